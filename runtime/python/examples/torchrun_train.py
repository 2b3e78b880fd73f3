#!/usr/bin/env python3
"""A plain torchrun training script: nothing in it knows about Phalanx.

It is what ``torchrun --nproc_per_node=N torchrun_train.py`` runs anywhere: the process group
from the environment torch's elastic agent sets (``init_method="env://"``: ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``), DDP over gloo, and the usual torchrun snapshot
pattern (rank 0 saves model, optimizer and step every ``--snapshot_every`` steps; after a restart
of the worker group every rank loads the newest snapshot). Under ``phalanx-torchrun`` the same
script gets Phalanx's failure detection (docs/pytorch.md, "Keeping torchrun").

Prints ``EVENT`` lines (start, step, final) for the tests; ``final`` carries a SHA-256 of the
parameters.
"""

import argparse
import datetime
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def event(kind, **fields):
    line = "EVENT t_ms=%d task=%s restart=%s pid=%d kind=%s%s\n" % (
        int(time.time() * 1000), os.environ.get("RANK"),
        os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), os.getpid(), kind,
        "".join(" %s=%s" % kv for kv in fields.items()))
    os.write(1, line.encode())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step_time", type=float, default=0.0, help="seconds of extra work")
    parser.add_argument("--snapshot_every", type=int, default=10)
    parser.add_argument("--snapshot", default="/tmp/torchrun-snapshot.pt")
    args = parser.parse_args(argv)

    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    if os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        step = snapshot["step"]
    ddp = DistributedDataParallel(model)
    event("start", resume_step=step, world=world)

    while step < args.steps:
        data = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(16, 8, generator=data)
        loss = ((ddp(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if args.step_time:
            time.sleep(args.step_time)
        event("step", step=step)
        if rank == 0 and (step % args.snapshot_every == 0 or step == args.steps):
            tmp = args.snapshot + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.snapshot)

    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.numpy().tobytes())
    event("final", steps=step, params_sha256=digest.hexdigest())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
