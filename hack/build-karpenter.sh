#!/usr/bin/env bash
# Builds what the Karpenter scenarios (test/karpenter) run beside the control
# plane of build-k8s.sh, into bin/karpenter/<version>-<os>-<arch>/:
#   karpenter       Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter/kwok)
#   kwok            KWOK (sigs.k8s.io/kwok/cmd/kwok), the fake kubelet of the nodes
#   kube-scheduler  from the same k8s.io/kubernetes tool module as the control
#                   plane (test/e2e/tools/k8s), reused from bin/node when
#                   hack/build-node.sh has built it
#   crds/           NodePool, NodeClaim, KWOKNodeClass (and the rest Karpenter
#                   ships), copied from the module cache
#   stages/         KWOK stages: the fast node-initialize, pod-ready and
#                   pod-complete of the kwok module, and Karpenter's hack/kwok/stages
# Karpenter v1.15 needs Go >= 1.26.9, so its tool module (test/karpenter/tools)
# is built with GOTOOLCHAIN=go1.27.3, which the go command fetches from the Go
# module proxy. Prints the directory; a second run with the same pinned
# versions reuses it, also from ~/.cache/runner-guard.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${root}/test/karpenter/tools"
export GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.27.3}"
k8s_version="v1.37.2"
mod() { (cd "${tools}" && go list -m -f "{{.$1}}" "$2"); }
karpenter_version="$(mod Version sigs.k8s.io/karpenter)"
kwok_version="$(mod Version sigs.k8s.io/kwok)"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
dest="${root}/bin/karpenter/${karpenter_version#v}-${os}-${arch}"
stamp="${dest}/.versions"
want="karpenter=${karpenter_version} kwok=${kwok_version} kubernetes=${k8s_version} layout=1"

copy_from_cache() {
  local cache="$1"
  [[ -f "${cache}/.versions" && "$(cat "${cache}/.versions")" == "${want}" ]] || return 1
  mkdir -p "${dest}"
  cp -pr "${cache}/." "${dest}/"
  echo "karpenter binaries copied from ${cache}" >&2
}

# The kube-scheduler build-node.sh made, when its stamp names the same
# Kubernetes version; otherwise a build from the shared tool module (whose
# compiled packages the Go build cache already holds after build-k8s.sh).
build_scheduler() {
  local node_dir="${root}/bin/node/${k8s_version#v}-${os}-${arch}"
  if [[ -x "${node_dir}/kube-scheduler" && -f "${node_dir}/.versions" \
        && "$(cat "${node_dir}/.versions")" == "kubernetes=${k8s_version} "* ]]; then
    cp -p "${node_dir}/kube-scheduler" "${dest}/kube-scheduler"
    echo "kube-scheduler copied from ${node_dir}" >&2
    return 0
  fi
  local minor="${k8s_version#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
  echo "building kube-scheduler ${k8s_version} (first run only)..." >&2
  # The control plane's own module builds with the machine's Go.
  (cd "${root}/test/e2e/tools/k8s" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" \
    -o "${dest}/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler)
}

build_all() {
  local start=$SECONDS
  mkdir -p "${dest}/crds" "${dest}/stages"
  echo "building karpenter ${karpenter_version} with its KWOK provider (first run only, ${GOTOOLCHAIN})..." >&2
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${dest}/karpenter" sigs.k8s.io/karpenter/kwok)
  echo "building kwok ${kwok_version} ($((SECONDS-start))s so far)..." >&2
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${dest}/kwok" sigs.k8s.io/kwok/cmd/kwok)
  build_scheduler
  local kdir kwdir
  kdir="$(mod Dir sigs.k8s.io/karpenter)"; kwdir="$(mod Dir sigs.k8s.io/kwok)"
  cp "${kdir}"/kwok/charts/crds/*.yaml "${kdir}"/kwok/apis/crds/*.yaml "${dest}/crds/"
  cp "${kwdir}/kustomize/stage/node/fast/node-initialize.yaml" \
     "${kwdir}/kustomize/stage/pod/fast/pod-ready.yaml" \
     "${kwdir}/kustomize/stage/pod/fast/pod-complete.yaml" \
     "${kdir}"/hack/kwok/stages/*.yaml "${dest}/stages/"
  chmod -R u+w "${dest}"
  echo "karpenter binaries built in $((SECONDS-start))s into ${dest}" >&2
}

if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "${dest}"
  exit 0
fi
cache="${RUNNER_GUARD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/runner-guard}/karpenter/${karpenter_version#v}-${os}-${arch}"
if copy_from_cache "${cache}"; then
  echo "${want}" > "${stamp}"
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
