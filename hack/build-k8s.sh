#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kubectl from the Go
# module proxy into bin/k8s/<version>-<os>-<arch>/, the layout controller-runtime's
# envtest accepts as KUBEBUILDER_ASSETS. A second run with the same pinned
# versions reuses the binaries; a version change builds a new directory.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/lib/cached-build.sh
source "${root}/hack/lib/cached-build.sh"
k8s_version="${kube_version}"
etcd_version="v3.7.3"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
want="kubernetes=${k8s_version} etcd=${etcd_version}"

# A caller may bring its own binaries; accept them if kube-apiserver reports the
# same minor version.
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" && -x "${KUBEBUILDER_ASSETS}/etcd" \
      && -x "${KUBEBUILDER_ASSETS}/kubectl" && -x "${KUBEBUILDER_ASSETS}/kube-controller-manager" ]]; then
  have="$("${KUBEBUILDER_ASSETS}/kube-apiserver" --version 2>/dev/null | awk '{print $2}')"
  if [[ "${have%.*}" == "${k8s_version%.*}" ]]; then
    echo "using KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} (kube-apiserver ${have})" >&2
    echo "${KUBEBUILDER_ASSETS}"
    exit 0
  fi
  echo "ignoring KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}: kube-apiserver ${have:-unknown}, want ${k8s_version%.*}.x" >&2
fi

# build_all DEST builds the control plane's binaries into DEST.
build_all() {
  local dest="$1" start=$SECONDS
  echo "building etcd ${etcd_version} (first run only)..." >&2
  (cd "${root}/test/e2e/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "${dest}/etcd" go.etcd.io/etcd/server/v3)
  copy_kube_cmds "${dest}" kube-apiserver kube-controller-manager kubectl
  echo "control-plane binaries built in $((SECONDS-start))s into ${dest}" >&2
}

cached_build "control-plane binaries" "k8s/${k8s_version#v}-${os}-${arch}" "${want}" build_all
