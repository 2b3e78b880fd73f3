#!/usr/bin/env python3
"""The coordinator's cost per barrier round and per membership change, with and without node
agents relaying (docs/adr/0008-agent-relay.md, issue 33 item 3). A model, not a run: it counts
the frames the coordinator reads and writes, and prices them with a per-frame cost calibrated
from a measured barrier (`barrier_p50_ms.256` of `phalanx-coord-bench`, which pays for both ends
of every frame on one 2-core machine, so the price is an upper bound for the coordinator alone).

    python3 bench/relay_model.py [--barrier_ms_256 2.65] [--tasks_per_node 8]
"""

import argparse


def frames(tasks, tasks_per_node, relay):
    """Frames the coordinator reads + writes for one barrier round over all tasks, and writes
    for one task's failure told to everyone."""
    nodes = -(-tasks // tasks_per_node)
    if relay:
        # Each agent sends one arrival for its node's tasks (when the last local one arrived)
        # and gets one release; a failure is one frame per agent, which tells its tasks.
        return 2 * nodes, nodes
    # Each task sends its arrival and gets its release (the session wire coalesces a process's
    # releases into one write, but each is still a frame to build and send); a failure is one
    # frame per session.
    return 2 * tasks, tasks


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--barrier_ms_256", type=float, default=2.65,
                   help="measured barrier round of 256 tasks (docs/benchmarks.md), ms")
    p.add_argument("--tasks_per_node", type=int, default=8)
    args = p.parse_args()
    per_frame_us = args.barrier_ms_256 * 1000 / (2 * 256)
    print("per frame: %.1f us (from a %.2f ms barrier of 256 tasks); %d tasks per node"
          % (per_frame_us, args.barrier_ms_256, args.tasks_per_node))
    print("%8s | %12s %12s %10s | %12s %12s %10s" % (
        "tasks", "flat frames", "relay frames", "ratio", "flat ms", "relay ms", "fan-out"))
    for tasks in (1024, 4096, 16384, 102400):
        flat, flat_fan = frames(tasks, args.tasks_per_node, relay=False)
        relay, relay_fan = frames(tasks, args.tasks_per_node, relay=True)
        print("%8d | %12d %12d %9.0fx | %12.1f %12.1f %4d->%d" % (
            tasks, flat, relay, flat / relay, flat * per_frame_us / 1000,
            relay * per_frame_us / 1000, flat_fan, relay_fan))


if __name__ == "__main__":
    main()
