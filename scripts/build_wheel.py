#!/usr/bin/env python3
"""Builds the phalanx Python wheel from a build tree (`make wheel`):

    scripts/build_wheel.py --build BUILD_DIR [--out DIR]

writes DIR/phalanx-<version>-py3-none-<platform>.whl (DIR defaults to BUILD_DIR/dist) and prints
its path on the last line.

The wheel holds the pure-Python package (runtime/python/phalanx) and, in phalanx/_libs/,
libphalanx_c.so with every library it needs that is not part of the base system, repaired the way
auditwheel does it, so the package loads in any image with a glibc and libstdc++ at least as new
as the build machine's (the platform tag says which glibc):
- every bundled library is renamed with a hash of its content (libgrpc.so.29 ->
  libgrpc-1a2b3c4d.so.29), with its SONAME and every DT_NEEDED naming it rewritten, so a process
  that already loaded another libgrpc or libprotobuf (torch, jax) never confuses the two;
- every RUNPATH is $ORIGIN: nothing points into the build tree or needs LD_LIBRARY_PATH;
- libphalanx_c.so exports only the C ABI (runtime/client/phalanx_c.map) and phalanx/_native.py
  loads it with RTLD_DEEPBIND, so the bundled copies bind to each other first.
Debian's static gRPC/abseil archives cannot be linked into a shared object (they are built
without -fPIC and use local-exec TLS), hence bundling rather than static linking.

Needs patchelf, readelf, objdump and strip. Stdlib only: the wheel is a zip with a RECORD.
"""

import argparse
import base64
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(SRC, "runtime", "python", "phalanx")
LIBRARY = "libphalanx_c.so"
LIBS_DIR = "_libs"  # phalanx/_native.py BUNDLED_DIR

# What every Linux with a glibc has (the manylinux policy's base set): never bundled. Everything
# else ldd resolves is bundled, including libz, libssl and libcrypto (an image may lack them).
SYSTEM_LIBRARIES = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6", "libm.so.6",
    "libdl.so.2", "librt.so.1", "libpthread.so.0", "libresolv.so.2", "libutil.so.1",
    "libgcc_s.so.1", "libstdc++.so.6",
}

# Console scripts the wheel installs: name -> module:function.
ENTRY_POINTS = {
    "console_scripts": {
        "phalanx-launch": "phalanx.launch:main",
        "phalanx-torchrun": "phalanx.torchrun:main",
    },
    # torch's rendezvous registry (versions that load out-of-tree backends) calls this for the
    # creator of `--rdzv-backend=phalanx`.
    "torchrun.handlers": {
        "phalanx": "phalanx.torchrun:handler_creator",
    },
}


def fail(message):
    sys.exit("build_wheel: " + message)


def run(*argv):
    try:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        fail("%s not found (scripts/install-deps.sh installs it)" % argv[0])
    except subprocess.CalledProcessError as e:
        fail("%s failed: %s" % (" ".join(argv), e.stderr.strip()))


def package_version():
    text = open(os.path.join(PACKAGE_DIR, "__init__.py")).read()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        fail("no __version__ in phalanx/__init__.py")
    return match.group(1)


def resolved_dependencies(library):
    """{soname: path} of everything the dynamic loader loads for ``library`` (ldd)."""
    deps = {}
    for line in run("ldd", library).splitlines():
        match = re.match(r"\s*(\S+) => (\S+) \(0x", line)
        if match:
            deps[match.group(1)] = match.group(2)
        elif "not found" in line:
            fail("%s: a dependency is missing: %s" % (library, line.strip()))
    return deps


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def hashed_name(soname, path):
    """libgrpc.so.29 -> libgrpc-<8 hex of the content>.so.29 (auditwheel's scheme)."""
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:8]
    stem, dot, rest = soname.partition(".so")
    return "%s-%s%s%s" % (stem, digest, dot, rest)


def glibc_floor(paths):
    """The newest GLIBC_x.y symbol version any of ``paths`` needs, as (x, y)."""
    newest = (2, 17)
    for path in paths:
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", run("objdump", "-T", path)):
            newest = max(newest, (int(major), int(minor)))
    return newest


def stage_libraries(build, libs_dir):
    """Copies libphalanx_c.so and its non-system dependencies into ``libs_dir``, renamed and
    patched. Returns {original soname: bundled file name} and the paths staged."""
    source = os.path.join(build, "runtime", "client", LIBRARY)
    if not os.path.exists(source):
        fail("%s not built (run `make build` first)" % source)
    deps = resolved_dependencies(source)
    bundled = {soname: path for soname, path in deps.items() if soname not in SYSTEM_LIBRARIES}
    renames = {soname: hashed_name(soname, path) for soname, path in bundled.items()}
    staged = []
    for soname, path in list(bundled.items()) + [(LIBRARY, source)]:
        target = os.path.join(libs_dir, renames.get(soname, LIBRARY))
        shutil.copyfile(path, target)
        os.chmod(target, 0o755)
        # Debug info of the project's own libraries (RelWithDebInfo) is most of their size; the
        # system's are stripped already.
        run("strip", "--strip-debug", target)
        # One patchelf call per kind of change: 0.14 (bookworm) garbles the result when
        # --set-rpath or --set-soname share a call with --replace-needed.
        replace = []
        for name in needed(target):
            if name in renames:
                replace += ["--replace-needed", name, renames[name]]
        if replace:
            run("patchelf", *replace, target)
        if soname != LIBRARY:
            run("patchelf", "--set-soname", renames[soname], target)
        run("patchelf", "--set-rpath", "$ORIGIN", target)
        staged.append(target)
    return renames, staged


def check_staged(libs_dir, staged):
    """Every staged library resolves its dependencies to the bundle or to the base system."""
    for path in staged:
        for soname, where in resolved_dependencies(path).items():
            inside = os.path.dirname(os.path.realpath(where)) == os.path.realpath(libs_dir)
            if not inside and soname not in SYSTEM_LIBRARIES:
                fail("%s resolves %s to %s, outside the bundle" % (path, soname, where))


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def write_wheel(path, files, dist_info):
    """``files``: [(archive name, bytes, executable)]. Adds the RECORD; fixed timestamps so two
    builds of the same tree give the same wheel."""
    record = []
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, zip's minimum
    stamp = tuple(__import__("time").gmtime(max(epoch, 315532800))[:6])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data, executable in files:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if executable else 0o644) << 16
            wheel.writestr(info, data)
            record.append("%s,%s,%d" % (name, record_hash(data), len(data)))
        record_name = dist_info + "/RECORD"
        record.append(record_name + ",,")
        info = zipfile.ZipInfo(record_name, date_time=stamp)
        info.external_attr = 0o644 << 16
        wheel.writestr(info, "\n".join(record) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="the CMake build directory")
    parser.add_argument("--out", help="where the wheel goes (default BUILD/dist)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out or os.path.join(build, "dist"))
    version = package_version()

    with tempfile.TemporaryDirectory() as tmp:
        libs_dir = os.path.join(tmp, LIBS_DIR)
        os.makedirs(libs_dir)
        print("build_wheel: bundling %s and its dependencies" % LIBRARY, flush=True)
        renames, staged = stage_libraries(build, libs_dir)
        check_staged(libs_dir, staged)
        major, minor = glibc_floor(staged)
        tag = "py3-none-manylinux_%d_%d_%s" % (major, minor, platform.machine())
        dist_info = "phalanx-%s.dist-info" % version

        files = []
        for name in sorted(os.listdir(PACKAGE_DIR)):
            if name.endswith(".py"):
                data = open(os.path.join(PACKAGE_DIR, name), "rb").read()
                files.append(("phalanx/" + name, data, False))
        for path in sorted(staged):
            files.append(("phalanx/%s/%s" % (LIBS_DIR, os.path.basename(path)),
                          open(path, "rb").read(), True))
        metadata = "\n".join([
            "Metadata-Version: 2.1", "Name: phalanx", "Version: " + version,
            "Summary: Phalanx runtime client: coordination, in-place recovery for torch",
            "Requires-Python: >=3.8", "License: Apache-2.0", ""])
        wheel_meta = "\n".join([
            "Wheel-Version: 1.0", "Generator: phalanx scripts/build_wheel.py",
            "Root-Is-Purelib: false", "Tag: " + tag, ""])
        entry_points = "".join(
            "[%s]\n%s\n" % (group, "".join("%s = %s\n" % kv for kv in sorted(items.items())))
            for group, items in sorted(ENTRY_POINTS.items()))
        files += [(dist_info + "/METADATA", metadata.encode(), False),
                  (dist_info + "/WHEEL", wheel_meta.encode(), False),
                  (dist_info + "/entry_points.txt", entry_points.encode(), False)]

        os.makedirs(out, exist_ok=True)
        wheel_path = os.path.join(out, "phalanx-%s-%s.whl" % (version, tag))
        write_wheel(wheel_path + ".part", files, dist_info)
        os.replace(wheel_path + ".part", wheel_path)

    exported = [line.split()[-1] for line in
                run("nm", "-D", "--defined-only", os.path.join(build, "runtime", "client",
                                                               LIBRARY)).splitlines()]
    families = sorted({re.sub(r"^libabsl_.*", "libabsl_*", n.partition(".so")[0]) for n in renames})
    print("build_wheel: %d libraries bundled (%s), %d symbols exported, %.1f MB" % (
        len(renames), " ".join(families), len(exported), os.path.getsize(wheel_path) / 1e6))
    print(wheel_path)


if __name__ == "__main__":
    main()
