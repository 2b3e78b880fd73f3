#!/usr/bin/env bash
# A real Kubernetes 1.28 node on this machine, to try Phalanx as users run it: its images pulled
# by a real kubelet from containerd, placed by kube-scheduler, reached through Services and cluster
# DNS (docs/deploy.md, "Try a real install on one machine"; issue 28). Not yet the local cluster's
# `--nodes-kind real` back end: one node, no fault injection.
#
#   scripts/real-node-cluster.sh start DIR [IMAGE_ARCHIVE...]
#       etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.28.7
#       (../shared/kubernetes-v1.28.7), one kubelet with its own containerd (runc), CNI bridge
#       and cgroup root, kube-proxy (iptables) and CoreDNS; imports the OCI archives given
#       (e.g. build/images/*.oci.tar) into the node; writes DIR/kubeconfig (cluster admin) and
#       prints `ready kubeconfig=DIR/kubeconfig node=node-1 (Ns)`.
#   scripts/real-node-cluster.sh stop DIR
#       undoes everything start did, also after start was killed: pods and containers, daemons,
#       mounts under DIR, the bridge, the KUBE-* and CNI-* iptables rules, the cgroups, the
#       ip_forward sysctl.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), containerd and runc (Debian: containerd, runc),
# containernetworking-plugins (/usr/lib/cni), iptables, etcd, openssl, buildah (the pause image).
# Network: the machine's own address, loopback, and the pod and Service addresses it creates.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
shared=${PHALANX_SHARED_DIR:-$(dirname "$repo")/shared}
node=node-1
bridge=phx-br1
pod_subnet=10.244.1.0/24
gateway=10.244.1.1
cgroup_root=phalanx-$node

usage() { sed -n '2,21p' "$0" >&2; exit 2; }
# shellcheck source=demo_lib.sh
source "$here/demo_lib.sh"  # wait_for SECONDS COMMAND...
say() { echo "real-node-cluster: $*" >&2; }
# up WHAT SECONDS COMMAND...: waits for COMMAND to succeed, or stops the start with a pointer.
up() {
  local what=$1 seconds=$2
  shift 2
  wait_for "$seconds" "$@" || { say "$what did not come up in ${seconds}s; logs in $dir/logs"; exit 1; }
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

stop() {
  # Best effort to the end: one step that finds nothing to undo must not skip the others.
  set +e +o pipefail
  local dir=$1
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  local kubectl="$dir/bin/kubectl --kubeconfig $dir/kubeconfig --request-timeout=10s"
  if [ -f "$dir/pids/kubelet" ] && kill -0 "$(cat "$dir/pids/kubelet")" 2>/dev/null; then
    # Pods first, while the kubelet runs, so that CNI DEL frees their addresses.
    $kubectl delete pods --all --all-namespaces --grace-period=1 --wait=true --timeout=30s \
      >/dev/null 2>&1 || true
  fi
  for p in kubelet kube-proxy coredns; do
    [ -f "$dir/pids/$p" ] && kill "$(cat "$dir/pids/$p")" 2>/dev/null || true
  done
  if [ -S "$dir/node/containerd.sock" ]; then
    local ctr="ctr --address $dir/node/containerd.sock -n k8s.io"
    for c in $($ctr tasks ls -q 2>/dev/null); do $ctr tasks kill -s KILL "$c" >/dev/null 2>&1 || true; done
  fi
  for p in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "$dir/pids/$p" ] && kill "$(cat "$dir/pids/$p")" 2>/dev/null || true
  done
  sleep 2
  # Anything of ours still running (a shim, a container's process): by its paths.
  pkill -KILL -f "$dir/" 2>/dev/null || true
  # Mounts under DIR (the kubelet's self-mount, secrets, shm, netns, rootfs), deepest first.
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
  for v in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link show "$v" | grep -q "master $bridge" && ip link del "$v" 2>/dev/null || true
  done
  # kube-proxy's and the CNI plugins' rules: jumps to KUBE-*/CNI-* chains first, then the chains.
  for table in nat filter mangle; do
    iptables -t "$table" -S 2>/dev/null | grep -E '^-A .*-j (KUBE|CNI)-|^-A (KUBE|CNI)-' |
      grep -vE '^-A (KUBE|CNI)-' | sed 's/^-A /-D /' | while read -r rule; do
        eval "iptables -t $table $rule" 2>/dev/null || true; done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
      iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$cgroup_root" ] && find "$h$cgroup_root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  if [ -f "$dir/ip_forward.before" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$dir/ip_forward.before")" || true
  fi
  rm -rf "$dir"
  set -e -o pipefail
}

start() {
  local dir=$1
  shift
  [ "$(id -u)" = 0 ] || { say "needs root"; exit 1; }
  for tool in containerd runc ctr iptables etcd openssl buildah; do
    command -v "$tool" >/dev/null || { say "$tool is not installed (apt-get install containerd runc iptables etcd-server openssl buildah)"; exit 1; }
  done
  [ -x /usr/lib/cni/bridge ] || { say "no CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"; exit 1; }
  [ -f "$shared/kubernetes-v1.28.7/unpack.sh" ] || { say "no $shared/kubernetes-v1.28.7"; exit 1; }
  stop "$dir"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local t0; t0=$(date +%s)
  mkdir -p "$dir"/{pids,logs,pki,node/kubelet,node/cni-conf,node/cni-data}
  sysctl -n net.ipv4.ip_forward >"$dir/ip_forward.before"
  "$shared/kubernetes-v1.28.7/unpack.sh" "$dir/bin" >/dev/null
  local ip; ip=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1)
  [ -n "$ip" ] || { say "no global IPv4 address for the node"; exit 1; }
  local api_port etcd_port etcd_peer kubelet_port healthz_port proxy_metrics proxy_healthz
  api_port=$(free_port); etcd_port=$(free_port); etcd_peer=$(free_port)
  kubelet_port=$(free_port); healthz_port=$(free_port)
  proxy_metrics=$(free_port); proxy_healthz=$(free_port)

  # Certificates: one CA; the API server's serving cert; clients: admin, the API server to the
  # kubelet, the node (system:node:<name>, NodeRestriction), the controller manager, the scheduler.
  local pki=$dir/pki
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 7 \
    -subj "/CN=phalanx-real-node-ca" 2>/dev/null
  cert() {  # NAME CN [O] [SANS]
    openssl req -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.csr" \
      -subj "/CN=$2${3:+/O=$3}" 2>/dev/null
    if [ -n "${4:-}" ]; then
      printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" >"$pki/$1.ext"
    else
      printf 'extendedKeyUsage=clientAuth\n' >"$pki/$1.ext"
    fi
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -out "$pki/$1.crt" -days 7 -extfile "$pki/$1.ext" 2>/dev/null
  }
  cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.96.0.1,IP:$ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin phalanx-admin system:masters
  cert kubelet-client kube-apiserver-kubelet-client system:masters
  cert node "system:node:$node" system:nodes
  cert node-serving "system:node:$node" system:nodes "IP:$ip,IP:127.0.0.1,DNS:$node"
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  kubeconfig() {  # FILE CERT
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: real-node, cluster: {server: "https://$ip:$api_port", certificate-authority: $pki/ca.crt}}]
users: [{name: user, user: {client-certificate: $pki/$2.crt, client-key: $pki/$2.key}}]
contexts: [{name: real-node, context: {cluster: real-node, user: user}}]
current-context: real-node
EOF
  }
  kubeconfig "$dir/kubeconfig" admin
  for c in node controller-manager scheduler; do kubeconfig "$dir/$c.kubeconfig" "$c"; done
  launch() {  # NAME COMMAND...: in its own session, logged, its pid kept for stop
    local name=$1
    shift
    setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$dir/pids/$name"
  }
  local kubectl="$dir/bin/kubectl --kubeconfig $dir/kubeconfig"

  launch etcd "$dir/bin/etcd" --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer"
  # Advertised on the machine's address: the kubernetes Service's endpoint, which pods reach
  # through kube-proxy (in-cluster config of the operator and the agent).
  launch kube-apiserver "$dir/bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$ip" --advertise-address="$ip" --secure-port="$api_port" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --kubelet-client-certificate="$pki/kubelet-client.crt" \
    --kubelet-client-key="$pki/kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname --allow-privileged=true
  up kube-apiserver 90 $kubectl get --raw /readyz
  launch kube-controller-manager "$dir/bin/kube-controller-manager" \
    --kubeconfig="$dir/controller-manager.kubeconfig" \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service,-route' \
    --use-service-account-credentials --root-ca-file="$pki/ca.crt" \
    --service-account-private-key-file="$pki/sa.key" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=0
  launch kube-scheduler "$dir/bin/kube-scheduler" --kubeconfig="$dir/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=0

  # The pause image every pod sandbox runs: a static binary, FROM scratch.
  mkdir -p "$dir/pause"
  printf '%s\n' '#include <signal.h>' '#include <sys/wait.h>' '#include <unistd.h>' \
    'static void stop(int s) { (void)s; _exit(0); }' \
    'static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }' \
    'int main(void) { signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap); for (;;) pause(); }' \
    >"$dir/pause/pause.c"
  gcc -static -O2 -o "$dir/pause/pause" "$dir/pause/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$dir/pause/Containerfile"
  buildah bud -q --isolation chroot -t localhost/phalanx-pause:1 "$dir/pause" >/dev/null
  buildah push -q localhost/phalanx-pause:1 "oci-archive:$dir/pause/pause.tar:localhost/phalanx-pause:1" >/dev/null
  buildah rmi localhost/phalanx-pause:1 >/dev/null 2>&1 || true

  local n=$dir/node
  cat >"$n/containerd.toml" <<EOF
version = 2
root = "$n/containerd-root"
state = "$n/containerd-state"
[grpc]
  address = "$n/containerd.sock"
[ttrpc]
  address = "$n/containerd-ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$n/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/phalanx-pause:1"
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails to set its oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$n/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni-conf"
EOF
  cat >"$n/cni-conf/10-phalanx.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "phalanx-$node", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$n/cni-data"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  launch containerd containerd --config "$n/containerd.toml"
  local ctr="ctr --address $n/containerd.sock -n k8s.io"
  up containerd 30 $ctr version
  $ctr images import --snapshotter native "$dir/pause/pause.tar" >/dev/null
  local archive
  for archive in "$@"; do
    say "importing $(basename "$archive")"
    $ctr images import --snapshotter native "$archive" >/dev/null
  done

  # The kubelet's cgroup root must exist in every cgroup v1 hierarchy before it starts.
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -f "$h/cgroup.procs" ] || continue
    mkdir -p "$h$cgroup_root"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h$cgroup_root/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h$cgroup_root/cpuset.mems"
    fi
  done
  cat >"$n/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
failSwapOn: false
oomScoreAdj: 0
port: $kubelet_port
healthzPort: $healthz_port
readOnlyPort: 0
clusterDomain: cluster.local
clusterDNS: [$gateway]
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/node-serving.crt
tlsPrivateKeyFile: $pki/node-serving.key
containerRuntimeEndpoint: unix://$n/containerd.sock
imageServiceEndpoint: unix://$n/containerd.sock
podCIDR: $pod_subnet
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  launch kubelet "$dir/bin/kubelet" --config="$n/kubelet.yaml" --kubeconfig="$dir/node.kubeconfig" \
    --root-dir="$n/kubelet" --cert-dir="$n/kubelet/pki" --hostname-override="$node" --node-ip="$ip"
  up "the node" 90 sh -c "$kubectl get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"

  cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: 10.244.0.0/16
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:$proxy_metrics
healthzBindAddress: 127.0.0.1:$proxy_healthz
clientConnection: {kubeconfig: $dir/kubeconfig}
conntrack: {maxPerCore: 0}
EOF
  launch kube-proxy "$dir/bin/kube-proxy" --config="$dir/kube-proxy.yaml" --hostname-override="$node"
  # CoreDNS on the bridge's gateway (the kubelet's clusterDNS): Services, headless Services and
  # pod host names under cluster.local.
  cat >"$dir/Corefile" <<EOF
.:53 {
    bind $gateway
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfig real-node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF
  # The bridge (and so the gateway address) exists once the first pod has its network: make it
  # now, as the bridge plugin would, so CoreDNS can bind it before any pod.
  ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
  ip addr show dev "$bridge" | grep -q "$gateway/" || ip addr add "$gateway/24" dev "$bridge"
  ip link set "$bridge" up
  launch coredns "$dir/bin/coredns" -conf "$dir/Corefile"
  echo "ready kubeconfig=$dir/kubeconfig node=$node ($(( $(date +%s) - t0 ))s)"
}

case "${1:-}" in
  start) [ $# -ge 2 ] || usage; dir=$2; shift 2; start "$dir" "$@" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2"; say "stopped" ;;
  *) usage ;;
esac
