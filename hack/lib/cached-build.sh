# Sourced by hack/build-k8s.sh, build-node.sh and build-karpenter.sh: how
# each reuses what it built. A build directory bin/<sub> holds a .versions
# stamp naming the pinned versions it was built from; a copy under
# ~/.cache/runner-guard/<sub> (RUNNER_GUARD_CACHE) lets the clean clones of
# one machine share it. The caller sets root, the repository.

# stamped DIR WANT: DIR was built from the versions WANT names.
stamped() {
  [[ -f "$1/.versions" && "$(cat "$1/.versions")" == "$2" ]]
}

# k8s_ldflags VERSION: the -ldflags that stamp a binary of the k8s.io/kubernetes
# tool module (test/e2e/tools/k8s) with its Kubernetes version.
k8s_ldflags() {
  local version="$1" minor="${1#v1.}"
  minor="${minor%%.*}"
  echo "-s -w -X k8s.io/component-base/version.gitVersion=${version} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=${version} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
}

# cached_build WHAT SUB WANT BUILD: prints bin/SUB once it holds what the
# stamp WANT names: as it is, copied from the cache, or built by the function
# BUILD (called with the directory) and then copied into the cache.
cached_build() {
  local what="$1" sub="$2" want="$3" build="$4"
  local dest="${root}/bin/${sub}"
  local cache="${RUNNER_GUARD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/runner-guard}/${sub}"
  # make test's stages build side by side: the second to want SUB waits for
  # the first's build rather than making its own.
  local lock="${root}/bin/.${sub//\//_}.lock" lockfd
  mkdir -p "${root}/bin"
  exec {lockfd}>"${lock}"
  flock "${lockfd}"
  if stamped "${dest}" "${want}"; then
    exec {lockfd}>&-
    echo "${dest}"
    return 0
  fi
  mkdir -p "${dest}"
  rm -f "${dest}/.versions"
  if stamped "${cache}" "${want}"; then
    # Everything but the stamp, which is written last: an interrupted copy
    # is never taken as whole.
    tar -C "${cache}" --exclude=./.versions -cf - . | tar -C "${dest}" -xpf -
    echo "${what} copied from ${cache}" >&2
  else
    "${build}" "${dest}"
    if mkdir -p "${cache}" 2>/dev/null && rm -f "${cache}/.versions" && cp -pr "${dest}/." "${cache}/"; then
      echo "${want}" > "${cache}/.versions"
    fi
  fi
  echo "${want}" > "${dest}/.versions"
  exec {lockfd}>&-
  echo "${dest}"
}

# The k8s.io/kubernetes commands the tests run, from its tool module
# (test/e2e/tools/k8s): the control plane's (build-k8s.sh), the node's
# (build-node.sh) and the Karpenter scenarios' scheduler (build-karpenter.sh).
kube_version="v1.37.2"
kube_cmds=(kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy)

# kube_cmds_dir prints bin/kube/<version>-<os>-<arch>, holding every command
# of kube_cmds. They are built by one go build, so the packages they share
# (most of them) compile once, and all without cgo, so no build differs in
# the compiled packages it could share.
kube_cmds_dir() {
  cached_build "kubernetes commands" "kube/${kube_version#v}-$(go env GOOS)-$(go env GOARCH)" \
    "kubernetes=${kube_version} cmds=${kube_cmds[*]}" build_kube_cmds
}

# build_kube_cmds DEST builds kube_cmds into DEST.
build_kube_cmds() {
  local dest="$1" start=$SECONDS pkgs=() cmd
  for cmd in "${kube_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${cmd}"); done
  echo "building ${kube_cmds[*]} ${kube_version} in one go build (first run only, about 12 minutes on 2 cores)..." >&2
  (cd "${root}/test/e2e/tools/k8s" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags "${kube_version}")" \
    -o "${dest}/" "${pkgs[@]}")
  echo "kubernetes commands built in $((SECONDS-start))s into ${dest}" >&2
}

# copy_kube_cmds DEST CMD...: the commands CMD, from kube_cmds_dir, into DEST.
copy_kube_cmds() {
  local dest="$1" src cmd
  shift
  src="$(kube_cmds_dir)"
  for cmd in "$@"; do cp -p "${src}/${cmd}" "${dest}/${cmd}"; done
}
