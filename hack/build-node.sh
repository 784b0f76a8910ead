#!/usr/bin/env bash
# Builds what a real node needs beside the control plane of build-k8s.sh:
# kubelet, kube-scheduler and kube-proxy from the same k8s.io/kubernetes tool
# module (test/e2e/tools/k8s), containerd v2 with ctr and the runc shim, and
# the bridge, host-local, loopback and portmap CNI plugins (test/node/tools/
# containerd), into bin/node/<version>-<os>-<arch>/ (CNI plugins in cni/).
# runc, iptables, conntrack and iproute2 come from Debian and are installed
# with apt-get when missing. Prints the directory; a second run with the same
# pinned versions reuses the binaries, also from ~/.cache/runner-guard.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/lib/cached-build.sh
source "${root}/hack/lib/cached-build.sh"
k8s_version="${kube_version}"
containerd_version="$(cd "${root}/test/node/tools/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
cni_version="$(cd "${root}/test/node/tools/containerd" && go list -m -f '{{.Version}}' github.com/containernetworking/plugins)"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
want="kubernetes=${k8s_version} containerd=${containerd_version} cni=${cni_version}"
k8s_cmds=(kubelet kube-scheduler kube-proxy)
runtime_cmds=(containerd ctr containerd-shim-runc-v2)
cni_plugins=(main/bridge ipam/host-local main/loopback meta/portmap)

# Debian packages the node runs: runc (the OCI runtime containerd's shim
# calls), iptables for kube-proxy and portmap, conntrack, ip for netns.
install_debian_packages() {
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v modprobe >/dev/null || missing+=(kmod)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ "$(id -u)" != 0 ]]; then
    echo "build-node: need Debian packages ${missing[*]} and am not root to install them" >&2
    return 1
  fi
  echo "installing Debian packages: ${missing[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# build_all DEST builds every binary into DEST.
build_all() {
  local dest="$1" start=$SECONDS cmd p
  mkdir -p "${dest}/cni"
  copy_kube_cmds "${dest}" "${k8s_cmds[@]}"
  # No btrfs/devmapper/zfs snapshotters: they need cgo headers, and the node
  # uses overlayfs.
  local tags="no_btrfs no_devmapper no_zfs"
  local cver="-X github.com/containerd/containerd/v2/version.Version=${containerd_version}"
  for cmd in "${runtime_cmds[@]}"; do
    echo "building ${cmd} ${containerd_version} (first run only; $((SECONDS-start))s so far)..." >&2
    (cd "${root}/test/node/tools/containerd" && CGO_ENABLED=0 go build -trimpath -tags "${tags}" -ldflags "-s -w ${cver}" \
      -o "${dest}/${cmd}" "github.com/containerd/containerd/v2/cmd/${cmd}")
  done
  echo "building CNI plugins ${cni_version} ($((SECONDS-start))s so far)..." >&2
  for p in "${cni_plugins[@]}"; do
    (cd "${root}/test/node/tools/containerd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
      -o "${dest}/cni/${p#*/}" "github.com/containernetworking/plugins/plugins/${p}")
  done
  echo "node binaries built in $((SECONDS-start))s into ${dest}" >&2
}

install_debian_packages
cached_build "node binaries" "node/${k8s_version#v}-${os}-${arch}" "${want}" build_all
