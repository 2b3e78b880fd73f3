#!/usr/bin/env python3
"""The container images `make images` builds, built and run:

  images_test.py SOURCE_DIR BINARY_DIR

1. scripts/build-images.sh BINARY_DIR (archives newer than their binaries are reused);
2. each OCI archive (BINARY_DIR/images/<image>-<version>.oci.tar): one image, named
   <registry>/<image>:<version>; its config runs as a numeric non-root user, its entrypoint is the
   binary, its OCI labels (title, version, revision, source) match the binary; its layer holds the
   binary, /etc/passwd with that user, the CA bundle and the binary's ELF interpreter, all owned
   by root except the user's home, and a sticky /tmp;
3. each image's entrypoint runs with --version (`buildah from oci-archive:` + `buildah run
   --isolation chroot` as the image's user, in a private vfs store): it prints
   "<image> <version> (<revision>)", which proves every library it needs is in the image;
4. the chart's default image references (`helm template` with default values: the operator and
   agent containers and the operator's --coordinator_image; values.yaml + Chart.yaml when helm is
   not available) are the archives' names and tags.

Exit 0 pass, 1 fail, 77 skipped (buildah not installed, or cannot run here). Standard library plus
PyYAML.
"""
import contextlib
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test  # noqa: E402  (helm helpers; re-executes under /usr/bin/python3 without PyYAML)
from deploy_test import Failure, check  # noqa: E402

SKIP = 77
NON_ROOT = 65532


def run(cmd, timeout=300, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


class Buildah:
    """buildah on a private, throw-away vfs store (never the system's)."""

    def __init__(self, exe, root):
        self.exe, self.root = exe, root

    def __call__(self, *args, timeout=120):
        return self.result(*args, timeout=timeout).stdout

    def result(self, *args, timeout=120, transient=None):
        """Runs buildah; a failure whose stderr holds `transient` is returned, not judged."""
        cmd = [self.exe, "--root", os.path.join(self.root, "root"), "--runroot",
               os.path.join(self.root, "run"), "--storage-driver", "vfs", *args]
        r = run(cmd, timeout=timeout)
        if r.returncode != 0 and transient and transient in r.stderr:
            return r
        check(r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    def cleanup(self):
        try:
            self("rm", "--all")
        except Failure:
            pass
        subprocess.run(["chmod", "-R", "u+w", self.root], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Reading an OCI archive without buildah.

class Archive:
    def __init__(self, path):
        self.path = path
        with tarfile.open(path) as t:
            self.members = {m.name.lstrip("./"): m for m in t.getmembers()}
            self._blobs = {}
            index = json.load(t.extractfile(self.members["index.json"]))
            check(len(index["manifests"]) == 1, f"{path}: {len(index['manifests'])} manifests, want 1")
            desc = index["manifests"][0]
            self.ref = desc.get("annotations", {}).get("org.opencontainers.image.ref.name")
            self.manifest = json.loads(self._blob(t, desc["digest"]))
            self.config = json.loads(self._blob(t, self.manifest["config"]["digest"]))
            self.files = {}
            for layer in self.manifest["layers"]:
                data = self._blob(t, layer["digest"])
                if layer["mediaType"].endswith("gzip"):
                    data = gzip.decompress(data)
                with tarfile.open(fileobj=io.BytesIO(data)) as lt:
                    for m in lt.getmembers():
                        name = "/" + m.name.lstrip("./")
                        self.files[name] = (m, lt.extractfile(m).read() if m.isfile() else None)

    def _blob(self, t, digest):
        algo, hexd = digest.split(":", 1)
        return t.extractfile(self.members[f"blobs/{algo}/{hexd}"]).read()

    def file(self, path):
        """Contents of PATH in the image, following symlinks."""
        for _ in range(10):
            entry = self.files.get(path)
            check(entry is not None, f"{self.path}: no {path} in the image")
            m, data = entry
            if m.issym():
                target = m.linkname
                path = target if target.startswith("/") else os.path.normpath(
                    os.path.join(os.path.dirname(path), target))
                continue
            return data
        raise Failure(f"{self.path}: symlink loop at {path}")


def elf_interpreter(data):
    """PT_INTERP of a 64-bit little-endian ELF, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3a], "little")
    for i in range(phnum):
        ph = data[phoff + i * phentsize: phoff + (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") == 3:  # PT_INTERP
            off = int.from_bytes(ph[8:16], "little")
            size = int.from_bytes(ph[32:40], "little")
            return data[off:off + size].rstrip(b"\0").decode()
    return None


# ---------------------------------------------------------------------------------------------

def chart_image_refs(src, helm):
    """{image name: reference} the chart deploys with default values."""
    if helm:
        objs = deploy_test.objects(deploy_test.helm_template(helm, src))
        op = deploy_test.one(objs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]
        agent = deploy_test.one(objs, "DaemonSet", "-agent")["spec"]["template"]["spec"]["containers"][0]
        coordinator = deploy_test.args_of(op).get("--coordinator_image")
        refs = {"phalanx-operator": op["image"], "phalanx-agent": agent["image"],
                "phalanx-coordinator": coordinator}
    else:
        chart, values = deploy_test.chart_files(src)
        registry = values["global"]["imageRegistry"]
        refs = {}
        for component in ("operator", "agent", "coordinator"):
            image = values[component]["image"]
            ref = f"{image['repository']}:{image.get('tag') or chart['appVersion']}"
            refs[image["repository"]] = f"{registry}/{ref}" if registry else ref
    return refs


def binary_version(binary):
    r = run([binary, "--version"], timeout=30)
    check(r.returncode == 0, f"{binary} --version exited {r.returncode}: {r.stderr}")
    m = re.fullmatch(r"(\S+) (\S+) \((\S+)\)\n", r.stdout)
    check(m, f"{binary} --version printed {r.stdout!r}")
    return m.groups()


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, binary_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    exe = shutil.which("buildah")
    if not exe:
        print("SKIP: buildah is not installed (apt-get install buildah; scripts/install-deps.sh)")
        return SKIP
    if os.geteuid() != 0 and run([exe, "unshare", "true"]).returncode != 0:
        print("SKIP: not root and `buildah unshare` fails here (no user namespaces): cannot build images")
        return SKIP

    started = time.monotonic()
    images, registry = deploy_test.image_binaries(src)
    version = deploy_test.project_version(src)
    env = {k: v for k, v in os.environ.items() if k != "PHALANX_IMAGE_REGISTRY"}
    r = run([os.path.join(src, "scripts", "build-images.sh"), binary_dir], timeout=900, env=env)
    print(r.stdout, end="")
    check(r.returncode == 0, f"scripts/build-images.sh failed ({r.returncode}):\n{r.stderr}")
    built_s = time.monotonic() - started

    with contextlib.redirect_stdout(io.StringIO()):  # its "SKIP: no helm" is not ours
        helm = deploy_test.find_helm(src)
    chart_refs = chart_image_refs(src, helm)
    print(f"chart images ({'helm template' if helm else 'values.yaml, no helm'}): "
          + ", ".join(sorted(chart_refs.values())))

    store = Buildah(exe, tempfile.mkdtemp(prefix="phalanx-images-test-"))
    try:
        for image, rel in sorted(images.items()):
            binary = os.path.join(binary_dir, rel)
            name, bin_version, revision = binary_version(binary)
            check(name == image and bin_version == version,
                  f"{binary} --version says {name} {bin_version}, want {image} {version}")
            path = os.path.join(binary_dir, "images", f"{image}-{version}.oci.tar")
            check(os.path.exists(path), f"no {path} after build-images.sh")
            a = Archive(path)
            want_ref = f"{registry}/{image}:{version}"
            check(a.ref == want_ref, f"{path}: named {a.ref}, want {want_ref}")
            if image in chart_refs:
                check(chart_refs[image] == a.ref,
                      f"the chart deploys {chart_refs[image]}, make images builds {a.ref}")

            cfg = a.config["config"]
            user = cfg.get("User", "")
            check(re.fullmatch(r"\d+(:\d+)?", user), f"{image}: user {user!r} is not numeric")
            check(all(int(x) != 0 for x in user.split(":")), f"{image}: runs as root ({user})")
            check(int(user.split(":")[0]) == NON_ROOT, f"{image}: user {user}, want {NON_ROOT}")
            entrypoint = cfg.get("Entrypoint") or []
            check(entrypoint == [f"/usr/local/bin/{image}"], f"{image}: entrypoint {entrypoint}")
            labels = cfg.get("Labels") or {}
            want_labels = {"title": image, "version": version, "revision": revision}
            for key, want in want_labels.items():
                got = labels.get(f"org.opencontainers.image.{key}")
                check(got == want, f"{image}: label org.opencontainers.image.{key}={got!r}, want {want!r}")
            check(labels.get("org.opencontainers.image.source", "").startswith("https://"),
                  f"{image}: label org.opencontainers.image.source")

            passwd = a.file("/etc/passwd").decode()
            check(re.search(rf"^[^:]+:x:{NON_ROOT}:{NON_ROOT}:", passwd, re.M),
                  f"{image}: /etc/passwd has no user {NON_ROOT}")
            check(b"BEGIN CERTIFICATE" in a.file("/etc/ssl/certs/ca-certificates.crt"),
                  f"{image}: CA bundle")
            # Root owns everything but the user's home: the user cannot replace the binary.
            owners = {name: m.uid for name, (m, _) in a.files.items()}
            wrong = [n for n, uid in owners.items()
                     if uid != (NON_ROOT if n.startswith("/home/nonroot") else 0)]
            check(not wrong, f"{image}: unexpected owners: {wrong[:5]}")
            check(owners.get("/home/nonroot") == NON_ROOT, f"{image}: no /home/nonroot")
            check(a.files["/tmp"][0].mode & 0o7777 == 0o1777, f"{image}: /tmp is not 1777")
            interp = elf_interpreter(a.file(entrypoint[0]))
            check(interp, f"{image}: {entrypoint[0]} is not a dynamic ELF executable")
            a.file(interp)  # the loader is there

            # Run the entrypoint, as the image's user, from the archive alone.
            t0 = time.monotonic()
            ctr = store("from", "--quiet", f"oci-archive:{path}").strip()
            want = f"{image} {version} ({revision})\n"
            for attempt in range(3):
                # Once (of ~20 runs) buildah's chroot runner failed before the entrypoint ran:
                # "Close_Fd sealing memfd copy: Device or resource busy" (its copy of itself).
                ran = store.result("run", "--isolation", "chroot", "--user", user, ctr, "--",
                                   *entrypoint, "--version", timeout=60,
                                   transient=None if attempt == 2 else "sealing memfd")
                out = ran.stdout
                # Once in a loaded CI run (of ~10 here), `buildah run` exited 0 with no output at
                # all for an entrypoint whose output is fixed (the same binary printed it outside
                # the image in step 2): buildah's chroot runner lost it. Empty output or the
                # failure above is run again, visibly; any other output is judged at once.
                if (out and ran.returncode == 0) or attempt == 2:
                    break
                print(f"{image}: buildah run exited {ran.returncode} with no output (stderr "
                      f"{ran.stderr!r}); running it again", flush=True)
            if image == "phalanx-agent":
                # The DaemonSet's init container, as the chart runs it: root, the entrypoint
                # with prepare-socket-dir (the image has no shell for a chown).
                init = store.result("run", "--isolation", "chroot", "--user", "0:0", ctr, "--",
                                    *entrypoint, "prepare-socket-dir", "/tmp/phalanx",
                                    "65532:65532", timeout=60)
                check(init.returncode == 0 and "/tmp/phalanx is mode 0750, owned by 65532:65532"
                      in init.stdout, f"{image}: the init container's prepare-socket-dir: "
                      f"{init.returncode} {init.stdout!r} {init.stderr!r}")
            store("rm", ctr)
            check(out == want, f"{image}: entrypoint --version printed {out!r}, want {want!r} "
                               f"(buildah's stderr: {ran.stderr!r})")
            size_mb = os.path.getsize(path) / 1e6
            unpacked_mb = sum(m.size for m, _ in a.files.values()) / 1e6
            print(f"ok {a.ref}: user {user}, {size_mb:.1f} MB archive ({unpacked_mb:.1f} MB unpacked), "
                  f"runs: {out.strip()} ({time.monotonic() - t0:.1f}s)")
    except Failure as e:
        print(f"FAIL (images): {e}")
        return 1
    finally:
        store.cleanup()
    print(f"PASS (images): {len(images)} images, build step {built_s:.1f}s, "
          f"total {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL (images): {e}")
        sys.exit(1)
