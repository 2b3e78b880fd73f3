#!/usr/bin/env python3
"""A DDP training loop kept as users write it (a ``DataLoader`` over a ``DistributedSampler``,
epochs of batches) that survives faults in place on Phalanx (CPU, gloo).

The loop is :meth:`phalanx.torch_recovery.Manager.loop` over the loader, its body in
``with manager.recoverable():``; the data's position after a recovery is the step the group
agreed on, so a replacement starts at the right batch and the final parameters are bitwise those
of an undisturbed run (the last line: ``kind=final params_sha256=...``, which the oracle test
compares with ``--reference``). docs/pytorch.md shows the diff from the plain DDP script.

Exit codes as torch_train.py: 0 done, 2 bad configuration, 3 superseded, 1 any other failure.
"""

import argparse
import sys
import time

from torch_train import EXIT_BAD_CONFIG, build_model, event, join_job, params_sha256

SAMPLES = 1024


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--step_time", type=float, default=0.05,
                   help="seconds of simulated compute per step (a sleep), so faults land mid-run")
    p.add_argument("--reference", type=int, default=0, metavar="RANKS",
                   help="no job: train for RANKS ranks in this one process (each rank's batch "
                        "from its own sampler, gradients averaged as the Manager's DDP hook "
                        "does) and print the final line an undisturbed run prints")
    return p.parse_args(argv)


def dataset(torch):
    """A fixed synthetic regression set: inputs and the targets of a fixed linear map."""
    g = torch.Generator().manual_seed(99)
    x = torch.randn(SAMPLES, 16, generator=g)
    w = torch.randn(16, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x @ w + 0.01 * torch.randn(SAMPLES, 4, generator=g))


def reference(torch, args):
    """The undisturbed run without a job: the ranks' loaders side by side, every rank's gradient
    computed in turn and averaged exactly as ``chain_allreduce`` does."""
    from torch.utils.data import DataLoader, DistributedSampler
    data = dataset(torch)
    samplers = [DistributedSampler(data, num_replicas=args.reference, rank=r, shuffle=True,
                                   seed=0) for r in range(args.reference)]
    loaders = [DataLoader(data, batch_size=args.batch_size, sampler=s) for s in samplers]
    model = build_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    params = list(model.parameters())
    steps = 0
    for epoch in range(args.epochs):
        for s in samplers:
            s.set_epoch(epoch)
        for batches in zip(*loaders):
            grads = []
            for x, y in batches:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                grads.append([p.grad.clone() for p in params])
            for i, p in enumerate(params):
                total = grads[0][i].clone()
                for rank_grads in grads[1:]:
                    total.add_(rank_grads[i])
                p.grad = total.div_(len(batches))
            optimizer.step()
            steps += 1
    event("reference", "final", steps=steps, params_sha256=params_sha256(model))
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        sys.stderr.write("torch_dataloader_train: PyTorch is not installed (%s)\n" % e)
        return EXIT_BAD_CONFIG
    torch.set_num_threads(1)
    if args.reference > 0:
        return reference(torch, args)
    from phalanx.torch_recovery import Manager
    from torch.utils.data import DataLoader

    client = join_job("torch_dataloader_train")
    if client is None:
        return EXIT_BAD_CONFIG
    me = client.task_id

    # The user's script from here on; docs/pytorch.md shows it beside the plain DDP one.
    model = build_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    manager = Manager(model, optimizer, client=client,
                      on_event=lambda m, kind, fields: event(me, kind, **fields))
    data = dataset(torch)
    sampler = manager.sampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    loss_fn = torch.nn.MSELoss()
    for x, y in manager.loop(loader, args.epochs):
        with manager.recoverable():
            optimizer.zero_grad()
            loss = loss_fn(manager.model(x), y)
            loss.backward()
            optimizer.step()
            event(me, "step", step=manager.step + 1, loss="%.6f" % loss.item())
            time.sleep(args.step_time)
    if manager.step == args.epochs * len(loader):
        event(me, "final", steps=manager.step, params_sha256=params_sha256(model))
    manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
