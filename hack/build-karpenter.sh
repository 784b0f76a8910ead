#!/usr/bin/env bash
# Builds what the Karpenter scenarios (test/karpenter) run beside the control
# plane of build-k8s.sh, into bin/karpenter/<version>-<os>-<arch>/:
#   karpenter       Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter/kwok)
#   kwok            KWOK (sigs.k8s.io/kwok/cmd/kwok), the fake kubelet of the nodes
#   kube-scheduler  from the k8s.io/kubernetes commands the control plane and
#                   the node share (hack/lib/cached-build.sh: kube_cmds_dir)
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
# shellcheck source=hack/lib/cached-build.sh
source "${root}/hack/lib/cached-build.sh"
tools="${root}/test/karpenter/tools"
export GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.27.3}"
k8s_version="${kube_version}"
mod() { (cd "${tools}" && go list -m -f "{{.$1}}" "$2"); }
karpenter_version="$(mod Version sigs.k8s.io/karpenter)"
kwok_version="$(mod Version sigs.k8s.io/kwok)"
os="$(go env GOOS)"; arch="$(go env GOARCH)"
want="karpenter=${karpenter_version} kwok=${kwok_version} kubernetes=${k8s_version} layout=1"

# build_scheduler DEST: kube-scheduler from the k8s.io/kubernetes commands
# the control plane and the node share (kube_cmds_dir), built with the
# machine's Go.
build_scheduler() {
  copy_kube_cmds "$1" kube-scheduler
}

# build_all DEST builds everything into DEST.
build_all() {
  local dest="$1" start=$SECONDS
  mkdir -p "${dest}/crds" "${dest}/stages"
  echo "building karpenter ${karpenter_version} with its KWOK provider (first run only, ${GOTOOLCHAIN})..." >&2
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${dest}/karpenter" sigs.k8s.io/karpenter/kwok)
  echo "building kwok ${kwok_version} ($((SECONDS-start))s so far)..." >&2
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${dest}/kwok" sigs.k8s.io/kwok/cmd/kwok)
  build_scheduler "${dest}"
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

cached_build "karpenter binaries" "karpenter/${karpenter_version#v}-${os}-${arch}" "${want}" build_all
