package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/ghclient"
)

// GitHub is what the decision needs from GitHub; *ghclient.Client implements it.
type GitHub interface {
	Unregister(ctx context.Context, scope ghclient.Scope, runnerName string, idHint int64) (ghclient.Outcome, error)
	Status(ctx context.Context, scope ghclient.Scope, runnerName string) (ghclient.RunnerStatus, error)
}

// decider applies the decision table of DESIGN.md, rules 1 to 10 in order.
type decider struct {
	policy        policy
	specs         []RunnerPodSpec
	github        GitHub
	githubTimeout time.Duration
	memory        *admittedMemory
}

func newDecider(cfg Config, gh GitHub, now func() time.Time) *decider {
	return &decider{
		policy: policy{
			OnError:          cfg.OnError,
			BypassUsers:      cfg.Bypass.Users,
			BypassGroups:     cfg.Bypass.Groups,
			ForceAnnotation:  cfg.forceAnnotation(),
			ExemptNamespaces: cfg.ExemptNamespaces,
			BusyRetryAfter:   cfg.BusyRetryAfter.Duration,
		},
		specs:         cfg.RunnerPods,
		github:        gh,
		githubTimeout: cfg.GitHubTimeout.Duration,
		memory:        newAdmittedMemory(cfg.RecentlyAdmittedTTL.Duration, now),
	}
}

// decide returns the decision for one review and the runner it concerns (zero
// when the decision was made before the runner was resolved).
func (d *decider) decide(ctx context.Context, r review) (Decision, Target) {
	r.Spec = matchRunnerPod(r.Pod, d.specs)
	if dec, ok := ruleNotRunnerPod(r); ok {
		return dec, Target{}
	}
	if dec, ok := ruleAlreadyTerminating(r); ok {
		return dec, Target{}
	}
	if dec, ok := ruleRunnerNotRunning(r); ok {
		return dec, Target{}
	}
	if dec, ok := ruleBypass(r, d.policy); ok {
		return dec, Target{}
	}
	target, scopeErr := resolveTarget(r.Pod, r.Spec)
	if dec, ok := ruleScopeUnknown(r, scopeErr, d.policy); ok {
		return dec, target
	}
	if !r.DryRun && d.memory.admitted(r.Pod.UID, target) {
		return allow(ReasonRecentlyAdmitted, "deletion of this pod was admitted moments ago; runner already unregistered"), target
	}

	res := d.askGitHub(ctx, r, target)
	rules := []func() (Decision, bool){
		func() (Decision, bool) { return ruleDryRun(r, target, res, d.policy) },
		func() (Decision, bool) { return ruleUnregistered(r, target, res) },
		func() (Decision, bool) { return ruleRunnerBusy(r, target, res, d.policy) },
		func() (Decision, bool) { return ruleRateLimited(r, target, res) },
		func() (Decision, bool) { return ruleGitHubError(r, target, res, d.policy) },
	}
	for _, rule := range rules {
		if dec, ok := rule(); ok {
			if dec.Reason == ReasonUnregistered || dec.Reason == ReasonRunnerNotFound {
				d.memory.remember(r.Pod.UID, target)
			}
			return dec, target
		}
	}
	// Unreachable with a well-behaved GitHub client: an outcome it never returns.
	res.Err = fmt.Errorf("GitHub client returned unexpected outcome %s", res.Outcome)
	dec, _ := ruleGitHubError(r, target, res, d.policy)
	return dec, target
}

// askGitHub makes the one GitHub call of a decision, bounded by the GitHub timeout.
func (d *decider) askGitHub(ctx context.Context, r review, t Target) githubResult {
	ctx, cancel := context.WithTimeout(ctx, d.githubTimeout)
	defer cancel()
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
