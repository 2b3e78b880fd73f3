#!/usr/bin/env python3
"""make bench → build/bench/peers.json (issue 15): Phalanx's coordination service side by side
with torch's TCPStore (Debian's python3-torch) on TCPStore's own workloads, in the same run on
the same machine, driven the same way: client processes (``bench/peer_worker.py`` for TCPStore
and the Phalanx Python client, ``phalanx-peer-worker`` for the C++ client, one protocol), each
running its share of the tasks as threads, one connection per task, everything on 127.0.0.1.

Rows (medians of --runs runs): rendezvous_64/256/1024 (s: GO → the last task through the first
barrier; each task connects, publishes an address and passes a barrier over all tasks),
barrier_16/64/256 (ms: the median round of 20 barriers over all tasks, a round being the last
task's pass of barrier k minus that of k−1), kv_ops_per_s (8 synchronous clients, each a set
then a get of its own 100-byte keys in a loop), kv_get_p50_us / kv_set_p50_us (the median
over those 8 clients of each one's median). Sets are TCPStore's kind everywhere: sent, not
waited for (TCPStore's set has no answer; Phalanx's kv_set(wait=False) / KvInsertAsync, whose
answers are checked); a get or barrier after them on the same connection is handled after
them. coordination.json's kv_set_p50_us is the waited-for set. TCPStore has no barrier: its workers use the
cheapest it allows (an atomic add, the last arrival sets a key every task WAITs for).
Run with the interpreter that imports torch (Debian's /usr/bin/python3); without torch the
TCPStore column is skipped with a line saying so."""

import argparse
import datetime
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "runtime", "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "runtime", "python"))

PEERS = ("tcpstore", "phalanx_py", "phalanx_cpp")
BARRIERS = 20
KV_CLIENTS = 8
RUN_DEADLINE_S = 180  # one measurement; a hung one fails instead of stalling make bench
ROWS = [  # (workload, unit, lower_is_better)
    ("rendezvous_64", "s", True), ("rendezvous_256", "s", True), ("rendezvous_1024", "s", True),
    ("barrier_16", "ms", True), ("barrier_64", "ms", True), ("barrier_256", "ms", True),
    ("kv_ops_per_s", "ops/s", False), ("kv_get_p50_us", "us", True),
    ("kv_set_p50_us", "us", True),
]

TCPSTORE_SERVER = r"""
import datetime, sys
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, int(sys.argv[1]), True, datetime.timedelta(seconds=300), False)
print("port=%d" % store.port, flush=True)
sys.stdin.read()
"""


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Server:
    """The server a measurement runs against: a TCPStore in its own process, or a
    phalanx-coordinator (the coordination bench's flags: 1 s heartbeats, 10 s timeout)."""

    def __init__(self, peer, world):
        self.coordinator = self.proc = None
        self.token = ""
        if peer == "tcpstore":
            self.proc = subprocess.Popen([sys.executable, "-c", TCPSTORE_SERVER, str(world)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            line = self.proc.stdout.readline().decode()
            if not line.startswith("port="):
                raise RuntimeError("the TCPStore server did not start")
            self.address = "127.0.0.1:" + line.split("=")[1].strip()
            self.pid = self.proc.pid
        else:
            import harness
            self.coordinator = harness.Coordinator(
                num_tasks=world, job="bench", heartbeat_timeout="10s",
                extra_args=["--heartbeat_interval=1s"])
            self.address, self.token = self.coordinator.address, self.coordinator.token
            self.pid = self.coordinator.proc.pid

    def close(self):
        if self.coordinator:
            self.coordinator.close()
        else:
            self.proc.stdin.close()
            self.proc.wait(30)


class Workers:
    """The client processes of one measurement; their lines arrive on one queue."""

    def __init__(self, args, peer, server, workload, world, processes, extra):
        self.lines = queue.Queue()
        self.procs = []
        per = world // processes
        for p in range(processes):
            count = per if p < processes - 1 else world - per * (processes - 1)
            common = ["--workload=" + workload, "--address=" + server.address,
                      "--first=%d" % (p * per), "--count=%d" % count, "--world=%d" % world] + extra
            if peer == "phalanx_cpp":
                cmd = [os.path.join(args.build, "bench", "phalanx-peer-worker"),
                       "--token=" + server.token] + common
            else:
                cmd = [sys.executable, os.path.join(HERE, "peer_worker.py"),
                       "--peer=" + ("tcpstore" if peer == "tcpstore" else "phalanx"),
                       "--token=" + server.token] + common
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    env=dict(os.environ, PHALANX_LOG_LEVEL="warning"))
            self.procs.append(proc)
            threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc):
        for raw in proc.stdout:
            self.lines.put(raw.decode("utf-8", "replace").strip())
        self.lines.put(None)

    def wait_for(self, word, deadline):
        """Every process's ``word`` line; returns the other lines seen meanwhile."""
        seen, other = 0, []
        while seen < len(self.procs):
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("timed out waiting for %s" % word)
            if line is None:
                raise RuntimeError("a worker exited before %s" % word)
            if line.startswith("ERROR"):
                raise RuntimeError(line)
            if line == word:
                seen += 1
            else:
                other.append(line)
        return other

    def go(self):
        for proc in self.procs:
            proc.stdin.write(b"GO\n")
            proc.stdin.flush()

    def close(self):
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fields(line):
    return dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)


def measure(args, peer, workload, world, processes, extra):
    """One measurement: (lines after GO, t0 in unix µs, server RSS in MiB with every
    connection open)."""
    server = Server(peer, world)
    workers = None
    try:
        workers = Workers(args, peer, server, workload, world, processes, extra)
        deadline = time.monotonic() + RUN_DEADLINE_S
        workers.wait_for("READY", deadline)
        t0 = int(time.time() * 1e6)
        workers.go()
        lines = workers.wait_for("DONE", deadline)
        return lines, t0, rss_mib(server.pid)
    finally:
        if workers:
            workers.close()
        server.close()


def rendezvous_run(args, peer, world):
    """(rendezvous seconds, median barrier round in ms, server RSS MiB) of one run."""
    barriers = BARRIERS if world <= 256 else 0
    lines, t0, rss = measure(args, peer, "rendezvous", world, max(1, min(8, world // 32)),
                             ["--barriers=%d" % barriers])
    last = {}
    for line in lines:
        if line.startswith("PASS"):
            f = fields(line)
            b = int(f["barrier"])
            last[b] = max(last.get(b, 0), int(f["t_us"]))
    rounds = [(last[b] - last[b - 1]) / 1000.0 for b in range(0, barriers)]
    return ((last[-1] - t0) / 1e6, statistics.median(rounds) if rounds else None, rss)


def kv_run(args, peer):
    lines, _, _ = measure(args, peer, "kv", KV_CLIENTS, 2, ["--seconds=%g" % args.kv_seconds])
    kv = [fields(line) for line in lines if line.startswith("KV")]
    if len(kv) != KV_CLIENTS:
        raise RuntimeError("%d of %d kv clients reported" % (len(kv), KV_CLIENTS))
    return (sum(int(f["ops"]) for f in kv) / args.kv_seconds,
            statistics.median(float(f["get_p50_us"]) for f in kv),
            statistics.median(float(f["set_p50_us"]) for f in kv))


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median_high(values) if values else None


def bench_peer(args, peer):
    """{workload: median} for one peer, plus the server RSS with 1024 tasks connected."""
    samples = {name: [] for name, _, _ in ROWS}
    rss = []
    sizes = [int(n) for n in args.sizes.split(",") if n]
    for run in range(args.runs):
        for world in sizes:
            try:
                rendezvous_s, barrier_ms, server_rss = rendezvous_run(args, peer, world)
            except RuntimeError as e:
                print("  %s rendezvous %d, run %d failed: %s" % (peer, world, run + 1, e))
                continue
            if world != 16:
                samples["rendezvous_%d" % world].append(rendezvous_s)
            if world <= 256:
                samples["barrier_%d" % world].append(barrier_ms)
            if world == 1024:
                rss.append(server_rss)
            print("  %-11s run %d: rendezvous %4d %.3f s%s" % (
                peer, run + 1, world, rendezvous_s,
                ", barrier %.2f ms" % barrier_ms if barrier_ms is not None else ""), flush=True)
        if not args.kv:
            continue
        try:
            ops, get_us, set_us = kv_run(args, peer)
            samples["kv_ops_per_s"].append(ops)
            samples["kv_get_p50_us"].append(get_us)
            samples["kv_set_p50_us"].append(set_us)
            print("  %-11s run %d: kv %.0f ops/s, get p50 %.0f us, set p50 %.0f us"
                  % (peer, run + 1, ops, get_us, set_us), flush=True)
        except RuntimeError as e:
            print("  %s kv, run %d failed: %s" % (peer, run + 1, e))
    result = {name: median_of(v) for name, v in samples.items()}
    result["server_rss_mib_1024"] = median_of(rss)
    return result


def ratio(row):
    """Phalanx against TCPStore as 'x times faster' (> 1: Phalanx ahead), per client."""
    out = {}
    for client in ("phalanx_py", "phalanx_cpp"):
        ours, theirs = row.get(client), row.get("tcpstore")
        if ours and theirs:
            out[client] = theirs / ours if row["lower_is_better"] else ours / theirs
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--out", default="build/bench/peers.json")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kv_seconds", type=float, default=3.0)
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated subset of " + ",".join(PEERS))
    parser.add_argument("--sizes", default="16,64,256,1024",
                        help="task counts of the rendezvous and barrier runs (a subset: rows "
                             "left out are null)")
    parser.add_argument("--no_kv", dest="kv", action="store_false",
                        help="leave out the key-value rows")
    args = parser.parse_args()
    os.environ["PHALANX_BUILD_DIR"] = os.path.abspath(args.build)
    os.environ.setdefault("PHALANX_LIBRARY", os.path.join(
        os.path.abspath(args.build), "runtime", "client", "libphalanx_c.so"))
    peers = [p for p in args.peers.split(",") if p]
    if "tcpstore" in peers:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            print("peers bench: TCPStore column skipped: %s cannot import torch (%s); make deps "
                  "installs python3-torch for /usr/bin/python3" % (sys.executable, e))
            peers.remove("tcpstore")
    print("peers bench: %s, medians of %d runs, %d cores" % (", ".join(peers), args.runs,
                                                           os.cpu_count()), flush=True)
    measured = {peer: bench_peer(args, peer) for peer in peers}
    rows = []
    for name, unit, lower in ROWS:
        row = {"workload": name, "unit": unit, "lower_is_better": lower}
        for peer in PEERS:
            row[peer] = measured.get(peer, {}).get(name)
        rows.append(row)
    doc = {"rows": rows, "cores": os.cpu_count(), "runs": args.runs,
           "server_rss_mib_1024": {p: measured[p]["server_rss_mib_1024"] for p in measured},
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "method": "bench/peers_bench.py: client processes of threads, one connection per "
                     "task, on 127.0.0.1; medians of runs"}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)

    def show(v):
        return "-" if v is None else ("%.0f" % v if v >= 100 else "%.3g" % v)
    print("\n| workload | unit | TCPStore | Phalanx py | Phalanx C++ | py vs TCPStore "
          "| C++ vs TCPStore |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        r = ratio(row)
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            row["workload"], row["unit"], show(row["tcpstore"]), show(row["phalanx_py"]),
            show(row["phalanx_cpp"]),
            "%.2fx" % r["phalanx_py"] if "phalanx_py" in r else "-",
            "%.2fx" % r["phalanx_cpp"] if "phalanx_cpp" in r else "-"))
    print("(ratios: how many times better Phalanx is; > 1 means ahead)")
    print("server RSS with 1024 tasks connected (MiB): " + ", ".join(
        "%s %s" % (p, show(v)) for p, v in doc["server_rss_mib_1024"].items()))
    print("written to " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
