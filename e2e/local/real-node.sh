#!/usr/bin/env bash
# One real Kubernetes node of the local cluster (docs/local-kubernetes.md):
# containerd, the fake GPU device plugin, the kubelet and kube-proxy, in the node's network
# namespace and in a mount namespace of their own.
#
#   real-node.sh NODE_DIR NETNS
#
# NODE_DIR holds the configs `slurmkube_e2e real-nodes up` wrote (containerd.toml,
# kubelet.yaml, kubelet.args, kubeconfig, kube-proxy.yaml, dev/nvidia*). Stops everything on
# SIGTERM; exits non-zero as soon as one of its daemons dies.
#
# Why the namespaces: each node listens on the kubelet's usual ports in its own
# netns, and some of the paths the kubelet uses are fixed (the device-plugin
# folder /var/lib/kubelet/device-plugins, /var/log/pods), so each node
# bind-mounts its own there in a private mount namespace. containerd shares that mount namespace so it sees
# the volumes the kubelet mounts (secrets, projected tokens).
set -euo pipefail
node_dir=$1 netns=$2
bin=${SLURMKUBE_CACHE:-$HOME/.cache/slurmkube}/bin

# Host paths the kubelet or containerd use whatever their configuration says;
# each node gets its own copy (bind-mounted from NODE_DIR/host/<path>), or one
# node's kubelet would garbage-collect another's pod logs.
shared=(/var/lib/kubelet/device-plugins /var/log/pods /var/log/containers /var/lib/cni)

if [[ -z ${SLURMKUBE_IN_NODE:-} ]]; then
  for path in "${shared[@]}"; do mkdir -p "$path" "$node_dir/host$path"; done
  SLURMKUBE_IN_NODE=1 exec nsenter --net="/run/netns/$netns" \
    unshare --mount --propagation slave /usr/bin/bash "$0" "$@"
fi

for path in "${shared[@]}"; do mount --bind "$node_dir/host$path" "$path"; done
export PATH="$bin:$PATH"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait || true
}
trap 'stop; exit 0' TERM INT

containerd --config "$node_dir/containerd.toml" >>"$node_dir/containerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [[ -S $node_dir/containerd/containerd.sock ]] && break
  sleep 0.2
done
[[ -S $node_dir/containerd/containerd.sock ]] || { echo "containerd did not start; see $node_dir/containerd.log"; stop; exit 1; }

# The images `make images` built (and pause): no registry is reachable.
if [[ -e $node_dir/images.tar ]]; then
  ctr --address "$node_dir/containerd/containerd.sock" -n k8s.io images import "$node_dir/images.tar" \
    >>"$node_dir/containerd.log" 2>&1 || { echo "image import failed; see $node_dir/containerd.log"; stop; exit 1; }
fi

slurmkube-k8s fake-gpu-plugin --dev-dir "$node_dir/dev" --count "$(cat "$node_dir/gpus")" \
  >>"$node_dir/device-plugin.log" 2>&1 &
pids+=($!)

mapfile -t kubelet_args <"$node_dir/kubelet.args"
slurmkube-k8s kubelet "${kubelet_args[@]}" >>"$node_dir/kubelet.log" 2>&1 &
pids+=($!)

slurmkube-k8s kube-proxy --config "$node_dir/kube-proxy.yaml" >>"$node_dir/kube-proxy.log" 2>&1 &
pids+=($!)

echo "node up: containerd ${pids[0]}, device plugin ${pids[1]}, kubelet ${pids[2]}, kube-proxy ${pids[3]}"
rc=0
wait -n "${pids[@]}" || rc=$?
echo "a node daemon exited (rc $rc); stopping the node"
stop
exit 1
