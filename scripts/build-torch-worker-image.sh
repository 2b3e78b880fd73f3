#!/usr/bin/env bash
# Builds the sample PyTorch worker image (deploy/docker/torch-worker/Containerfile): a PyTorch
# base image with the phalanx wheel pip-installed and the torch examples in /opt/phalanx/examples.
#
#   scripts/build-torch-worker-image.sh BUILD_DIR
#
# Always stages BUILD_DIR/images/context/phalanx-torch-worker/ (Containerfile, the wheel from
# scripts/build_wheel.py, examples/), which `docker build` takes as is. The base image comes from
# a registry, so the image itself is built (buildah, into
# BUILD_DIR/images/phalanx-torch-worker-<version>.oci.tar) only when PHALANX_TORCH_BASE_IMAGE names
# it (e.g. docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime, the Containerfile's default)
# and buildah may pull it; otherwise it says so and exits 0. Called by `make images`.
# Environment: PHALANX_IMAGE_REGISTRY (default ghcr.io/phalanx-dev), PHALANX_TORCH_BASE_IMAGE,
# BUILDAH (default buildah).
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
cp "$SRC_DIR"/runtime/python/examples/{torch_train.py,torchrun_train.py} "$CONTEXT/examples/"
ref="$REGISTRY/$IMAGE:$version"
echo "build-torch-worker-image: staged $CONTEXT (docker build -t $ref $CONTEXT)"

if [ -z "${PHALANX_TORCH_BASE_IMAGE:-}" ]; then
  echo "build-torch-worker-image: not built: set PHALANX_TORCH_BASE_IMAGE to a PyTorch image" \
       "buildah can pull (e.g. docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime)"
  exit 0
fi
command -v "$BUILDAH" >/dev/null || { echo "build-torch-worker-image: buildah not found" >&2; exit 1; }
STORE="$OUT/.storage-torch"
bh() { "$BUILDAH" --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }
cleanup() { bh rmi --all --force >/dev/null 2>&1 || true; chmod -R u+w "$STORE" 2>/dev/null || true; rm -rf "$STORE"; }
trap cleanup EXIT
archive="$OUT/$IMAGE-$version.oci.tar"
rm -f "$archive"
bh bud --quiet --isolation chroot --format oci --layers=false \
  --build-arg "BASE_IMAGE=$PHALANX_TORCH_BASE_IMAGE" --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" -f "$CONTEXT/Containerfile" -t "$ref" "$CONTEXT" >/dev/null
bh push --quiet "$ref" "oci-archive:$archive:$ref"
echo "build-torch-worker-image: $archive ($ref, $(du -h "$archive" | cut -f1))"
