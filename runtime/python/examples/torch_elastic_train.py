#!/usr/bin/env python3
"""A PyTorch elastic-style training loop for a Phalanx TrainingJob (CPU, gloo backend).

It uses the ``torch.distributed`` environment the operator injects into every task pod:
``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` (``init_method="env://"``), the way
a torchrun worker does, and the Phalanx client (when ``PHALANX_COORDINATOR`` is set) for what
torch.distributed lacks: coordinated checkpoints when a preemption round opens
(``phalanx.reached_sync_point``) and peer-failure notices.

Recovery is torch-elastic style: a gloo collective cannot survive a dead peer, so every task
exits and the whole group is restarted: use ``failurePolicy.restartScope: Job``. On start the
group resumes from the newest checkpoint every rank has (an ``all_reduce(MIN)`` of each rank's
latest step), like a torchrun script that reloads its snapshot.

torch is optional: when it cannot be imported the program says so on stderr and exits 2 (bad
configuration), so a job built on an image without torch fails fast instead of restarting.

Exit codes: 0 done, 2 bad configuration (no torch, missing env), 3 superseded, 4 left at a
preemption sync point, 1 any other failure (e.g. a peer died inside a collective).
"""

import argparse
import os
import sys
import time

EXIT_DONE, EXIT_OTHER, EXIT_BAD_CONFIG, EXIT_SUPERSEDED, EXIT_PREEMPTED = 0, 1, 2, 3, 4


def event(rank, kind, fields=""):
    line = "EVENT t_ms=%d task=%d inc=%s kind=%s%s%s\n" % (
        int(time.time() * 1000), rank, os.environ.get("PHALANX_INCARNATION", "0"), kind,
        " " if fields else "", fields)
    os.write(1, line.encode())


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--checkpoint_every", type=int, default=10)
    p.add_argument("--checkpoint_dir", default="/tmp/phalanx-torch-checkpoints")
    p.add_argument("--timeout", type=float, default=120.0, help="process group timeout, seconds")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        sys.stderr.write("torch_elastic_train: PyTorch is not installed (%s); install torch (CPU "
                         "is enough) in the task image to run this example\n" % e)
        return EXIT_BAD_CONFIG
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
               if not os.environ.get(v)]
    if missing:
        sys.stderr.write("torch_elastic_train: %s not set (the Phalanx operator injects them)\n"
                         % ", ".join(missing))
        return EXIT_BAD_CONFIG
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    import datetime
    client = None
    if os.environ.get("PHALANX_COORDINATOR"):
        try:
            import phalanx
        except ImportError:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
            import phalanx
        try:
            client = phalanx.init(timeout=60)
        except phalanx.Aborted:
            return EXIT_SUPERSEDED
        except (phalanx.InvalidArgument, phalanx.Unauthenticated, phalanx.LibraryNotFound) as e:
            sys.stderr.write("torch_elastic_train: %s\n" % e)
            return EXIT_BAD_CONFIG
        named = {}

        @client.on_preemption
        def _(round_):  # session thread: just remember it
            named["me"] = round_.affected_tasks is not None and rank in round_.affected_tasks

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    event(rank, "connected")
    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt_dir = os.path.join(args.checkpoint_dir, "rank-%d" % rank)
    os.makedirs(ckpt_dir, exist_ok=True)

    def latest():
        steps = [int(n[5:-3]) for n in os.listdir(ckpt_dir)
                 if n.startswith("step-") and n.endswith(".pt")]
        return max(steps) if steps else 0

    def save(step):
        path = os.path.join(ckpt_dir, "step-%d.pt" % step)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
        os.replace(path + ".tmp", path)
        event(rank, "checkpoint", "step=%d" % step)

    # Resume from the newest checkpoint every rank has.
    mine = torch.tensor([latest()], dtype=torch.int64)
    dist.all_reduce(mine, op=dist.ReduceOp.MIN)
    step = int(mine.item())
    if step > 0:
        state = torch.load(os.path.join(ckpt_dir, "step-%d.pt" % step))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    event(rank, "start", "resume_step=%d" % step)

    gen = torch.Generator().manual_seed(1000 + rank)
    loss = torch.tensor(0.0)
    try:
        while step < args.steps:
            if client is not None and client.reached_sync_point(step):
                save(step)
                event(rank, "sync_checkpoint", "step=%d" % step)
                if named.get("me"):
                    event(rank, "left_for_preemption", "step=%d" % step)
                    return EXIT_PREEMPTED
            x = torch.randn(32, 8, generator=gen)
            loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():  # data-parallel gradient average
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                p.grad /= world
            opt.step()
            step += 1
            if step % args.checkpoint_every == 0 or step == args.steps:
                save(step)
    except RuntimeError as e:  # a peer died inside a collective: the group restarts
        event(rank, "failed", 'reason="%s"' % str(e).splitlines()[0])
        return EXIT_OTHER
    if client is not None:
        client.shutdown(timeout=60)
    dist.destroy_process_group()
    event(rank, "done", "steps=%d loss=%.6f" % (step, float(loss)))
    return EXIT_DONE


if __name__ == "__main__":
    sys.exit(main())
