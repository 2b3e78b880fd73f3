#!/usr/bin/env python3
"""Static lock checking: compiles every source (and each test that declares lock annotations)
with clang's -Wthread-safety.

GCC ignores the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations; clang checks
them. TSan cannot stand in for this here: Debian's abseil is not built with TSan, so
absl::Mutex is invisible to it and every guarded access shows up as a (false) race.

Usage: check_thread_safety.py BUILD_DIR   (reads BUILD_DIR/compile_commands.json)
Exits 0 when clean or when clang++ is not installed (it says so), 1 on any finding.
"""
import json
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ANNOTATIONS = ("GUARDED_BY", "LOCKS_REQUIRED", "LOCKS_EXCLUDED", "ACQUIRED_")
CHECKED_DIRS = ("/common/", "/runtime/", "/operator/", "/node_agent/", "/examples/", "/bench/", "/tests/")


def clang_command(entry, clang):
    args = shlex.split(entry["command"])
    out, skip = [clang], False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        # -Werror (PHALANX_WERROR) is GCC's gate on GCC's warnings; clang's own -Wall findings
        # are not this check's business, only -Werror=thread-safety below.
        if arg in ("-c", "-Werror", entry["file"], entry.get("unity", "")) or \
                arg.startswith("-fsanitize"):
            continue
        out.append(arg)
    return out + ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                  "-Wno-unknown-warning-option", "-Wno-unused-command-line-argument",
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


def main():
    clang = shutil.which("clang++")
    if clang is None:
        print("thread-safety check skipped: clang++ is not installed")
        return 0
    with open(f"{sys.argv[1]}/compile_commands.json") as f:
        entries = []
        for e in json.load(f):
            sources = sources_of(e)
            picked = [s for s in sources if wanted(s)]
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
          f"{failures} with findings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
