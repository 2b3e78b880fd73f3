#!/usr/bin/env bash
# Builds the Phalanx container images daemonless with buildah, FROM scratch ("distroless-style"),
# into OCI archives:
#
#   scripts/build-images.sh BUILD_DIR [--force] [--stage-only] [IMAGE...]
#
#   BUILD_DIR/images/<image>-<version>.oci.tar   one image each, named
#                                                $PHALANX_IMAGE_REGISTRY/<image>:<version>
#   BUILD_DIR/images/context/<image>/            its build context: Containerfile + rootfs/
#
# IMAGE is phalanx-operator, phalanx-agent, phalanx-coordinator or phalanx-sample-worker (default:
# all four). Called by `make images`; tests/deploy/images_test.py runs each image's entrypoint.
#
# No base image can be pulled here, so each image is assembled from the local build: the stripped
# binary (/usr/local/bin/<image>), every shared library `ldd` lists plus the dynamic loader (at the
# paths ldd resolved them to; the project's own libraries go to /usr/local/lib), an ld.so.cache,
# the CA bundle, /etc/passwd and /etc/group with the non-root user nonroot (65532), /tmp, and
# context/home/ for the user's home. The
# image itself (user, entrypoint, labels, environment) is deploy/docker/Containerfile.<name
# without the phalanx- prefix>, built with `buildah bud` from the staged context: the same
# context builds with `docker build` (see docs/deploy.md).
#
# The version and revision come from the binaries themselves (`<binary> --version`), so the labels
# always describe what is inside. An archive newer than its binary, this script and its
# Containerfile is kept (--force rebuilds). --stage-only stages the contexts without buildah.
#
# Environment: PHALANX_IMAGE_REGISTRY (default ghcr.io/phalanx-dev, the chart's
# global.imageRegistry), PHALANX_IMAGE_SOURCE (the org.opencontainers.image.source label),
# BUILDAH (default buildah), SOURCE_DATE_EPOCH (fixes the images' creation and file times, for
# reproducible archives). buildah uses a private store under BUILD_DIR/images/.storage (vfs
# driver, removed afterwards), never the system's.
set -euo pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
BUILD_DIR="$(cd "$1" && pwd)" || { echo "build-images: no build directory $1" >&2; exit 2; }
shift
SRC_DIR="$(cd "$(dirname "$0")/.." && pwd)"
FORCE=0
STAGE_ONLY=0
REQUESTED=()
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --stage-only) STAGE_ONLY=1 ;;
    -h|--help) usage ;;
    -*) echo "build-images: unknown flag $arg" >&2; usage ;;
    *) REQUESTED+=("$arg") ;;
  esac
done

REGISTRY="${PHALANX_IMAGE_REGISTRY:-ghcr.io/phalanx-dev}"
SOURCE_URL="${PHALANX_IMAGE_SOURCE:-https://github.com/phalanx-dev/phalanx}"
BUILDAH="${BUILDAH:-buildah}"
OUT="$BUILD_DIR/images"

# image name → binary in the build tree.
declare -A BINARY=(
  [phalanx-operator]=operator/phalanx-operator
  [phalanx-agent]=node_agent/phalanx-agent
  [phalanx-coordinator]=runtime/coordination/phalanx-coordinator
  [phalanx-sample-worker]=examples/sample_worker/phalanx-sample-worker
)
ALL=(phalanx-operator phalanx-agent phalanx-coordinator phalanx-sample-worker)
[ ${#REQUESTED[@]} -gt 0 ] || REQUESTED=("${ALL[@]}")
for image in "${REQUESTED[@]}"; do
  [ -n "${BINARY[$image]:-}" ] || { echo "build-images: unknown image $image (one of ${ALL[*]})" >&2; exit 2; }
done

CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
[ -s "$CA_BUNDLE" ] || { echo "build-images: no $CA_BUNDLE: apt-get install ca-certificates" >&2; exit 1; }
if [ "$STAGE_ONLY" = 0 ] && ! command -v "$BUILDAH" >/dev/null; then
  echo "build-images: buildah not found: apt-get install buildah (scripts/install-deps.sh)" >&2
  exit 1
fi
for tool in ldd objcopy ldconfig; do
  command -v "$tool" >/dev/null || { echo "build-images: $tool not found (binutils, libc-bin)" >&2; exit 1; }
done

# "phalanx-operator 0.1.0 (3970d79d9cea)" → "0.1.0 3970d79d9cea"
version_of() {
  local line
  line="$("$1" --version 2>/dev/null | head -n1)" || true
  if [[ "$line" =~ ^[a-z-]+\ ([0-9][0-9A-Za-z.+-]*)\ \(([^\)]+)\)$ ]]; then
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
  else
    echo "build-images: $1 --version printed '$line', not '<name> <version> (<revision>)'" >&2
    return 1
  fi
}

# Copies every shared library BINARY needs into ROOTFS: system libraries at the path ldd resolved
# them to (a directory the loader searches by default), the loader at the binary's interpreter
# path, anything else (the project's own libraries, found through the build tree's RUNPATH) into
# /usr/local/lib, which the image's ld.so.conf lists.
stage_libraries() {
  local binary="$1" rootfs="$2" line lib dest
  ldd "$binary" > "$rootfs.ldd" || { echo "build-images: ldd $binary failed" >&2; return 1; }
  if grep -q "not found" "$rootfs.ldd"; then
    echo "build-images: $binary has unresolved libraries:" >&2
    grep "not found" "$rootfs.ldd" >&2
    return 1
  fi
  while read -r line; do
    lib=""
    case "$line" in
      *"=> /"*) lib="${line#*=> }"; lib="${lib%% (*}" ;;   # libfoo.so.1 => /path (0x...)
      /*) lib="${line%% (*}" ;;                            # /lib64/ld-linux-x86-64.so.2 (0x...)
      *) continue ;;                                       # linux-vdso.so.1 (0x...)
    esac
    case "$lib" in
      /lib/*|/lib64/*|/usr/lib/*|/usr/lib64/*) dest="$rootfs$lib" ;;
      *) dest="$rootfs/usr/local/lib/$(basename "$lib")" ;;
    esac
    mkdir -p "$(dirname "$dest")"
    cp -L "$lib" "$dest"
    chmod 0755 "$dest"
  done < "$rootfs.ldd"
  rm -f "$rootfs.ldd"
}

# Stages BUILD_DIR/images/context/IMAGE (Containerfile + rootfs/) for one image.
stage() {
  local image="$1" binary="$2" context="$3" short="${1#phalanx-}" rootfs
  rootfs="$context/rootfs"
  rm -rf "$context"
  mkdir -p "$rootfs"/{usr/local/bin,usr/local/lib,etc/ssl/certs,tmp,home} "$context/home"
  cp "$SRC_DIR/deploy/docker/Containerfile.$short" "$context/Containerfile"
  # Debug sections off (symbols stay, for readable stack traces): a fraction of the size.
  objcopy --strip-debug "$binary" "$rootfs/usr/local/bin/$image"
  chmod 0755 "$rootfs/usr/local/bin/$image"
  stage_libraries "$binary" "$rootfs"
  cp "$CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$rootfs/etc/ssl/certs/ca-certificates.crt"
  # The same user and group distroless's "nonroot" images have; root exists but has no shell.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
  echo /usr/local/lib > "$rootfs/etc/ld.so.conf"
  chmod 0644 "$rootfs"/etc/{passwd,group,nsswitch.conf,ld.so.conf}
  # Resolves every library the loader needs without the build tree's RUNPATH.
  ldconfig -r "$rootfs"
  chmod 1777 "$rootfs/tmp"
  chmod 0755 "$context/home"  # /home/nonroot, owned by 65532 (the Containerfile's COPY --chown)
}

STORE="$OUT/.storage"
bh() { "$BUILDAH" --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }
cleanup() {
  if [ -d "$STORE" ]; then
    bh rm --all >/dev/null 2>&1 || true
    bh rmi --all --force >/dev/null 2>&1 || true
    # vfs layers are plain folders; buildah may leave read-only ones behind.
    chmod -R u+w "$STORE" 2>/dev/null || true
    rm -rf "$STORE"
  fi
}
trap cleanup EXIT

mkdir -p "$OUT"
start=$(date +%s)
built=0
revisions=()
for image in "${REQUESTED[@]}"; do
  binary="$BUILD_DIR/${BINARY[$image]}"
  short="${image#phalanx-}"
  containerfile="$SRC_DIR/deploy/docker/Containerfile.$short"
  [ -x "$binary" ] || { echo "build-images: $binary not built (make build)" >&2; exit 1; }
  [ -f "$containerfile" ] || { echo "build-images: no $containerfile" >&2; exit 1; }
  read -r version revision < <(version_of "$binary") || exit 1
  [ -n "${version:-}" ] || exit 1
  revisions+=("$revision")
  ref="$REGISTRY/$image:$version"
  archive="$OUT/$image-$version.oci.tar"
  context="$OUT/context/$image"

  if [ "$STAGE_ONLY" = 0 ] && [ "$FORCE" = 0 ] && [ -s "$archive" ] &&
     [ "$archive" -nt "$binary" ] && [ "$archive" -nt "$0" ] && [ "$archive" -nt "$containerfile" ]; then
    echo "build-images: $archive is up to date ($ref)"
    continue
  fi
  stage "$image" "$binary" "$context"
  if [ "$STAGE_ONLY" = 1 ]; then
    echo "build-images: staged $context (docker build -t $ref $context)"
    continue
  fi

  t0=$(date +%s)
  rm -f "$archive"
  bh bud --quiet --isolation chroot --format oci --layers=false \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    --build-arg "SOURCE=$SOURCE_URL" \
    ${SOURCE_DATE_EPOCH:+--timestamp "$SOURCE_DATE_EPOCH"} \
    -f "$context/Containerfile" -t "$ref" "$context" >/dev/null
  bh push --quiet "$ref" "oci-archive:$archive:$ref"
  bh rmi --force "$ref" >/dev/null
  size=$(du -h "$archive" | cut -f1)
  echo "build-images: $archive ($ref, $size, revision $revision, $(( $(date +%s) - t0 ))s)"
  built=$((built + 1))
done
# `make images` builds every binary first; a partial rebuild after a re-configure may not have.
if [ "$(printf '%s\n' "${revisions[@]}" | sort -u | wc -l)" -gt 1 ]; then
  echo "build-images: warning: the binaries come from different revisions (${revisions[*]}):" \
       "rebuild them all (make build) for a consistent set" >&2
fi
echo "build-images: $built built in $(( $(date +%s) - start ))s under $OUT"
