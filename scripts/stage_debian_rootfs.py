#!/usr/bin/env python3
"""Stages an image root file system from Debian packages installed on this machine: the packages
named, every package they depend on (Depends and Pre-Depends, the first installed alternative),
their files as dpkg lists them (documentation, man pages and locales left out), an ld.so.cache,
/etc/passwd and /etc/group with root and the non-root user nonroot (65532), and /tmp. No registry
and no network: what `apt-get install` put here is what the image holds, so the image runs the
same Python and PyTorch the tests run on the host.

  stage_debian_rootfs.py OUT_DIR PACKAGE... [--wheel FILE]

--wheel unpacks a wheel into /usr/lib/python3/dist-packages (what pip would install, without
pip). Prints the package count and the staged size.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile

SKIP_PREFIXES = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/locale/", "/usr/share/info/",
                 "/usr/share/lintian/", "/usr/share/bug/")


def query(fmt, package):
    r = subprocess.run(["dpkg-query", "-W", f"-f={fmt}", package], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def installed(package):
    status = query("${Status}", package)
    return status is not None and status.endswith("installed")


def closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        if not installed(package):
            raise SystemExit(f"stage_debian_rootfs: {package} is not installed (apt-get install {package})")
        seen.add(package)
        fields = query("${Depends}, ${Pre-Depends}", package) or ""
        for alternatives in fields.split(","):
            for candidate in alternatives.split("|"):
                name = re.sub(r"\(.*?\)", "", candidate).strip().split(":")[0]
                if name and installed(name):
                    todo.append(name)
                    break
    return sorted(seen)


def copy_files(package, out):
    listing = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True).stdout
    for path in listing.splitlines():
        if not path.startswith("/") or path.startswith(SKIP_PREFIXES) or path == "/.":
            continue
        dest = out + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not os.path.lexists(dest):
                os.symlink(os.readlink(path), dest)
        elif os.path.isdir(path):
            os.makedirs(dest, exist_ok=True)
        elif os.path.isfile(path):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(path, dest)


def copy_alternatives(out):
    """The links update-alternatives made (libblas.so.3 -> /etc/alternatives/... -> the chosen
    provider): dpkg does not list them. Each one whose chosen provider was staged is made in the
    root file system as it is here (/var/lib/dpkg/alternatives/NAME: mode, master link, then
    slave name / slave link pairs up to a blank line)."""
    admin = "/var/lib/dpkg/alternatives"
    for name in sorted(os.listdir(admin)):
        with open(os.path.join(admin, name)) as f:
            lines = f.read().split("\n")
        links = [(name, lines[1])] if len(lines) > 1 else []
        i = 2
        while i + 1 < len(lines) and lines[i]:
            links.append((lines[i], lines[i + 1]))
            i += 2
        for alt_name, link in links:
            alt = "/etc/alternatives/" + alt_name
            if not os.path.islink(alt) or not link.startswith("/"):
                continue
            target = os.readlink(alt)
            if not os.path.lexists(out + target):
                continue  # its provider is not in the image
            for path, dest in ((out + alt, target), (out + link, alt)):
                if not os.path.lexists(path):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    os.symlink(dest, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("packages", nargs="+")
    ap.add_argument("--wheel")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    packages = closure(args.packages)
    # Debian's merged /usr: /bin, /lib, /lib64 and /sbin are links into /usr.
    for d in ["bin", "lib", "lib64", "sbin"]:
        if os.path.islink("/" + d):
            target = os.readlink("/" + d)
            os.makedirs(os.path.join(out, target.lstrip("/")), exist_ok=True)
            os.symlink(target, os.path.join(out, d))
    for package in packages:
        copy_files(package, out)
    copy_alternatives(out)
    if args.wheel:
        site = os.path.join(out, "usr", "lib", "python3", "dist-packages")
        os.makedirs(site, exist_ok=True)
        with zipfile.ZipFile(args.wheel) as wheel:
            for member in wheel.infolist():
                wheel.extract(member, site)
                mode = member.external_attr >> 16
                if mode:
                    os.chmod(os.path.join(site, member.filename), mode & 0o777)
    os.makedirs(os.path.join(out, "etc"), exist_ok=True)
    with open(os.path.join(out, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/sbin/nologin\n"
                "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    with open(os.path.join(out, "etc", "group"), "w") as f:
        f.write("root:x:0:\nnonroot:x:65532:\n")
    os.makedirs(os.path.join(out, "tmp"), exist_ok=True)
    os.chmod(os.path.join(out, "tmp"), 0o1777)
    os.makedirs(os.path.join(out, "home", "nonroot"), exist_ok=True)
    subprocess.run(["ldconfig", "-r", out], check=True)
    size = subprocess.run(["du", "-sm", out], capture_output=True, text=True).stdout.split()[0]
    print(f"stage_debian_rootfs: {len(packages)} packages, {size} MiB in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
