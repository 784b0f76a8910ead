package webhook

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/ghclient"
)

// ask makes the one GitHub call of a decision the runner rules left open.
// What GitHub said of the runner lately (the busy, look-up and failure
// memories) is what resolve recalled into the review; the answer is written
// back by settle (record), with call and cut saying what it came from.
func (d *decider) ask(ctx context.Context, r *review) githubResult {
	if !r.Recalled.Read {
		return githubResult{} // only bypass users and disrupted pods get here: nothing to ask
	}
	readOnly := r.ReadOnly
	// ctx ends at the review's deadline (decide).
	deadline, _ := ctx.Deadline()
	if left := time.Until(deadline); !readOnly && left < minUnregisterTime {
		// An unregister that may not finish before the API server gives
		// up must not start: GitHub could remove the runner while the
		// API server tells the deleter the webhook failed.
		return githubResult{Err: &outOfTimeError{left: left}}
	}
	return d.askGitHub(ctx, r, readOnly)
}

// askGitHub makes the one GitHub call of a decision, bounded by the GitHub timeout.
func (d *decider) askGitHub(ctx context.Context, r *review, readOnly bool) githubResult {
	ctx, cancel := context.WithTimeout(ctx, d.githubTimeout)
	defer cancel()
	// Each namespace gets its fair share of the credential's budget.
	ctx = ghclient.WithNamespace(ctx, r.Namespace)
	t := r.Target
	log := logr.FromContextOrDiscard(ctx).WithValues("runner", t.Name, "scope", t.Scope.String(), "runnerIDHint", t.IDHint)
	start := time.Now()
	if readOnly {
		// A dry run may reuse any remembered answer. A bypass user's or a
		// disrupted pod's delete lets the pod go on "idle": it reuses only a
		// remembered "busy", which can only keep a pod longer.
		if res := r.Recalled.Status; r.Recalled.StatusKnown && (r.DryRun || res.busy()) {
			log.V(1).Info("answered a read-only look-up from memory", "state", res.Status, "error", errString(res.Err))
			return res
		}
		sctx := ctx
		if r.DryRun {
			// A dry run lets no pod go: it yields to unregisters that can, so
			// dry runs in a loop cannot spend other teams' budget.
			sctx = ghclient.WithPriority(ctx, ghclient.PriorityRecheck)
		}
		st, err := d.github.Status(sctx, r.Runner)
		log.V(1).Info("asked GitHub for runner status (read-only)", "state", st.State, "error", errString(err), "took", time.Since(start))
		res := githubResult{Err: err, call: callStatus, cut: ctx.Err() != nil}
		if err == nil {
			res.Status = &st
		}
		return res
	}
	prio := ghclient.PriorityRelease
	if !r.Released {
		// An evictor that has just unregistered the runner (runner-guard's
		// drain, on any replica) is not refused on a listing taken while
		// the job ran, nor demoted: that would keep a pod whose runner is gone.
		res, listed := d.knownBusy(ctx, r)
		if res.Outcome == ghclient.Busy {
			log.V(1).Info("runner known busy: not asking GitHub to unregister it", "from", res.From, "took", time.Since(start))
			return res
		}
		if r.Busy.Known && listed == ghclient.ListedUnknown {
			// Busy lately and nothing cheaper says its job ended: a re-check,
			// which yields to unregisters that can let a pod go.
			prio = ghclient.PriorityRecheck
		}
	}
	if f := r.Recalled.Failure; f.Known {
		if f.Left > 0 {
			log.V(1).Info("this pod's last decision failed moments ago: not asking GitHub", "error", errString(f.Err), "retryIn", f.Left)
			return githubResult{Err: f.Err, retryIn: f.Left, From: knowGitHub}
		}
		// A repeat of a failed decision yields to unregisters that can let
		// a pod go.
		prio = ghclient.PriorityRecheck
	}
	out, err := d.github.Unregister(ghclient.WithPriority(ctx, prio), r.Runner)
	log.V(1).Info("asked GitHub to unregister runner", "outcome", out.String(), "error", errString(err), "took", time.Since(start))
	var spent *ghclient.Spent
	if !errors.As(err, &spent) {
		return githubResult{Outcome: out, Err: err, From: knowGitHub, call: callUnregister}
	}
	// Nothing was sent when the budget held it (call none): only GitHub's
	// failures back off.
	if r.Busy.Wait > 0 {
		// The budget is spent and the runner was busy moments ago: say so
		// from memory rather than fail.
		return githubResult{Outcome: ghclient.Busy, From: knowMemory}
	}
	return githubResult{Outcome: out, Err: err, From: knowGitHub}
}

// knownBusy answers "busy" from knowledge that costs less than a DELETE: the
// scope's shared listing, taken anew only for a runner busy lately or when the
// budget is pressed (else only a fresh one is read, at no cost). A listing
// that says idle proves nothing (it lags GitHub's broker): the DELETE decides.
// It also returns what the listing said (ListedUnknown: no listing).
func (d *decider) knownBusy(ctx context.Context, r *review) (githubResult, ghclient.ListedState) {
	ls, err := d.github.Listed(ctx, r.Runner, listingRefresh(r.Busy.Known, d.github.Pressed(r.Runner)))
	switch {
	case err == nil && ls.State == ghclient.ListedBusy:
		return githubResult{Outcome: ghclient.Busy, From: knowListing, listedAt: ls.Taken}, ls.State
	case err != nil && r.Busy.Wait > 0:
		// No listing to be had (the budget is spent, GitHub failed): the
		// remembered "busy" still holds.
		return githubResult{Outcome: ghclient.Busy, From: knowMemory}, ghclient.ListedUnknown
	case err != nil:
		return githubResult{}, ghclient.ListedUnknown
	}
	return githubResult{}, ls.State
}

// busy reports a look-up that found the runner busy.
func (g githubResult) busy() bool {
	return g.Err == nil && g.Status != nil && g.Status.State == ghclient.StateBusy
}

// listingRefresh is when a decision takes its scope's listing anew: for a
// runner busy lately, once the listing is stale; whatever the runner, when
// the listing held shows it busy and is ghclient.ListedBusyMaxAge old, so an
// eviction retried every 5 s is let go within one retry of its job's end
// (the renewal is 304s while nothing changed). With the budget pressed, a
// stale listing is taken anew for any runner, and a busy one is not renewed
// sooner: the listing then saves a DELETE for every runner of the scope.
func listingRefresh(busyLately, pressed bool) ghclient.Refresh {
	switch {
	case pressed:
		return ghclient.RefreshStale
	case busyLately:
		return ghclient.RefreshStale | ghclient.RefreshBusy
	}
	return ghclient.RefreshBusy
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// minUnregisterTime is the least time left in which an unregister is
// started: a DELETE GitHub answers in well under it, and one that is cut off
// leaves the deleter refused while the runner may be gone.
const minUnregisterTime = time.Second
