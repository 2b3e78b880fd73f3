"""The node agent's side of a process group: which local GPUs it uses, and the agent's abort.

The node agent (``phalanx-agent``, one per node) watches the node's GPUs. When one fails (a fatal
XID such as 79, "fell off the bus") it asks every local task whose communicators use that GPU to
abort them. A task learns that by reporting its communicators ("cliques") to the agent's clique
registry: the answer to a report carries a pending abort request. :class:`AgentWatch` keeps one
process group reported (every ``period`` seconds) and calls ``on_abort(reason)`` once when the
agent asks; :class:`phalanx.torch_recovery.Manager` uses it for its group.

The agent is reached at ``$PHALANX_CLIQUE_ADDRESS`` (``host:port``, the agent on the node's
address: what the operator sets in task pods, docs/adr/0004) or ``$PHALANX_CLIQUE_SOCKET`` (a Unix
socket path). Reports carry a key derived from the task's job token (``$PHALANX_TOKEN_FILE`` or
``$PHALANX_TOKEN``), the same digest the C++ ``JobCliques`` uses, so the agent lets only this task
change its entries and never sees the token. The wire protocol is the agent's
(``node_agent/cliques/clique_socket.h``): one line per request, one line per answer.

Which GPUs a rank uses, as the node (NVML) numbers them: :func:`local_devices` (CUDA's current
device through ``CUDA_VISIBLE_DEVICES``; without CUDA, ``LOCAL_RANK``: one GPU per local rank).
"""

import hashlib
import os
import socket
import threading

__all__ = ["clique_socket_key", "agent_endpoint", "local_devices", "report", "forget",
           "AgentWatch", "AgentUnavailable"]

_KEY_CONTEXT = b"phalanx clique socket key v1\n"
_ANSWER_LIMIT = 4096


class AgentUnavailable(Exception):
    """No node agent answered (none installed on this node, or it is restarting)."""


def clique_socket_key(token):
    """The key this task shows the agent: hex SHA-256 of a fixed context and the token
    (``CliqueSocketKey`` in C++). ``""`` for an empty token."""
    if not token:
        return ""
    return hashlib.sha256(_KEY_CONTEXT + token.encode("utf-8")).hexdigest()


def _ticket(environ):
    """The clique ticket the operator mounted for this task (``PHALANX_CLIQUE_TICKET_FILE``),
    or None: without one the key is a digest of the task's credential."""
    path = environ.get("PHALANX_CLIQUE_TICKET_FILE")
    if not path:
        return None
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None  # a Secret written before the agents had a key holds no ticket


def agent_key(environ):
    """What this task shows its node agent as ``key=``: its clique ticket, else the digest."""
    return _ticket(environ) or clique_socket_key(_token(environ))


def _token(environ):
    path = environ.get("PHALANX_TOKEN_FILE")
    if path:
        with open(path, "r", encoding="utf-8") as f:
            return f.read().strip()
    return environ.get("PHALANX_TOKEN", "")


def agent_endpoint(environ=None):
    """``host:port`` or a socket path of this node's agent, from the environment; None if the
    task was not given one (no agent, or ``spec.nodeAgent.enabled: false``)."""
    environ = os.environ if environ is None else environ
    return environ.get("PHALANX_CLIQUE_ADDRESS") or environ.get("PHALANX_CLIQUE_SOCKET") or None


def local_devices(environ=None):
    """The node's GPU indices this rank uses: CUDA's current device (mapped through
    ``CUDA_VISIBLE_DEVICES`` when that lists indices), else ``[LOCAL_RANK]``, else ``[]``."""
    environ = os.environ if environ is None else environ
    try:
        import torch
        if torch.cuda.is_available():
            current = torch.cuda.current_device()
            visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
                       if v.strip()]
            if visible and all(v.isdigit() for v in visible) and current < len(visible):
                return [int(visible[current])]
            return [current]
    except ImportError:
        pass
    local = environ.get("LOCAL_RANK", "")
    return [int(local)] if local.isdigit() else []


def _connect(endpoint, timeout):
    if endpoint.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address = endpoint
    else:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError("agent endpoint %r is neither a socket path nor host:port" % endpoint)
        host = host.strip("[]")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        address = (host, int(port))
    sock.settimeout(timeout)
    try:
        sock.connect(address)
    except OSError as e:
        sock.close()
        raise AgentUnavailable("no node agent at %s: %s" % (endpoint, e)) from e
    return sock


def _request(endpoint, line, timeout):
    """Sends one request line; returns the answer line (without the newline)."""
    sock = _connect(endpoint, timeout)
    try:
        sock.sendall(line.encode("utf-8") + b"\n")
        answer = b""
        while not answer.endswith(b"\n") and len(answer) < _ANSWER_LIMIT:
            chunk = sock.recv(_ANSWER_LIMIT)
            if not chunk:
                break
            answer += chunk
    except OSError as e:
        raise AgentUnavailable("the node agent at %s did not answer: %s" % (endpoint, e)) from e
    finally:
        sock.close()
    answer = answer.decode("utf-8", "replace").strip()
    if not answer or answer.startswith("ERR busy"):
        raise AgentUnavailable("the node agent at %s did not answer: %r" % (endpoint, answer))
    if answer.startswith("ERR permission denied"):
        raise PermissionError(answer)
    if answer.startswith("ERR"):
        raise ValueError(answer)
    return answer


def report(endpoint, key, job, task, incarnation, clique, state, devices, timeout=1.0):
    """Reports one clique; returns the agent's abort reason for this task, or None."""
    for name, value in (("job", job), ("clique", clique), ("state", state)):
        if not value or any(c.isspace() for c in value):
            raise ValueError("%s must be a non-empty word, not %r" % (name, value))
    answer = _request(endpoint, "REPORT job=%s task=%d inc=%d clique=%s state=%s devices=%s "
                      "key=%s" % (job, task, incarnation, clique, state,
                                  ",".join(str(int(d)) for d in devices), key), timeout)
    if answer.startswith("OK abort="):
        return answer[len("OK abort="):].replace("_", " ")
    return None


def forget(endpoint, key, job, task, timeout=1.0):
    """Drops this task's entries from the agent's registry."""
    _request(endpoint, "FORGET job=%s task=%d key=%s" % (job, task, key), timeout)


class AgentWatch:
    """Keeps one clique reported to the node agent, READY, every ``period`` seconds, and calls
    ``on_abort(reason)`` once, on its own thread, when the agent asks this task to abort. The
    abort rides on the answer to a report, so ``period`` bounds how late it is seen (a report is
    one short local connection: 4 a second per rank cost the agent nothing measurable; it forgets
    reports not refreshed within its TTL, 30 s by default). A missing agent is retried quietly; the
    watch never raises into training. :meth:`stop` forgets the clique."""

    def __init__(self, job, task, incarnation, clique, devices, on_abort, endpoint=None,
                 key=None, period=0.25, environ=None):
        environ = os.environ if environ is None else environ
        self.endpoint = endpoint or agent_endpoint(environ)
        self.key = key if key is not None else agent_key(environ)
        self.job, self.task, self.incarnation = job, int(task), int(incarnation)
        self.clique = clique
        self.devices = [int(d) for d in devices]
        self.period = float(period)
        self.last_error = None
        self._on_abort = on_abort
        self._stop = threading.Event()
        self._thread = None

    @property
    def active(self):
        """Whether there is an agent to report to and a device to report."""
        return bool(self.endpoint and self.devices)

    def start(self):
        if self.active and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="phalanx-agent-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout=2.0):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
            try:
                forget(self.endpoint, self.key, self.job, self.task)
            except (AgentUnavailable, ValueError, PermissionError, OSError):
                pass  # the agent drops unrefreshed reports after its TTL anyway

    def _loop(self):
        while not self._stop.is_set():
            try:
                reason = report(self.endpoint, self.key, self.job, self.task, self.incarnation,
                                self.clique, "READY", self.devices)
                self.last_error = None
            except (AgentUnavailable, ValueError, PermissionError, OSError) as e:
                self.last_error = e
                reason = None
            if reason is not None:
                try:
                    self._on_abort(reason)
                finally:
                    self._stop.set()
                return
            self._stop.wait(self.period)
