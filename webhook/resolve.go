package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// This file is the narrow API the disruption controller (package disruption)
// shares with the admission decision: which pods are guarded runner pods,
// which runner a pod runs (the same resolver, bindings and credentials), the
// recently-admitted memory, and the hand-off of EphemeralRunners to retire
// after an unregister, so that no Kubernetes write happens inside admission.

// Retirements takes the EphemeralRunners of runners a decision unregistered,
// with the UID of the pod the decision let go; it must not block.
// disruption.Retirer implements it: on the replica that admitted the
// deletion, outside the admission call, it deletes each once that pod is
// seen terminating or gone.
type Retirements interface {
	Add(run arc.Runner, pod types.UID)
}

// Resolved is the runner behind a guarded runner pod.
type Resolved struct {
	// Runner is what GitHub is asked about: scope, name, ID hint, credentials.
	Runner ghclient.Runner
	// Target is the same runner with the source of each fact.
	Target Target
	// ARC is ARC's verified object behind the pod, nil when there is none.
	ARC *arc.Runner
}

// ErrNotGuarded: the pod is no runner pod runner-guard guards (not matched
// by runnerPods, or in an exempt namespace).
var ErrNotGuarded = errors.New("not a guarded runner pod")

// RunnerContainer returns the runner container of a pod runner-guard guards:
// one its runnerPods match, outside the exempt namespaces.
func (h *Handler) RunnerContainer(pod *corev1.Pod) (string, bool) {
	if pod == nil {
		return "", false
	}
	spec := h.runnerPodSpec(pod.Namespace, labels.Set(pod.Labels))
	if spec == nil {
		return "", false
	}
	return spec.Container, true
}

// Guards reports whether runner-guard guards a pod of namespace with these
// labels, as RunnerContainer does, from the two facts that decide it: the
// controllers' watch predicates ask it of every pod event without building
// a *corev1.Pod.
func (h *Handler) Guards(namespace string, podLabels labels.Labels) bool {
	return h.runnerPodSpec(namespace, podLabels) != nil
}

// runnerPodSpec is the runnerPods entry matching a pod outside the exempt
// namespaces, nil when none does.
func (h *Handler) runnerPodSpec(namespace string, podLabels labels.Labels) *RunnerPodSpec {
	if slices.Contains(h.exempt, namespace) {
		return nil
	}
	if h.runnerNamespaces != nil && !h.runnerNamespaces[namespace] {
		return nil
	}
	return matchRunnerLabels(podLabels, h.specs)
}

// RunnerRunning reports whether the runner container of a guarded pod is
// running: only then can its process hold a job.
func (h *Handler) RunnerRunning(pod *corev1.Pod) bool {
	c, ok := h.RunnerContainer(pod)
	return ok && runnerContainerRunning(pod, c)
}

// Resolve answers, as an admission decision would, which runner a guarded
// pod runs. It returns ErrNotGuarded for other pods, and an error naming the
// problem when GitHub must not be asked about it (a borrowed owner
// reference, an unreadable ARC object, an unknown or unbound scope,
// unusable credentials).
func (h *Handler) Resolve(ctx context.Context, pod *corev1.Pod) (Resolved, error) {
	if _, ok := h.RunnerContainer(pod); !ok {
		return Resolved{}, ErrNotGuarded
	}
	spec := matchRunnerPod(pod, h.specs)
	res := h.decider.resolver.resolve(ctx, pod, spec)
	r := review{resolution: res}
	if !r.askable() {
		return Resolved{ARC: res.ARC}, resolutionError(res)
	}
	return Resolved{Runner: res.Runner, Target: res.Target, ARC: res.ARC}, nil
}

// resolutionError is the one problem of a resolution that is not askable.
func resolutionError(res resolution) error {
	for _, err := range []error{res.NotOwner, res.ObjectErr, res.ScopeErr, res.CredsErr, res.HostErr} {
		if err != nil {
			return err
		}
	}
	if res.NotBound != "" {
		return fmt.Errorf("runner %q: %s", res.Target.Name, res.NotBound)
	}
	return errors.New("runner cannot be asked about")
}

// Unregistered records that runner-guard itself removed the runner of pod
// on GitHub (the disruption controller's DELETE), so this replica answers
// the pod's deletion as recently admitted, without asking GitHub again.
func (h *Handler) Unregistered(pod *corev1.Pod, t Target) {
	if pod != nil {
		h.decider.removed(memoryKeysOf(pod.UID, t))
	}
}

// resolve reads, once, everything the runner rules decide on, into the
// review, from the pod decide settled on (for a DELETE, the live pod
// readLive read): the runner behind the pod (ARC's object or the pod's own
// facts: name, scope, credentials, and the ghclient.Runner GitHub is asked
// about), the node's deadline for Karpenter's DELETE, what the
// memories hold of the runner (whether the pod's deletion was admitted
// moments ago, GitHub's "busy", failure or look-up lately: the only read of
// them), and for an eviction the disruption budget it is charged to, with one
// of its disruptions reserved. Nothing here asks GitHub or decides.
func (d *decider) resolve(ctx context.Context, r *review) {
	r.resolution = d.resolver.resolve(ctx, r.Pod, r.Spec)
	if d.policy.HonorNodeDeadlines && r.Operation == OperationDelete && !r.DryRun {
		d.readNodeDeadline(ctx, r)
	}
	if r.askable() {
		d.recall(r)
	}
	if r.Operation == OperationEvict && !r.DryRun {
		r.PDBBlocks, r.PDBSeveral, r.PDBInFlight, r.budgetHold, r.PDBReserveErr = d.budgets.ReserveFor(ctx, d.pods, d.pods, r.Pod)
	}
}

// askable reports whether the resolver found a runner GitHub may be asked about.
func (r *review) askable() bool {
	res := r.resolution
	return res.NotOwner == nil && res.ObjectErr == nil && res.ScopeErr == nil && res.CredsErr == nil && res.HostErr == nil && res.NotBound == ""
}
