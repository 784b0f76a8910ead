package webhook

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
)

// ScopeBound reports whether the scope bindings let a guarded pod's
// namespace (and runner pod spec) name scope; with no bindings configured
// every scope is open. The events endpoint asks it of a delivery's
// repository before it writes a job onto the pod.
func (h *Handler) ScopeBound(pod *corev1.Pod, scope ghclient.Scope) bool {
	if _, ok := h.RunnerContainer(pod); !ok {
		return false
	}
	spec := matchRunnerPod(pod, h.specs)
	return spec != nil && h.decider.resolver.bindings.scopeNotBound(pod.Namespace, spec.Name, scope) == ""
}
