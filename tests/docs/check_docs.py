#!/usr/bin/env python3
"""Keeps docs/ honest with the code. Standard library only.

    python3 tests/docs/check_docs.py SOURCE_DIR

Three checks; every problem is printed and the exit code is 1 if there is any.

(a) Metrics. The exported metrics are the string literals "phalanx_<name>" in the C++ sources
    (common/, runtime/, operator/, node_agent/; tests and *_test.cc excluded) that are registered
    as metric families: on a line with `.Name(` or passed to a `Build(...)` helper next to
    prometheus::Build{Counter,Gauge,Histogram,Summary}. Every `phalanx_*` word in docs/*.md must be
    one of them, optionally with a _bucket, _sum, _count or _total suffix (names that end in `_`
    or `*` are prefixes, e.g. `phalanx_agent_*`, and must match at least one metric). A word
    counts as a metric when its second part is a component that exports metrics
    (`phalanx_operator_...`, `phalanx_coordinator_...`, `phalanx_agent_...`) or it ends in a unit
    suffix (`_total`, `_seconds`, `_bytes`, ...); other `phalanx_*` words are C ABI functions
    (`phalanx_barrier`) or CMake targets. Every exported metric must appear in
    docs/operations.md.

(b) Links. Every relative Markdown link `[text](target)` in docs/*.md, docs/adr/*.md and
    README.md must point to an existing file or folder, and an anchor (`file.md#heading`,
    `#heading`) to a heading of that Markdown file, spelled as GitHub does (lower case,
    punctuation dropped, spaces to `-`). http(s) and mailto links are not checked.

(c) Commands. In docs/quickstart.md, docs/user-guide.md, docs/operations.md, docs/cpp-client.md
    and docs/architecture.md every command in a ```sh or ```console block must say which test or
    script runs it: a comment `# tested-by: PATH` at the end of the command's line or alone on
    the line before it. In ```sh blocks every non-comment line is a command (a line ending in `\\`
    continues on the next); in ```console blocks only lines starting with `$ `. The check:
      - PATH exists (relative to SOURCE_DIR);
      - `make TARGET ...`: PATH is a Makefile with a `TARGET:` rule;
      - anything else: PATH contains the program's name (the first word after VAR=value
        assignments, without its directory) and its first argument, followed by the second when
        that is an option (`kubectl apply -f x.yaml` -> `apply -f`; `kubectl get tj` -> `get`;
        `phalanx-localcluster admin stop-pod ...` -> `admin`); when the first argument is an
        option, just its name (`worker --steps=20` -> `--steps`). Before
        comparing, quotes, commas and brackets are removed from both and spaces are collapsed,
        so a Python or C++ argument list (`["apply", "-f", path]`) matches too.
    This does not prove the command is run exactly as written; it catches a doc command that no
    test knows about, and a test that stopped running it.
"""

import os
import re
import shlex
import sys

DOC_COMMAND_FILES = ["quickstart.md", "user-guide.md", "operations.md", "cpp-client.md",
                     "architecture.md"]
SOURCE_DIRS = ["common", "runtime", "operator", "node_agent"]
METRIC_SUFFIXES = ("_bucket", "_sum", "_count", "_total")

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- (a) metrics ---------------------------------------------------------------------------------

def exported_metrics(src):
    literal = re.compile(r'"(phalanx_[a-z0-9_]+)"')
    builder = re.compile(r"Build(Counter|Gauge|Histogram|Summary)\s*\(")
    found = {}
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".cc", ".h")) or name.endswith("_test.cc"):
                    continue
                path = os.path.join(root, name)
                lines = read(path).splitlines()
                for i, line in enumerate(lines):
                    for m in literal.finditer(line):
                        context = " ".join(lines[max(0, i - 2):i + 1])
                        if ".Name(" in line or (builder.search(context) and "Build(" in context):
                            found[m.group(1)] = os.path.relpath(path, src)
    return found


def doc_files(src):
    docs = os.path.join(src, "docs")
    out = [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    adr = os.path.join(docs, "adr")
    if os.path.isdir(adr):
        out += [os.path.join(adr, n) for n in sorted(os.listdir(adr)) if n.endswith(".md")]
    return out


def check_metrics(src):
    metrics = exported_metrics(src)
    if len(metrics) < 10:
        problem("sources", f"found only {len(metrics)} phalanx_* metrics; is the scan broken?")
    word = re.compile(r"\bphalanx_[a-z0-9_]+\*?")
    components = {name.split("_")[1] for name in metrics}  # operator, coordinator, agent
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        for n, line in enumerate(read(path).splitlines(), 1):
            for m in word.finditer(line):
                name = m.group(0)
                if name.endswith(("*", "_")):
                    if not _looks_like_metric(name.rstrip("*_") + "_", components):
                        continue
                    prefix = name.rstrip("*")
                    if not any(x.startswith(prefix) for x in metrics):
                        problem(f"{rel}:{n}", f"no metric starts with {prefix}")
                    continue
                base = name
                for suffix in METRIC_SUFFIXES:
                    if base not in metrics and base.endswith(suffix):
                        base = base[: -len(suffix)]
                if name in metrics or base in metrics:
                    continue
                if not _looks_like_metric(name, components):
                    continue  # C ABI functions, CMake targets, ...
                problem(f"{rel}:{n}", f"{name} is not a metric the code exports")
    ops = os.path.join(src, "docs", "operations.md")
    text = read(ops) if os.path.exists(ops) else ""
    for name, where in sorted(metrics.items()):
        if not re.search(r"\b" + re.escape(name) + r"\b", text):
            problem("docs/operations.md", f"{name} (from {where}) is not documented")


UNIT_SUFFIXES = ("_total", "_seconds", "_bytes", "_bucket", "_count", "_sum", "_ratio", "_info")


def _looks_like_metric(name, components):
    # A metric reference names a component that exports metrics (phalanx_operator_...) or ends in
    # a unit suffix; other phalanx_* words are C ABI functions (phalanx_barrier) or CMake
    # targets (phalanx_clique; test binaries such as phalanx_agent_test name a component too).
    parts = name.split("_")
    if name.endswith("_test"):
        return False
    return (len(parts) > 2 and parts[1] in components) or name.endswith(UNIT_SUFFIXES)


# --- (b) links -----------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def anchors_of(path):
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    anchors = set()
    in_fence = False
    for line in read(path).splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            suffix, n = slug, 0
            while suffix in anchors:
                n += 1
                suffix = f"{slug}-{n}"
            anchors.add(suffix)
    return anchors


def check_links(src):
    files = doc_files(src) + [os.path.join(src, "README.md")]
    for path in files:
        rel = os.path.relpath(path, src)
        in_fence = False
        for n, line in enumerate(read(path).splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for m in LINK.finditer(line):
                target = m.group(1)
                if target.startswith(("http://", "https://", "mailto:")):
                    continue
                target, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(path), target)) \
                    if target else path
                if not os.path.exists(full):
                    problem(f"{rel}:{n}", f"link to {m.group(1)} points to nothing")
                elif anchor and full.endswith(".md") and anchor not in anchors_of(full):
                    problem(f"{rel}:{n}", f"link to {m.group(1)}: no such heading")


# --- (c) commands --------------------------------------------------------------------------------

MARKER = re.compile(r"#\s*tested-by:\s*(\S+)")


def normalize(text):
    return " ".join(re.sub(r"[\"',\[\]{}]", " ", text).split())


def commands_in(path):
    """Yields (line number, command text, marker path or None) for each command."""
    lines = read(path).splitlines()
    fence = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip() or "plain"
            i += 1
            continue
        if fence not in ("sh", "console") or not stripped or stripped.startswith("#"):
            i += 1
            continue
        if fence == "console" and not stripped.startswith("$ "):
            i += 1
            continue
        start = i
        text = stripped[2:] if fence == "console" else stripped
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        marker = MARKER.search(text)
        if marker is None and start > 0:
            marker = MARKER.search(lines[start - 1].strip()) if \
                lines[start - 1].strip().startswith("#") else None
        command = text.split(" # ", 1)[0] if " # " in text else text
        yield start + 1, command.strip(), marker.group(1) if marker else None
        i += 1


def check_commands(src):
    for name in DOC_COMMAND_FILES:
        path = os.path.join(src, "docs", name)
        rel = os.path.relpath(path, src)
        if not os.path.exists(path):
            problem(rel, "missing")
            continue
        for n, command, tested_by in commands_in(path):
            where = f"{rel}:{n}"
            if tested_by is None:
                problem(where, f"`{command}` has no `# tested-by: PATH` marker")
                continue
            target = os.path.join(src, tested_by)
            if not os.path.isfile(target):
                problem(where, f"tested-by {tested_by}: no such file")
                continue
            try:
                words = shlex.split(command, comments=False)
            except ValueError as e:
                problem(where, f"cannot parse `{command}`: {e}")
                continue
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)
            if not words:
                problem(where, f"`{command}` has no program")
                continue
            program, args = os.path.basename(words[0]), words[1:]
            content = read(target)
            if program == "make":
                goal = next((a for a in args if "=" not in a), "all")
                if not re.search(r"^" + re.escape(goal) + r"\s*:", content, re.M):
                    problem(where, f"{tested_by} has no `{goal}:` rule for `{command}`")
                continue
            flat = " " + normalize(content) + " "
            if program not in content:
                problem(where, f"{tested_by} does not mention `{program}` (`{command}`)")
                continue
            if args and args[0].startswith("-"):
                first = [args[0].split("=", 1)[0]]  # an option first: its name
            elif len(args) > 1 and args[1].startswith("-"):
                first = args[:2]                     # a subcommand and its option: `apply -f`
            else:
                first = args[:1]
            needle = normalize(" ".join(first))
            if needle and needle not in flat:
                problem(where, f"{tested_by} does not run `{program} {needle}` (`{command}`)")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    src = os.path.abspath(sys.argv[1])
    check_metrics(src)
    check_links(src)
    check_commands(src)
    if problems:
        print(f"check_docs: {len(problems)} problem(s):")
        for p in problems:
            print("  " + p)
        return 1
    print("check_docs: docs agree with the code (metrics, links, commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
