"""The Phalanx runtime client for Python: :class:`Client`, a thin ctypes layer over the C ABI
(``runtime/client/phalanx_c.h``, shipped as ``libphalanx_c.so``).

Thread-safety: a :class:`Client` may be used from several threads at once (the C client is
thread-safe and every blocking call releases the GIL while it waits). Do not call
:meth:`Client.close` while another thread is inside a call on the same client.

Callbacks (:meth:`Client.on_peer_change`, :meth:`Client.on_preemption`) run on the C client's
*session thread*, which also carries the task's heartbeats: keep them quick (set a flag, put
something on a queue, start a thread). Never make blocking client calls (barrier, kv_get,
shutdown, ...) or call :meth:`Client.close` from a callback. An exception a callback raises is
printed to stderr and otherwise ignored.
"""

import atexit
import collections
import ctypes
import os
import sys
import threading
import traceback
import weakref

from . import _native
from .errors import (Error, FailedPrecondition, InvalidArgument, NotFound, Unimplemented,
                     error_from_code)

__all__ = ["Client", "TaskRef", "PeerChange", "PreemptionRound", "TaskState",
           "DEFAULT_TIMEOUT", "MAX_INCARNATION"]

#: Default timeout in seconds for blocking calls that take one.
DEFAULT_TIMEOUT = 300.0
# What timeout=None means: no practical limit (30 days), kept finite for the RPC deadlines.
_NO_LIMIT_MS = 30 * 24 * 3600 * 1000


class TaskState:
    """Task states as reported to peer-change callbacks (``PHALANX_TASK_*``)."""
    UNREGISTERED = 0
    CONNECTED = 1
    FAILED = 2
    SHUTDOWN = 3
    NAMES = {0: "UNREGISTERED", 1: "CONNECTED", 2: "FAILED", 3: "SHUTDOWN"}


TaskRef = collections.namedtuple("TaskRef", ["task_id", "incarnation"])
TaskRef.__doc__ = "A task and the incarnation it runs as."

PeerChange = collections.namedtuple("PeerChange",
                                    ["task_id", "incarnation", "state", "state_name", "reason"])
PeerChange.__doc__ = """A peer failed, left (:meth:`Client.leave`) or came back (a new incarnation).

``state`` is a :class:`TaskState` value (``state_name`` its name), ``reason`` a text."""

PreemptionRound = collections.namedtuple("PreemptionRound",
                                         ["round", "deadline", "reason", "affected_tasks"])
PreemptionRound.__doc__ = """A preemption round opened.

``deadline`` is a Unix time in seconds (float) or None when unknown. ``affected_tasks`` is a
tuple of the task ids the round names as about to be preempted, or None when the loaded
library cannot say (it lacks ``phalanx_set_preemption_callback2``)."""


def _ms(timeout):
    """Seconds (float, None = no limit) → milliseconds for the C ABI."""
    if timeout is None:
        return _NO_LIMIT_MS
    try:
        ms = int(round(float(timeout) * 1000.0))
    except (TypeError, ValueError):
        raise InvalidArgument("timeout must be a number of seconds or None, not %r" % (timeout,))
    return max(0, min(ms, _NO_LIMIT_MS))


def _bytes(value, what):
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgument("%s must be str or bytes, not %s" % (what, type(value).__name__))


#: The largest incarnation there is (2^63 - 1): C++ keeps incarnations signed 64-bit
#: (common/base/incarnation.h), the C ABI and the protocol carry them as uint64.
MAX_INCARNATION = (1 << 63) - 1


def _incarnation(value):
    """``value`` as an incarnation, or ``InvalidArgument``: ctypes would wrap a negative or an
    oversized number into some other task's incarnation without a word."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INCARNATION:
        raise InvalidArgument("incarnation must be an int in [0, 2^63 - 1], not %r" % (value,))
    return value


def _task_array(tasks):
    if tasks is None:
        return None, 0
    tasks = [int(t) for t in tasks]
    if not tasks:
        return None, 0
    return (ctypes.c_int * len(tasks))(*tasks), len(tasks)


_live_clients = weakref.WeakSet()


def _disown_after_fork():
    # In a forked child: every client belongs to the parent. Its session thread is not here, so
    # a call would wait out its whole timeout (12 s once, for a write the parent's session had
    # in fact applied), and destroying it would wait for threads that do not exist. So each is
    # marked forked (every call raises FailedPrecondition at once) and leaked, never destroyed;
    # the parent's session is untouched.
    for client in list(_live_clients):
        client._forked_from = client._owner_pid
        client._lock = threading.Lock()  # another thread may have held it at fork()
    _live_clients.clear()


os.register_at_fork(after_in_child=_disown_after_fork)


@atexit.register
def _close_all():
    # Stop session threads while the interpreter can still run their callbacks safely.
    for client in list(_live_clients):
        try:
            client.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


def check(lib, code):
    """Raises the library's last error (on this thread) for a non-zero return ``code``."""
    if code != 0:
        # Thread-local: read on the calling thread.
        message = lib.phalanx_last_error()
        details = lib.phalanx_last_error_details()
        raise error_from_code(code, message.decode("utf-8", "replace") if message else "",
                              details.decode("utf-8", "replace") if details else "")


class Client:
    """One task's connection to its job's coordination service.

    Create it with :meth:`from_env` (inside a pod the operator started) or with explicit
    arguments, register callbacks, then :meth:`connect`. Use it as a context manager (or call
    :meth:`close`) to stop its session; :meth:`shutdown` first for a clean exit that peers do
    not see as a failure.

    Errors: every method raises a subclass of :class:`phalanx.Error`; those common to all calls
    are ``Unavailable`` (coordinator unreachable or restarting: retry), ``Aborted`` (this
    incarnation was superseded: exit and be restarted), ``Unauthenticated`` (wrong token),
    ``InvalidArgument`` and ``FailedPrecondition`` (not connected yet).
    """

    def __init__(self, coordinator, job, task_id, num_tasks, incarnation=0, token="", _handle=None):
        """Creates a client for task ``task_id`` of ``num_tasks`` in ``job``.

        ``coordinator`` is ``host:port``; ``token`` the job token. Does not connect.
        Raises ``InvalidArgument`` for a bad configuration, ``LibraryNotFound``.
        """
        self._lib = _native.load()
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()
        self._forked_from = None  # the parent's pid, in a forked child
        self._peer_callbacks = []
        self._preemption_callbacks = []
        self._reconnect_callbacks = []
        self._callback_thread = None
        self._handle = None
        handle = ctypes.c_void_p()
        if _handle is None:
            code = self._lib.phalanx_client_create(
                _bytes(coordinator, "coordinator"), _bytes(job, "job"), int(task_id),
                int(num_tasks), _incarnation(incarnation), _bytes(token, "token"),
                ctypes.byref(handle))
        else:
            code = _handle(self._lib, ctypes.byref(handle))
        self._check(code)
        self._handle = handle
        # The ctypes function objects must outlive every call the C side can make to them:
        # they are stored on self and only dropped after the C client is destroyed.
        self._peer_trampoline = _native.PEER_CHANGE_FN(self._on_peer_change_c)
        self._lib.phalanx_set_peer_change_callback(self._handle, self._peer_trampoline, None)
        if hasattr(self._lib, "phalanx_set_preemption_callback2"):
            self._preemption_trampoline = _native.PREEMPTION2_FN(self._on_preemption2_c)
            self._lib.phalanx_set_preemption_callback2(self._handle, self._preemption_trampoline,
                                                       None)
        else:
            self._preemption_trampoline = _native.PREEMPTION_FN(self._on_preemption_c)
            self._lib.phalanx_set_preemption_callback(self._handle, self._preemption_trampoline,
                                                      None)
        if hasattr(self._lib, "phalanx_set_reconnect_callback"):
            self._reconnect_trampoline = _native.RECONNECT_FN(self._on_reconnect_c)
            self._lib.phalanx_set_reconnect_callback(self._handle, self._reconnect_trampoline,
                                                     None)
        _live_clients.add(self)

    @classmethod
    def from_env(cls):
        """A client configured from the environment the operator injects: PHALANX_COORDINATOR,
        PHALANX_JOB, PHALANX_TASK_ID, PHALANX_NUM_TASKS, PHALANX_INCARNATION, PHALANX_TOKEN.

        Raises ``InvalidArgument`` naming the variable that is missing or malformed.
        """
        return cls(None, None, 0, 0, _handle=lambda lib, out: lib.phalanx_client_create_from_env(out))

    # -- plumbing ---------------------------------------------------------------------------

    def _check(self, code):
        check(self._lib, code)

    def _h(self):
        if self._forked_from is not None:
            raise FailedPrecondition(
                "this phalanx client belongs to process %d, which forked this one (%d): a child "
                "cannot use its parent's session. Call from the parent, or give the child a "
                "client of its own" % (self._forked_from, os.getpid()))
        handle = self._handle
        if handle is None:
            raise FailedPrecondition("the client is closed")
        return handle

    def _run_callbacks(self, callbacks, event):
        self._callback_thread = threading.get_ident()
        for callback in list(callbacks):
            try:
                callback(event)
            except Exception:
                sys.stderr.write("phalanx: exception in callback %r:\n" % (callback,))
                traceback.print_exc()

    def _on_peer_change_c(self, _user, task_id, incarnation, state, reason):
        self._run_callbacks(self._peer_callbacks, PeerChange(
            task_id, incarnation, state, TaskState.NAMES.get(state, str(state)),
            reason.decode("utf-8", "replace") if reason else ""))

    def _preemption_event(self, round_, deadline_ms, reason, affected):
        return PreemptionRound(round_, deadline_ms / 1000.0 if deadline_ms > 0 else None,
                               reason.decode("utf-8", "replace") if reason else "", affected)

    def _on_preemption_c(self, _user, round_, deadline_ms, reason):
        self._run_callbacks(self._preemption_callbacks,
                            self._preemption_event(round_, deadline_ms, reason, None))

    def _on_preemption2_c(self, _user, round_, deadline_ms, reason, tasks, count):
        affected = tuple(tasks[i] for i in range(count)) if tasks else ()
        self._run_callbacks(self._preemption_callbacks,
                            self._preemption_event(round_, deadline_ms, reason, affected))

    def _on_reconnect_c(self, _user, coordinator_restarted):
        self._run_callbacks(self._reconnect_callbacks, bool(coordinator_restarted))

    # -- identity ---------------------------------------------------------------------------

    @property
    def task_id(self):
        """This task's index in the job (0-based)."""
        return self._lib.phalanx_task_id(self._h())

    @property
    def num_tasks(self):
        """How many tasks the job has."""
        return self._lib.phalanx_num_tasks(self._h())

    @property
    def incarnation(self):
        """This process's incarnation of its task (0 first, +1 per restart)."""
        return self._lib.phalanx_incarnation(self._h())

    # -- callbacks --------------------------------------------------------------------------

    def on_peer_change(self, callback):
        """Calls ``callback(PeerChange)`` when a peer fails or registers a new incarnation.

        Runs on the session thread: keep it quick (see the module docs). Returns ``callback``,
        so it can be used as a decorator. Register before :meth:`connect` to miss nothing.
        """
        self._peer_callbacks.append(callback)
        return callback

    def on_preemption(self, callback):
        """Calls ``callback(PreemptionRound)`` when a preemption round opens; from then on
        :meth:`reached_sync_point` agrees on a checkpoint step. Same rules as
        :meth:`on_peer_change`."""
        self._preemption_callbacks.append(callback)
        return callback

    def on_reconnect(self, callback):
        """Calls ``callback(coordinator_restarted)`` each time the session comes back after a
        break. ``coordinator_restarted`` is True when the coordinator is a new one (it stopped,
        moved or restarted): its key-value data, barriers and preemption round are gone, so
        re-publish what peers read and re-run recovery. Same rules as :meth:`on_peer_change`."""
        self._reconnect_callbacks.append(callback)
        return callback

    # -- calls ------------------------------------------------------------------------------

    def connect(self, timeout=60.0):
        """Registers the task and opens its session; returns once connected.

        Raises ``DeadlineExceeded`` (coordinator not reachable in time), ``Aborted`` (a newer
        incarnation of this task exists), ``Unauthenticated`` (wrong token).
        """
        self._check(self._lib.phalanx_connect(self._h(), _ms(timeout)))

    def wait_until_connected(self, timeout=60.0):
        """Waits until the task is registered again and its session is open: the retry path
        after ``Unavailable`` (the coordinator stopped, moved or restarted). The client
        re-registers the same task at the same incarnation by itself; this only waits for it.

        Raises ``DeadlineExceeded`` (not back in time), ``Aborted`` (this incarnation can no
        longer take part: exit).
        """
        self._check(self._lib.phalanx_wait_until_connected(self._h(), _ms(timeout)))

    @property
    def connected(self):
        """True while the task is registered and its session is open."""
        return bool(self._lib.phalanx_connected(self._h()))

    def barrier(self, name, timeout=DEFAULT_TIMEOUT, tasks=None):
        """Waits until every task (or every task in ``tasks``) has reached barrier ``name``.

        Raises ``DeadlineExceeded`` whose message (and ``missing_tasks``) names the tasks that
        never arrived, ``Cancelled`` when a participant cancelled it, ``Aborted``.
        """
        array, count = _task_array(tasks)
        self._check(self._lib.phalanx_barrier(self._h(), _bytes(name, "name"), _ms(timeout),
                                              array, count))

    def cancel_barrier(self, name):
        """Fails barrier ``name`` with ``Cancelled`` for everyone waiting in it (e.g. because a
        participant died). Blocking: call it from a thread, not from a callback."""
        self._check(self._lib.phalanx_cancel_barrier(self._h(), _bytes(name, "name")))

    def kv_set(self, key, value, overwrite=False, wait=True):
        """Sets ``key`` to ``value`` (bytes, or str stored as UTF-8).

        Raises ``AlreadyExists`` if the key is set and ``overwrite`` is false.

        With ``wait=False`` it returns once the set is sent on the task's session, without
        waiting for the coordinator's answer, as torch's ``TCPStore.set`` does. This client's
        later calls on its session are handled after it (so a ``kv_get`` of the key sees it):
        ``kv_get``, ``kv_try_get``, ``kv_set``, ``kv_add``, ``kv_compare_set``, ``kv_delete`` and
        ``barrier``; ``kv_dir`` may overtake it. Its failure, if any, is raised by the
        next ``kv_set(wait=False)`` or by :meth:`kv_wait_sets`. Without a session it waits.
        """
        data = _bytes(value, "value")
        set_fn = self._lib.phalanx_kv_set
        if not wait and hasattr(self._lib, "phalanx_kv_set_nowait"):
            set_fn = self._lib.phalanx_kv_set_nowait
        # bytes go to the C side as they are (it copies them before returning).
        self._check(set_fn(self._h(), _bytes(key, "key"), data or None, len(data),
                           1 if overwrite else 0))

    def kv_wait_sets(self, timeout=DEFAULT_TIMEOUT):
        """Waits until every ``kv_set(wait=False)`` sent so far is answered; raises the first
        failure among them (then forgotten), or ``DeadlineExceeded`` if one is still unanswered
        after ``timeout`` seconds."""
        if hasattr(self._lib, "phalanx_kv_wait_sets"):
            self._check(self._lib.phalanx_kv_wait_sets(self._h(), _ms(timeout)))

    def _take_value(self, ptr, length):
        try:
            return ctypes.string_at(ptr, length.value)
        finally:
            self._lib.phalanx_free(ptr)

    def kv_get(self, key, timeout=DEFAULT_TIMEOUT):
        """The value of ``key`` (bytes), waiting up to ``timeout`` seconds for it to be set.

        Raises ``DeadlineExceeded`` naming the key when it was not set in time.
        """
        ptr, length = ctypes.c_void_p(), ctypes.c_size_t()
        self._check(self._lib.phalanx_kv_get(self._h(), _bytes(key, "key"), _ms(timeout),
                                             ctypes.byref(ptr), ctypes.byref(length)))
        return self._take_value(ptr, length)

    def kv_try_get(self, key, default=None):
        """The value of ``key`` (bytes) if it is set, else ``default``. Does not wait."""
        ptr, length = ctypes.c_void_p(), ctypes.c_size_t()
        try:
            self._check(self._lib.phalanx_kv_try_get(self._h(), _bytes(key, "key"),
                                                     ctypes.byref(ptr), ctypes.byref(length)))
        except NotFound:
            return default
        return self._take_value(ptr, length)

    def kv_dir(self, directory):
        """Every ``(key, value)`` under ``directory`` (``"a/b"`` lists ``a/b/...``), as a list of
        ``(str, bytes)`` pairs in key order. The coordinator answers in bounded pages; the library
        fetches them all (not a snapshot: keys changed meanwhile may or may not appear)."""
        entries, count = ctypes.POINTER(_native.KvEntry)(), ctypes.c_size_t()
        self._check(self._lib.phalanx_kv_dir(self._h(), _bytes(directory, "directory"),
                                             ctypes.byref(entries), ctypes.byref(count)))
        try:
            return [(entries[i].key.decode("utf-8", "replace"),
                     ctypes.string_at(entries[i].value, entries[i].value_len))
                    for i in range(count.value)]
        finally:
            self._lib.phalanx_kv_entries_free(entries, count.value)

    def kv_delete(self, key):
        """Deletes ``key`` (and, for a directory, the keys under it); returns how many keys
        were deleted."""
        deleted = ctypes.c_int(0)
        self._check(self._lib.phalanx_kv_delete(self._h(), _bytes(key, "key"),
                                                ctypes.byref(deleted)))
        return deleted.value

    def kv_add(self, key, delta=1):
        """Atomically adds ``delta`` to the integer under ``key`` (stored as decimal text, so
        ``kv_get`` reads e.g. ``b"3"``; an absent key counts as 0) and returns the new value.

        Raises ``FailedPrecondition`` when the key holds something that is not an integer. Not
        retried: after ``Unavailable`` the add may or may not have happened.
        """
        value = ctypes.c_int64(0)
        self._check(self._lib.phalanx_kv_add(self._h(), _bytes(key, "key"), int(delta),
                                             ctypes.byref(value)))
        return value.value

    def kv_compare_set(self, key, expected, desired):
        """Sets ``key`` to ``desired`` if it holds ``expected`` (``None``: if it is absent), in
        one step. Returns ``(swapped, value)``: whether it did, and what ``key`` holds afterwards
        (bytes, or ``None`` when absent)."""
        want = None if expected is None else _bytes(expected, "expected")
        put = _bytes(desired, "desired")
        # An empty expected value is not "absent": it still needs a pointer (a 1-byte buffer).
        want_buf = ctypes.create_string_buffer(want, max(1, len(want))) if want is not None else None
        put_buf = ctypes.create_string_buffer(put, len(put)) if put else None
        swapped, present = ctypes.c_int(0), ctypes.c_int(0)
        ptr, length = ctypes.c_void_p(), ctypes.c_size_t()
        self._check(self._lib.phalanx_kv_compare_set(
            self._h(), _bytes(key, "key"), want_buf, 0 if want is None else len(want), put_buf,
            len(put), ctypes.byref(swapped), ctypes.byref(present), ctypes.byref(ptr),
            ctypes.byref(length)))
        value = self._take_value(ptr, length) if present.value else None
        return bool(swapped.value), value

    def report_error(self, message):
        """Declares this task failed with ``message``; every peer hears of it and the operator
        restarts the task."""
        self._check(self._lib.phalanx_report_error(self._h(), _bytes(message, "message")))

    def report_rolled_back(self, recovery, seconds):
        """After resuming from a checkpoint: ``seconds`` of wall time this task had spent on the
        steps it now runs again (not the time it waited after the failure). Every task of one
        recovery passes the same ``recovery`` name; the coordinator counts it once and the
        operator books it as lost goodput."""
        self._check(self._lib.phalanx_report_rolled_back(
            self._h(), _bytes(recovery, "recovery"), float(seconds)))

    def report_stepping(self):
        """This task completed a training step: call it after every step. Only the first call
        after a registration reaches the coordinator (the rest cost a flag check); the operator
        then books the time before the job's first step, and the time a group spends re-forming
        after a failure, as not productive."""
        self._check(self._lib.phalanx_report_stepping(self._h()))

    def alive_tasks(self, tasks=None, timeout=DEFAULT_TIMEOUT):
        """The alive tasks among ``tasks`` (default: all) as a list of :class:`TaskRef`.

        An agreement: every alive member of the set must call it, and all get the same answer.
        Raises ``DeadlineExceeded`` naming the tasks that did not ask.
        """
        array, count = _task_array(tasks)
        capacity = count or self.num_tasks
        ids = (ctypes.c_int * capacity)()
        incs = (ctypes.c_uint64 * capacity)()
        n = ctypes.c_size_t()
        self._check(self._lib.phalanx_alive_tasks(self._h(), array, count, _ms(timeout), ids,
                                                  incs, capacity, ctypes.byref(n)))
        return [TaskRef(ids[i], incs[i]) for i in range(min(n.value, capacity))]

    def notify_preemption(self, reason="", deadline=None, tasks=None):
        """Opens (or joins) a preemption round naming ``tasks`` (their nodes are going away),
        with ``deadline`` as a Unix time in seconds (None: unknown). Returns the round number.
        Normally the operator or node agent does this; tests and tools may too."""
        array, count = _task_array(tasks)
        round_ = ctypes.c_uint64()
        deadline_ms = 0 if deadline is None else int(deadline * 1000)
        self._check(self._lib.phalanx_notify_preemption(self._h(), _bytes(reason, "reason"),
                                                        deadline_ms, array, count,
                                                        ctypes.byref(round_)))
        return round_.value

    def reached_sync_point(self, step):
        """Call once per step before running it. True exactly once, at the step every task
        agreed to checkpoint at after a preemption round opened; False otherwise (no RPC when
        no round is open)."""
        reached = ctypes.c_int(0)
        self._check(self._lib.phalanx_reached_sync_point(self._h(), int(step),
                                                         ctypes.byref(reached)))
        return bool(reached.value)

    def shutdown(self, timeout=60.0):
        """The job's shutdown barrier: returns once every task has called it; afterwards this
        task's session ends without counting as a failure."""
        self._check(self._lib.phalanx_shutdown(self._h(), _ms(timeout)))

    def leave(self, reason="", timeout=10.0):
        """This task leaves on its own, without the shutdown barrier: a departure, not a
        failure. Its incarnation ends SHUTDOWN ("left: <reason>"), so no peer's barrier or
        ``kv_get`` fails for it; peers hear of it (``on_peer_change``) and a barrier that includes
        it waits for its next incarnation. The session ends; call :meth:`close` after. Raises
        ``FailedPrecondition`` without an open session, ``DeadlineExceeded`` when the coordinator
        did not confirm within ``timeout`` (the session is closed anyway)."""
        if not hasattr(self._lib, "phalanx_leave"):
            raise Unimplemented("this libphalanx_c has no phalanx_leave (an older build)")
        self._check(self._lib.phalanx_leave(self._h(), _bytes(reason, "reason"), _ms(timeout)))

    def close(self):
        """Stops the session and frees the C client (idempotent). Peers see a session break
        unless :meth:`shutdown` passed first or the task left (:meth:`leave`). Not from a
        callback."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is None or self._forked_from is not None:
            return  # a forked child's copy is leaked: its threads live in the parent only
        if self._callback_thread == threading.get_ident():
            self._handle = handle
            raise Error("Client.close() called from a callback (on the session thread)")
        # Clear the C callbacks first, then destroy (which joins the session thread); the ctypes
        # trampolines stay referenced by self until after that.
        self._lib.phalanx_set_peer_change_callback(handle, _native.PEER_CHANGE_FN(), None)
        self._lib.phalanx_set_preemption_callback(handle, _native.PREEMPTION_FN(), None)
        if hasattr(self._lib, "phalanx_set_preemption_callback2"):
            self._lib.phalanx_set_preemption_callback2(handle, _native.PREEMPTION2_FN(), None)
        self._lib.phalanx_client_destroy(handle)
        _live_clients.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._handle is None:
            return "<phalanx.Client closed>"
        return "<phalanx.Client task=%d/%d incarnation=%d>" % (self.task_id, self.num_tasks,
                                                                self.incarnation)
