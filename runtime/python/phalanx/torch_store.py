"""A ``torch.distributed`` Store on the Phalanx coordination service (issue 14, item 1).

``init_process_group`` needs a Store for its rendezvous; this one keeps its keys in the job's
key-value store on the coordinator the tasks already talk to, so a Phalanx job needs no
``MASTER_ADDR``/``MASTER_PORT`` server of its own (torch's ``TCPStore`` lives in rank 0's
process and dies with it)::

    import phalanx, torch.distributed as dist
    from phalanx.torch_store import PhalanxStore

    client = phalanx.init()
    store = PhalanxStore(client, prefix="pg/%d" % client.incarnation)
    dist.init_process_group("gloo", store=store, rank=client.task_id,
                            world_size=client.num_tasks)

Every key lives under ``prefix`` (a key-value directory): give each process group, and each
re-formation of one, a prefix of its own. Keys are escaped (``%XX`` for anything but letters,
digits, ``-``, ``_`` and ``.``), since c10d's keys hold ``/`` and empty segments that the
coordinator's key rules refuse. ``add`` and ``compare_set`` are single atomic calls on the
coordinator (``KeyValueAdd`` / ``KeyValueCompareAndSet``), not read-modify-write loops.

Semantics follow torch 1.13's ``TCPStore``: ``get`` and ``wait`` block up to the store's timeout
(``DeadlineExceeded`` naming the key, which torch reports as a ``RuntimeError``); ``add`` keeps a
decimal counter; ``compare_set`` with an empty ``expected`` means "only if absent" and answers
the value stored afterwards (``expected`` itself when the key is absent and nothing was stored);
``num_keys`` counts the keys under this store's prefix. ``set`` does not wait for the
coordinator's answer, as ``TCPStore.set`` (which sends the key and value and reads no reply):
it returns once the set is on the task's session, and everything this store does next (``get``,
``wait``, ``check``, ``add``, ``compare_set``, ``delete_key``, ``set``) is handled after it; another
process's blocking ``get``/``wait`` sees it, its ``check`` may run first. A failed set is raised
by the next ``set`` or ``num_keys``, or by a ``get``/``wait`` that timed out. ``PhalanxStore(..., wait_sets=True)`` waits for each answer
instead: the moment ``set`` returns, every process's calls see the value. A coordinator restart loses the keys,
like a ``TCPStore`` whose host died: re-form the group under a new prefix. Errors propagate as
the client raises them (``Unavailable`` while the coordinator restarts); the store never
retries, since an ``add`` that met ``Unavailable`` may or may not have happened.

Needs ``torch`` (imported here, not by ``phalanx``): importing this module without it raises
``ImportError``.
"""

import datetime
import string

import torch.distributed as dist

from .errors import DeadlineExceeded

__all__ = ["PhalanxStore", "escape_key"]

_PLAIN = frozenset(string.ascii_letters + string.digits + "-_.")


def escape_key(key):
    """``key`` (str or bytes) as one segment of a coordinator key: ``%XX`` for every byte that is
    not a letter, digit, ``-``, ``_`` or ``.`` (so ``/`` and ``%`` themselves are escaped)."""
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not raw:
        return "%"  # the empty key: "%" alone is no escape of anything
    return "".join(chr(b) if chr(b) in _PLAIN else "%%%02X" % b for b in raw)


def _as_bytes(value):
    """torch passes bytes; a user calling the store directly may pass str (stored as UTF-8)."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class PhalanxStore(dist.Store):
    """A c10d Store whose keys live under ``prefix`` in the job's key-value store.

    ``client`` is a connected :class:`phalanx.Client` (thread-safe; its blocking calls release
    the GIL). ``timeout`` (seconds or a ``timedelta``) bounds ``get`` and ``wait``.
    """

    def __init__(self, client, prefix="torch", timeout=datetime.timedelta(minutes=5),
                 wait_sets=False):
        super().__init__()
        self._wait_sets = wait_sets
        prefix = prefix.strip("/")
        if not prefix:
            raise ValueError("prefix must name a key-value directory, e.g. 'pg/0'")
        self._client = client
        self._prefix = prefix
        self._timeout = _seconds(timeout)

    @property
    def prefix(self):
        return self._prefix

    def _key(self, key):
        return "%s/%s" % (self._prefix, escape_key(key))

    # The c10d Store interface (called by torch from C++ through its Python trampoline).

    def set(self, key, value):
        # TCPStore.set's contract: sent, not answered (the module's docstring says what that
        # orders); wait_sets=True waits for the answer.
        self._client.kv_set(self._key(key), _as_bytes(value), overwrite=True,
                            wait=self._wait_sets)

    def get(self, key):
        try:
            return self._client.kv_get(self._key(key), timeout=self._timeout)
        except DeadlineExceeded:
            self._raise_failed_set()
            raise

    def add(self, key, value):
        return self._client.kv_add(self._key(key), int(value))

    def compare_set(self, key, expected, desired):
        expected, desired = _as_bytes(expected), _as_bytes(desired)
        k = self._key(key)
        if expected:
            swapped, now = self._client.kv_compare_set(k, expected, desired)
        else:
            # TCPStore reads an empty `expected` as "only if absent"; a key holding the empty
            # value matches it too.
            swapped, now = self._client.kv_compare_set(k, None, desired)
            if not swapped and now == b"":
                swapped, now = self._client.kv_compare_set(k, b"", desired)
        return expected if now is None else now

    def wait(self, keys, timeout=None):
        budget = self._timeout if timeout is None else _seconds(timeout)
        try:
            for key in keys:
                self._client.kv_get(self._key(key), timeout=budget)
        except DeadlineExceeded:
            self._raise_failed_set()
            raise

    def _raise_failed_set(self):
        # A key that never came may be one of this store's own sets that failed unanswered:
        # that failure says more than the timeout.
        if not self._wait_sets:
            self._client.kv_wait_sets(timeout=1.0)

    def check(self, keys):
        return all(self._client.kv_try_get(self._key(key)) is not None for key in keys)

    def delete_key(self, key):
        return self._client.kv_delete(self._key(key)) > 0

    def num_keys(self):
        # A directory listing is not a session call: it could overtake this store's sets.
        self._client.kv_wait_sets()
        return len(self._client.kv_dir(self._prefix))

    def set_timeout(self, timeout):
        self._timeout = _seconds(timeout)

    def __repr__(self):
        return "PhalanxStore(prefix=%r, timeout=%ss, wait_sets=%s)" % (
            self._prefix, self._timeout, self._wait_sets)
