package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	return Resolved{Runner: res.Target.runner(), Target: res.Target, ARC: res.ARC}, nil
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
		h.decider.memory.remember(pod.UID, t)
		h.decider.busy.forget(t)
	}
}

// JobClause names, for messages, what a busy runner's pod holds: the job
// from its EphemeralRunner's job fields when known (repository, workflow
// run, job name), and how long the pod has run (the job started after it).
// It is "" when neither is known.
func JobClause(run *arc.Runner, pod *corev1.Pod, now time.Time) string {
	var job string
	if run != nil {
		job = run.Job.String()
	}
	var since string
	if pod != nil {
		start := pod.CreationTimestamp.Time
		if pod.Status.StartTime != nil {
			start = pod.Status.StartTime.Time
		}
		if !start.IsZero() && now.Sub(start) >= time.Second {
			since = fmt.Sprintf("its pod started %s ago", now.Sub(start).Round(time.Second))
		}
	}
	switch {
	case job != "" && since != "":
		return job + ", " + since
	case job != "":
		return job
	}
	return since
}

// parenthesized renders a non-empty clause as " (clause)".
func parenthesized(clause string) string {
	if clause == "" {
		return ""
	}
	return " (" + clause + ")"
}
