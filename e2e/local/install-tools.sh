#!/usr/bin/env bash
# Pinned `go install` of kwok, kueue and helm (and kind, containerd or coredns, on request) into
# $SLURMKUBE_CACHE/bin.
#
# Why a script: each tool is built once per version into its own folder
# ($SLURMKUBE_CACHE/tools/<name>-<version>/) and bin/<name> is a symlink to it,
# so a re-run is a no-op and a version bump never mixes old and new binaries.
# The build happens outside the checkout so CI clones on the same machine reuse it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${SLURMKUBE_CACHE:-$HOME/.cache/slurmkube}
mkdir -p "$cache/bin" "$cache/tools"
# shellcheck source=publish-tool.sh
source "$here/publish-tool.sh"

install_tool() { # name module@version [version-variable[=value] set with -ldflags -X]
  local name=$1 pkg=$2 version=${2##*@} version_var=${3:-}
  local dir="$cache/tools/$name-$version"
  # Worktrees and CI clones share the cache: one builds, the others wait and find it built.
  exec 9>"$cache/.$name.lock"
  flock 9
  if [[ ! -x "$dir/$name" ]]; then
    echo "building $name $version (go install $pkg)"
    local start=$SECONDS
    local ldflags="-s"
    if [[ $version_var == *=* ]]; then ldflags+=" -X $version_var"
    elif [[ -n $version_var ]]; then ldflags+=" -X $version_var=$version"; fi
    local tmp
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    GOBIN="$tmp" GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install -trimpath -ldflags="$ldflags" "$pkg"
    publish_tool "$tmp" "$dir" "$name"
    echo "built $name $version in $((SECONDS - start))s"
  fi
  ln -sfn "$dir/$name" "$cache/bin/$name"
  exec 9>&-
}

tools=${*:-kwok kueue helm}
for t in $tools; do
  case $t in
    kwok) install_tool kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
    kueue) install_tool kueue "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" sigs.k8s.io/kueue/pkg/version.GitVersion ;;
    kind) install_tool kind "sigs.k8s.io/kind@$KIND_VERSION" ;;
    containerd)
      # The daemon, its CLI and the runc shim; the version without its "v", as
      # containerd's release builds report it (Node containerRuntimeVersion).
      for bin in containerd ctr containerd-shim-runc-v2; do
        install_tool "$bin" "github.com/containerd/containerd/v2/cmd/$bin@$CONTAINERD_VERSION" \
          "github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION#v}"
      done ;;
    # Cluster DNS for the real nodes' pods (e2e/slurmkube_e2e/cluster_dns.py).
    coredns) install_tool coredns "github.com/coredns/coredns@$COREDNS_VERSION" \
      "github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" ;;
    helm) install_tool helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm.sh/helm/v3/internal/version.version ;;
    *) echo "unknown tool: $t" >&2; exit 2 ;;
  esac
done
