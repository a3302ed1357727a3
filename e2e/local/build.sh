#!/usr/bin/env bash
# Build slurmkube-k8s (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl in one binary) into $SLURMKUBE_CACHE.
#
# The output folder is named after a hash of the Go sources and go.mod/go.sum,
# so an unchanged tree is never rebuilt and a changed one never runs a stale
# binary. bin/slurmkube-k8s and bin/kubectl are symlinks to the current build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${SLURMKUBE_CACHE:-$HOME/.cache/slurmkube}
mkdir -p "$cache/bin" "$cache/tools"
# shellcheck source=publish-tool.sh
source "$here/publish-tool.sh"

hash=$(cd "$here" && { cat go.mod go.sum $(find cmd -name '*.go' | sort); grep -E '^(K8S|ETCD)_VERSION=' versions.env; } | sha256sum | cut -c1-12)
dir="$cache/tools/slurmkube-k8s-$K8S_VERSION-$hash"
# Worktrees and CI clones share the cache: one builds, the others wait and find it built.
exec 9>"$cache/.slurmkube-k8s.lock"
flock 9
if [[ ! -x "$dir/slurmkube-k8s" ]]; then
  echo "building slurmkube-k8s (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION); takes a while on a cold cache"
  start=$SECONDS
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-s"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  # A folder of this run's own: checkouts on one machine share the cache and may
  # build the same hash at once; rename(2) publishes it whole (publish_tool).
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "$ldflags" \
    -o "$tmp/slurmkube-k8s" ./cmd/slurmkube-k8s)
  publish_tool "$tmp" "$dir" slurmkube-k8s
  echo "built slurmkube-k8s in $((SECONDS - start))s"
fi
ln -sfn "$dir/slurmkube-k8s" "$cache/bin/slurmkube-k8s"
ln -sfn "$dir/slurmkube-k8s" "$cache/bin/kubectl"
