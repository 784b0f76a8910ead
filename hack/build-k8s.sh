#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kubectl from the Go
# module proxy into bin/k8s/<version>-<os>-<arch>/, the layout controller-runtime's
# envtest accepts as KUBEBUILDER_ASSETS. A second run with the same pinned
# versions reuses the binaries; a version change builds a new directory.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
k8s_version="v1.37.2"
etcd_version="v3.7.3"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
dest="${root}/bin/k8s/${k8s_version#v}-${os}-${arch}"
stamp="${dest}/.versions"
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

if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "${dest}"
  exit 0
fi

# Clean clones on the same machine share one copy outside the work tree.
cache="${RUNNER_GUARD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/runner-guard}/k8s/${k8s_version#v}-${os}-${arch}"
if [[ -f "${cache}/.versions" && "$(cat "${cache}/.versions")" == "${want}" ]]; then
  mkdir -p "${dest}"
  cp -p "${cache}/etcd" "${cache}/kube-apiserver" "${cache}/kube-controller-manager" "${cache}/kubectl" "${dest}/"
  echo "${want}" > "${stamp}"
  echo "control-plane binaries copied from ${cache}" >&2
  echo "${dest}"
  exit 0
fi

mkdir -p "${dest}"
rm -f "${stamp}"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

start=$SECONDS
echo "building etcd ${etcd_version} (first run only)..." >&2
(cd "${root}/test/e2e/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "${dest}/etcd" go.etcd.io/etcd/server/v3)
for cmd in kube-apiserver kube-controller-manager kubectl; do
  echo "building ${cmd} ${k8s_version} (first run only, several minutes on 2 cores; $((SECONDS-start))s so far)..." >&2
  (cd "${root}/test/e2e/tools/k8s" && go build -trimpath -ldflags "${ldflags}" -o "${dest}/${cmd}" "k8s.io/kubernetes/cmd/${cmd}")
done
echo "${want}" > "${stamp}"
if mkdir -p "${cache}" 2>/dev/null && cp -p "${dest}"/etcd "${dest}"/kube-* "${dest}"/kubectl "${cache}/"; then
  echo "${want}" > "${cache}/.versions"
fi
echo "control-plane binaries built in $((SECONDS-start))s into ${dest}" >&2
echo "${dest}"
