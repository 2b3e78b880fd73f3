"""Exceptions raised by the Phalanx Python client.

Every C ABI call returns a status code (the absl/gRPC numbering); a non-zero code becomes an
instance of the matching subclass of :class:`Error`, carrying the library's message (for
people: its words may change) and the failure's facts (``details``: the fields of
coordination.proto's ErrorDetails, which the properties below read).
"""

import json

__all__ = [
    "Error", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "LibraryNotFound", "error_from_code",
]


class Error(Exception):
    """Base of every Phalanx error. ``code`` is the numeric status code, ``message`` the text,
    ``details`` the failure's facts as a dict (empty when it has none): ``reason``
    (``"PEER_FAILED"``, ``"BARRIER_TIMED_OUT"``, ``"ALIVE_TASKS_TIMED_OUT"``,
    ``"SERVICE_CANCELLED"``), ``failed_tasks`` (``[{"task_id": 1, "incarnation": "2"}]``),
    ``failure_reason``, ``missing_task_ids``, ``barrier_id``."""

    code = 2  # UNKNOWN unless a subclass says otherwise

    def __init__(self, message="", code=None, details=None):
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code is not None:
            self.code = code

    @property
    def reason(self):
        """The failure's reason code (``details["reason"]``), or None."""
        return self.details.get("reason")

    def __str__(self):
        return "%s: %s" % (type(self).__name__, self.message) if self.message else type(self).__name__


class Cancelled(Error):
    """The operation was cancelled: a peer task failed while it waited (fail fast: barriers and
    ``kv_get`` end at once, not at their timeout; ``failed_tasks`` names the task), a peer
    cancelled the barrier, or the client shut down. Go to recovery."""
    code = 1

    @property
    def failed_tasks(self):
        """Ids of the peer tasks whose failure ended the wait; empty for a cancel or a
        shutdown."""
        return [int(t.get("task_id", 0)) for t in self.details.get("failed_tasks", [])]

    @property
    def failed_incarnations(self):
        """{task id: the incarnation that failed} for the peers in ``failed_tasks``."""
        return {int(t.get("task_id", 0)): int(t.get("incarnation", 0))
                for t in self.details.get("failed_tasks", [])}


class Unknown(Error):
    """An error the library could not classify."""
    code = 2


class InvalidArgument(Error):
    """A bad request or bad configuration (e.g. a malformed PHALANX_* variable)."""
    code = 3


class DeadlineExceeded(Error):
    """A wait timed out.

    For barriers and ``alive_tasks``, ``missing_tasks`` holds the ids of the tasks that never
    arrived (empty otherwise, e.g. for ``kv_get``, whose message names the key that was not
    set); ``barrier_id`` names a barrier that timed out.
    """
    code = 4

    @property
    def missing_tasks(self):
        return [int(t) for t in self.details.get("missing_task_ids", [])]

    @property
    def barrier_id(self):
        return self.details.get("barrier_id")


class NotFound(Error):
    """The key (or other named thing) does not exist."""
    code = 5


class AlreadyExists(Error):
    """``kv_set(..., overwrite=False)`` on a key that is already set."""
    code = 6


class PermissionDenied(Error):
    """The caller may not do this."""
    code = 7


class ResourceExhausted(Error):
    code = 8


class FailedPrecondition(Error):
    """The coordinator does not know this task as registered (e.g. a call before ``connect``)."""
    code = 9


class Aborted(Error):
    """This incarnation was superseded or declared failed ("task restarted").

    Terminal for the process: exit (the sample programs use exit code 3) and let the operator
    start the next incarnation.
    """
    code = 10


class OutOfRange(Error):
    code = 11


class Unimplemented(Error):
    code = 12


class Internal(Error):
    code = 13


class Unavailable(Error):
    """The coordinator is unreachable or restarting; retry after the client reconnects."""
    code = 14


class DataLoss(Error):
    code = 15


class Unauthenticated(Error):
    """The job token (PHALANX_TOKEN) is missing or wrong."""
    code = 16


class LibraryNotFound(Error, OSError):
    """``libphalanx_c.so`` could not be loaded (see :func:`phalanx.find_library`)."""
    code = 5


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
    Internal, Unavailable, DataLoss, Unauthenticated)}


def error_from_code(code, message, details_json=""):
    """The exception instance for C ABI status ``code`` (non-zero) with ``message`` and the
    failure's facts (``phalanx_last_error_details()``: JSON, or empty)."""
    cls = _BY_CODE.get(code, Unknown)
    try:
        details = json.loads(details_json) if details_json else {}
    except ValueError:
        details = {}
    return cls(message, code, details if isinstance(details, dict) else {})
