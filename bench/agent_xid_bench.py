#!/usr/bin/env python3
"""make bench → adds to build/bench/agent.json (issue 17): how fast a failing GPU is acted on.

A real phalanx-agent with fake GPUs and a torch job (4 gloo ranks of
runtime/python/examples/torch_train.py, rank r on "GPU" r) as PythonClient.TorchAgent runs it; at
step --xid_at an XID 79 is scripted on GPU 1 (--fake_xid_file). Keys:

- ``xid_to_abort_ms``: the XID line written → the task on that GPU has aborted its process group
  (its ``device_failed`` event: the agent's poll, then the task's next report to the agent);
- ``xid_to_resumed_s``: → every rank stepping again at full size (the replacement started by the
  supervisor, as the operator would, the group re-formed, the state sent to it).

Medians of --repeats runs. The other keys of the file (the C++ agent bench's) are kept. Run with
the interpreter that imports torch (Debian's /usr/bin/python3); without torch it says so and
writes nothing."""

import argparse
import json
import os
import sys
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "runtime", "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "runtime", "python"))
sys.path.insert(0, HERE)

TRAIN = os.path.join(REPO, "runtime", "python", "examples", "torch_train.py")
FAILING_GPU = 1


def one_run(args):
    import harness
    import rank_supervisor
    from torch_bench import first_full_step_after
    coordinator = harness.Coordinator(num_tasks=args.ranks, job="xidbench", heartbeat_timeout="2s")
    agent = harness.Agent(coordinator.dir, gpus=args.ranks)
    ranks = None
    try:
        ranks = rank_supervisor.RankSupervisor(
            coordinator, [TRAIN, "--steps=%d" % args.steps, "--step_time=%g" % args.step_time],
            args.ranks, kill_hung=False,
            env_for=lambda task, inc: {} if inc else {"PHALANX_CLIQUE_ADDRESS": agent.address,
                                                      "LOCAL_RANK": str(task)})
        if not ranks.wait_for(lambda ev, ex: ranks.min_step() >= args.xid_at, 300):
            raise RuntimeError("the job did not reach step %d; logs in %s"
                               % (args.xid_at, coordinator.dir))
        injected_ms = int(time.time() * 1000)
        agent.inject_xid(FAILING_GPU, 79)
        if not ranks.wait_for(lambda ev, ex: len(ranks.finals()) == args.ranks, 600):
            raise RuntimeError("the job did not finish; logs in " + coordinator.dir)
        events = list(ranks.events)
        aborted = [int(e["t_ms"]) for e in events if e["kind"] == "device_failed"]
        reformed = max(int(e["t_ms"]) for e in events
                       if e["kind"] in ("recovered", "formed") and int(e["t_ms"]) > injected_ms)
        resumed = first_full_step_after(events, args.ranks, reformed)
        if not aborted or resumed is None:
            raise RuntimeError("no abort or no resumption; logs in " + coordinator.dir)
        return (aborted[0] - injected_ms, (resumed - injected_ms) / 1000.0)
    finally:
        if ranks is not None:
            ranks.close()
        agent.close()
        coordinator.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True, help="agent.json: these keys are added to it")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--step_time", type=float, default=0.05)
    p.add_argument("--xid_at", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from torch_bench import bench_environment
    if not bench_environment(args.build, "agent XID bench"):
        return 0
    runs = []
    for i in range(args.repeats):
        print("agent XID bench: run %d of %d (XID 79 on GPU %d at step %d of %d, %d ranks)"
              % (i + 1, args.repeats, FAILING_GPU, args.xid_at, args.steps, args.ranks),
              flush=True)
        runs.append(one_run(args))
    result = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            result = json.load(f)
    result["xid_to_abort_ms"] = round(median(r[0] for r in runs))
    result["xid_to_resumed_s"] = round(median(r[1] for r in runs), 3)
    result["xid_config"] = {"ranks": args.ranks, "steps": args.steps,
                            "step_time_s": args.step_time, "xid_at_step": args.xid_at,
                            "repeats": args.repeats, "agent_poll_s": 0.1,
                            "report_period_s": 0.25, "cores": os.cpu_count()}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print("xid_to_abort_ms %d  xid_to_resumed_s %.3f  (medians of %d)"
          % (result["xid_to_abort_ms"], result["xid_to_resumed_s"], args.repeats))
    print("wrote " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
