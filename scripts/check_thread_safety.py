#!/usr/bin/env python3
"""Static lock checking: compiles every source (and each test that declares lock annotations)
with clang's -Wthread-safety.

GCC ignores the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations; clang checks
them. TSan cannot stand in for this here: Debian's abseil is not built with TSan, so
absl::Mutex is invisible to it and every guarded access shows up as a (false) race.

Usage: check_thread_safety.py BUILD_DIR   (reads BUILD_DIR/compile_commands.json)
       check_thread_safety.py --self-test [BUILD_DIR]  (the check, and BUILD_DIR's compile
                              command where the build does the check, find a planted finding)
Exits 0 when clean or when clang++ is not installed (it says so), 1 on any finding.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ANNOTATIONS = ("GUARDED_BY", "LOCKS_REQUIRED", "LOCKS_EXCLUDED", "ACQUIRED_")
# What a project file must mention for a translation unit that includes it to hold anything this
# analysis can report on: a capability (absl::Mutex and its scoped locks, or a type annotated as
# one) or an annotation. The analysis only reasons about capabilities, and it reports nothing
# inside system headers (absl, libstdc++: libstdc++'s std::mutex is not annotated at all).
CAPABILITY_WORDS = ("Mutex", "GUARDED_BY", "LOCKS_REQUIRED", "LOCKS_EXCLUDED", "LOCK_FUNCTION",
                    "ACQUIRE", "RELEASE", "REQUIRES", "EXCLUDES", "CAPABILITY", "LOCKABLE",
                    "ASSERT_EXCLUSIVE", "ASSERT_SHARED", "RETURN_CAPABILITY", "THREAD_SAFETY",
                    "thread_annotations")
CHECKED_DIRS = ("/common/", "/runtime/", "/operator/", "/node_agent/", "/examples/", "/bench/", "/tests/")


def compile_flags(entry):
    """The entry's compiler and flags, without its output (-o X), -c and the source compiled."""
    out, skip = [], False
    for arg in shlex.split(entry["command"]):
        if skip:
            skip = False
        elif arg == "-o":
            skip = True
        elif arg not in ("-c", entry["file"], entry.get("unity", "")):
            out.append(arg)
    return out


def clang_command(entry, clang):
    # Warning flags: only the thread-safety analysis is this check's business (GCC's
    # -Wall/-Wextra gate the build), and clang's other warnings cost ~15% of its time.
    out = [clang] + [arg for arg in compile_flags(entry)[1:]
                     if not arg.startswith(("-fsanitize", "-W"))]
    return out + ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety",
                  entry["file"]]


def has_annotations(path):
    """A test file is checked only when it declares lock annotations of its own: the rest use
    the (checked) library types, and compiling all of them took CI ~2 of the check's 4 minutes."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return any(word in text for word in ANNOTATIONS)


UNITY_INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)


def sources_of(entry):
    """The project sources an entry compiles: in a unity build (cmake/build_speed.cmake) one
    entry is a generated Unity/unity_N_cxx.cxx that #includes several; checking it whole parses
    the shared headers once for all of them."""
    path = entry["file"]
    if "/Unity/unity_" in path:
        with open(path, encoding="utf-8") as f:
            return UNITY_INCLUDE.findall(f.read())
    return [path]


def wanted(source):
    return (any(d in source for d in CHECKED_DIRS) and "/gen/" not in source
            and (not source.endswith("_test.cc") or has_annotations(source)))


def included_files(build_dir):
    """Every object's source and the headers it included, from ninja's dependency log of the
    build that ran before the tests ({} when ninja has none: then every unit is checked)."""
    try:
        out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            current = line.split(":", 1)[0]
            deps[current] = []
            # "#deps N, deps mtime M (STALE)": the object is older than a dependency. Then the
            # list may not be what the sources include now, so it is not trusted.
            if "STALE" in line:
                del deps[current]
                current = None
        elif current and line.strip():
            deps[current].append(line.strip())
    return deps


_mentions = {}


def mentions_a_capability(path):
    if path not in _mentions:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = "Mutex"  # unreadable: assume the worst, check the unit
        _mentions[path] = any(word in text for word in CAPABILITY_WORDS)
    return _mentions[path]


def can_have_findings(entry, deps, project_dir):
    """False only when ninja's dependency log shows the unit includes no project file that
    mentions a capability or an annotation: clang's analysis cannot report anything there, and
    ~40% of the units are like that (the operator's single-threaded reconcile passes, the
    programs' main files). Skipping them cut the check's time by that much."""
    args = shlex.split(entry["command"])
    output = args[args.index("-o") + 1] if "-o" in args[:-1] else ""
    included = deps.get(output)
    if included is None:
        return True  # no (or a stale) dependency record: check it
    own = [f for f in included
           if os.path.realpath(f).startswith(project_dir) and "/gen/" not in f]
    return any(mentions_a_capability(f) for f in own + sources_of(entry))


PLANTED = """#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
class Queue {
 public:
  void Push(int v) { newest_ = v; }  // the planted finding: no lock held
 private:
  absl::Mutex mu_;
  int newest_ ABSL_GUARDED_BY(mu_) = 0;
};
int main() { Queue q; q.Push(1); }
"""


def self_test(build_dir=None):
    """The check, run on a one-file build whose file writes a guarded member without its lock,
    must report it: the flags it passes clang still enable the analysis and fail on it."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="phalanx-tsa-") as tmp:
        os.makedirs(os.path.join(tmp, "runtime"))
        source = os.path.join(tmp, "runtime", "planted.cc")
        with open(source, "w") as f:
            f.write(PLANTED)
        with open(os.path.join(tmp, "compile_commands.json"), "w") as f:
            json.dump([{"directory": tmp, "file": source, "command":
                        f"/usr/bin/c++ -O2 -g1 -Wall -Wextra -Werror -std=c++20 -o planted.o "
                        f"-c {source}"}], f)
        result = subprocess.run([sys.executable, os.path.abspath(__file__), tmp],
                                capture_output=True, text=True)
        print(result.stdout, end="")
        if result.returncode != 1 or "newest_" not in result.stdout or \
                "1 with findings" not in result.stdout:
            print(f"self-test FAILED: exit {result.returncode}, the planted finding was not "
                  f"reported")
            return 1
        print("self-test: the planted unguarded write was found by the check's own pass")
        if build_dir and analysed_by_the_build(build_dir):
            # The build stands in for the pass: its own compile command must fail on the file.
            with open(f"{build_dir}/compile_commands.json") as f:
                entry = next(e for e in json.load(f) if any(wanted(s) for s in sources_of(e)))
            command = compile_flags(entry)
            built = subprocess.run(command + ["-fsyntax-only", source], cwd=entry["directory"],
                                   capture_output=True, text=True)
            if built.returncode == 0 or "newest_" not in built.stderr:
                print(f"self-test FAILED: the build's compile command ({command[0]}) accepts the "
                      f"planted unguarded write:\n{built.stderr}")
                return 1
            print("self-test: the build's own compile command fails on it too:\n" + built.stderr)
    return 0


def analysed_by_the_build(build_dir):
    """Whether the build compiled every project source with clang's analysis as an error (a
    clang build of `make test`: CMakeLists.txt adds -Wthread-safety under clang, PHALANX_WERROR
    -Werror). Then the build already failed on any finding, and parsing everything again here
    would only repeat it (~3.5 CPU-minutes of the tests' ~22)."""
    with open(f"{build_dir}/compile_commands.json") as f:
        entries = [e for e in json.load(f) if any(wanted(s) for s in sources_of(e))]
    if not entries:
        return False
    for e in entries:
        args = shlex.split(e["command"])
        if "clang" not in os.path.basename(args[0]) or "-Wthread-safety" not in args or \
                "-Werror" not in args or "-w" in args or \
                any(a.startswith("-Wno-thread-safety") for a in args):
            return False
    return True


def main():
    clang = shutil.which("clang++")
    if clang is None:
        print("thread-safety check skipped: clang++ is not installed")
        return 0
    if sys.argv[1:2] == ["--self-test"]:
        return self_test(sys.argv[2] if len(sys.argv) > 2 else None)
    build_dir = sys.argv[1]
    if analysed_by_the_build(build_dir):
        print("thread-safety check: done by the build itself (clang with -Wthread-safety and "
              "-Werror: a finding fails the build); the self-test checks the flags find one")
        return 0
    project_dir = os.path.realpath(os.path.join(os.path.dirname(__file__), "..")) + "/"
    deps = included_files(build_dir)
    skipped = 0
    with open(f"{build_dir}/compile_commands.json") as f:
        entries = []
        for e in json.load(f):
            sources = sources_of(e)
            picked = [s for s in sources if wanted(s)]
            if picked and not can_have_findings(e, deps, project_dir):
                skipped += 1
                continue
            if picked == sources:
                entries.append(e)  # the whole translation unit: its headers parsed once
            else:  # a unity batch of tests, few of which declare annotations: just those
                entries += [dict(e, file=s, unity=e["file"]) for s in picked]

    def check(entry):
        result = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                                capture_output=True, text=True)
        return entry["file"], result.returncode, result.stderr

    failures = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for path, code, err in pool.map(check, entries):
            if code != 0 or "thread-safety" in err:
                failures += 1
                print(f"FAIL {path}\n{err}")
    sources = sum(len(sources_of(e)) for e in entries)
    print(f"thread-safety check: {len(entries)} translation units ({sources} sources), "
          f"{failures} with findings; {skipped} units skipped: they include no project file "
          f"that mentions a lock or an annotation")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
