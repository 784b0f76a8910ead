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
k8s_version="v1.37.2"
containerd_version="$(cd "${root}/test/node/tools/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
cni_version="$(cd "${root}/test/node/tools/containerd" && go list -m -f '{{.Version}}' github.com/containernetworking/plugins)"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
dest="${root}/bin/node/${k8s_version#v}-${os}-${arch}"
stamp="${dest}/.versions"
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

copy_from_cache() {
  local cache="$1"
  [[ -f "${cache}/.versions" && "$(cat "${cache}/.versions")" == "${want}" ]] || return 1
  mkdir -p "${dest}"
  cp -pr "${cache}/." "${dest}/"
  echo "node binaries copied from ${cache}" >&2
}

build_all() {
  local minor="${k8s_version#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
  local start=$SECONDS cmd p
  mkdir -p "${dest}/cni"
  for cmd in "${k8s_cmds[@]}"; do
    echo "building ${cmd} ${k8s_version} (first run only; $((SECONDS-start))s so far)..." >&2
    (cd "${root}/test/e2e/tools/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${dest}/${cmd}" "k8s.io/kubernetes/cmd/${cmd}")
  done
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
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "${dest}"
  exit 0
fi
cache="${RUNNER_GUARD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/runner-guard}/node/${k8s_version#v}-${os}-${arch}"
if copy_from_cache "${cache}"; then
  echo "${dest}"
  exit 0
fi
rm -f "${stamp}"
build_all
echo "${want}" > "${stamp}"
# The cache's stamp is written last, so a partial copy is never taken as whole.
if mkdir -p "${cache}" 2>/dev/null && rm -f "${cache}/.versions" && cp -pr "${dest}/." "${cache}/"; then
  echo "${want}" > "${cache}/.versions"
fi
echo "${dest}"
