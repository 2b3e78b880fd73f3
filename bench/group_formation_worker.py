#!/usr/bin/env python3
"""One rank of torch_bench.py's group-formation measurement: once every rank has imported
torch and reached the store (a `ready/<rank>` key, then a wait for all of them), it times
``init_process_group("gloo", store=...)`` and the first barrier on the new group, through
PhalanxStore (on a coordinator: PHALANX_* in the environment) or torch's TCPStore, and prints
``formation_s=<seconds>``."""

import argparse
import datetime
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--kind", choices=["phalanx", "tcpstore"], required=True)
    p.add_argument("--port", type=int, default=0, help="TCPStore's port")
    args = p.parse_args()
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=600)
    if args.kind == "phalanx":
        import phalanx
        from phalanx.torch_store import PhalanxStore
        store = PhalanxStore(phalanx.init(timeout=600), prefix="formation", timeout=timeout)
    else:
        store = dist.TCPStore("127.0.0.1", args.port, args.world, args.rank == 0, timeout=timeout)
    # Everyone has imported and connected: only the formation is timed.
    store.set("ready/%d" % args.rank, "1")
    store.wait(["ready/%d" % r for r in range(args.world)])
    started = time.monotonic()
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=args.rank,
                            world_size=args.world, timeout=timeout)
    dist.barrier()
    print("formation_s=%.4f" % (time.monotonic() - started), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
