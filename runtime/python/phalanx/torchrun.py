"""torchrun on Phalanx: a rendezvous backend for torch's elastic agent, and a launcher over it.

    phalanx-torchrun [--nproc_per_node N] [--max_restarts R] [--monitor_interval S] \\
                     TRAINING_SCRIPT [ARG...]
    python3 -m phalanx.torchrun ...              # the same, without the console script

runs an unmodified torchrun training script (``init_process_group(init_method="env://")``,
``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` from the environment) in a TrainingJob pod. Each pod runs
one elastic agent, which is the pod's Phalanx task (``nprocPerNode: 1`` in the TrainingJob; the
agent starts ``--nproc_per_node`` workers). The rendezvous goes through the job's coordinator
instead of a c10d/etcd store, so the agents get what Phalanx adds:

- **detection**: a dead or hung pod is seen by the coordinator's heartbeats (sub-second to
  ``heartbeatTimeoutSeconds``), and every other agent restarts its workers at its next monitor
  tick (``num_nodes_waiting``), instead of waiting for a collective to fail or for a keep-alive
  to expire; a worker that dies makes its agent ask every other agent for a new round;
- **the gang**: every rendezvous waits for all ``PHALANX_NUM_TASKS`` agents, each at its current
  incarnation (the operator restarts a lost pod as the task's next incarnation);
- **goodput and restarts** in the TrainingJob's status, as for any Phalanx task.

torchrun's own whole-group restart stays: workers restart from the script's own checkpoint.

The backend is registered as ``phalanx`` when this module is imported, and for torch versions
whose registry loads out-of-tree backends (the ``torchrun.handlers`` entry point the wheel
declares), ``torchrun --rdzv-backend=phalanx`` picks it up where torch's own CLI works. Debian's
torch 1.13 ``torchrun`` fails on Python 3.11 before starting a worker; ``phalanx-torchrun`` uses
the launcher API (``torch.distributed.launcher.api``) instead.

Rendezvous protocol (all through the coordinator): a round is complete when every task agrees
through ``alive_tasks`` that all of them are alive; its name is the tasks' incarnations joined
(the *epoch*) and the number of complete rounds this epoch has had, which every member counts
alike. The round's c10d store is a :class:`~phalanx.torch_store.PhalanxStore` under
``torchrun/<run id>/<epoch>/<n>``. An agent that needs a new round while the others run their
workers sets ``restart`` in the current round's store; the others see it in
``num_nodes_waiting``. Only a run whose workers succeeded closes the rendezvous
(:func:`close_rendezvous`); an agent that fails leaves it open for its pod's next incarnation.
"""

import argparse
import logging
import os
import sys
import threading
import time

from .client import Client
from .errors import Cancelled, DeadlineExceeded, Error, Unavailable
from .torch_store import PhalanxStore

log = logging.getLogger("phalanx.torchrun")

BACKEND = "phalanx"
# The variables that make a process a Phalanx task: the agent keeps its task to itself, so that
# a worker that imports phalanx does not act as its agent.
_IDENTITY_ENV = ("PHALANX_TASK_ID", "PHALANX_INCARNATION", "PHALANX_TOKEN", "PHALANX_TOKEN_FILE")

try:
    from torch.distributed.elastic.rendezvous import api as _rdzv_api
    from torch.distributed.elastic.rendezvous.api import (RendezvousClosedError,
                                                          RendezvousHandler,
                                                          RendezvousTimeoutError)
except ImportError as _e:  # pragma: no cover - torch is optional for the rest of the package
    raise ImportError("phalanx.torchrun needs torch.distributed.elastic (%s)" % _e)


class PhalanxRendezvousHandler(RendezvousHandler):
    """A torch elastic ``RendezvousHandler`` whose members are the job's Phalanx tasks."""

    def __init__(self, client, run_id, timeout=900.0, poll_timeout=5.0):
        self._client = client
        self._run_id = run_id
        self._timeout = timeout
        self._poll_timeout = poll_timeout
        self._prefix = "torchrun/%s" % run_id
        self._cond = threading.Condition()
        self._members = {}        # task -> incarnation of the current round
        # Peer changes (task, incarnation, state name, reason) that may concern the current
        # round; judged against its members when asked (they may arrive before the round that
        # they concern is formed).
        self._changes = []
        self._rounds_in_epoch = {}
        self._change_count = 0
        self._store = None
        client.on_peer_change(self._on_peer_change)

    # -- RendezvousHandler ----------------------------------------------------------------------

    def get_backend(self):
        return BACKEND

    def get_run_id(self):
        return self._run_id

    def next_rendezvous(self):
        if self.is_closed():
            raise RendezvousClosedError("rendezvous %s is closed" % self._run_id)
        self._request_new_round()
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RendezvousTimeoutError(
                    "not every task of %d joined rendezvous %s within %.0f s" % (
                        self._client.num_tasks, self._run_id, self._timeout))
            with self._cond:
                seen = self._change_count
            try:
                alive = self._client.alive_tasks(timeout=max(1.0, min(remaining, 60.0)))
            except (DeadlineExceeded, Cancelled, Unavailable) as e:
                log.info("phalanx rendezvous: retrying (%s)", e)
                continue
            if len(alive) < self._client.num_tasks:
                # A replacement is not registered yet: its registration is a peer change.
                with self._cond:
                    self._cond.wait_for(lambda: self._change_count != seen,
                                        min(self._poll_timeout, max(0.0, remaining)))
                continue
            break
        epoch = ".".join(str(t.incarnation) for t in alive)
        n = self._rounds_in_epoch.get(epoch, 0)
        self._rounds_in_epoch = {epoch: n + 1}
        with self._cond:
            self._members = {t.task_id: t.incarnation for t in alive}
            # What is old news for this round's members goes; what concerns them stays.
            self._changes = [c for c in self._changes if self._concerns_round_locked(c)]
        self._store = PhalanxStore(self._client, prefix="%s/%s/%d" % (self._prefix, epoch, n),
                                   timeout=self._timeout)
        rank, world = self._client.task_id, self._client.num_tasks
        log.info("phalanx rendezvous %s complete: round %d of epoch %s, group rank %d of %d",
                 self._run_id, n, epoch, rank, world)
        # The agent cannot see the script's steps: a complete rendezvous stands for the first
        # step (the time before it is booked as before-first-step, not productive).
        try:
            self._client.report_stepping()
        except (Unavailable, DeadlineExceeded) as e:
            log.info("phalanx rendezvous: stepping report not delivered (%s)", e)
        return self._store, rank, world

    def is_closed(self):
        return self._client.kv_try_get(_closed_key(self._run_id)) is not None

    def set_closed(self):
        close_rendezvous(self._client, self._run_id)

    def num_nodes_waiting(self):
        """1 when the workers must restart for a new round: a peer of the current round failed
        or was replaced (the coordinator said so), or another agent asked for a new round."""
        with self._cond:
            news = next((self._describe(c) for c in self._changes
                         if self._concerns_round_locked(c)), None)
        if news is not None:
            log.warning("phalanx: restarting the worker group for a new round (%s)", news)
            return 1
        if self._store is not None and self._store.check(["restart"]):
            log.warning("phalanx: another agent asked for a new round; restarting the worker "
                        "group")
            return 1
        return 0

    def shutdown(self):
        """Leaves the rendezvous open. torch's launcher calls this whenever its agent stops,
        failed or not (torch 1.13's ``launch_agent``), and under torchrun that closes the
        rendezvous for every agent. Under Phalanx a failed agent's pod comes back as the task's
        next incarnation, which must find the rendezvous open (a closed one fails every
        replacement until the job's ``maxRestarts`` are spent), so only a run whose workers
        succeeded closes it: :func:`main` calls :func:`close_rendezvous` then."""
        return True

    # -- internals ------------------------------------------------------------------------------

    def _request_new_round(self):
        """Tells the agents still running the current round's workers to restart them."""
        if self._store is not None:
            try:
                self._store.set("restart", b"1")
            except Error as e:  # the coordinator may be restarting; the peers will see us anyway
                log.info("phalanx rendezvous: restart request not written: %s", e)

    def _on_peer_change(self, change):
        """The client's session thread: keep what may concern the current or the next round."""
        record = (change.task_id, change.incarnation, change.state_name, change.reason)
        with self._cond:
            self._change_count += 1
            concerns = bool(self._members) and self._concerns_round_locked(record)
            if not self._members or concerns:
                self._changes.append(record)
                del self._changes[:-_MAX_CHANGES]
            self._cond.notify_all()
        if concerns:
            # Said when the coordinator says it: the workers may restart for it at the next
            # monitor tick, or sooner when their collectives fail on the lost peer first.
            log.warning("phalanx: %s", self._describe(record))

    def _concerns_round_locked(self, change):
        """A member of the current round failed at its incarnation, or was replaced."""
        task, incarnation, state, _ = change
        member = self._members.get(task)
        if member is None:
            return False
        return (state == "FAILED" and incarnation == member) or incarnation > member

    def _describe(self, change):
        task, incarnation, state, reason = change
        if state == "FAILED":
            return "peer task %d (incarnation %d) failed: %s" % (task, incarnation, reason)
        return "peer task %d was replaced by incarnation %d" % (task, incarnation)


_MAX_CHANGES = 1024


def _closed_key(run_id):
    return "torchrun/%s/closed" % run_id


def close_rendezvous(client, run_id):
    """Marks run ``run_id`` finished: an agent that starts a rendezvous after this (a pod
    restarted after its peers succeeded) stops at once instead of waiting for peers that left."""
    client.kv_set(_closed_key(run_id), b"1", overwrite=True)


def create_handler(params, client=None):
    """The registry's creator: a handler for ``params`` (RendezvousParameters). The client is the
    pod's Phalanx task (``Client.from_env()``), created once per process."""
    global _client
    if client is None:
        with _client_lock:
            if _client is None:
                _client = Client.from_env()
                _client.connect(timeout=params.get_as_int("connect_timeout", 120))
            client = _client
    timeout = params.get_as_int("timeout", 900)
    if client.num_tasks < params.min_nodes or client.num_tasks > params.max_nodes:
        raise ValueError("the job has %d tasks (PHALANX_NUM_TASKS) but the launch asks for %d:%d "
                         "nodes; a Phalanx rendezvous always has every task" % (
                             client.num_tasks, params.min_nodes, params.max_nodes))
    return PhalanxRendezvousHandler(client, params.run_id, timeout=timeout)


def handler_creator():
    """The ``torchrun.handlers`` entry point: torch's registry calls it for the creator."""
    return create_handler


_client = None
_client_lock = threading.Lock()


def register():
    """Registers the ``phalanx`` backend with torch's rendezvous registry (idempotent)."""
    try:
        _rdzv_api.rendezvous_handler_registry.register(BACKEND, create_handler)
    except ValueError:
        pass  # already registered (by this module, or by torch from the entry point)


register()


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="phalanx-torchrun",
        description="Runs a torchrun training script in a Phalanx TrainingJob pod: torch's "
                    "elastic agent with the Phalanx rendezvous backend.")
    parser.add_argument("--nproc_per_node", type=int, default=1, help="workers in this pod")
    parser.add_argument("--max_restarts", type=int, default=100,
                        help="worker group restarts this agent allows (torchrun's --max_restarts)")
    parser.add_argument("--monitor_interval", type=float, default=1.0,
                        help="seconds between the agent's checks of its workers and of the "
                             "rendezvous (torchrun's default is 5)")
    parser.add_argument("--rdzv_timeout", type=int, default=900,
                        help="seconds a rendezvous may wait for every task")
    parser.add_argument("--master_addr", default=None,
                        help="the address group rank 0 publishes for the workers' store "
                             "(default: $MASTER_ADDR, which the operator sets to task 0's host)")
    parser.add_argument("--no_python", action="store_true",
                        help="run TRAINING_SCRIPT as a program, not with this Python")
    parser.add_argument("script", help="the training script (or program with --no_python)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="phalanx-torchrun: %(message)s")
    from torch.distributed.elastic.agent.server import api as agent_api
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in ("PHALANX_COORDINATOR", "PHALANX_JOB", "PHALANX_TASK_ID", "PHALANX_NUM_TASKS"):
        if not os.environ.get(name):
            sys.stderr.write("phalanx-torchrun: %s is not set (the operator sets it in a "
                             "TrainingJob pod)\n" % name)
            return 2
    try:
        client = Client.from_env()
        client.connect(timeout=120)
    except Error as e:
        sys.stderr.write("phalanx-torchrun: cannot join the job: %s\n" % e)
        return 2
    global _client
    _client = client
    for name in _IDENTITY_ENV:
        os.environ.pop(name, None)

    # torch 1.13's agent publishes socket.getfqdn() for the workers' store; in a pod that is the
    # pod name, which other pods cannot resolve. Group rank 0 is task 0, whose stable host name
    # the operator gives as MASTER_ADDR.
    master_addr = args.master_addr or os.environ.get("MASTER_ADDR")
    if master_addr:
        agent_api._get_fq_hostname = lambda: master_addr

    num = client.num_tasks
    config = LaunchConfig(
        min_nodes=num, max_nodes=num, nproc_per_node=args.nproc_per_node,
        run_id=os.environ["PHALANX_JOB"], role="trainer", rdzv_backend=BACKEND,
        rdzv_endpoint=os.environ["PHALANX_COORDINATOR"],
        rdzv_configs={"timeout": args.rdzv_timeout}, max_restarts=args.max_restarts,
        monitor_interval=args.monitor_interval, start_method="spawn")
    entrypoint = args.script if args.no_python else sys.executable
    script_args = args.script_args if args.no_python else ["-u", args.script] + args.script_args
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    try:
        elastic_launch(config, entrypoint)(*script_args)
    except ChildFailedError as e:
        sys.stderr.write("phalanx-torchrun: the workers failed: %s\n" % e)
        client.close()
        return 1
    try:
        close_rendezvous(client, config.run_id)
        client.shutdown(timeout=120)
    except Error as e:
        sys.stderr.write("phalanx-torchrun: shutdown: %s\n" % e)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
