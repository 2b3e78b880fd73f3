#!/usr/bin/env python3
"""A real PyTorch data-parallel job on Phalanx that survives faults in place (CPU, gloo).

A small MLP (fixed seed) learns a fixed linear map from synthetic batches derived from the step
number and the rank, with SGD + momentum, wrapped in ``DistributedDataParallel`` by
:class:`phalanx.torch_recovery.Manager`. When a rank dies or hangs the survivors keep their model
in memory, re-form the group with the replacement and hand it their state, so the final
parameters are bitwise those of an undisturbed run: the last line says so with a SHA-256 of them
(``kind=final params_sha256=...``), which the oracle test and ``make demo`` compare.

Run it as a TrainingJob's command (``restartScope: Task``; the operator injects ``PHALANX_*``) or
under any supervisor that restarts a dead rank with ``PHALANX_INCARNATION`` + 1. Set
``GLOO_SOCKET_IFNAME`` where the default interface is not the one peers reach.

Exit codes: 0 done, 2 bad configuration (no torch, missing env), 3 superseded, 4 left at a
preemption sync point, 1 any other failure.
"""

import argparse
import hashlib
import os
import sys
import time

EXIT_BAD_CONFIG = 2


def event(task, kind, **fields):
    # One token per field: spaces in a value (an error text) become '_'.
    text = "".join(" %s=%s" % (k, "_".join(str(v).split())) for k, v in fields.items())
    line = "EVENT t_ms=%d task=%s inc=%s kind=%s%s\n" % (
        int(time.time() * 1000), task, os.environ.get("PHALANX_INCARNATION", "0"), kind, text)
    os.write(1, line.encode())


def join_job(name):
    """The job's client (PHALANX_* from the environment), its peers' changes reported as EVENT
    lines (what a supervisor watches for a hung rank; the operator uses its own watch); None,
    said on stderr, when the environment is not a job's."""
    import phalanx
    try:
        client = phalanx.init(timeout=120)
    except phalanx.InvalidArgument as e:
        sys.stderr.write("%s: %s\n" % (name, e))
        return None
    me = client.task_id

    @client.on_peer_change
    def _(peer):
        event(me, "peer_change", peer=peer.task_id, peer_inc=peer.incarnation,
              state=peer.state_name, reason=peer.reason[:120] or "-")
    return client


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step_time", type=float, default=0.05,
                   help="seconds of simulated compute per step (a sleep), so faults land mid-run")
    p.add_argument("--checkpoint_dir", default="",
                   help="shared folder for checkpoints (needed only if every rank is lost)")
    p.add_argument("--checkpoint_every", type=int, default=0)
    p.add_argument("--collective_timeout", type=float, default=60.0)
    p.add_argument("--preempt_at", type=int, default=-1,
                   help="test hook: task 0's first incarnation opens a preemption round naming "
                        "--preempt_task when it reaches this step (the node agent's job)")
    p.add_argument("--preempt_task", type=int, default=1)
    p.add_argument("--hang_at", type=int, default=-1,
                   help="test hook: task --hang_task's first incarnation hangs in this step, "
                        "before its forward pass (outside any collective), as a deadlocked data "
                        "loader would: only the hang watchdog can tell")
    p.add_argument("--hang_task", type=int, default=1)
    p.add_argument("--hang_timeout", type=float, default=None,
                   help="Manager's hang_timeout (default: its own)")
    p.add_argument("--linger_file", default="",
                   help="test hook: until this file exists, each of the last --linger_steps "
                        "steps takes 1 s more, so a test's faults land before the job ends "
                        "however slow the machine; the loop keeps stepping (preemption rounds "
                        "still reach their sync point) and the math is unchanged")
    p.add_argument("--linger_steps", type=int, default=0)
    p.add_argument("--recovery", choices=["wait", "continue"], default="wait",
                   help="Manager's recovery mode: wait for a replacement, or train on with the "
                        "live tasks meanwhile")
    p.add_argument("--schedule", default="",
                   help="with --reference: which tasks trained from which step, "
                        "'STEP:T,T,...;STEP:...' (recovery=continue runs; default: all, always)")
    p.add_argument("--state_mb", type=int, default=0,
                   help="bench hook: carry this many MiB of extra state with the model (a "
                        "buffer in Manager's stateful, not trained), so a replacement's state "
                        "transfer has a size to measure")
    p.add_argument("--reference", type=int, default=0, metavar="RANKS",
                   help="no job: train the same model for RANKS ranks in this one process "
                        "(each rank's gradient in turn, averaged as the Manager's DDP hook does) "
                        "and print the final line an undisturbed run of RANKS ranks prints")
    return p.parse_args(argv)


def build_model(torch):
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batch(torch, step, rank):
    """The same batch for (step, rank) in every run and every incarnation."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(32, 16, generator=g)
    target = torch.Generator().manual_seed(7)
    w = torch.randn(16, 4, generator=target)
    return x, x @ w + 0.01 * torch.randn(32, 4, generator=g)


class Ballast:
    """``mb`` MiB of state that travels with the model (``stateful``): what a large model's
    weights and optimizer state weigh in a state transfer, without their compute."""

    def __init__(self, torch, mb):
        self.data = torch.arange(mb * 2**18, dtype=torch.float32)

    def state_dict(self):
        return {"data": self.data}

    def load_state_dict(self, state):
        self.data = state["data"]


def params_sha256(model):
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def reference(torch, args):
    """The undisturbed run's result without a job: every rank's gradient computed in turn and
    averaged exactly as ``chain_allreduce`` does (summed in rank order, then divided), so
    the SHA-256 matches a real run's bit for bit."""
    model = build_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    params = list(model.parameters())
    schedule = sorted((int(at), [int(t) for t in tasks.split(",")]) for at, tasks in
                      (entry.split(":") for entry in args.schedule.split(";") if entry))
    for step in range(args.steps):
        members = list(range(args.reference))
        for at, tasks in schedule:
            if at <= step:
                members = tasks
        grads = []
        for rank in members:
            x, y = batch(torch, step, rank)
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            grads.append([p.grad.clone() for p in params])
        for i, p in enumerate(params):
            total = grads[0][i].clone()
            for rank_grads in grads[1:]:
                total.add_(rank_grads[i])
            p.grad = total.div_(len(members))
        optimizer.step()
    event("reference", "final", steps=args.steps, params_sha256=params_sha256(model))
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        sys.stderr.write("torch_train: PyTorch is not installed (%s)\n" % e)
        return EXIT_BAD_CONFIG
    torch.set_num_threads(1)  # many ranks on few cores; also keeps the math single-threaded
    if args.reference > 0:
        return reference(torch, args)
    from phalanx.torch_recovery import Manager

    # Everything that does not depend on the rank comes before join_job: in a spare pod
    # (spec.spares) that is done while the spare waits, not after it is given a rank.
    model = build_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    stateful = {"ballast": Ballast(torch, args.state_mb)} if args.state_mb > 0 else None
    client = join_job("torch_train")
    if client is None:
        return EXIT_BAD_CONFIG
    me = client.task_id

    def on_event(manager, kind, fields):
        event(me, kind, **fields)

    manager = Manager(model, optimizer, client=client, checkpoint_dir=args.checkpoint_dir or None,
                      stateful=stateful,
                      checkpoint_every=args.checkpoint_every,
                      collective_timeout=args.collective_timeout, on_event=on_event,
                      hang_timeout=args.hang_timeout, recovery=args.recovery)
    loss_fn = torch.nn.MSELoss()

    def train_step(step):
        if (args.preempt_at >= 0 and step == args.preempt_at and me == 0
                and client.incarnation == 0):
            client.notify_preemption(reason="test: node going away",
                                     tasks=[args.preempt_task])
        if step == args.hang_at and me == args.hang_task and client.incarnation == 0:
            event(me, "hanging", step=step)
            while True:
                time.sleep(3600)
        x, y = batch(torch, step, me)
        optimizer.zero_grad()
        loss = loss_fn(manager.model(x), y)
        loss.backward()
        optimizer.step()
        event(me, "step", step=step + 1, loss="%.6f" % loss.item())
        if args.step_time > 0:
            time.sleep(args.step_time)
        if (args.linger_file and step >= args.steps - args.linger_steps
                and not os.path.exists(args.linger_file)):
            time.sleep(1.0)

    manager.run(train_step, args.steps)
    if manager.step == args.steps:  # not a replacement that started after the others finished
        event(me, "final", steps=manager.step, params_sha256=params_sha256(model))
    manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
