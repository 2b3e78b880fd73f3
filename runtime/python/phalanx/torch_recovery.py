"""In-place recovery for ``torch.distributed`` training on Phalanx (issue 14, item 3).

torchrun restarts every worker when one dies. With :class:`Manager` the survivors keep their
process, model and optimizer in memory; only the failed task is restarted (``restartScope:
Task``), and the group re-forms around it::

    import torch
    from phalanx.torch_recovery import Manager

    model = MyModel()                                   # the same seed on every task
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    manager = Manager(model, optimizer)                 # PHALANX_* from the environment
    loader = DataLoader(data, batch_size=32, sampler=manager.sampler(data, shuffle=True))

    for x, y in manager.loop(loader, epochs):           # your loop; resumes at the right batch
        with manager.recoverable():                     # a peer's failure: recover in place
            optimizer.zero_grad()
            loss_fn(manager.model(x), y).backward()     # manager.model: DDP on the live group
            optimizer.step()
    manager.shutdown()

(or ``manager.run(train_step, steps)`` with the loop's body a function of the step.)

What :meth:`Manager.loop` (and :meth:`Manager.run`) do around each step:

1. **Forms the group** through the coordination service: every task waits until all tasks are
   registered (``alive_tasks``), publishes what it holds (the step its in-memory state is at, or
   its newest checkpoint), and after one barrier all agree on the *source*: the task holding the
   newest state (in memory before on disk, lowest task id on a tie). The process group is
   ``init_process_group(store=PhalanxStore(prefix="torch/<epoch>/pg"))``, where the epoch is the
   tasks' incarnations joined and, when the same members form again (a transport error with
   nobody replaced), ``-<n>`` for their n-th formation: each formation has a fresh barrier and
   fresh rendezvous keys.
2. **Restores state from the source**: model, optimizer, the step, and every object in
   ``stateful`` (``state_dict``/``load_state_dict``) go point to point from the source to the
   tasks that lack them (the replacement, a survivor one step behind), tensor by tensor after a
   small pickle of their structure, so a replacement starts bitwise identical to the survivors;
   tasks that hold the source's step already receive nothing. Everyone resumes at the source's
   step.
3. **Runs steps**. A peer that dies makes the collective in the step fail (gloo: the connection
   closes; a hung peer is declared failed by the coordinator's heartbeat timeout and killed by the
   operator, which closes its connections). The manager then destroys the group, keeps the
   model, and goes back to 1: the survivors wait for the replacement (incarnation + 1), which
   receives the state from a live peer. A survivor that finished the step before the failure
   (its all-reduce completed) is ahead: it becomes the source, so no step is run twice with
   different results.
4. **Preemption rounds**: at the step every task agreed on (``reached_sync_point``) each task
   writes a checkpoint (when ``checkpoint_dir`` is set); the tasks the round names then exit with
   code 4, and the others re-form with their replacements as above.

Exit codes (the operator's conventions): 3 when this incarnation was superseded or declared failed
(``Aborted``), 4 after the sync checkpoint when a preemption round names this task.

What it needs from the training step: data from the sampler's indices (or the step and rank) and
randomness seeded from them, so a step run again after a recovery computes the same thing; ``optimizer.zero_grad``
at the start of the step (the manager clears gradients after a recovery, too). An exception that
is not a communication failure (a bug) is reported to the coordinator (``report_error``) and
re-raised, unless a peer failure was seen within ``failure_grace`` seconds.

Needs ``torch`` (imported here, not by ``phalanx``).
"""

import contextlib
import copy
import datetime
import gc
import itertools
import os
import pickle
import queue
import sys
import threading
import time

import torch
import torch.distributed as dist

from . import device_map
from .cliques import AgentWatch, local_devices
from .errors import Aborted, Cancelled, DeadlineExceeded, Error, Unavailable
from .torch_store import PhalanxStore

__all__ = ["Manager", "CollectiveAborter", "DistributedSampler", "chain_allreduce",
           "EXIT_SUPERSEDED", "EXIT_PREEMPTED", "EXIT_DEVICE_FAILED", "EXIT_HUNG"]

EXIT_SUPERSEDED = 3
EXIT_PREEMPTED = 4
# The node agent saw this rank's GPU fail: the task must leave it (a new pod, elsewhere).
EXIT_DEVICE_FAILED = 5
# This rank's hang watchdog found it stuck in a step outside any collective: restart it.
EXIT_HUNG = 6
# Without a hang_timeout: the watchdog fires after this many times the longest step seen, and
# never sooner than the floor (a first epoch's slow steps, a checkpoint's pause).
HANG_STEP_FACTOR = 10.0
HANG_FLOOR_S = 30.0

_ABORTED_BY_PHALANX = "collective aborted by Phalanx"
# Messages of torch's transport errors: a peer is gone or unreachable, not a bug in the step.
_TRANSPORT_MARKERS = (_ABORTED_BY_PHALANX, "gloo/transport", "Connection closed",
                      "Connection reset", "Connection refused", "Broken pipe", "Timed out",
                      "timed out", "NCCL", "ProcessGroup", "Socket")


class CollectiveAborter:
    """The gradient collectives in flight on one process group, so that a peer's failure fails
    them at once. A hung peer (SIGSTOP, a stuck kernel) keeps its sockets open, so gloo would wait
    for it until the group's timeout, or until the operator kills it after its grace period; the
    coordinator's heartbeat timeout tells sooner, and :meth:`abort` then fails the future DDP's
    backward waits on. The abandoned collective stays queued in the group until the hung peer is
    gone; :meth:`wait_idle` names it so the group is kept (not destroyed, which would wait)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._pending = set()   # futures DDP waits on, not answered yet
        self._running = set()   # futures of the collectives themselves, not ended yet
        self._aborted = None

    def track(self, future, collective):
        """``future`` is DDP's; ``collective`` the all-gather's own future, passed to finish()."""
        with self._cond:
            self._running.add(collective)
            if self._aborted is None:
                self._pending.add(future)
                return
            reason = self._aborted
        future.set_exception(RuntimeError(reason))

    def finish(self, future, collective, value=None, error=None):
        with self._cond:
            self._running.discard(collective)
            self._cond.notify_all()
            if future not in self._pending:
                return  # aborted already
            self._pending.discard(future)
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def abort(self, reason):
        with self._cond:
            if self._aborted is None:
                self._aborted = reason
            pending, self._pending = self._pending, set()
        for future in pending:
            future.set_exception(RuntimeError(reason))

    def reason(self):
        """Why the group's collectives were aborted (None: they were not)."""
        with self._cond:
            return self._aborted

    def busy(self):
        """Whether a collective of this group is in flight on this rank."""
        with self._cond:
            return bool(self._running)

    def wait_idle(self, timeout):
        """Waits up to ``timeout`` seconds for every tracked collective to end; returns how many
        are still running."""
        with self._cond:
            self._cond.wait_for(lambda: not self._running, timeout)
            return len(self._running)


class DistributedSampler(torch.utils.data.DistributedSampler):
    """torch's ``DistributedSampler`` that :meth:`Manager.loop` can start mid-epoch: its next
    pass skips the first samples of this rank's share (``skip_next``) without their being
    loaded. The same indices in the same order as torch's for the same seed and epoch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._skip = 0

    def skip_next(self, samples):
        """The next pass (only) starts ``samples`` into this rank's share."""
        self._skip = int(samples)

    def __iter__(self):
        skip, self._skip = self._skip, 0
        return itertools.islice(super().__iter__(), skip, None)


class _TensorSlot:
    """Where a tensor was in a state sent by :func:`_send_state`: its place in the stream."""

    def __init__(self, index, dtype, shape):
        self.index, self.dtype, self.shape = index, dtype, tuple(shape)


def _map_leaves(obj, fn):
    """``obj`` (nested dicts, lists, tuples) with ``fn`` applied to its other values. A dict is
    copied with its type and attributes (a module's state_dict carries ``_metadata``, which
    load_state_dict reads), a namedtuple rebuilt field by field."""
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for key in out:
            out[key] = _map_leaves(out[key], fn)
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_leaves(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_leaves(v, fn) for v in obj)
    return fn(obj)


def _strip_tensors(obj, tensors):
    """``obj`` with each tensor replaced by a :class:`_TensorSlot`; the tensors appended."""
    def strip(value):
        if not isinstance(value, torch.Tensor):
            return value
        tensors.append(value)
        return _TensorSlot(len(tensors) - 1, value.dtype, value.shape)
    return _map_leaves(obj, strip)


def _fill_tensors(obj, tensors):
    return _map_leaves(obj, lambda v: tensors[v.index] if isinstance(v, _TensorSlot) else v)


def _as_bytes(tensor, device):
    """A tensor's bytes as a flat uint8 tensor on ``device`` (any dtype travels as bytes)."""
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8).to(device)


def _send_state(state, receivers, device):
    """Sends ``state`` (a state_dict: nested dicts and lists of tensors and plain values) to
    each of ``receivers``: its structure as one small pickle, then every tensor on its own."""
    tensors = []
    header = pickle.dumps(_strip_tensors(state, tensors))
    header = torch.frombuffer(bytearray(header), dtype=torch.uint8).to(device)
    payloads = [_as_bytes(t, device) for t in tensors]
    for dst in receivers:
        dist.send(torch.tensor([header.numel()], dtype=torch.int64, device=device), dst)
        dist.send(header, dst)
        works = [dist.isend(p, dst) for p in payloads if p.numel() > 0]
        for work in works:
            work.wait()


def _receive_state(src, device):
    """What :func:`_send_state` sent: (state, (tensor bytes, seconds their transfer took: from
    the structure's arrival, when the sender is sending, to the last byte))."""
    size = torch.zeros(1, dtype=torch.int64, device=device)
    dist.recv(size, src)
    header = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.recv(header, src)
    started = time.monotonic()
    skeleton = pickle.loads(header.cpu().numpy().tobytes())
    slots = []
    _collect_slots(skeleton, slots)
    slots.sort(key=lambda slot: slot.index)
    buffers = [torch.empty(_slot_bytes(slot), dtype=torch.uint8, device=device)
               for slot in slots]
    works = [dist.irecv(b, src) for b in buffers if b.numel() > 0]
    for work in works:
        work.wait()
    seconds = time.monotonic() - started
    tensors = [b.view(slot.dtype).reshape(slot.shape) for b, slot in zip(buffers, slots)]
    return _fill_tensors(skeleton, tensors), (sum(b.numel() for b in buffers), seconds)


def _collect_slots(obj, slots):
    _map_leaves(obj, lambda v: slots.append(v) if isinstance(v, _TensorSlot) else None)


def _slot_bytes(slot):
    count = 1
    for n in slot.shape:
        count *= n
    return count * torch.empty((), dtype=slot.dtype).element_size()


# Elements per piece of a bucket on the chain: pieces pipeline along it (a rank adds and
# forwards one piece while the next arrives). 256 Ki floats = 1 MiB.
CHAIN_PIECE_ELEMENTS = 1 << 18


def chain_allreduce(tensor, group):
    """Averages ``tensor`` over ``group`` in place, bit for bit the same whatever the bucket
    layout and however often the group re-formed: the sum is taken in rank order,
    ``((g0 + g1) + g2) + ...``, then divided by the world size, as ``--reference`` computes it.

    Rank 0 sends its tensor to rank 1, which adds its own and sends the partial sum to rank 2,
    and so on; the last rank divides and the result travels back down the chain, each rank
    keeping a copy. Pieces of ``CHAIN_PIECE_ELEMENTS`` pipeline along the chain, so every rank
    sends and receives about twice the tensor, as in a ring all-reduce (an all-gather would be
    world-size/2 times that). Point to point only: no collective whose order could differ
    between ranks."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return tensor.div_(1)
    pieces = list(tensor.view(-1).split(CHAIN_PIECE_ELEMENTS))
    if rank == 0:
        for work in [dist.isend(p, 1, group=group) for p in pieces]:
            work.wait()  # before the result overwrites them
        for work in [dist.irecv(p, 1, group=group) for p in pieces]:
            work.wait()
        return tensor
    last = rank == world - 1
    partials = [torch.empty_like(p) for p in pieces]
    arriving = [dist.irecv(t, rank - 1, group=group) for t in partials]
    sends = []
    for piece, partial, work in zip(pieces, partials, arriving):
        work.wait()
        partial.add_(piece)  # (sum of ranks below) + this rank's: the reference's order
        if last:
            piece.copy_(partial.div_(world))
            sends.append(dist.isend(piece, rank - 1, group=group))
        else:
            sends.append(dist.isend(partial, rank + 1, group=group))
    if not last:
        back = [dist.irecv(p, rank + 1, group=group) for p in pieces]
        for piece, work in zip(pieces, back):
            work.wait()
            sends.append(dist.isend(piece, rank - 1, group=group))
    for work in sends:
        work.wait()
    return tensor


class ChainReducer:
    """DDP's gradient averaging through :func:`chain_allreduce` (``deterministic=True``): a
    thread per process group takes the buckets in the order DDP hands them over (the same on
    every rank) so backward goes on meanwhile. Collectives are tracked by a
    :class:`CollectiveAborter`: a peer's failure fails the bucket DDP waits on at once; the
    bucket's chain ends when its sockets do (or, on a hung peer, keeps the group busy, and the
    manager sets the group aside)."""

    def __init__(self, aborter, group):
        self._aborter = aborter
        self._group = group
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="phalanx-chain-allreduce",
                                        daemon=True)
        self._thread.start()

    def close(self, timeout):
        """Ends the thread once the bucket in flight, if any, is done; waits up to ``timeout``
        seconds. True when it ended: then nothing here holds the process group any more (a
        group still referenced when the interpreter exits is destroyed during its shutdown,
        where torch 1.13's gloo may abort the process: seen as "terminate called")."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def hook(self, bucket):
        result = torch.futures.Future()
        token = object()
        self._aborter.track(result, token)
        self._queue.put((bucket.buffer(), result, token))
        return result

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                self._group = None
                return
            tensor, result, token = item
            try:
                reason = self._aborter.reason()
                if reason is not None:
                    raise RuntimeError(reason)
                self._aborter.finish(result, token, value=self._reduce(tensor))
            except Exception as e:  # noqa: BLE001 - handed to DDP's backward
                # The group is broken: the buckets queued behind must not start a chain on it
                # (ranks would wait on each other's different buckets until the timeout).
                self._aborter.abort("%s: %s" % (_ABORTED_BY_PHALANX, e))
                self._aborter.finish(result, token, error=e)

    def _reduce(self, tensor):
        if tensor.is_cuda and dist.get_backend(self._group) == "gloo":
            # gloo moves host memory only: the chain runs on a CPU copy.
            host = tensor.cpu()
            tensor.copy_(chain_allreduce(host, self._group))
            return tensor
        return chain_allreduce(tensor, self._group)


def chain_allreduce_hook(reducer, bucket):
    """The DDP communication hook of :class:`ChainReducer` (``state``: the reducer)."""
    return reducer.hook(bucket)


def tracked_allreduce_hook(state, bucket):
    """DDP's own averaging (divide, then gloo/NCCL all-reduce) with the collective tracked by a
    :class:`CollectiveAborter` (``state``), so a peer's failure fails it at once and the hang
    watchdog knows this rank is waiting in it."""
    tensor = bucket.buffer().div_(dist.get_world_size())
    collective = dist.all_reduce(tensor, async_op=True).get_future()
    result = torch.futures.Future()
    state.track(result, collective)

    def complete(done):
        try:
            done.value()
            state.finish(result, collective, value=tensor)
        except Exception as e:  # noqa: BLE001 - handed to DDP's backward
            state.finish(result, collective, error=e)
    collective.then(complete)
    return result


def _default_event(manager, kind, fields):
    text = " ".join("%s=%s" % (k, v) for k, v in fields.items())
    sys.stderr.write("phalanx.torch: task=%d inc=%d %s %s\n" % (
        manager.rank, manager.incarnation, kind, text))
    sys.stderr.flush()


class RecoveryFailed(Error):
    """The group could not be re-formed in ``recovery_timeout`` seconds."""
    code = 4


class Manager:
    """Keeps a data-parallel torch job training through peer failures, in place.

    ``model`` (an ``nn.Module``) and ``optimizer`` are the user's; the manager wraps the model in
    ``DistributedDataParallel`` over the current group (``ddp=False``: use :attr:`group` yourself)
    and exposes it as :attr:`model`. ``client``: a connected :class:`phalanx.Client` (default:
    :func:`phalanx.init`). ``stateful``: ``{name: object}`` with ``state_dict``/
    ``load_state_dict`` (an LR scheduler, a data sampler) carried with the model.
    ``checkpoint_dir``: a path every task can read (a shared volume); checkpoints go to
    ``<dir>/task-0/step-<N>.pt`` every ``checkpoint_every`` steps (0: only at preemption sync
    points), written by the group's first task alone, task 0 unless it is missing (DDP's state
    is the same on every task; with ``ddp=False``
    each task writes its own ``task-<id>``), and are used only when no task holds the state in
    memory. ``collective_timeout``:
    the process group's timeout, seconds. ``deterministic`` (default): DDP averages gradients
    with :func:`chain_allreduce` (summed in rank order, a ring all-reduce's traffic), so a run
    through re-formations ends bitwise where an undisturbed one does; ``False``: DDP's own
    all-reduce (the last bits may then differ after a re-formation). ``on_event(manager, kind, fields)``: progress reports
    (``formed``, ``failure``, ``recovered``, ``checkpoint``, ``leaving``, ``device_failed``);
    default: a line on stderr.

    ``agent_devices``: the node's GPU indices this rank's group uses, reported to the node agent
    (where the task was given one: ``$PHALANX_CLIQUE_ADDRESS``) so that a failing GPU aborts
    exactly the groups on it (default :func:`phalanx.cliques.local_devices`; ``[]``: no
    reports). When the agent asks, the collective in flight fails at once, the task reports the
    error to the coordinator (its peers re-form without it) and the process exits
    :data:`EXIT_DEVICE_FAILED` so that it is started again elsewhere. ``agent_period``: seconds
    between reports, which bounds how late the agent's request is seen.

    :attr:`device_table` (after the group formed): the job's task → GPUs table
    (:mod:`phalanx.device_map`), the same in every task and stable across restarts; this task's
    GPUs are ``gpu_uuids`` (default :func:`phalanx.device_map.local_gpu_uuids`: empty on CPU).

    ``recovery``: ``"wait"`` (default): after a failure the survivors wait for the replacement;
    ``"continue"``: tasks that hold a state re-form at once with the live tasks and train on
    (the gradient averaged over them), and the group re-forms at full size when the missing
    task registers again (its step in flight may run again); the newcomer takes the state from
    a peer.

    ``hang_timeout``: seconds a step may run while this rank waits in no collective (computing,
    loading data, deadlocked) before the hang watchdog declares it hung: it reports the task
    failed (its peers, waiting in the step's collective, re-form at once, without the
    coordinator's heartbeat timeout, which a rank stuck this way never trips) and exits
    :data:`EXIT_HUNG` to be started again. Default: 10 times the longest step this process has
    completed, at least 30 s; off with ``ddp=False`` unless set (the manager does not see your
    own collectives, so it could not tell a victim from the culprit). Armed once a step has
    completed.
    """

    def __init__(self, model, optimizer=None, *, client=None, backend="gloo", ddp=True,
                 ddp_kwargs=None, stateful=None, checkpoint_dir=None, checkpoint_every=0,
                 collective_timeout=60.0, recovery_timeout=600.0, failure_grace=30.0,
                 prefix="torch", deterministic=True, on_event=None, agent_devices=None,
                 agent_period=0.25, gpu_uuids=None, hang_timeout=None, recovery="wait"):
        if client is None:
            import phalanx
            client = phalanx.init()
        self._client = client
        self._module = model
        self._optimizer = optimizer
        self._backend = backend
        self._ddp = ddp
        self._ddp_kwargs = dict(ddp_kwargs or {})
        self._deterministic = deterministic
        self._stateful = dict(stateful or {})
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_every = int(checkpoint_every)
        self._collective_timeout = float(collective_timeout)
        self._recovery_timeout = float(recovery_timeout)
        self._failure_grace = float(failure_grace)
        self._prefix = prefix.strip("/")
        self._on_event = on_event or _default_event
        self.step = 0
        self.model = None
        self.group = None
        self._have_state = False  # whether self.step's state is in memory (not before forming)
        self._cond = threading.Condition()
        self._changes = 0         # peer changes seen (failures, new incarnations)
        self._formations = 0      # groups formed (the first, then one per recovery)
        self._coordinator_restarts = 0
        self._leaving_round = None
        self._aborter = None      # the current group's collectives
        self._chain = None        # the current group's ChainReducer (deterministic DDP)
        self._members = {}        # task id -> incarnation in the current group
        self._agreements = {}     # incarnations joined -> member agreements that returned them
        self._abandoned = []      # groups with a collective stuck on a hung peer
        self._agent_devices = (local_devices() if agent_devices is None
                               else [int(d) for d in agent_devices])
        self._agent_period = float(agent_period)
        self._agent_watch = None  # the current group, reported to the node agent
        self._device_failure = None  # the agent's reason, once it asked this task to abort
        self._gpu_uuids = list(device_map.local_gpu_uuids() if gpu_uuids is None else gpu_uuids)
        # The hang watchdog (_watch_hangs): when the step in progress began (None: no step),
        # the longest step seen (its threshold grows with it when hang_timeout is None).
        self._hang_timeout = None if hang_timeout is None else float(hang_timeout)
        if recovery not in ("wait", "continue"):
            raise ValueError("recovery must be 'wait' or 'continue', got %r" % (recovery,))
        self._continue = recovery == "continue"
        self._rejoined = False    # continue: a task registered since the last agreement
        self._syncing = False     # in DDP's pre-forward collectives (hang watchdog)
        self._sync_hooks = []
        self._group_tasks = []    # the current group's tasks, in group-rank order
        self._step_began = None
        self._longest_step = None
        threading.Thread(target=self._watch_hangs, name="phalanx-hang-watchdog",
                         daemon=True).start()
        self.device_table = []
        client.on_peer_change(self._peer_changed)
        client.on_preemption(self._preemption)
        client.on_reconnect(self._reconnected)

    # -- what the user reads ------------------------------------------------------------------

    @property
    def rank(self):
        return self._client.task_id

    @property
    def world_size(self):
        return self._client.num_tasks

    @property
    def incarnation(self):
        return self._client.incarnation

    @property
    def client(self):
        return self._client

    # -- callbacks (the client's session thread: quick, no blocking calls) ---------------------

    def _peer_changed(self, peer):
        with self._cond:
            self._changes += 1
            if self._continue and peer.state_name == "CONNECTED":
                # Seen between groups too (no aborter then): _before_step re-forms for it.
                self._rejoined = True
            self._cond.notify_all()
            aborter, members = self._aborter, self._members
        # A member of the current group failed or was replaced: fail its collectives now.
        member = members.get(peer.task_id)
        if aborter is None:
            return
        if member is None:
            if self._continue and peer.state_name == "CONNECTED":
                # recovery="continue": a task the live group trained without is back; the
                # group re-forms at full size (the step in flight, if it fails, runs again).
                aborter.abort("%s: task %d (incarnation %d) joined: re-forming at full size" % (
                    _ABORTED_BY_PHALANX, peer.task_id, peer.incarnation))
            return
        failed = peer.state_name == "FAILED" and peer.incarnation == member
        if failed or peer.incarnation > member:
            aborter.abort("%s: peer task %d (incarnation %d) %s: %s" % (
                _ABORTED_BY_PHALANX, peer.task_id, member,
                "failed" if failed else "was replaced", peer.reason))

    def _agent_abort(self, reason):
        """The node agent's abort request (its watch thread): fail the collective in flight."""
        with self._cond:
            self._device_failure = reason
            self._cond.notify_all()
            aborter = self._aborter
        if aborter is not None:
            aborter.abort("%s: the node agent asks to abort: %s" % (_ABORTED_BY_PHALANX, reason))

    def _preemption(self, round_):
        affected = round_.affected_tasks
        if affected is not None and self.rank in affected:
            with self._cond:
                self._leaving_round = round_.round

    def _reconnected(self, coordinator_restarted):
        if coordinator_restarted:
            with self._cond:
                self._coordinator_restarts += 1
                self._cond.notify_all()

    def _event(self, kind, **fields):
        try:
            self._on_event(self, kind, fields)
        except Exception:  # a reporting hook must not stop training
            pass

    # -- the loop -----------------------------------------------------------------------------

    def run(self, step_fn, steps):
        """Runs ``step_fn(step)`` for every step up to ``steps``, recovering in place after peer
        failures; returns the number of steps done (``steps``)."""
        if not self._begin(steps):
            return steps
        while self.step < steps:
            try:
                self._before_step()
                self._step_starts()
                step_fn(self.step)
            except Aborted:
                self._exit(EXIT_SUPERSEDED, "superseded")
            except Exception as e:  # noqa: BLE001 - classified by _recover_or_raise
                self._recover_or_raise(e)
                continue
            self._after_step()
        self._end()
        return self.step

    def loop(self, loader, epochs):
        """Yields the batches of ``loader`` (a ``DataLoader``) for ``epochs`` epochs: your loop
        kept as it is, its body in ``with manager.recoverable():``. Calls the sampler's
        ``set_epoch`` at each epoch, counts one step per batch, and after a recovery resumes at
        the batch of the step the group agreed on: the data position is the step (epoch =
        step // len(loader)), so it needs no state of its own. With :meth:`sampler`'s sampler
        the batches before that position are skipped without being loaded; with another, they
        are loaded and dropped. A batch must depend only on the sampler's indices (and seeded
        randomness), so that a batch loaded again after a recovery is the same batch."""
        per_epoch = len(loader)
        if per_epoch == 0:
            raise ValueError("the loader yields no batch")
        steps = int(epochs) * per_epoch
        if not self._begin(steps):
            return
        while self.step < steps:
            formation = self._formations
            batches = self._batches_from(loader, *divmod(self.step, per_epoch))
            while True:
                try:
                    self._before_step()
                except Aborted:
                    self._exit(EXIT_SUPERSEDED, "superseded")
                except Exception as e:  # noqa: BLE001 - classified by _recover_or_raise
                    self._recover_or_raise(e)
                    break
                self._step_starts()  # the watchdog covers loading the batch too
                try:
                    batch = next(batches)
                except StopIteration:
                    self._step_ends(completed=False)
                    break
                try:
                    yield batch
                except GeneratorExit:  # the caller left the loop: no step runs any more
                    self._step_ends(completed=False)
                    raise
                if self._formations != formation:
                    break  # the body failed and recovered: resume at the agreed step's batch
                self._after_step()
                if self.step % per_epoch == 0 or self.step >= steps:
                    break
        self._end()

    @contextlib.contextmanager
    def recoverable(self):
        """The body of a :meth:`loop` step: a peer's failure inside it (a collective raising)
        is recovered from in place (the group re-forms, the state comes from a live peer) and
        the loop resumes at the agreed step; any other exception is reported and re-raised, as
        in :meth:`run`."""
        try:
            yield
        except Aborted:
            self._exit(EXIT_SUPERSEDED, "superseded")
        except Exception as e:  # noqa: BLE001 - classified by _recover_or_raise
            self._recover_or_raise(e)

    def sampler(self, dataset, **kwargs):
        """A :class:`DistributedSampler` for this task's rank in the job (``shuffle``, ``seed``,
        ``drop_last`` as torch's), which :meth:`loop` can position without loading data."""
        return DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank,
                                  **kwargs)

    # -- the loop's steps ---------------------------------------------------------------------

    def _begin(self, steps):
        """Forms the group (and restores the state); False when the job had finished already."""
        done = self._retrying(lambda: self._client.kv_try_get(self._done_key()))
        if done is not None and int(done) >= steps:
            # A replacement started after every task finished: nothing left to train.
            self._event("already_done", steps=int(done))
            return False
        self._recover(None)
        return True

    def _before_step(self):
        self._check_device()
        if self._missing_task_is_back():
            raise RuntimeError("%s: a missing task registered again: re-forming at full size"
                               % _ABORTED_BY_PHALANX)
        if self._reached_sync_point():
            self._at_sync_point()

    def _after_step(self):
        self._step_ends(completed=True)
        self.step += 1
        self._report_stepping()
        if self._checkpoint_every and self.step % self._checkpoint_every == 0:
            self._checkpoint("interval")

    def _missing_task_is_back(self):
        """recovery="continue": the group is partial and a task registered since it formed."""
        with self._cond:
            return (self._continue and len(self._group_tasks) < self.world_size
                    and self._rejoined)

    def _end(self):
        if self._missing_task_is_back():
            # Bring the newcomer in before finishing: it takes the final state from a peer and
            # reaches the shutdown barrier with everyone (else it would wait to form a group).
            self._recover(None)
        self._retrying(lambda: self._client.kv_set(self._done_key(), str(self.step),
                                                   overwrite=True))

    def _recover_or_raise(self, error):
        """After ``error`` out of a step: recovers when a peer failed, else reports the bug and
        re-raises it."""
        self._step_ends(completed=False)
        self._check_device()
        if not self._is_peer_failure(error):
            self._fatal(error)
            raise error
        self._recover(error)

    # -- the hang watchdog --------------------------------------------------------------------

    def _step_starts(self):
        with self._cond:
            self._step_began = time.monotonic()
            self._cond.notify_all()

    def _mark_syncing(self, active):
        with self._cond:
            self._syncing = active

    def _step_ends(self, completed):
        with self._cond:
            self._syncing = False
            if completed and self._step_began is not None:
                took = time.monotonic() - self._step_began
                self._longest_step = max(self._longest_step or 0.0, took)
            self._step_began = None
            self._cond.notify_all()

    def _hang_limit(self):
        """Seconds a step may run outside any collective; None: not armed (no step has
        completed yet: a first step compiles, allocates, warms up)."""
        if self._longest_step is None:
            return None
        if not self._ddp and self._hang_timeout is None:
            return None  # the user's own collectives are not tracked: victim or culprit?
        if self._hang_timeout is not None:
            return self._hang_timeout
        return max(HANG_FLOOR_S, HANG_STEP_FACTOR * self._longest_step)

    def _watch_hangs(self):
        """A rank stuck in a step outside any collective (compute, data loading, a deadlock)
        keeps heartbeating, so the coordinator cannot tell; its peers wait in the step's
        collective for it. This thread sees it: it reports the task failed, so the peers
        re-form at once, and ends the process (EXIT_HUNG) so that it is started again. A rank
        waiting in a collective is a victim of a late peer, not the culprit: it waits on."""
        with self._cond:
            while True:
                began, limit = self._step_began, self._hang_limit()
                if began is None or limit is None:
                    self._cond.wait(60.0)  # a step's start wakes it
                    continue
                remaining = began + limit - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                if self._syncing or (self._aborter is not None and self._aborter.busy()):
                    self._cond.wait(limit)  # in a collective: a peer is late, not this rank
                    continue
                stuck, step = time.monotonic() - began, self.step
                break
        reason = ("stuck %.1f s in step %d outside any collective (the hang watchdog's limit is "
                  "%.1f s)" % (stuck, step, limit))
        self._event("hung", step=step, stuck_s="%.1f" % stuck, limit_s="%.1f" % limit)
        try:
            self._client.report_error("task %d hung: %s" % (self.rank, reason))
        except Error:
            pass
        self._exit(EXIT_HUNG, "hung")

    def _batches_from(self, loader, epoch, index):
        """An iterator over ``loader``'s batches of ``epoch`` from batch ``index`` on."""
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        if index and isinstance(sampler, DistributedSampler) and loader.batch_size:
            sampler.skip_next(index * loader.batch_size)
            return iter(loader)
        return itertools.islice(iter(loader), index, None)

    def _report_stepping(self):
        """Tells the coordinator the group steps (once per registration: the job's first step,
        or a regroup's end), for the operator's goodput. Best effort: a coordinator that is away
        hears of it after the next step."""
        try:
            self._client.report_stepping()
        except Aborted:
            self._exit(EXIT_SUPERSEDED, "superseded")
        except Error:
            pass  # not delivered (the coordinator away, or older): the next step's call retries

    def _retrying(self, call, timeout=300.0):
        """``call()``, again after the coordinator is back when it answers Unavailable."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except Unavailable:
                self._client.wait_until_connected(timeout=max(1.0, deadline - time.monotonic()))

    def shutdown(self, timeout=300.0):
        """The job's shutdown barrier (retried across coordinator restarts), then the group goes.
        If a group had to be abandoned to a hung peer during the run, this ends the process
        (exit 0) instead of returning: torch 1.13's gloo cannot tear such a group down."""
        deadline = time.monotonic() + timeout
        self._retrying(lambda: self._client.shutdown(
            timeout=max(1.0, deadline - time.monotonic())), timeout)
        self._teardown()
        if self._abandoned:
            self._exit(0, "done; %d process group(s) abandoned to hung peers cannot be torn "
                          "down" % len(self._abandoned))

    def state_dict(self):
        """Everything a replacement needs: model, optimizer, step and the stateful objects."""
        state = {"step": self.step, "model": self._module.state_dict(),
                 "stateful": {k: v.state_dict() for k, v in self._stateful.items()}}
        if self._optimizer is not None:
            state["optimizer"] = self._optimizer.state_dict()
        return state

    def load_state_dict(self, state):
        self._module.load_state_dict(state["model"])
        if self._optimizer is not None and "optimizer" in state:
            self._optimizer.load_state_dict(state["optimizer"])
        for name, obj in self._stateful.items():
            if name in state.get("stateful", {}):
                obj.load_state_dict(state["stateful"][name])
        self.step = int(state["step"])

    # -- failure handling ---------------------------------------------------------------------

    def _reached_sync_point(self):
        try:
            return self._client.reached_sync_point(self.step)
        except Unavailable:  # the coordinator is restarting; the round is gone with it
            return False

    def _is_peer_failure(self, error):
        if isinstance(error, (Cancelled, Unavailable, DeadlineExceeded)):
            return True
        if not isinstance(error, RuntimeError):
            return False
        message = str(error)
        if any(marker in message for marker in _TRANSPORT_MARKERS):
            return True
        # Some other error out of a collective: a peer failure if the coordinator reports one
        # soon (its heartbeat timeout), a bug in the step otherwise.
        with self._cond:
            seen = self._changes
        return self._peer_change_since(seen, self._failure_grace)

    def _peer_change_since(self, seen, timeout):
        """Whether a peer change after the ``seen``-th arrives within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._changes != seen, timeout)

    def _check_device(self):
        """Leaves (exits) if the node agent said this rank's GPU failed."""
        with self._cond:
            reason = self._device_failure
        if reason is None:
            return
        self._event("device_failed", step=self.step, devices=",".join(
            str(d) for d in self._agent_devices), reason=repr(reason[:200]))
        try:
            # Peers hear of it now, not at the heartbeat timeout, and re-form without this task.
            self._client.report_error("the node agent aborted this task's process group: %s"
                                      % reason[:400])
        except Error:
            pass
        self._exit(EXIT_DEVICE_FAILED, "device failed")

    def _fatal(self, error):
        self._event("fatal", error=repr(str(error)[:200]))
        try:
            self._client.report_error("training step failed: %s" % (str(error)[:500],))
        except Error:
            pass

    def _exit(self, code, why):
        self._event("exit", code=code, why=why)
        sys.stdout.flush()
        sys.stderr.flush()
        # os._exit: the process group's destructor would wait for collectives a dead peer holds.
        os._exit(code)

    # -- recovery -----------------------------------------------------------------------------

    def _recover(self, cause):
        started = time.monotonic()
        if cause is not None:
            self._event("failure", step=self.step, error=repr(str(cause)[:160]))
        self._teardown()
        deadline = started + self._recovery_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fatal(RecoveryFailed("could not re-form the group in %.0f s"
                                           % self._recovery_timeout))
                raise RecoveryFailed("could not re-form the process group in %.0f s"
                                     % self._recovery_timeout)
            try:
                with self._cond:
                    changes, restarts = self._changes, self._coordinator_restarts
                marks = [time.monotonic()]
                epoch = self._agree_on_members(deadline)
                marks.append(time.monotonic())
                source, step, from_disk, receivers = self._agree_on_source(epoch, remaining)
                marks.append(time.monotonic())
                self._form_group(epoch)
                marks.append(time.monotonic())
                moved = self._restore(source, step, from_disk, receivers)
                marks.append(time.monotonic())
                # Where the time went (seconds): members agreed, source agreed, group formed,
                # state restored (with DDP built).
                phases = ",".join("%.3f" % (b - a) for a, b in zip(marks, marks[1:]))
                self._formations += 1
                transfer = {}
                if moved is not None:  # this task received the state: its size and speed
                    nbytes, seconds = moved
                    transfer = {"state_bytes": nbytes,
                                "state_mb_per_s": "%.1f" % (nbytes / 2**20 / max(seconds, 1e-9))}
                self._event("recovered" if cause is not None else "formed", epoch=epoch,
                            step=self.step, source=source, took_s="%.3f" % (
                                time.monotonic() - started), phases_s=phases, **transfer)
                return
            except Aborted:
                self._exit(EXIT_SUPERSEDED, "superseded")
            except Unavailable:
                self._teardown()
                self._client.wait_until_connected(timeout=max(1.0, deadline - time.monotonic()))
            except (Cancelled, DeadlineExceeded):
                self._teardown()  # membership changed during the agreement: agree again
            except RuntimeError as e:  # the group could not form or broadcast
                self._teardown()
                with self._cond:
                    restarted = self._coordinator_restarts != restarts
                if not (restarted or self._peer_change_since(changes, self._failure_grace)):
                    self._fatal(e)
                    raise
                self._event("retry", error=repr(str(e)[:160]))

    def _agree_on_members(self, deadline):
        """Waits until every task is registered; returns the epoch (incarnations joined)."""
        with self._cond:
            self._rejoined = False  # this agreement counts who is registered now
        while True:
            with self._cond:
                seen = self._changes
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded("not every task came back")
            alive = self._client.alive_tasks(timeout=max(1.0, min(remaining, 120.0)))
            # recovery="continue": tasks that hold a state train on without the missing ones
            # (a fresh process waits for all: it has nothing to train with alone).
            partial = self._continue and self._have_state and len(alive) > 0
            if len(alive) == self.world_size or partial:
                incarnations = {t.task_id: t.incarnation for t in alive}
                self._group_tasks = sorted(incarnations)
                members = ".".join(str(incarnations[t]) if t in incarnations else "x"
                                   for t in range(self.world_size))
                # The same members can agree more than once (a transport error that replaced
                # nobody, a retry). Barriers are single-use and an earlier formation's store keys
                # must not be read, so each agreement needs its own name. Every member took part
                # in every agreement that returned these incarnations (a replacement changes
                # them), so all count alike; torchrun.py names its rounds the same way. (Without
                # this, a re-formation after a coordinator restart reused an epoch with a step of
                # its own, and on the same coordinator it would have met a passed barrier.)
                n = self._agreements.get(members, 0) + 1
                self._agreements = {members: n}  # older memberships never return
                return members if n == 1 else "%s-%d" % (members, n)
            # A replacement is not registered yet: its registration is a peer change.
            self._peer_change_since(seen, min(5.0, max(0.0, remaining)))

    def _agree_on_source(self, epoch, timeout):
        """Every task publishes what it holds; all pick the same source and the tasks that need
        its state: (task, step, from_disk, receivers)."""
        directory = "%s/%s/holds" % (self._prefix, epoch)
        live = self.step if self._have_state else -1
        on_disk = self._newest_checkpoint()
        self._client.kv_set("%s/%d" % (directory, self.rank), "%d %d" % (live, on_disk),
                            overwrite=True)
        self._client.barrier("%s/%s/agreed" % (self._prefix, epoch), timeout=max(1.0, timeout),
                             tasks=self._group_tasks)
        best = (-1, 0, 0)  # (step, in memory, -task)
        live_steps = {}
        for key, value in self._client.kv_dir(directory):
            task = int(key.rsplit("/", 1)[1])
            live_step, disk_step = (int(v) for v in value.split())
            live_steps[task] = live_step
            best = max(best, (live_step, 1, -task), (disk_step, 0, -task))
        step, in_memory, neg_task = best
        first = self._group_tasks[0]
        if step < 0:
            # A fresh start: the first task's initial state for everyone.
            return first, 0, False, [t for t in self._group_tasks if t != first]
        source = -neg_task
        # Who lacks the source's state: a task whose memory holds another step (a replacement,
        # one behind); with a checkpoint, every other task (nobody holds its step in memory).
        receivers = [t for t in self._group_tasks
                     if t != source and (not in_memory or live_steps.get(t, -1) != step)]
        return source, step, not in_memory, receivers

    def _form_group(self, epoch):
        store = PhalanxStore(self._client, prefix="%s/%s/pg" % (self._prefix, epoch),
                             timeout=self._collective_timeout)
        dist.init_process_group(self._backend, store=store,
                                rank=self._group_tasks.index(self.rank),
                                world_size=len(self._group_tasks),
                                timeout=datetime.timedelta(seconds=self._collective_timeout))
        self.group = dist.group.WORLD
        # Every task, so the barrier inside is met: one per formation, milliseconds.
        self.device_table = device_map.exchange(
            self._client, self._gpu_uuids, "%s/%s/devices" % (self._prefix, epoch),
            timeout=self._collective_timeout, tasks=self._group_tasks)
        with self._cond:
            self._members = {t: int(i) for t, i in enumerate(epoch.split("-")[0].split("."))
                             if i != "x"}
            self._aborter = CollectiveAborter()
        watch = AgentWatch(os.environ.get("PHALANX_JOB", ""), self.rank, self.incarnation,
                           "torch-%s-%s" % (self._prefix.replace("/", "-"), epoch),
                           self._agent_devices, self._agent_abort, period=self._agent_period)
        if watch.active and watch.job:
            self._agent_watch = watch.start()

    def _restore(self, source, step, from_disk, receivers):
        """The source's state to the tasks that lack it, point to point, tensor by tensor (no
        whole-state blob, nothing through the tasks that hold it already); then DDP anew.
        Returns (bytes, seconds) on a task that received the state, else None."""
        moved = None
        if self.rank == source:
            if from_disk:
                self.load_state_dict(torch.load(self._checkpoint_path(step),
                                                map_location=self._placement))
            elif not self._have_state:
                self.step = 0  # fresh start: this process's initial state is the job's
            _send_state(self.state_dict(), [self._group_tasks.index(t) for t in receivers],
                        self._wire)
        elif self.rank in receivers:
            state, moved = _receive_state(self._group_tasks.index(source), self._wire)
            self.load_state_dict(state)
        self._have_state = True
        self.step = step
        self._module.zero_grad(set_to_none=True)
        if self._ddp:
            self.model = torch.nn.parallel.DistributedDataParallel(self._module,
                                                                   **self._ddp_kwargs)
            if self._deterministic:
                self._chain = ChainReducer(self._aborter, self.group)
                self.model.register_comm_hook(self._chain, chain_allreduce_hook)
            else:
                self.model.register_comm_hook(self._aborter, tracked_allreduce_hook)
            # DDP's forward starts with collectives of its own (buffers broadcast, buckets
            # rebuilt) before it calls the module: a rank waiting there is a victim, not hung.
            self._sync_hooks = [
                self.model.register_forward_pre_hook(lambda *_: self._mark_syncing(True)),
                self._module.register_forward_pre_hook(lambda *_: self._mark_syncing(False))]
        else:
            self.model = self._module
        return moved

    @property
    def _wire(self):
        """Where the state's broadcast tensors live: NCCL moves CUDA tensors only (a CPU tensor
        fails the collective), gloo and the others take CPU tensors."""
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _placement(self, storage, location):
        """``map_location`` for a state saved by another process (a peer, or this task before a
        restart on another node): CUDA tensors go to this process's own device, whatever ordinal
        they had where they were saved (CUDA_VISIBLE_DEVICES numbers GPUs per process); CPU
        tensors stay on the CPU."""
        if location.startswith("cuda"):
            return storage.cuda(torch.cuda.current_device())
        return storage

    def _teardown(self):
        """Drops DDP and the process group; the module and optimizer stay."""
        hooks, self._sync_hooks = self._sync_hooks, []
        for hook in hooks:
            hook.remove()
        self.model = None
        self.group = None
        chain, self._chain = self._chain, None
        if chain is not None:
            # Its thread ends once its bucket in flight, if any, has; a bucket stuck on a hung
            # peer keeps the group busy and it is set aside below.
            chain.close(timeout=1.0)
        with self._cond:
            aborter, self._aborter, self._members = self._aborter, None, {}
        watch, self._agent_watch = self._agent_watch, None
        if watch is not None:
            watch.stop()
        gc.collect()  # DDP's reducer holds the group: let it go before destroying the group
        if dist.is_initialized():
            # A dead peer's collective fails within milliseconds once its sockets close; one on
            # a hung peer waits until the operator kills it (its grace period) or the timeout.
            if aborter is not None and aborter.wait_idle(1.0):
                # Destroying the group would wait for that collective, and torch 1.13's gloo
                # cannot tear it down safely later either (seen: terminate or SIGSEGV at exit):
                # keep it (a few sockets and threads) until shutdown(), which then ends the
                # process without running destructors.
                self._abandoned.append(dist.distributed_c10d._get_default_group())
            dist.destroy_process_group()

    # -- checkpoints --------------------------------------------------------------------------

    def _at_sync_point(self):
        self._checkpoint("preemption")
        with self._cond:
            leaving = self._leaving_round is not None
        if leaving:
            self._event("leaving", step=self.step)
            self._exit(EXIT_PREEMPTED, "preempted")

    def _checkpoint_path(self, step):
        return os.path.join(self._checkpoint_dir, "task-%d" % self.rank, "step-%d.pt" % step)

    def _checkpoint(self, why):
        if not self._checkpoint_dir:
            return
        if self._ddp and self._group_tasks and self._group_tasks[0] != self.rank:
            return  # DDP's state is the same on every task: the group's first task writes it
        path = self._checkpoint_path(self.step)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = path + ".tmp.%d" % os.getpid()
        torch.save(self.state_dict(), temporary)
        os.replace(temporary, path)  # readers see a whole file or none
        for old in self._checkpoint_steps()[:-2]:  # keep the newest two
            try:
                os.remove(self._checkpoint_path(old))
            except OSError:
                pass
        self._event("checkpoint", step=self.step, why=why)

    def _checkpoint_steps(self):
        if not self._checkpoint_dir:
            return []
        try:
            names = os.listdir(os.path.join(self._checkpoint_dir, "task-%d" % self.rank))
        except OSError:
            return []
        return sorted(int(n[5:-3]) for n in names
                      if n.startswith("step-") and n.endswith(".pt") and n[5:-3].isdigit())

    def _newest_checkpoint(self):
        steps = self._checkpoint_steps()
        return steps[-1] if steps else -1

    def _done_key(self):
        return "%s/done" % self._prefix
