#!/usr/bin/env python3
"""One rank of torch_bench.py's determinism measurement: an MLP (512-1024-1024-512, 2.1 M
parameters, 8 MiB of gradients) under DDP on gloo, trained for --steps steps on synthetic
batches, either with DDP's own all-reduce (``plain``) or with Phalanx's deterministic averaging
(``chain``: phalanx.torch_recovery.ChainReducer, what Manager(deterministic=True) registers).
Rank 0 prints ``step_ms=<mean step time after warm-up>``. No coordinator: a TCPStore forms the
group, so only the averaging differs between the two."""

import argparse
import datetime
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=["plain", "chain"], required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", args.port, args.world, args.rank == 0,
                          timeout=datetime.timedelta(seconds=300))
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Tanh(),
                                torch.nn.Linear(1024, 1024), torch.nn.Tanh(),
                                torch.nn.Linear(1024, 512))
    ddp = DistributedDataParallel(model)
    if args.mode == "chain":
        from phalanx.torch_recovery import ChainReducer, CollectiveAborter, chain_allreduce_hook
        ddp.register_comm_hook(ChainReducer(CollectiveAborter(), dist.group.WORLD),
                               chain_allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(args.rank)
    x, y = torch.randn(32, 512, generator=g), torch.randn(32, 512, generator=g)
    loss_fn = torch.nn.MSELoss()
    started = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            started = time.monotonic()
        optimizer.zero_grad()
        loss_fn(ddp(x), y).backward()
        optimizer.step()
    dist.barrier()
    if args.rank == 0:
        print("step_ms=%.3f" % ((time.monotonic() - started) / args.steps * 1000), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
