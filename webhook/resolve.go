package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		h.decider.removed(memoryKeysOf(pod.UID, t))
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

// resolve reads, once, everything the runner rules decide on, into the
// review: the live pod of a DELETE (its oldObject may be forged), the runner
// behind the pod (ARC's object or the pod's own facts: name, scope,
// credentials), the node's deadline for Karpenter's DELETE, what the
// memories hold of the runner (whether the pod's deletion was admitted
// moments ago, GitHub's "busy", failure or look-up lately: the only read of
// them), and for an eviction the disruption budget it is charged to, with one
// of its disruptions reserved. Nothing here asks GitHub or decides.
func (d *decider) resolve(ctx context.Context, r *review) {
	if r.Operation == OperationDelete {
		if d.readLive(ctx, r); r.LiveErr != nil || r.LiveGone != "" {
			return
		}
	}
	r.resolution = d.resolver.resolve(ctx, r.Pod, r.Spec)
	if d.policy.HonorNodeDeadlines && r.Operation == OperationDelete && !r.DryRun && karpenterUser(r.User.Username, &d.policy) {
		dl, ok, err := ReadNodeDeadline(ctx, d.pods, r.Pod.Spec.NodeName)
		if err != nil {
			// Unread, the node is held as without the flag.
			logr.FromContextOrDiscard(ctx).V(1).Info("cannot read the NodeClaim of the pod's node", "node", r.Pod.Spec.NodeName, "error", err.Error())
		}
		if ok {
			r.NodeDeadline = dl
		}
	}
	if r.askable() {
		d.recall(r)
	}
	if r.Operation == OperationEvict && !r.DryRun {
		r.PDBBlocks, r.PDBSeveral, r.PDBInFlight, r.budgetHold, r.PDBReserveErr = d.blockingPDB(ctx, r.Pod)
	}
}

// askable reports whether the resolver found a runner GitHub may be asked about.
func (r *review) askable() bool {
	res := r.resolution
	return res.NotOwner == nil && res.ObjectErr == nil && res.ScopeErr == nil && res.CredsErr == nil && res.HostErr == nil && res.NotBound == ""
}

// readLive replaces the DELETE review's pod with the live pod of the same
// name and UID, or records why there is none.
func (d *decider) readLive(ctx context.Context, r *review) {
	live := &corev1.Pod{}
	err := d.pods.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		r.LiveGone = fmt.Sprintf("no live pod has the UID %q the review names", r.Pod.UID)
	case apierrors.IsForbidden(err) && namespaceDeleting(ctx, d.pods, r.Namespace):
		// A namespace being deleted takes its Roles with it, and with them
		// the right to read its pods that guardedNamespaces grants: the
		// review's own copy of the pod decides, or every runner pod there
		// would be refused until someone restored the Role, and the
		// namespace would stay Terminating.
		logr.FromContextOrDiscard(ctx).Info("the pod may no longer be read in a namespace being deleted; deciding from the review's copy", "error", err.Error())
	case err != nil:
		r.LiveErr = err
	case live.UID != r.Pod.UID:
		// The same words as for no pod at all: the answer goes to whoever sent
		// the review, and the live UID is what a forged review would need.
		r.LiveGone = fmt.Sprintf("no live pod has the UID %q the review names", r.Pod.UID)
	default:
		r.Pod = live
		if spec := matchRunnerPod(live, d.specs); spec != nil {
			r.Spec = spec
		}
	}
}

// namespaceDeleting is arc.NamespaceDeleting's verdict alone.
func namespaceDeleting(ctx context.Context, pods client.Reader, name string) bool {
	_, deleting := arc.NamespaceDeleting(ctx, pods, name)
	return deleting
}

// blockingPDB names the PodDisruptionBudget for which the API server's
// eviction subresource would refuse evicting the pod now (pdbBlocks), once
// the evictions let through under it and the API server has not yet
// accounted for are counted (this replica's, and the other replicas'
// reservations in the budget's Lease); else it reserves one of the budget's
// disruptions for this eviction (hold). A failed read of the budgets blocks
// nothing: the API server checks them itself after the webhooks. A failed
// reservation blocks (reserveErr): the budget allows the eviction, but
// another replica may have taken the last disruption, and the runner must
// not be unregistered for an eviction the API server then refuses.
func (d *decider) blockingPDB(ctx context.Context, pod *corev1.Pod) (blocking string, several []string, inFlight int, hold BudgetHold, reserveErr error) {
	read := d.budgets.SeePods(ctx, d.pods, pod.Namespace)
	var pdbs policyv1.PodDisruptionBudgetList
	if err := d.pods.List(ctx, &pdbs, client.InNamespace(pod.Namespace)); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot list PodDisruptionBudgets; the API server will check them", "error", err.Error())
		return "", nil, 0, BudgetHold{}, nil
	}
	charged, several := ChargedBudget(pod, BudgetsThatCount(pdbs.Items))
	if charged == nil {
		return "", several, 0, BudgetHold{}, nil
	}
	hold, inFlight, ok, err := d.budgets.ReserveShared(ctx, charged, pod, read)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("cannot reserve a disruption with the other replicas; refusing the eviction", "budget", charged.Name, "error", err.Error())
		return charged.Name, nil, inFlight, BudgetHold{}, err
	}
	if !ok {
		return charged.Name, nil, inFlight, BudgetHold{}, nil
	}
	return "", nil, 0, hold, nil
}
