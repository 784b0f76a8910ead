package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/webhook/arc"

	"github.com/runner-guard/runner-guard/ghclient"
)

// GitHub is what the decision needs from GitHub; *ghclient.Router implements
// it, with the flags' credentials or a runner's own (ARC's githubConfigSecret).
type GitHub interface {
	Unregister(ctx context.Context, r ghclient.Runner) (ghclient.Outcome, error)
	Status(ctx context.Context, r ghclient.Runner) (ghclient.RunnerStatus, error)
}

var _ GitHub = &ghclient.Router{}

// RunnerResolver reads what a runner controller's own objects say about the
// runner of a pod; *arc.Resolver implements it for ARC's scale-set mode.
type RunnerResolver interface {
	Resolve(ctx context.Context, pod *corev1.Pod) (*arc.Runner, error)
	Retire(ctx context.Context, run *arc.Runner) error
}

var _ RunnerResolver = &arc.Resolver{}

// decider runs the decision table (rules.go) over the facts of one review,
// resolving the runner and asking GitHub only when a rule needs them.
type decider struct {
	policy        policy
	specs         []RunnerPodSpec
	table         []rule
	github        GitHub
	githubTimeout time.Duration
	// pods reads live pods and PodDisruptionBudgets through the API server.
	pods   client.Reader
	memory *admittedMemory
	busy   *busyMemory
	// runners reads ARC's EphemeralRunners; nil reads labels only.
	runners RunnerResolver
	// retire deletes the EphemeralRunner of a runner runner-guard unregistered.
	retire  bool
	metrics *Metrics
	// fallbacks remembers which fallbacks to labels were reported, so each
	// cause is logged once and each pod gets one Event.
	fallbacks *fallbackMemory
}

func newDecider(cfg Config, gh GitHub, pods client.Reader, now func() time.Time) *decider {
	pol := cfg.policy()
	return &decider{
		retire:        cfg.retireEphemeralRunners(),
		fallbacks:     newFallbackMemory(),
		policy:        pol,
		specs:         cfg.RunnerPods,
		table:         decisionTable(),
		github:        gh,
		githubTimeout: cfg.GitHubTimeout.Duration,
		pods:          pods,
		memory:        newAdmittedMemory(cfg.RecentlyAdmittedTTL.Duration, now),
		busy:          newBusyMemory(pol.BusyRetryAfter, pol.BusyRetryMax, now),
	}
}

// decide returns the decision for one review and the runner it concerns (zero
// when the decision was made before the runner was resolved).
func (d *decider) decide(ctx context.Context, r review) (Decision, Target) {
	r.Spec = matchRunnerPod(r.Pod, d.specs)
	r.Disrupted = r.Spec != nil && disrupted(r.Pod)
	reached := stageRequest
	for _, rl := range d.table {
		for reached < rl.needs {
			reached++
			d.resolve(ctx, &r, reached)
		}
		if dec, ok := rl.decide(&r, &d.policy); ok {
			switch dec.Reason {
			case ReasonUnregistered, ReasonRunnerNotFound:
				d.memory.remember(r.Pod.UID, r.Target)
				d.busy.forget(r.Target)
			}
			if dec.Reason == ReasonUnregistered && r.ARC != nil && d.retire {
				dec = d.retireEphemeralRunner(ctx, r.ARC, dec)
			}
			return dec, r.Target
		}
	}
	// The table's last rule always decides; reaching here is a programming error.
	panic("webhook: decision table ended without a decision")
}

// resolve adds the facts of stage s to the review.
func (d *decider) resolve(ctx context.Context, r *review, s stage) {
	switch s {
	case stageRunner:
		if r.Operation == OperationDelete {
			// The review's oldObject may be forged: decide from the live pod.
			if d.readLive(ctx, r); r.LiveErr != nil || r.LiveGone != "" {
				return
			}
		}
		d.resolveRunner(ctx, r)
		if r.ScopeErr == nil && r.LiveErr == nil && r.CredsErr == nil {
			r.RecentlyAdmitted = d.memory.admitted(r.Pod.UID, r.Target)
			r.Busy.Wait = d.busy.recall(r.Target)
		}
		if r.Operation == OperationEvict && !r.DryRun {
			r.PDBBlocks = d.blockingPDB(ctx, r.Pod)
		}
	case stageGitHub:
		if r.ScopeErr != nil || r.CredsErr != nil {
			return // only bypass users and disrupted pods get here: nothing to ask
		}
		r.GitHub = d.askGitHub(ctx, r)
		if !r.readOnly(&d.policy) {
			switch {
			case r.GitHub.Err == nil && r.GitHub.Outcome == ghclient.Busy:
				r.Busy.Next = d.busy.busy(r.Target)
			case r.GitHub.Err == nil:
				d.busy.forget(r.Target)
			}
		}
	}
}

// resolveRunner finds the runner behind the pod: from its runner
// controller's own objects where they can be read (ARC's EphemeralRunner),
// else from the pod's labels and env as its runner pod spec says.
func (d *decider) resolveRunner(ctx context.Context, r *review) {
	if d.runners != nil {
		run, err := d.runners.Resolve(ctx, r.Pod)
		var unavailable *arc.UnavailableError
		var creds *arc.CredentialsError
		var invalid *arc.InvalidError
		switch {
		case err == nil && run != nil:
			r.ARC = run
			r.Target = Target{Scope: run.Scope, Name: run.Name, IDHint: run.ID, Creds: run.Creds}
			return
		case errors.As(err, &unavailable):
			r.Fallback = d.fallbacks.report(ctx, r.Pod, unavailable)
		case errors.As(err, &creds):
			r.Target, _ = resolveTarget(r.Pod, r.Spec)
			r.CredsErr = err
			return
		case errors.As(err, &invalid):
			r.ScopeErr = err
			return
		case err != nil:
			r.LiveErr = err
			return
		}
	}
	r.Target, r.ScopeErr = resolveTarget(r.Pod, r.Spec)
}

// retireEphemeralRunner deletes the EphemeralRunner of a runner runner-guard
// just unregistered, so ARC's EphemeralRunnerSet creates a fresh runner
// instead of restarting the pod with a dead registration. A failure does not
// change the answer: the runner is already gone from GitHub.
func (d *decider) retireEphemeralRunner(ctx context.Context, run *arc.Runner, dec Decision) Decision {
	err := d.runners.Retire(ctx, run)
	d.metrics.retired(err)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "cannot retire the EphemeralRunner; ARC replaces it after its runner fails to start", "ephemeralRunner", run.EphemeralRunner.String())
		dec.Message += fmt.Sprintf("; retiring EphemeralRunner %s failed (%v): ARC replaces it after the runner fails to start", run.EphemeralRunner, err)
		return dec
	}
	dec.Message += fmt.Sprintf("; EphemeralRunner %s deleted so ARC creates a fresh runner", run.EphemeralRunner)
	return dec
}

// readLive replaces the DELETE review's pod with the live pod of the same
// name and UID, or records why there is none.
func (d *decider) readLive(ctx context.Context, r *review) {
	live := &corev1.Pod{}
	err := d.pods.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		r.LiveGone = "no such pod exists"
	case err != nil:
		r.LiveErr = err
	case live.UID != r.Pod.UID:
		r.LiveGone = fmt.Sprintf("the review names UID %q but the live pod has UID %q", r.Pod.UID, live.UID)
	default:
		r.Pod = live
		if spec := matchRunnerPod(live, d.specs); spec != nil {
			r.Spec = spec
		}
	}
}

// blockingPDB names a PodDisruptionBudget selecting the pod that allows no
// disruption now, or "". A failed read blocks nothing: the API server checks
// the budgets itself after the webhooks.
func (d *decider) blockingPDB(ctx context.Context, pod *corev1.Pod) string {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := d.pods.List(ctx, &pdbs, client.InNamespace(pod.Namespace)); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot list PodDisruptionBudgets; the API server will check them", "error", err.Error())
		return ""
	}
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labelsOf(pod)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			return pdb.Name
		}
	}
	return ""
}

// disrupted reports a pod the control plane marked Failed with a
// DisruptionTarget condition (pod GC, taint eviction) rather than one whose
// containers ended.
func disrupted(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// askGitHub makes the one GitHub call of a decision, bounded by the GitHub timeout.
func (d *decider) askGitHub(ctx context.Context, r *review) githubResult {
	ctx, cancel := context.WithTimeout(ctx, d.githubTimeout)
	defer cancel()
	t := r.Target
	log := logr.FromContextOrDiscard(ctx).WithValues("runner", t.Name, "scope", t.Scope.String(), "runnerIDHint", t.IDHint)
	start := time.Now()
	if r.readOnly(&d.policy) {
		st, err := d.github.Status(ctx, t.runner())
		log.V(1).Info("asked GitHub for runner status (read-only)", "state", st.State, "error", errString(err), "took", time.Since(start))
		if err != nil {
			return githubResult{Err: err}
		}
		return githubResult{Status: &st}
	}
	out, err := d.github.Unregister(ctx, t.runner())
	log.V(1).Info("asked GitHub to unregister runner", "outcome", out.String(), "error", errString(err), "took", time.Since(start))
	return githubResult{Outcome: out, Err: err}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
