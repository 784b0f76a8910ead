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
  if stamped "${dest}" "${want}"; then
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
  echo "${dest}"
}
