package webhook

import (
	"context"
	"time"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/ghclient"
)

// GitHub is what the decision needs from GitHub; *ghclient.Client implements it.
type GitHub interface {
	Unregister(ctx context.Context, scope ghclient.Scope, runnerName string, idHint int64) (ghclient.Outcome, error)
	Status(ctx context.Context, scope ghclient.Scope, runnerName string) (ghclient.RunnerStatus, error)
}

// decider runs the decision table (rules.go) over the facts of one review,
// resolving the runner and asking GitHub only when a rule needs them.
type decider struct {
	policy        policy
	specs         []RunnerPodSpec
	table         []rule
	github        GitHub
	githubTimeout time.Duration
	memory        *admittedMemory
}

func newDecider(cfg Config, gh GitHub, now func() time.Time) *decider {
	return &decider{
		policy:        cfg.policy(),
		specs:         cfg.RunnerPods,
		table:         decisionTable(),
		github:        gh,
		githubTimeout: cfg.GitHubTimeout.Duration,
		memory:        newAdmittedMemory(cfg.RecentlyAdmittedTTL.Duration, now),
	}
}

// decide returns the decision for one review and the runner it concerns (zero
// when the decision was made before the runner was resolved).
func (d *decider) decide(ctx context.Context, r review) (Decision, Target) {
	r.Spec = matchRunnerPod(r.Pod, d.specs)
	reached := stageRequest
	for _, rl := range d.table {
		for reached < rl.needs {
			reached++
			d.resolve(ctx, &r, reached)
		}
		if dec, ok := rl.decide(&r, &d.policy); ok {
			if dec.Reason == ReasonUnregistered || dec.Reason == ReasonRunnerNotFound {
				d.memory.remember(r.Pod.UID, r.Target)
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
		r.Target, r.ScopeErr = resolveTarget(r.Pod, r.Spec)
		r.RecentlyAdmitted = r.ScopeErr == nil && d.memory.admitted(r.Pod.UID, r.Target)
	case stageGitHub:
		r.GitHub = d.askGitHub(ctx, r)
	}
}

// askGitHub makes the one GitHub call of a decision, bounded by the GitHub timeout.
func (d *decider) askGitHub(ctx context.Context, r *review) githubResult {
	ctx, cancel := context.WithTimeout(ctx, d.githubTimeout)
	defer cancel()
	t := r.Target
	log := logr.FromContextOrDiscard(ctx).WithValues("runner", t.Name, "scope", t.Scope.String(), "runnerIDHint", t.IDHint)
	start := time.Now()
	if r.DryRun {
		st, err := d.github.Status(ctx, t.Scope, t.Name)
		log.V(1).Info("asked GitHub for runner status (dry run)", "state", st.State, "error", errString(err), "took", time.Since(start))
		if err != nil {
			return githubResult{Err: err}
		}
		return githubResult{Status: &st}
	}
	out, err := d.github.Unregister(ctx, t.Scope, t.Name, t.IDHint)
	log.V(1).Info("asked GitHub to unregister runner", "outcome", out.String(), "error", errString(err), "took", time.Since(start))
	return githubResult{Outcome: out, Err: err}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
