#!/usr/bin/env python3
"""The GPU proof's PyTorch step: phalanx.torch_recovery.Manager on a real backend, with a
recovery, checked bit for bit against an undisturbed run.

    torch_manager_proof.py --coordinator BIN --out DIR [--device cuda --backend nccl]
                           [--worlds 1,2] [--steps 30] [--timeout 120]

For each world size W: a coordinator (BIN) for W tasks and W rank processes train a small MLP
for --steps steps (DDP through the Manager, its deterministic all-reduce hook); then the same
again, with the last rank SIGKILLed mid-run and started again as its next incarnation. With
W = 1 nothing survives, so the replacement restores the checkpoint (every 5 steps); with W > 1
the survivors keep the state in memory and hand it over. Every rank's final parameters must
hash the same as the undisturbed run's.

Several ranks on one GPU: NCCL refuses them ("Duplicate GPU detected"); that world size is then
SKIP with NCCL's words, not FAIL. Prints one ``PASS|FAIL|SKIP: ...`` line per check; exits 1 when
any check failed. Rank logs go to DIR. Stdlib only in this process; the ranks import torch."""

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

KILL_AT_STEP = 12  # the victim's step when it is killed: after a checkpoint (every 5)


# -- the rank ------------------------------------------------------------------------------------

def rank_main(args):
    import torch
    import phalanx
    from phalanx.torch_recovery import Manager

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        torch.use_deterministic_algorithms(True)  # cuBLAS: CUBLAS_WORKSPACE_CONFIG (below)
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    client = phalanx.init(timeout=60)
    me = client.task_id

    def say(kind, **fields):
        text = "".join(" %s=%s" % (k, "_".join(str(v).split())) for k, v in fields.items())
        os.write(1, ("EVENT task=%d inc=%d kind=%s%s\n" % (me, client.incarnation, kind,
                                                           text)).encode())

    manager = Manager(model, optimizer, client=client, backend=args.backend,
                      checkpoint_dir=args.checkpoint_dir, checkpoint_every=5,
                      collective_timeout=60.0, agent_devices=[],
                      on_event=lambda m, kind, fields: say(kind, **fields))
    loss_fn = torch.nn.MSELoss()
    target = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))

    def train_step(step):
        g = torch.Generator().manual_seed(step * 1009 + me)
        x = torch.randn(32, 16, generator=g)
        y = x @ target + 0.01 * torch.randn(32, 4, generator=g)
        optimizer.zero_grad()
        loss = loss_fn(manager.model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        say("step", step=step + 1)
        time.sleep(0.05)

    manager.run(train_step, args.steps)
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    say("final", steps=manager.step, sha=h.hexdigest())
    manager.shutdown()
    return 0


# -- the driver ----------------------------------------------------------------------------------

class Job:
    """A coordinator for `world` tasks and their rank processes (the operator's part: starting a
    rank again as its next incarnation is the caller's)."""

    def __init__(self, args, world, name):
        self.args, self.world, self.name = args, world, name
        self.dir = os.path.join(args.out, name)
        os.makedirs(self.dir, exist_ok=True)
        self.checkpoints = tempfile.mkdtemp(prefix="ckpt-", dir=self.dir)
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w") as f:
            f.write("proof-token\n")
        self.coordinator = subprocess.Popen(
            [args.coordinator, "--listen=127.0.0.1:0", "--metrics_listen=", "--job=" + name,
             "--num_tasks=%d" % world, "--token_file=" + token_file, "--heartbeat_timeout=10s",
             "--heartbeat_interval=500ms"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(self.dir, "coordinator.log"), "wb"))
        line = self.coordinator.stdout.readline().decode()
        if not line.startswith("ready "):
            raise RuntimeError("the coordinator did not start: %r (see %s)" % (line, self.dir))
        self.address = line.split("grpc=")[1].split()[0]
        self.ranks = {}  # (task, incarnation) -> Popen
        self.events = []  # (task, incarnation, kind, fields)
        self.lock = threading.Lock()

    def start(self, task, incarnation=0):
        env = dict(os.environ, PHALANX_COORDINATOR=self.address, PHALANX_JOB=self.name,
                   PHALANX_TASK_ID=str(task), PHALANX_NUM_TASKS=str(self.world),
                   PHALANX_INCARNATION=str(incarnation), PHALANX_TOKEN="proof-token",
                   CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONUNBUFFERED="1")
        log = open(os.path.join(self.dir, "task-%d-%d.log" % (task, incarnation)), "wb")
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--rank", "--device", self.args.device,
             "--backend", self.args.backend, "--steps", str(self.args.steps),
             "--checkpoint_dir", self.checkpoints], env=env, stdout=subprocess.PIPE, stderr=log)
        self.ranks[(task, incarnation)] = proc
        threading.Thread(target=self._read, args=(proc, task, incarnation, log),
                         daemon=True).start()

    def _read(self, proc, task, incarnation, log):
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            parts = raw.decode("utf-8", "replace").split()
            if not parts or parts[0] != "EVENT":
                continue
            fields = dict(p.partition("=")[::2] for p in parts[1:])
            with self.lock:
                self.events.append((task, incarnation, fields.get("kind"), fields))

    def wait_for(self, predicate, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if predicate(self.events):
                    return True
            if all(p.poll() is not None for p in self.ranks.values()):
                with self.lock:
                    return predicate(self.events)
            time.sleep(0.1)
        return False

    def finals(self):
        with self.lock:
            return {t: f["sha"] for t, _, kind, f in self.events if kind == "final"}

    def logs(self):
        text = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text.append(f.read())
        return "\n".join(text)

    def close(self):
        for proc in list(self.ranks.values()) + [self.coordinator]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def run_world(args, world, report):
    what = "world %d, %s on %s" % (world, args.backend, args.device)
    undisturbed = Job(args, world, "w%d-undisturbed" % world)
    try:
        start = time.monotonic()
        for task in range(world):
            undisturbed.start(task)
        done = undisturbed.wait_for(lambda ev: len({t for t, _, k, _ in ev if k == "final"})
                                    == world, args.timeout)
        finals = undisturbed.finals()
        if not done or len(set(finals.values())) != 1:
            logs = undisturbed.logs()
            if world > 1 and "Duplicate GPU" in logs:
                line = next(l for l in logs.splitlines() if "Duplicate GPU" in l)
                report("SKIP", what, "NCCL allows one rank per GPU: " + line.strip()[:300])
                return
            report("FAIL", what + " / undisturbed run", "finals %s; logs in %s" % (
                finals, undisturbed.dir))
            return
        reference = next(iter(finals.values()))
        report("PASS", what + " / undisturbed run", "%d steps in %.1f s, params %s" % (
            args.steps, time.monotonic() - start, reference[:16]))
    finally:
        undisturbed.close()

    disturbed = Job(args, world, "w%d-recovery" % world)
    try:
        for task in range(world):
            disturbed.start(task)
        victim = world - 1
        reached = disturbed.wait_for(lambda ev: any(
            t == victim and k == "step" and int(f.get("step", 0)) >= KILL_AT_STEP
            for t, _, k, f in ev), args.timeout)
        if not reached:
            report("FAIL", what + " / recovery", "task %d never reached step %d; logs in %s" % (
                victim, KILL_AT_STEP, disturbed.dir))
            return
        killed = time.monotonic()
        disturbed.ranks[(victim, 0)].send_signal(signal.SIGKILL)
        disturbed.ranks[(victim, 0)].wait()
        disturbed.start(victim, incarnation=1)
        resumed = disturbed.wait_for(lambda ev: any(
            t == victim and i == 1 and k == "step" for t, i, k, _ in ev), args.timeout)
        recovery_s = time.monotonic() - killed
        done = disturbed.wait_for(lambda ev: len({t for t, _, k, _ in ev if k == "final"})
                                  == world, args.timeout)
        finals = disturbed.finals()
        if not (resumed and done) or set(finals.values()) != {reference}:
            report("FAIL", what + " / recovery", "resumed=%s finals %s, undisturbed %s; logs in %s"
                   % (resumed, finals, reference[:16], disturbed.dir))
            return
        how = "from its checkpoint" if world == 1 else "from the survivors' memory"
        report("PASS", what + " / recovery", "task %d killed at step >= %d, restarted %s, its "
               "first step %.1f s after the kill; final params bitwise equal to the undisturbed "
               "run's" % (victim, KILL_AT_STEP, how, recovery_s))
    finally:
        disturbed.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint_dir", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help="the phalanx-coordinator binary")
    parser.add_argument("--out", help="where the rank and coordinator logs go")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--worlds", default="1,2", help="world sizes to run, e.g. 1,2")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per phase")
    args = parser.parse_args()
    if args.rank:
        return rank_main(args)
    if not args.coordinator or not args.out:
        parser.error("--coordinator and --out are required")
    failed = []

    def report(verdict, what, detail):
        print("%s: torch Manager, %s: %s" % (verdict, what, detail), flush=True)
        if verdict == "FAIL":
            failed.append(what)

    for world in (int(w) for w in args.worlds.split(",")):
        try:
            run_world(args, world, report)
        except Exception as e:  # noqa: BLE001 - one line in the report, then the next world
            report("FAIL", "world %d" % world, "%s: %s" % (type(e).__name__, e))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
