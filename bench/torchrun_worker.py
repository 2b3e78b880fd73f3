#!/usr/bin/env python3
"""The torchrun side of bench/torch_bench.py: the same model, data and step time as
runtime/python/examples/torch_train.py, written the way a torchrun script is (env:// rendezvous,
DDP, a checkpoint every --checkpoint_every steps by rank 0, resume from it after a restart).
torchrun restarts every worker when one dies; rank --kill_rank kills itself with SIGKILL when it
reaches --kill_at in the first round. Prints the same EVENT lines as torch_train.py."""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime",
                                "python", "examples"))
import torch_train  # noqa: E402  (the model, the batches, the EVENT format)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step_time", type=float, default=0.05)
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--checkpoint_every", type=int, default=10)
    p.add_argument("--kill_at", type=int, default=-1)
    p.add_argument("--kill_rank", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    first_round = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    os.environ["PHALANX_INCARNATION"] = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("gloo")
    model = torch_train.build_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    torch_train.event(rank, "formed", step=step)
    loss_fn = torch.nn.MSELoss()
    while step < args.steps:
        if first_round and rank == args.kill_rank and step == args.kill_at:
            torch_train.event(rank, "killed", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = torch_train.batch(torch, step, rank)
        optimizer.zero_grad()
        loss_fn(ddp(x), y).backward()
        optimizer.step()
        step += 1
        torch_train.event(rank, "step", step=step)
        if rank == 0 and step % args.checkpoint_every == 0:
            temporary = path + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, temporary)
            os.replace(temporary, path)
        time.sleep(args.step_time)
    torch_train.event(rank, "final", steps=step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
