"""Phalanx runtime client for Python.

A pure-Python package (ctypes, no build step) over the Phalanx C ABI in ``libphalanx_c.so``.
Training code inside a pod the Phalanx operator started typically does::

    import phalanx
    phalanx.init()                      # from PHALANX_* env; registers and connects
    phalanx.barrier("start", timeout=60)
    for step in range(start, steps):
        if phalanx.reached_sync_point(step):
            save_checkpoint(step)       # every task checkpoints at this same step
        train_step(step)
    phalanx.shutdown()

The library is found through ``$PHALANX_LIBRARY``, then ``libphalanx_c.so`` next to the
package, then the dynamic loader's search path (``LD_LIBRARY_PATH``, ``ldconfig``).

The module-level functions act on one default :class:`Client` made by :func:`init`; use
:class:`Client` directly for anything else (several clients, explicit configuration).
Timeouts are in seconds (float); ``None`` means no practical limit. Errors are subclasses of
:class:`Error` (see ``docs/python.md`` for the table).
"""

import ctypes
import os
import sys
import threading

from . import _native
from .client import check as _check
from .client import (DEFAULT_TIMEOUT, MAX_INCARNATION, Client, PeerChange, PreemptionRound, TaskRef,
                     TaskState)
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
                     FailedPrecondition, Internal, InvalidArgument, LibraryNotFound, NotFound,
                     OutOfRange, PermissionDenied, ResourceExhausted, Unauthenticated,
                     Unavailable, Unimplemented, Unknown, error_from_code)

__version__ = "0.1.0"

__all__ = [
    "init", "is_spare", "await_assignment", "client", "initialized", "task_id", "num_tasks", "incarnation", "barrier",
    "cancel_barrier", "kv_set", "kv_get", "kv_try_get", "kv_dir", "kv_delete", "kv_add",
    "kv_compare_set", "alive_tasks",
    "reached_sync_point", "notify_preemption", "on_peer_change", "on_preemption",
    "on_reconnect", "wait_until_connected", "report_error", "report_rolled_back",
    "report_stepping", "shutdown",
    "close", "find_library",
    "Client", "TaskRef", "PeerChange", "PreemptionRound", "TaskState", "DEFAULT_TIMEOUT",
    "MAX_INCARNATION",
    "Error", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "LibraryNotFound", "error_from_code",
]

_lock = threading.Lock()
_default = None


def _reset_lock_after_fork():
    # Another thread may have held it at fork(). The default client stays: in the child every
    # call on it raises FailedPrecondition naming the parent (client.py, _disown_after_fork).
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock_after_fork)
_pending_peer = []
_pending_preemption = []
_pending_reconnect = []


def find_library():
    """Loads ``libphalanx_c.so`` (if not yet loaded) and returns the path it came from.
    Raises :class:`LibraryNotFound` listing every place it looked."""
    _native.load()
    return _native.library_path()


def is_spare():
    """True in a spare pod's process (``spec.spares``) that has not been given a task yet."""
    return bool(os.environ.get("PHALANX_SPARE")) and not os.environ.get("PHALANX_TASK_ID")


def await_assignment(timeout=60.0):
    """A spare's wait (``spec.spares``, ``PHALANX_SPARE`` set): blocks until the coordinator
    hands this process a failed task, then makes the process's environment that task's
    (``PHALANX_TASK_ID``, ``PHALANX_INCARNATION``, ``PHALANX_TOKEN``, ``RANK``,
    ``JAX_PROCESS_ID``) and returns ``(task_id, incarnation)``. :func:`init` calls it; call it
    yourself only to do something between the wait and connecting. ``timeout`` bounds how long
    the coordinator may be unreachable in a row; the wait for a task has no bound (a spare waits
    as long as its job wants it). Raises ``FailedPrecondition`` when this is not a spare."""
    if not is_spare():
        raise FailedPrecondition("not a spare: PHALANX_SPARE is not set or the task is known")
    lib = _native.load()
    if not hasattr(lib, "phalanx_await_assignment"):
        raise Unimplemented("this libphalanx_c has no phalanx_await_assignment (an older build)")
    task = ctypes.c_int(0)
    incarnation = ctypes.c_uint64(0)
    credential = ctypes.create_string_buffer(256)
    _check(lib, lib.phalanx_await_assignment(int(timeout * 1000), ctypes.byref(task),
                                             ctypes.byref(incarnation), credential,
                                             len(credential)))
    # The environment a task pod of this task has: everything downstream (from_env, frameworks
    # that read RANK) sees the task this process now is.
    os.environ.update(PHALANX_TASK_ID=str(task.value), PHALANX_INCARNATION=str(incarnation.value),
                      PHALANX_TOKEN=credential.value.decode("ascii"), RANK=str(task.value),
                      JAX_PROCESS_ID=str(task.value))
    os.environ.pop("PHALANX_TOKEN_FILE", None)
    sys.stderr.write("phalanx: spare %s takes over task %d as incarnation %d\n"
                     % (os.environ.get("PHALANX_POD_NAME", "?"), task.value, incarnation.value))
    return task.value, incarnation.value


def init(timeout=60.0, connect=True):
    """Creates the default client from the environment the operator injects
    (``PHALANX_COORDINATOR``, ``PHALANX_JOB``, ``PHALANX_TASK_ID``, ``PHALANX_NUM_TASKS``,
    ``PHALANX_INCARNATION``, ``PHALANX_TOKEN``) and, unless ``connect`` is false, connects it
    within ``timeout`` seconds. Callbacks registered with :func:`on_peer_change` /
    :func:`on_preemption` before this call are attached before connecting.

    In a spare pod (``spec.spares``) it first waits, as long as it takes, until the coordinator
    gives this process a failed task (:func:`await_assignment`): everything the script did
    before this call (imports, building the model) is what makes the spare warm.

    Returns the :class:`Client`. Calling it again returns the same client.
    Raises ``InvalidArgument`` (bad or missing variable: fix the environment),
    ``DeadlineExceeded`` (coordinator unreachable), ``Unauthenticated`` (wrong token),
    ``Aborted`` (a newer incarnation of this task exists), ``LibraryNotFound``.
    """
    global _default
    with _lock:
        if _default is None:
            if is_spare():
                await_assignment(timeout)
            c = Client.from_env()
            for cb in _pending_peer:
                c.on_peer_change(cb)
            for cb in _pending_preemption:
                c.on_preemption(cb)
            for cb in _pending_reconnect:
                c.on_reconnect(cb)
            del _pending_peer[:], _pending_preemption[:], _pending_reconnect[:]
            _default = c
        c = _default
    if connect:
        c.connect(timeout)
    return c


def initialized():
    """True once :func:`init` has created the default client."""
    return _default is not None


def client():
    """The default :class:`Client`; raises ``FailedPrecondition`` before :func:`init`."""
    c = _default
    if c is None:
        raise FailedPrecondition("phalanx.init() has not been called")
    return c


def task_id():
    """This task's index (PHALANX_TASK_ID)."""
    return client().task_id


def num_tasks():
    """The number of tasks in the job (PHALANX_NUM_TASKS)."""
    return client().num_tasks


def incarnation():
    """This process's incarnation of its task (PHALANX_INCARNATION; +1 per restart)."""
    return client().incarnation


def barrier(name, timeout=DEFAULT_TIMEOUT, tasks=None):
    """See :meth:`Client.barrier`. Raises ``DeadlineExceeded`` naming the missing tasks."""
    client().barrier(name, timeout, tasks)


def cancel_barrier(name):
    """See :meth:`Client.cancel_barrier`."""
    client().cancel_barrier(name)


def kv_set(key, value, overwrite=False):
    """See :meth:`Client.kv_set`."""
    client().kv_set(key, value, overwrite)


def kv_get(key, timeout=DEFAULT_TIMEOUT):
    """See :meth:`Client.kv_get`. Returns bytes."""
    return client().kv_get(key, timeout)


def kv_try_get(key, default=None):
    """See :meth:`Client.kv_try_get`."""
    return client().kv_try_get(key, default)


def kv_dir(directory):
    """See :meth:`Client.kv_dir`."""
    return client().kv_dir(directory)


def kv_add(key, delta=1):
    """See :meth:`Client.kv_add`."""
    return client().kv_add(key, delta)


def kv_compare_set(key, expected, desired):
    """See :meth:`Client.kv_compare_set`."""
    return client().kv_compare_set(key, expected, desired)


def kv_delete(key):
    """See :meth:`Client.kv_delete`."""
    return client().kv_delete(key)


def alive_tasks(tasks=None, timeout=DEFAULT_TIMEOUT):
    """See :meth:`Client.alive_tasks`."""
    return client().alive_tasks(tasks, timeout)


def reached_sync_point(step):
    """See :meth:`Client.reached_sync_point`: True exactly at the agreed checkpoint step."""
    return client().reached_sync_point(step)


def notify_preemption(reason="", deadline=None, tasks=None):
    """See :meth:`Client.notify_preemption`."""
    return client().notify_preemption(reason, deadline, tasks)


def on_peer_change(callback):
    """Registers ``callback(PeerChange)`` on the default client (or for it, before
    :func:`init`). Runs on the session thread: keep it quick. Usable as a decorator."""
    with _lock:
        if _default is None:
            _pending_peer.append(callback)
            return callback
    return _default.on_peer_change(callback)


def on_preemption(callback):
    """Registers ``callback(PreemptionRound)``; same rules as :func:`on_peer_change`."""
    with _lock:
        if _default is None:
            _pending_preemption.append(callback)
            return callback
    return _default.on_preemption(callback)


def on_reconnect(callback):
    """Registers ``callback(coordinator_restarted)`` (see :meth:`Client.on_reconnect`); same
    rules as :func:`on_peer_change`."""
    with _lock:
        if _default is None:
            _pending_reconnect.append(callback)
            return callback
    return _default.on_reconnect(callback)


def wait_until_connected(timeout=60.0):
    """See :meth:`Client.wait_until_connected`: the retry path after ``Unavailable``."""
    client().wait_until_connected(timeout)


def report_error(message):
    """See :meth:`Client.report_error`."""
    client().report_error(message)


def report_rolled_back(recovery, seconds):
    """See :meth:`Client.report_rolled_back`."""
    client().report_rolled_back(recovery, seconds)


def report_stepping():
    """See :meth:`Client.report_stepping`."""
    client().report_stepping()


def shutdown(timeout=60.0):
    """The job's shutdown barrier (see :meth:`Client.shutdown`)."""
    client().shutdown(timeout)


def close():
    """Closes the default client (after which :func:`init` makes a new one)."""
    global _default
    with _lock:
        c, _default = _default, None
    if c is not None:
        c.close()
