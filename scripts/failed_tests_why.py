#!/usr/bin/env python3
"""The last lines each failed test printed, after `make test`'s summary.

  failed_tests_why.py BUILD_DIR|LAST_TEST_LOG [LINES]

Reads ctest's own record of a run (BUILD_DIR/Testing/Temporary/LastTest.log, or a copy of one
that `make test` kept before rerunning the failed tests: each test's
output and verdict; not LastTestsFailed.log, which a green run leaves stale) and prints, for
every failed test, the last LINES (default 12) non-empty lines of its output. Why: a CI log is
often read only by its tail, which is ctest's list of names; the reason a test failed sits
hundreds of lines up, between other tests' output.
"""
import os
import sys

MAX_WIDTH = 200


def outputs(last_test_log):
    """{test name: (passed, [output lines])} from ctest's LastTest.log."""
    found, name, lines, inside, ended = {}, None, [], False, None
    with open(last_test_log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if " Testing: " in line and line.split(" Testing: ", 1)[0].replace("/", "").isdigit():
                name, lines, inside = line.split(" Testing: ", 1)[1].strip(), [], False
            elif name is not None and line == "Output:":
                inside = None  # the next line is the ---- rule
            elif inside is None:
                inside = True
            elif inside and line == "<end of output>":
                ended, name, inside = name, None, False
            elif ended is not None and line.startswith("Test "):
                if line != "Test time" and not line.startswith("Test time "):
                    found[ended], ended = (line.startswith("Test Pass"), lines), None
            elif inside:
                lines.append(line)
    return found


def main():
    where = sys.argv[1]
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    last_test_log = (where if os.path.isfile(where) else
                     os.path.join(where, "Testing", "Temporary", "LastTest.log"))
    if not os.path.exists(last_test_log):
        return 0
    seen = outputs(last_test_log)
    failed = [name for name, (passed, _) in seen.items() if not passed]
    if not failed:
        return 0
    print(f"\nWhy they failed (each one's last {keep} lines; all of it in {last_test_log}):")
    for name in failed:
        tail = [line for line in seen[name][1] if line.strip()][-keep:]
        print(f"--- {name}")
        for line in tail or ["(no output recorded)"]:
            print(f"    {line[:MAX_WIDTH]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
