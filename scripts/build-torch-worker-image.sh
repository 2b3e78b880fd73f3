#!/usr/bin/env bash
# Builds the sample PyTorch worker image (deploy/docker/torch-worker/Containerfile): a PyTorch
# base image with the phalanx wheel pip-installed and the torch examples in /opt/phalanx/examples.
#
#   scripts/build-torch-worker-image.sh BUILD_DIR
#
# Always stages BUILD_DIR/images/context/phalanx-torch-worker/ (Containerfile, the wheel from
# scripts/build_wheel.py, examples/), which `docker build` takes as is. The image itself is built
# (buildah, into BUILD_DIR/images/phalanx-torch-worker-<version>.oci.tar):
#   - on PHALANX_TORCH_BASE_IMAGE when set (a PyTorch image buildah may pull, e.g.
#     docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime, the Containerfile's default);
#   - else with PHALANX_TORCH_IMAGE_FROM_DEBIAN=1, from this machine's Debian packages
#     (Containerfile.debian: python3 + python3-torch and their dependencies, staged by
#     scripts/stage_debian_rootfs.py; no registry; about 1 GB);
#   - else not: it says so and exits 0. Called by `make images` (and `make torch-image`, which
#     sets PHALANX_TORCH_IMAGE_FROM_DEBIAN=1).
# Environment: PHALANX_IMAGE_REGISTRY (default ghcr.io/phalanx-dev), PHALANX_TORCH_BASE_IMAGE,
# PHALANX_TORCH_IMAGE_FROM_DEBIAN, BUILDAH (default buildah).
set -euo pipefail

[ $# -eq 1 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BUILD_DIR="$(cd "$1" && pwd)" || { echo "build-torch-worker-image: no build directory $1" >&2; exit 2; }
SRC_DIR="$(cd "$(dirname "$0")/.." && pwd)"
REGISTRY="${PHALANX_IMAGE_REGISTRY:-ghcr.io/phalanx-dev}"
BUILDAH="${BUILDAH:-buildah}"
IMAGE=phalanx-torch-worker
OUT="$BUILD_DIR/images"
CONTEXT="$OUT/context/$IMAGE"

wheel="$(python3 "$SRC_DIR/scripts/build_wheel.py" --build "$BUILD_DIR" | tail -n1)"
version="$(basename "$wheel" | cut -d- -f2)"
revision="$(git -C "$SRC_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/examples"
cp "$SRC_DIR/deploy/docker/torch-worker/Containerfile" "$CONTEXT/Containerfile"
cp "$wheel" "$CONTEXT/"
cp "$SRC_DIR"/runtime/python/examples/{torch_train.py,torch_dataloader_train.py,torchrun_train.py} "$CONTEXT/examples/"
ref="$REGISTRY/$IMAGE:$version"
echo "build-torch-worker-image: staged $CONTEXT (docker build -t $ref $CONTEXT)"

containerfile="$CONTEXT/Containerfile"
if [ -z "${PHALANX_TORCH_BASE_IMAGE:-}" ]; then
  if [ "${PHALANX_TORCH_IMAGE_FROM_DEBIAN:-0}" != 1 ]; then
    echo "build-torch-worker-image: not built: set PHALANX_TORCH_BASE_IMAGE to a PyTorch image" \
         "buildah can pull (e.g. docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime)," \
         "or build it from this machine's Debian packages: make torch-image"
    exit 0
  fi
  t0=$(date +%s)
  python3 "$SRC_DIR/scripts/stage_debian_rootfs.py" "$CONTEXT/rootfs" python3 python3-torch \
    --wheel "$wheel"
  containerfile="$SRC_DIR/deploy/docker/torch-worker/Containerfile.debian"
  echo "build-torch-worker-image: rootfs staged in $(( $(date +%s) - t0 ))s"
fi
command -v "$BUILDAH" >/dev/null || { echo "build-torch-worker-image: buildah not found" >&2; exit 1; }
STORE="$OUT/.storage-torch"
bh() { "$BUILDAH" --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }
cleanup() { bh rmi --all --force >/dev/null 2>&1 || true; chmod -R u+w "$STORE" 2>/dev/null || true; rm -rf "$STORE"; }
trap cleanup EXIT
archive="$OUT/$IMAGE-$version.oci.tar"
rm -f "$archive"
t0=$(date +%s)
bh bud --quiet --isolation chroot --format oci --layers=false \
  --build-arg "BASE_IMAGE=${PHALANX_TORCH_BASE_IMAGE:-scratch}" --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" -f "$containerfile" -t "$ref" "$CONTEXT" >/dev/null
bh push --quiet "$ref" "oci-archive:$archive:$ref"
rm -rf "$CONTEXT/rootfs"  # a copy of ~1 GB of /usr; the archive holds it
echo "build-torch-worker-image: $archive ($ref, $(du -h "$archive" | cut -f1), $(( $(date +%s) - t0 ))s)"
