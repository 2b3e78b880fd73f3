#!/usr/bin/env python3
"""A job's timeline as a picture (issue 32, item 5): what every task did over time, from the
EVENT lines its workers print, with the faults marked.

  timeline_plot.py LOG_DIR JOB OUT.png [--fault LABEL@UNIX_SECONDS ...] [--title TEXT]

LOG_DIR holds one log per pod, named <namespace>_<JOB>-task-<index>-<incarnation>.log (the local
cluster's cluster/logs). Top: each task's step over time (every event that names a step: the
sample worker's checkpoints, start and done; the PyTorch worker's steps), one line per pod, so
a stall is a flat stretch and a rollback a drop; recoveries, preemption checkpoints and failures
are marked. Bottom: each pod's life (first to last event), one bar per incarnation. Vertical
lines: the faults. Needs matplotlib (Debian's python3-matplotlib); exits 77 without it.
"""
import argparse
import os
import re
import sys

import debian_python

SKIP = 77
EVENT = re.compile(r"^EVENT t_ms=(\d+) .*?kind=(\S+)(.*)$")
POD = re.compile(r"^.+?_(?P<job>.+)-task-(?P<task>\d+)-(?P<inc>\d+)\.log$")
STEP_FIELDS = ("step", "resume_step", "steps")
MARKERS = {  # kind -> (marker, label)
    "recovered": ("o", "recovered"), "formed": ("o", "recovered"),
    "start": ("o", "recovered"),
    "sync_checkpoint": ("^", "preemption checkpoint"),
    "left_for_preemption": ("^", "preemption checkpoint"),
    "leaving": ("^", "preemption checkpoint"),
    "fatal": ("x", "failure"), "failure": ("x", "failure"), "peer_failed": ("x", "failure"),
}


def read_pods(log_dir, job):
    """{(task, incarnation): [(t_seconds, kind, {field: value})]} of `job`'s task pods."""
    pods = {}
    for name in sorted(os.listdir(log_dir)):
        m = POD.match(name)
        if not m or m["job"] != job:
            continue
        events = []
        with open(os.path.join(log_dir, name), errors="replace") as f:
            for line in f:
                e = EVENT.match(line.strip())
                if e:
                    fields = dict(re.findall(r"(\w+)=(\S+)", e[3]))
                    events.append((int(e[1]) / 1000.0, e[2], fields))
        if events:
            pods[(int(m["task"]), int(m["inc"]))] = events
    return pods


def step_of(fields):
    for key in STEP_FIELDS:
        if fields.get(key, "").isdigit():
            return int(fields[key])
    return None


def plot(pods, faults, title, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(t for events in pods.values() for t, _, _ in events)
    tasks = sorted({task for task, _ in pods})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.4]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    for (task, inc), events in sorted(pods.items()):
        color = colors[task % len(colors)]
        points = [(t - t0, step_of(f)) for t, _, f in events if step_of(f) is not None]
        if points:
            top.plot([p[0] for p in points], [p[1] for p in points], color=color, lw=1.4,
                     label=f"task {task}" if ("task", task) not in labelled else None)
            labelled.add(("task", task))
        for t, kind, f in events:
            if kind in MARKERS and step_of(f) is not None:
                marker, label = MARKERS[kind]
                top.scatter([t - t0], [step_of(f)], marker=marker, color="black", s=28,
                            zorder=3, label=label if label not in labelled else None)
                labelled.add(label)
        start, end = events[0][0] - t0, events[-1][0] - t0
        bottom.barh(tasks.index(task), end - start, left=start, height=0.6, color=color,
                    alpha=0.35 + 0.65 / (1 + inc), edgecolor="black", lw=0.5)
        bottom.text(start + 0.1, tasks.index(task), f"inc {inc}", va="center", fontsize=7)
    for label, at in faults:
        for ax in (top, bottom):
            ax.axvline(at - t0, color="red", ls="--", lw=1)
        top.text(at - t0, top.get_ylim()[1], " " + label, color="red", fontsize=8,
                 rotation=90, va="top", ha="right")
    top.set_ylabel("step")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(title, fontsize=10)
    bottom.set_yticks(range(len(tasks)), [f"task {t}" for t in tasks])
    bottom.set_xlabel("seconds since the first task event")
    bottom.set_ylabel("pods")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("log_dir")
    p.add_argument("job")
    p.add_argument("out")
    p.add_argument("--fault", action="append", default=[], metavar="LABEL@UNIX_SECONDS")
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    if not debian_python.reexec_for("matplotlib"):
        print("timeline_plot: matplotlib is not installed (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return SKIP
    pods = read_pods(args.log_dir, args.job)
    if not pods:
        print(f"timeline_plot: no EVENT lines of job {args.job} in {args.log_dir}",
              file=sys.stderr)
        return 1
    faults = []
    for spec in args.fault:
        label, _, at = spec.rpartition("@")
        try:
            faults.append((label, float(at)))
        except ValueError:
            print(f"timeline_plot: --fault {spec!r} is not LABEL@UNIX_SECONDS", file=sys.stderr)
            return 2
    plot(pods, faults, args.title or f"TrainingJob {args.job}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
