package webhook

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Explained is what the admission decision's own resolver says about one
// pod, for `runner-guard explain`: the same code answers, so the command
// cannot tell a story the webhook does not act on.
type Explained struct {
	// RunnerPodSpec names the runnerPods entry matching the pod; "" when none
	// does or the pod's namespace is not guarded (NotGuarded says why).
	RunnerPodSpec string
	NotGuarded    string
	// Target is the runner with the source of each fact; ARC its verified
	// object, nil when there is none.
	Target Target
	ARC    *arc.Runner
	// Problem is why GitHub would not be asked about this runner (a borrowed
	// owner reference, an unreadable object, an unknown or unbound scope,
	// unusable credentials); nil when it would be.
	Problem error
	// Binding names the scope binding covering the pod's namespace and
	// runner pod spec, with the scopes it allows; "" when no binding is
	// configured (every scope is open) or none covers the pod.
	Binding       string
	BindingScopes []string
	// NotBound says why the runner's scope is outside what the namespace may name.
	NotBound string
	// Fallback says why the pod's labels were read instead of ARC's object.
	Fallback string
}

// Explain resolves pod as an admission decision would, without asking GitHub.
func (h *Handler) Explain(ctx context.Context, pod *corev1.Pod) Explained {
	switch {
	case pod == nil:
		return Explained{NotGuarded: "no pod"}
	case slices.Contains(h.exempt, pod.Namespace):
		return Explained{NotGuarded: "namespace " + pod.Namespace + " is exempt (exemptNamespaces)"}
	case h.runnerNamespaces != nil && !h.runnerNamespaces[pod.Namespace]:
		return Explained{NotGuarded: "namespace " + pod.Namespace + " is not one of runnerNamespaces"}
	}
	spec := matchRunnerPod(pod, h.specs)
	if spec == nil {
		return Explained{NotGuarded: "no runnerPods selector matches the pod's labels"}
	}
	res := h.decider.resolver.resolve(ctx, pod, spec)
	out := Explained{RunnerPodSpec: spec.Name, Target: res.Target, ARC: res.ARC, NotBound: res.NotBound, Fallback: res.Fallback}
	if r := (review{resolution: res}); !r.askable() {
		out.Problem = resolutionError(res)
	}
	for _, b := range h.decider.resolver.bindings {
		if b.appliesTo(pod.Namespace, spec.Name) {
			out.Binding, out.BindingScopes = b.name, b.Scopes
			break
		}
	}
	return out
}
