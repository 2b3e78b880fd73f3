"""A throwaway real control plane (etcd + kube-apiserver) for scripts and Python tests.

Used by scripts/gen-crd-podtemplate.py (to read the API server's own OpenAPI document) and by
scripts/crd_envtest_test.py (to apply the CRD and manifests to a real kube-apiserver). The
binaries come from an envtest-style assets directory: $KUBEBUILDER_ASSETS, else
../shared/envtest (next to the checkout) unpacked with its unpack.sh into a temporary directory.
etcd is taken from the assets directory, else from PATH (Debian's etcd-server).

Flags are the ones /work/shared/envtest/README.md lists as working with v1.26: kube-apiserver makes
its own self-signed serving certificate in --cert-dir; clients authenticate with a static admin
token (group system:masters). No controller manager, scheduler or kubelet: enough for schema,
CEL, admission (PodSecurity) and strict field validation, which is all these scripts need.

Not thread-safe; one ControlPlane per process is plenty.
"""

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_ENVTEST = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "envtest"))


class Unavailable(Exception):
    """No assets or no etcd here: callers skip rather than fail."""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_assets(scratch):
    """The assets directory: $KUBEBUILDER_ASSETS, else shared/envtest unpacked into `scratch`."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env:
        if not os.path.exists(os.path.join(env, "kube-apiserver")):
            raise Unavailable(f"KUBEBUILDER_ASSETS={env} has no kube-apiserver")
        return env
    unpack = os.path.join(SHARED_ENVTEST, "unpack.sh")
    if not os.path.exists(unpack):
        raise Unavailable(f"no KUBEBUILDER_ASSETS and no {unpack}")
    out = os.path.join(scratch, "assets")
    subprocess.run(["sh", unpack, out], check=True, stdout=subprocess.DEVNULL)
    return out


def _etcd(assets):
    for candidate in (os.path.join(assets, "etcd"), shutil.which("etcd")):
        if candidate and os.path.exists(candidate):
            return candidate
    raise Unavailable("no etcd (apt-get install etcd-server, or put it in KUBEBUILDER_ASSETS)")


class ControlPlane:
    """etcd + kube-apiserver on loopback; use as a context manager.

    Attributes once started: url, token, ca_file (the server's self-signed certificate).
    """

    def __init__(self, admission_plugins=None, extra_flags=()):
        self.admission_plugins = admission_plugins
        self.extra_flags = list(extra_flags)
        self.dir = None
        self.procs = []
        self.url = None
        self.token = None
        self.ca_file = None

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="phalanx-envtest-")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _log(self, name):
        return open(os.path.join(self.dir, name + ".log"), "wb")

    def _start(self):
        assets = find_assets(self.dir)
        etcd = _etcd(assets)
        apiserver = os.path.join(assets, "kube-apiserver")
        etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.procs.append(subprocess.Popen(
            [etcd, "--data-dir", os.path.join(self.dir, "etcd"),
             "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"],
            stdout=self._log("etcd"), stderr=subprocess.STDOUT))

        key = os.path.join(self.dir, "sa.key")
        pub = os.path.join(self.dir, "sa.pub")
        subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub], check=True,
                       stderr=subprocess.DEVNULL)
        self.token = secrets.token_hex(16)
        tokens = os.path.join(self.dir, "tokens.csv")
        with open(tokens, "w") as f:
            f.write(f'{self.token},admin,admin,"system:masters"\n')
        cert_dir = os.path.join(self.dir, "certs")
        flags = [
            "--etcd-servers", etcd_url, "--secure-port", str(api_port),
            "--bind-address", "127.0.0.1", "--cert-dir", cert_dir,
            "--token-auth-file", tokens, "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", pub, "--service-account-signing-key-file", key,
            "--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
        ]
        if self.admission_plugins:
            flags += ["--enable-admission-plugins", ",".join(self.admission_plugins)]
        self.procs.append(subprocess.Popen([apiserver] + flags + self.extra_flags,
                                           stdout=self._log("kube-apiserver"),
                                           stderr=subprocess.STDOUT))
        self.url = f"https://127.0.0.1:{api_port}"
        deadline = time.monotonic() + 90
        while True:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; logs in "
                                       f"{self.dir}: {self.tail()}")
            crt = os.path.join(cert_dir, "apiserver.crt")
            if os.path.exists(crt):
                self.ca_file = crt
                try:
                    status, _, _ = self.request("GET", "/readyz")
                    if status == 200:
                        return
                except (OSError, ssl.SSLError):
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready after 90 s: {self.tail()}")
            time.sleep(0.3)

    def tail(self):
        path = os.path.join(self.dir, "kube-apiserver.log")
        try:
            with open(path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def request(self, method, path, body=None, content_type="application/json"):
        """(status, parsed JSON or text, response headers as a list of (name, value))."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=60) as resp:
                status, raw, headers = resp.status, resp.read(), resp.getheaders()
        except urllib.error.HTTPError as e:
            status, raw, headers = e.code, e.read(), list(e.headers.items())
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw.decode(errors="replace")
        return status, parsed, headers

    def kubeconfig(self, path):
        """Writes a kubeconfig for kubectl and returns its path."""
        with open(path, "w") as f:
            json.dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
                "clusters": [{"name": "envtest", "cluster": {
                    "server": self.url, "certificate-authority": self.ca_file}}],
                "users": [{"name": "admin", "user": {"token": self.token}}],
                "contexts": [{"name": "envtest",
                              "context": {"cluster": "envtest", "user": "admin"}}],
            }, f)
        return path
