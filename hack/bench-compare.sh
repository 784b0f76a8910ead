#!/usr/bin/env bash
# bench-compare.sh BASE: the benchmark program of BASE (a git ref) against the
# webhook built at BASE, then the working tree's against the working tree's
# webhook, one after the other on this machine, and every figure of both side
# by side with head/base. Each side runs its own benchmark program, so
# figures measured in-process (throughput, latency) compare the code too, not
# only the binary; a figure only one side has shows "-".
#
# Needs KUBEBUILDER_ASSETS and KUSTOMIZE, and HELM for the chart-defaults
# figures (make bench-compare sets them);
# BENCH_FLAGS is passed to both runs (e.g. -only "disruption budgets").
set -euo pipefail

base=${1:-}
if [[ -z "$base" ]]; then
  echo "usage: make bench-compare BASE=<git ref>  (e.g. BASE=HEAD~5, BASE=v0.3.0)" >&2
  exit 2
fi
root=$(git rev-parse --show-toplevel)
if ! git -C "$root" rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  echo "bench-compare: BASE=$base is not a commit of this repository" >&2
  exit 2
fi
: "${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS (make bench-compare sets it)}"
: "${KUSTOMIZE:?set KUSTOMIZE (make bench-compare sets it)}"

# BENCH_FLAGS as make passes it, quotes included: -only "disruption budgets".
eval "flags=(${BENCH_FLAGS:-})"

work=$(mktemp -d "${TMPDIR:-/tmp}/runner-guard-bench-compare.XXXXXX")
cleanup() {
  git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

git -C "$root" worktree add --quiet --detach "$work/base" "$base"
build() { (cd "$1" && CGO_ENABLED=0 go build -trimpath -o "$2" ./cmd/webhook); }
build "$work/base" "$work/webhook-base"
build "$root" "$work/webhook-head"

# run DIR BIN NAME: that tree's benchmark program against BIN; its name=value
# lines go to $work/NAME.figures, everything to $work/NAME.log.
run() {
  local dirty=""
  if [[ $3 == head ]] && ! git -C "$1" diff --quiet HEAD; then dirty="+uncommitted changes"; fi
  echo "bench-compare: $3 ($(git -C "$1" rev-parse --short HEAD)$dirty) ..." >&2
  if ! (cd "$1" && RUNNER_GUARD_BIN="$2" go run ./test/bench "${flags[@]}") >"$work/$3.log" 2>&1; then
    echo "bench-compare: the $3 run failed; its last lines:" >&2
    tail -20 "$work/$3.log" >&2
    exit 1
  fi
  grep -E '^[A-Za-z0-9_]+=' "$work/$3.log" >"$work/$3.figures" || true
}
run "$work/base" "$work/webhook-base" base
run "$root" "$work/webhook-head" head

echo "base: $base ($(git -C "$work/base" rev-parse --short HEAD)); head: working tree ($(git -C "$root" rev-parse --short HEAD))"
awk -F= '
  NR == FNR { base[$1] = $2; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 }; next }
  { head[$1] = $2; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
  END {
    printf "%-50s %14s %14s %10s\n", "figure", "base", "head", "head/base"
    for (i = 0; i < n; i++) {
      k = order[i]
      b = (k in base) ? base[k] : "-"; h = (k in head) ? head[k] : "-"
      r = "-"
      if (b != "-" && h != "-" && b + 0 != 0) r = sprintf("%.2f", h / b)
      printf "%-50s %14s %14s %10s\n", k, b, h, r
    }
  }' "$work/base.figures" "$work/head.figures"
