#!/usr/bin/env python3
"""scripts/timeline_plot.py on made-up logs: a PNG for a job with a rollback and a replaced
pod; clear failures for a job without events and for a malformed --fault. Exit 77 (skipped)
without matplotlib."""
import os
import subprocess
import sys
import tempfile

SKIP = 77
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "timeline_plot.py")
T0 = 1796161690000  # ms


def write_logs(d):
    def log(pod, lines):
        with open(os.path.join(d, f"default_{pod}.log"), "w") as f:
            f.write("a line that is not an event\n")
            for t, rest in lines:
                f.write(f"EVENT t_ms={T0 + t} {rest}\n")
    log("train-task-0-0", [(0, "task=0 inc=0 kind=start resume_step=0"),
                           (1000, "task=0 inc=0 kind=checkpoint step=20 why=interval"),
                           (2000, "task=0 inc=0 kind=recovered step=20 lost=5"),
                           (4000, "task=0 inc=0 kind=done steps=60 state=1")])
    log("train-task-1-0", [(0, "task=1 inc=0 kind=start resume_step=0"),
                           (1200, "task=1 inc=0 kind=checkpoint step=20 why=interval")])
    log("train-task-1-1", [(2100, "task=1 inc=1 kind=start resume_step=20"),
                           (4000, "task=1 inc=1 kind=done steps=60 state=1")])
    log("other-task-0-0", [(0, "task=0 inc=0 kind=start resume_step=0")])


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


def main():
    with tempfile.TemporaryDirectory() as d:
        write_logs(d)
        out = os.path.join(d, "timeline.png")
        r = run(d, "train", out, "--fault", f"kill task 1@{(T0 + 1500) / 1000}",
                "--title", "made up")
        if r.returncode == SKIP:
            print("SKIP: " + r.stderr.strip())
            return SKIP
        assert r.returncode == 0, r.stderr
        with open(out, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n", head
        assert os.path.getsize(out) > 10000, os.path.getsize(out)
        r = run(d, "nosuchjob", out)
        assert r.returncode == 1 and "no EVENT lines of job nosuchjob" in r.stderr, r.stderr
        r = run(d, "train", out, "--fault", "kill at noon")
        assert r.returncode == 2 and "not LABEL@UNIX_SECONDS" in r.stderr, r.stderr
    print("timeline_plot: PNG for a job with a replaced pod; no events and a bad --fault refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
