#!/usr/bin/env python3
"""make bench → build/bench/torch.json (issue 14): Phalanx's in-place recovery against torchrun
(torch elastic, c10d rendezvous, --max-restarts) on the same model, data, step time and world size
(4 gloo ranks on this machine), one rank SIGKILLed mid-run; and the c10d Store API driven the
same way against PhalanxStore and torch's TCPStore.

Keys: recover_s.phalanx / .torchrun (the kill → every rank stepping again at full size),
recover_s.phalanx_warm / lost_s.phalanx_warm (the same with a warm standby, phalanx.standby: the
replacement is a process that imported torch before the kill, as phalanx-launch keeps per pod),
recover_s.phalanx_spare / lost_s.phalanx_spare (the same with a spare, as a spare pod's process
of spec.spares: it ran the script up to phalanx.init() and the coordinator hands it the dead rank),
lost_s.phalanx / .torchrun (wall time lost against the same launcher's undisturbed run),
steps_lost.phalanx / .torchrun (steps done before the kill that were done again),
store_ops_per_s.phalanx / .tcpstore (set, get and add from 4 client processes at once),
hang_recover_s (rank 2 stuck in its step outside any collective, as a deadlocked data loader:
its hang watchdog, --hang_timeout, declares it hung; from its hang to every rank stepping again,
warm standby), group_formation_s.phalanx.4 / .64 and .tcpstore.4 / .64 (init_process_group plus a barrier
once every rank is connected, the slowest rank's time), deterministic_overhead_pct.4 / .16 (the step time of Manager's deterministic averaging,
ChainReducer, over DDP's own all-reduce, an MLP with 8 MiB of gradients at 4 and 16 ranks),
state_transfer_mb_per_s (a replacement receiving a 256 MiB state from a live peer, 2 ranks)
against state_transfer_reference_mb_per_s (the same bytes through one loopback TCP socket).
Run with the interpreter that imports torch (Debian's /usr/bin/python3)."""

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "runtime", "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "runtime", "python"))

TRAIN = os.path.join(REPO, "runtime", "python", "examples", "torch_train.py")
TORCHRUN_WORKER = os.path.join(HERE, "torchrun_worker.py")


def first_full_step_after(events, ranks, after_ms):
    """When every rank had reported a step after ``after_ms`` (ms), or None."""
    firsts = {}
    for e in events:
        if e.get("kind") == "step" and int(e["t_ms"]) > after_ms and e["task"] not in firsts:
            firsts[e["task"]] = int(e["t_ms"])
    return max(firsts.values()) if len(firsts) == ranks else None


def training_span(events):
    """Seconds from the first group formed to the last rank's final step: what a failure
    lengthens (process start-up before it is the same in every run and is left out)."""
    start = min(int(e["t_ms"]) for e in events if e.get("kind") == "formed")
    end = max(int(e["t_ms"]) for e in events if e.get("kind") == "final")
    return (end - start) / 1000.0


def max_step_before(events, ms):
    return max((int(e["step"]) for e in events
                if e.get("kind") == "step" and int(e["t_ms"]) <= ms), default=0)


def bench_environment(build, name):
    """Points the test harness at ``build``; False (said on stdout) when torch is missing."""
    os.environ["PHALANX_BUILD_DIR"] = os.path.abspath(build)
    os.environ.setdefault("PHALANX_LIBRARY",
                          os.path.join(build, "runtime", "client", "libphalanx_c.so"))
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("%s skipped: %s cannot import torch (%s); make deps installs python3-torch for "
              "/usr/bin/python3" % (name, sys.executable, e))
        return False
    return True


# -- Phalanx: plain processes under a supervisor that restarts a dead rank ----------------------

def phalanx_run(args, kill, standby=False, hang=False, spare=False):
    import harness
    import rank_supervisor
    os.environ.setdefault("PHALANX_BUILD_DIR", args.build)
    coordinator = harness.Coordinator(num_tasks=args.ranks, job="bench", heartbeat_timeout="2s",
                                      extra_args=["--metrics_listen=127.0.0.1:0"])
    extra = (["--hang_at=%d" % args.kill_at, "--hang_task=2",
              "--hang_timeout=%g" % args.hang_timeout] if hang else [])
    try:
        ranks = rank_supervisor.RankSupervisor(
            coordinator, [TRAIN, "--steps=%d" % args.steps, "--step_time=%g" % args.step_time]
            + extra, args.ranks, standby=standby, spare=spare)
        try:
            kill_ms = None
            if hang:
                if not ranks.wait_for(lambda ev, ex: len(ranks.finals()) == args.ranks, 600):
                    raise RuntimeError("the Phalanx job did not finish; logs in "
                                       + coordinator.dir)
                events = list(ranks.events)
                hung_ms = min(int(e["t_ms"]) for e in events if e["kind"] == "hanging")
                back = first_full_step_after(events, args.ranks,
                                             max(int(e["t_ms"]) for e in events
                                                 if e["kind"] in ("recovered", "formed")))
                return {"hang_recover_s": (back - hung_ms) / 1000.0}
            if spare and not harness.eventually(
                    lambda: coordinator.metric("phalanx_coordinator_spares_waiting") == 1, 300):
                raise RuntimeError("the spare never waited; logs in " + coordinator.dir)
            if kill:
                ranks.wait_for(lambda ev, ex: ranks.min_step() >= args.kill_at, 300)
                kill_ms = int(time.time() * 1000)
                ranks.signal(2, signal.SIGKILL)
            if not ranks.wait_for(lambda ev, ex: len(ranks.finals()) == args.ranks, 600):
                raise RuntimeError("the Phalanx job did not finish; logs in " + coordinator.dir)
            events = list(ranks.events)
            result = {"wall_s": training_span(events)}
            if kill:
                resumed = [int(e["step"]) for e in events
                           if e["kind"] == "recovered" and int(e["t_ms"]) > kill_ms]
                back = first_full_step_after(events, args.ranks,
                                             max(int(e["t_ms"]) for e in events
                                                 if e["kind"] in ("recovered", "formed")))
                result["recover_s"] = (back - kill_ms) / 1000.0
                result["steps_lost"] = max(0, max_step_before(events, kill_ms) - min(resumed))
            return result
        finally:
            ranks.close()
    finally:
        coordinator.close()


def state_transfer_mb_per_s(args):
    """A 2-rank job carrying ``--state_mb`` MiB of state; rank 1 SIGKILLed at step 5: the MiB/s
    at which its replacement received the state from the survivor (its ``formed`` event)."""
    import harness
    import rank_supervisor
    coordinator = harness.Coordinator(num_tasks=2, job="transfer", heartbeat_timeout="2s")
    try:
        ranks = rank_supervisor.RankSupervisor(
            coordinator, [TRAIN, "--steps=30", "--step_time=0.05",
                          "--state_mb=%d" % args.state_mb], 2)
        try:
            ranks.wait_for(lambda ev, ex: ranks.min_step() >= 5, 300)
            ranks.signal(1, signal.SIGKILL)

            def received(events):
                return [e for e in events if e["kind"] == "formed" and e["task"] == "1"
                        and e["inc"] == "1" and "state_mb_per_s" in e]
            if not ranks.wait_for(lambda ev, ex: received(ev), 300):
                raise RuntimeError("the replacement got no state; logs in " + coordinator.dir)
            got = received(ranks.events)[0]
            if int(got["state_bytes"]) < args.state_mb * 2**20:
                raise RuntimeError("the state moved was %s bytes" % got["state_bytes"])
            return float(got["state_mb_per_s"])
        finally:
            ranks.close()
    finally:
        coordinator.close()


DDP_STEP_WORKER = os.path.join(HERE, "ddp_step_worker.py")
FORMATION_WORKER = os.path.join(HERE, "group_formation_worker.py")


def group_formation_s(ranks, kind):
    """The slowest rank's init_process_group + first barrier (s) through ``kind``'s store."""
    import harness
    env = dict(os.environ, **harness.package_env(), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    coordinator = (harness.Coordinator(num_tasks=ranks, job="formation")
                   if kind == "phalanx" else None)
    port = free_port()
    try:
        procs = []
        for r in range(ranks):
            rank_env = dict(env, **coordinator.env(r)) if coordinator else env
            procs.append(subprocess.Popen(
                [sys.executable, FORMATION_WORKER, "--rank=%d" % r, "--world=%d" % ranks,
                 "--kind=" + kind, "--port=%d" % port], env=rank_env, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL))
        outs = [proc.communicate(timeout=900)[0].decode() for proc in procs]
        if any(proc.returncode != 0 for proc in procs):
            raise RuntimeError("group formation failed at %d ranks (%s)" % (ranks, kind))
        return max(float(out.split("formation_s=")[1].split()[0]) for out in outs)
    finally:
        if coordinator:
            coordinator.close()


def ddp_step_ms(ranks, mode, steps):
    """The mean step time (ms) of bench/ddp_step_worker.py's MLP at ``ranks`` ranks."""
    import harness
    port = free_port()
    env = dict(os.environ, **harness.package_env(), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, DDP_STEP_WORKER, "--rank=%d" % r,
                               "--world=%d" % ranks, "--port=%d" % port, "--mode=" + mode,
                               "--steps=%d" % steps], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
             for r in range(ranks)]
    out = procs[0].communicate(timeout=900)[0].decode()
    for proc in procs[1:]:
        proc.wait(timeout=120)
    if any(proc.returncode != 0 for proc in procs):
        raise RuntimeError("ddp_step_worker failed at %d ranks (%s)" % (ranks, mode))
    return float(out.split("step_ms=")[1].split()[0])


def deterministic_overhead_pct(args, ranks):
    """(chain − plain) / plain × 100, from the medians of --repeats runs of each."""
    plain = median([ddp_step_ms(ranks, "plain", args.ddp_steps) for _ in range(args.repeats)])
    chain = median([ddp_step_ms(ranks, "chain", args.ddp_steps) for _ in range(args.repeats)])
    return (chain - plain) / plain * 100.0, plain, chain


def socket_copy_mb_per_s(mb):
    """``mb`` MiB through one loopback TCP connection (sendall → recv_into), MiB/s: what moving
    the bytes costs on this machine without torch or Phalanx."""
    import socket
    import threading
    payload = bytearray(mb * 2**20)
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    listener.close()
    into = memoryview(bytearray(len(payload)))
    started = time.monotonic()
    thread = threading.Thread(target=sender.sendall, args=(payload,))
    thread.start()
    got = 0
    while got < len(payload):
        n = receiver.recv_into(into[got:])
        if n == 0:
            raise RuntimeError("the loopback connection closed early")
        got += n
    seconds = time.monotonic() - started
    thread.join()
    sender.close()
    receiver.close()
    return mb / seconds


# -- torchrun: torch elastic's launcher API (Debian's torchrun command fails on Python 3.11) -----

LAUNCH = """
import sys
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.distributed.elastic.multiprocessing import Std
config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=%(ranks)d, run_id="bench",
                      rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:%(port)d",
                      max_restarts=3, monitor_interval=0.1, redirects=Std.NONE, tee=Std.NONE)
elastic_launch(config, entrypoint=sys.executable)("-u", %(worker)r, *%(argv)r)
"""


def torchrun_run(args, kill):
    import rank_supervisor
    work = tempfile.mkdtemp(prefix="phalanx-bench-torchrun-")
    try:
        argv = ["--steps=%d" % args.steps, "--step_time=%g" % args.step_time,
                "--checkpoint_dir=" + work, "--checkpoint_every=%d" % args.checkpoint_every,
                "--kill_at=%d" % (args.kill_at if kill else -1)]
        code = LAUNCH % {"ranks": args.ranks, "port": free_port(), "worker": TORCHRUN_WORKER,
                         "argv": argv}
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.join(REPO, "runtime", "python"))
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(work, "launcher.log"), "wb"))
        events = []
        for raw in proc.stdout:
            fields = rank_supervisor.parse_event(raw.decode("utf-8", "replace").strip())
            if fields:
                events.append(fields)
        if proc.wait(600) != 0:
            raise RuntimeError("torchrun's launcher failed; see %s/launcher.log" % work)
        result = {"wall_s": training_span(events)}
        if kill:
            kill_ms = min(int(e["t_ms"]) for e in events if e["kind"] == "killed")
            formed = [e for e in events if e["kind"] == "formed" and int(e["t_ms"]) > kill_ms]
            back = first_full_step_after(events, args.ranks,
                                         max(int(e["t_ms"]) for e in formed))
            result["recover_s"] = (back - kill_ms) / 1000.0
            result["steps_lost"] = max(0, max_step_before(events, kill_ms)
                                       - min(int(e["step"]) for e in formed))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the Store API: set, get, add from several client processes at once ----------------------

STORE_CLIENT = """
import datetime, sys, time
sys.path.insert(0, %(python_dir)r)
import torch.distributed as dist
kind, ops, me = %(kind)r, %(ops)d, int(sys.argv[1])
if kind == "tcpstore":
    store = dist.TCPStore("127.0.0.1", %(port)d, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
else:
    import phalanx
    from phalanx.torch_store import PhalanxStore
    store = PhalanxStore(phalanx.init(timeout=60), prefix="bench", timeout=60)
print("ready", flush=True)
sys.stdin.readline()
started = time.monotonic()
for i in range(ops):
    key = "k%%d/%%d" %% (me, i)
    store.set(key, b"v" * 32)
    store.get(key)
    store.add("counter/%%d" %% me, 1)
print("done %%.6f" %% (time.monotonic() - started), flush=True)
"""


def store_ops_per_s(args, kind):
    import harness
    coordinator = server = None
    procs = []
    try:
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "runtime", "python"))
        port = free_port()
        if kind == "tcpstore":
            import torch.distributed as dist
            server = dist.TCPStore("127.0.0.1", port, is_master=True,
                                   timeout=datetime.timedelta(seconds=60))
        else:
            coordinator = harness.Coordinator(num_tasks=args.store_clients, job="storebench")
        code = STORE_CLIENT % {"python_dir": os.path.join(REPO, "runtime", "python"),
                               "kind": kind, "ops": args.store_ops, "port": port}
        for me in range(args.store_clients):
            client_env = dict(env, **(coordinator.env(me) if coordinator else {}))
            procs.append(subprocess.Popen([sys.executable, "-c", code, str(me)], env=client_env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        for p in procs:
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError("a %s store client did not start" % kind)
        started = time.monotonic()
        for p in procs:  # every client starts its loop at once
            p.stdin.write(b"go\n")
            p.stdin.flush()
        for p in procs:
            line = p.stdout.readline().decode()
            if not line.startswith("done"):
                raise RuntimeError("a %s store client failed" % kind)
        wall = time.monotonic() - started
        return 3 * args.store_ops * args.store_clients / wall
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        if coordinator:
            coordinator.close()
        del server


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step_time", type=float, default=0.05)
    p.add_argument("--kill_at", type=int, default=65)
    p.add_argument("--checkpoint_every", type=int, default=10,
                   help="torchrun's snapshot interval (Phalanx needs none to recover)")
    p.add_argument("--store_ops", type=int, default=2000, help="set+get+add rounds per client")
    p.add_argument("--store_clients", type=int, default=4)
    p.add_argument("--ddp_steps", type=int, default=20,
                   help="steps timed per run in the determinism measurement")
    p.add_argument("--hang_timeout", type=float, default=2.0,
                   help="the hang watchdog's limit in the hang measurement")
    p.add_argument("--state_mb", type=int, default=256,
                   help="the state a replacement receives in the transfer measurement")
    p.add_argument("--repeats", type=int, default=3, help="runs of each kind (medians)")
    args = p.parse_args()
    if not bench_environment(args.build, "torch bench"):
        return 0

    def say(text):
        print("torch bench: " + text, flush=True)

    say("Phalanx in place and torchrun (elastic_launch, c10d, max_restarts=3), %d ranks, %d "
        "steps of %g s, undisturbed and with rank 2 SIGKILLed at step %d"
        % (args.ranks, args.steps, args.step_time, args.kill_at))
    runs = {"ph0": [], "ph1": [], "pw1": [], "ps1": [], "phh": [], "tr0": [], "tr1": []}
    for i in range(args.repeats):
        say("run %d of %d" % (i + 1, args.repeats))
        runs["ph0"].append(phalanx_run(args, kill=False))
        runs["ph1"].append(phalanx_run(args, kill=True))
        runs["pw1"].append(phalanx_run(args, kill=True, standby=True))
        runs["ps1"].append(phalanx_run(args, kill=True, spare=True))
        runs["phh"].append(phalanx_run(args, kill=False, standby=True, hang=True))
        runs["tr0"].append(torchrun_run(args, kill=False))
        runs["tr1"].append(torchrun_run(args, kill=True))

    def med(run, key):
        return median([r[key] for r in runs[run]])
    ph0 = {"wall_s": med("ph0", "wall_s")}
    tr0 = {"wall_s": med("tr0", "wall_s")}
    ph1 = {k: med("ph1", k) for k in ("wall_s", "recover_s", "steps_lost")}
    pw1 = {k: med("pw1", k) for k in ("wall_s", "recover_s", "steps_lost")}
    ps1 = {k: med("ps1", k) for k in ("wall_s", "recover_s", "steps_lost")}
    tr1 = {k: med("tr1", k) for k in ("wall_s", "recover_s", "steps_lost")}
    say("c10d Store API: PhalanxStore and TCPStore")
    ops_phalanx = median([store_ops_per_s(args, "phalanx") for _ in range(args.repeats)])
    ops_tcp = median([store_ops_per_s(args, "tcpstore") for _ in range(args.repeats)])
    say("state transfer: %d MiB to a replacement, and through a loopback socket" % args.state_mb)
    transfer = median([state_transfer_mb_per_s(args) for _ in range(args.repeats)])
    socket_copy = median([socket_copy_mb_per_s(args.state_mb) for _ in range(args.repeats)])
    say("group formation through PhalanxStore and TCPStore, 4 and 64 ranks")
    formation = {(kind, n): median([group_formation_s(n, kind) for _ in range(args.repeats)])
                 for kind in ("phalanx", "tcpstore") for n in (4, 64)}
    say("deterministic averaging (ChainReducer) against DDP's own all-reduce, 4 and 16 ranks")
    overhead = {n: deterministic_overhead_pct(args, n) for n in (4, 16)}
    result = {
        "recover_s.phalanx": round(ph1["recover_s"], 3),
        "recover_s.torchrun": round(tr1["recover_s"], 3),
        "recover_s.phalanx_warm": round(pw1["recover_s"], 3),
        "lost_s.phalanx_warm": round(pw1["wall_s"] - ph0["wall_s"], 3),
        "recover_s.phalanx_spare": round(ps1["recover_s"], 3),
        "lost_s.phalanx_spare": round(ps1["wall_s"] - ph0["wall_s"], 3),
        "lost_s.phalanx": round(ph1["wall_s"] - ph0["wall_s"], 3),
        "lost_s.torchrun": round(tr1["wall_s"] - tr0["wall_s"], 3),
        "steps_lost.phalanx": ph1["steps_lost"],
        "steps_lost.torchrun": tr1["steps_lost"],
        "steps_lost": ph1["steps_lost"],
        "store_ops_per_s.phalanx": round(ops_phalanx),
        "store_ops_per_s.tcpstore": round(ops_tcp),
        "hang_recover_s": round(med("phh", "hang_recover_s"), 3),
        "group_formation_s.phalanx.4": round(formation[("phalanx", 4)], 3),
        "group_formation_s.phalanx.64": round(formation[("phalanx", 64)], 3),
        "group_formation_s.tcpstore.4": round(formation[("tcpstore", 4)], 3),
        "group_formation_s.tcpstore.64": round(formation[("tcpstore", 64)], 3),
        "deterministic_overhead_pct.4": round(overhead[4][0], 1),
        "deterministic_overhead_pct.16": round(overhead[16][0], 1),
        "state_transfer_mb_per_s": round(transfer, 1),
        "state_transfer_reference_mb_per_s": round(socket_copy, 1),
        "config": {"ranks": args.ranks, "steps": args.steps, "step_time_s": args.step_time,
                   "kill_at": args.kill_at, "torchrun_checkpoint_every": args.checkpoint_every,
                   "store_clients": args.store_clients, "store_ops_per_client": 3 * args.store_ops,
                   "repeats": args.repeats, "state_mb": args.state_mb,
                   "hang_timeout_s": args.hang_timeout,
                   "ddp_step_ms.plain.4": round(overhead[4][1], 2),
                   "ddp_step_ms.chain.4": round(overhead[4][2], 2),
                   "ddp_step_ms.plain.16": round(overhead[16][1], 2),
                   "ddp_step_ms.chain.16": round(overhead[16][2], 2), "undisturbed_s.phalanx": round(ph0["wall_s"], 3),
                   "undisturbed_s.torchrun": round(tr0["wall_s"], 3),
                   "cores": os.cpu_count()},
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print("%-28s %12s %12s" % ("", "Phalanx", "torchrun"))
    for key in ("recover_s", "lost_s", "steps_lost"):
        print("%-28s %12s %12s" % (key, result[key + ".phalanx"], result[key + ".torchrun"]))
    for key in ("recover_s", "lost_s"):
        print("%-28s %12s" % (key + " (warm standby)", result[key + ".phalanx_warm"]))
        print("%-28s %12s" % (key + " (spare)", result[key + ".phalanx_spare"]))
    print("%-28s %12s %12s" % ("store_ops_per_s (TCPStore)", result["store_ops_per_s.phalanx"],
                               result["store_ops_per_s.tcpstore"]))
    for n in (4, 64):
        print("%-28s %12s %12s" % ("group_formation_s.%d (TCPStore)" % n,
                                   result["group_formation_s.phalanx.%d" % n],
                                   result["group_formation_s.tcpstore.%d" % n]))
    for n in (4, 16):
        print("%-28s %12s" % ("deterministic_overhead_pct.%d" % n,
                               result["deterministic_overhead_pct.%d" % n]))
    print("%-28s %12s (limit %g s)" % ("hang_recover_s (warm)", result["hang_recover_s"],
                                       args.hang_timeout))
    print("%-28s %12s %12s" % ("state MiB/s (socket copy)", result["state_transfer_mb_per_s"],
                               result["state_transfer_reference_mb_per_s"]))
    print("wrote " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
