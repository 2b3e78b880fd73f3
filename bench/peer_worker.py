#!/usr/bin/env python3
"""One client process of bench/peers_bench.py: ``count`` tasks as threads, each with its own
client (its own connection), against either torch's TCPStore or Phalanx through its Python
client. phalanx-peer-worker (bench/peer_worker.cc) speaks the same protocol for the C++ client,
so one driver times all three the same way.

Protocol (lines): the worker prints ``READY`` once its threads wait at the start line (for ``kv``
they are connected already), then waits for ``GO`` on stdin. Then:
  rendezvous: every thread connects, publishes an address under ``addr/<id>``, passes the
    rendezvous barrier and ``--barriers`` more, printing ``PASS task=<id> barrier=<n>
    t_us=<unix µs>`` after each (n = -1 for the rendezvous); the connections stay open until
    stdin closes (the server's memory is read meanwhile).
  kv: every thread sets (overwrite, 100 bytes; as TCPStore, not waiting for the set's answer)
    and gets its own keys in a loop for
    ``--seconds``, one call at a time, and prints ``KV task=<id> ops=<n> set_p50_us=<>
    get_p50_us=<>``.
Errors: ``ERROR task=<id> <message>``."""

import argparse
import datetime
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "runtime", "python"))

VALUE = b"v" * 100
TIMEOUT_S = 120.0


def now_us():
    return int(time.time() * 1e6)


def p50(samples):
    samples = sorted(samples)
    return samples[len(samples) // 2] if samples else 0.0


class TcpStoreTask:
    """A task on torch's TCPStore. TCPStore has no barrier: the cheapest one it allows is an
    atomic add, the last arrival setting a done key, everyone waiting for that key (its WAIT
    is answered by the server, no polling)."""

    def __init__(self, args, task):
        from torch.distributed import TCPStore  # imported before GO: it takes a second
        self.args, self.task, self.store_class = args, task, TCPStore

    def connect(self):
        host, port = self.args.address.rsplit(":", 1)
        self.store = self.store_class(host, int(port), self.args.world, False,
                                      datetime.timedelta(seconds=TIMEOUT_S), False)

    def set(self, key, value):
        self.store.set(key, value)

    def get(self, key):
        return self.store.get(key)

    def barrier(self, name):
        if self.store.add("barrier/" + name, 1) == self.args.world:
            self.store.set("barrier/%s/done" % name, b"1")
        self.store.wait(["barrier/%s/done" % name])

    def close(self):
        del self.store


class PhalanxTask:
    def __init__(self, args, task):
        import phalanx
        self.client = phalanx.Client(args.address, "bench", task, args.world, token=args.token)

    def connect(self):
        self.client.connect(TIMEOUT_S)

    def set(self, key, value):
        # Not waiting for the answer, as TCPStore's set does not: like for like. A later get or
        # barrier on the same session is handled after it; a failure surfaces at the next set.
        self.client.kv_set(key, value, overwrite=True, wait=False)

    def get(self, key):
        return self.client.kv_get(key, TIMEOUT_S)

    def barrier(self, name):
        self.client.barrier(name, TIMEOUT_S)

    def close(self):
        self.client.kv_wait_sets()
        self.client.close()


def say(lock, line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def rendezvous(args, task, peer, lock):
    peer.connect()
    peer.set("addr/%d" % task, b"127.0.0.1:%d" % (20000 + task))
    for b in range(-1, args.barriers):
        peer.barrier("b%d" % b)
        say(lock, "PASS task=%d barrier=%d t_us=%d" % (task, b, now_us()))


def kv(args, task, peer, lock):
    sets, gets = [], []
    end = time.monotonic() + args.seconds
    i = 0
    while time.monotonic() < end:
        key = "kv/%d/%d" % (task, i % 1000)
        t0 = time.perf_counter()
        peer.set(key, VALUE)
        t1 = time.perf_counter()
        peer.get(key)
        t2 = time.perf_counter()
        sets.append((t1 - t0) * 1e6)
        gets.append((t2 - t1) * 1e6)
        i += 1
    say(lock, "KV task=%d ops=%d set_p50_us=%.1f get_p50_us=%.1f"
        % (task, 2 * i, p50(sets), p50(gets)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", choices=["tcpstore", "phalanx"], required=True)
    parser.add_argument("--workload", choices=["rendezvous", "kv"], required=True)
    parser.add_argument("--address", required=True, help="host:port of the server")
    parser.add_argument("--token", default="", help="Phalanx: the job token")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--world", type=int, required=True, help="tasks in the job")
    parser.add_argument("--barriers", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    lock = threading.Lock()
    start = threading.Event()
    peers = {}
    for task in range(args.first, args.first + args.count):
        peers[task] = (TcpStoreTask if args.peer == "tcpstore" else PhalanxTask)(args, task)
        if args.workload == "kv":
            peers[task].connect()
    work = rendezvous if args.workload == "rendezvous" else kv

    def run(task):
        start.wait()
        try:
            work(args, task, peers[task], lock)
        except Exception as e:  # reported to the driver, which fails the measurement
            say(lock, "ERROR task=%d %s" % (task, str(e).replace("\n", " ")))

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in peers]
    for t in threads:
        t.start()
    say(lock, "READY")
    if sys.stdin.readline().strip() != "GO":
        return 1
    start.set()
    for t in threads:
        t.join()
    say(lock, "DONE")
    sys.stdin.read()  # keep the connections open until the driver closes stdin
    for peer in peers.values():
        peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
