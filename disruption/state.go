package disruption

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Guard is what the controller shares with the admission decision:
// *webhook.Handler, so both agree on which pods are guarded runner pods and
// which runner each one runs.
type Guard interface {
	RunnerContainer(pod *corev1.Pod) (string, bool)
	// Guards is RunnerContainer's verdict from a pod's namespace and labels.
	Guards(namespace string, podLabels labels.Labels) bool
	RunnerRunning(pod *corev1.Pod) bool
	Resolve(ctx context.Context, pod *corev1.Pod) (webhook.Resolved, error)
	Unregistered(pod *corev1.Pod, t webhook.Target)
}

var _ Guard = &webhook.Handler{}

// GitHub is the atomic unregister; *ghclient.Router implements it, and every
// request passes through its credential's budget.
type GitHub interface {
	Unregister(ctx context.Context, r ghclient.Runner) (ghclient.Outcome, error)
}

var _ GitHub = &ghclient.Router{}

// Listing says whether GitHub's shared per-scope runner listing shows a
// runner busy. Busy is proof enough for a hint and for waiting; "not busy"
// is not proof of idle (the listing lags), so it only ends hints
// runner-guard set, and only the DELETE releases a runner.
type Listing interface {
	Busy(ctx context.Context, r ghclient.Runner) (bool, error)
	// Pressed reports that the runner's credential budget is pressed: the
	// drain then asks the listing before spending a DELETE.
	Pressed(r ghclient.Runner) bool
	// Taken is when the listing answering for r was taken, zero when no
	// fresh one is held. It never sends a request.
	Taken(ctx context.Context, r ghclient.Runner) time.Time
	// Any reports whether a fresh listing of any scope is held.
	Any() bool
	// Refreshes reports whether Busy takes a stale listing anew.
	Refreshes() bool
}

// RouterListing is the Router's shared per-scope listing (ghclient/listing.go).
// With Refresh a stale listing is taken anew (one request per 100 runners of
// the scope, shared); without it only a listing someone else took answers.
type RouterListing struct {
	Router  *ghclient.Router
	Refresh bool
}

var _ Listing = RouterListing{}

// errNotListed: no listing answers for the runner (none fresh, or none taken).
var errNotListed = errors.New("no listing of the runner's scope")

// Busy asks the listing, refreshing it when it is older than its TTL.
func (l RouterListing) Busy(ctx context.Context, r ghclient.Runner) (bool, error) {
	refresh := ghclient.RefreshNever
	if l.Refresh {
		refresh = ghclient.RefreshStale
	}
	li, err := l.Router.Listed(ctx, r, refresh)
	if err != nil {
		return false, err
	}
	switch li.State {
	case ghclient.ListedBusy:
		return true, nil
	case ghclient.ListedIdle, ghclient.ListedAbsent:
		return false, nil
	}
	return false, errNotListed
}

// Pressed is the Router's budget pressure for the runner's credential.
func (l RouterListing) Pressed(r ghclient.Runner) bool { return l.Router.Pressed(r) }

// Taken implements Listing.
func (l RouterListing) Taken(ctx context.Context, r ghclient.Runner) time.Time {
	li, err := l.Router.Listed(ctx, r, ghclient.RefreshNever)
	if err != nil || li.State == ghclient.ListedUnknown {
		return time.Time{}
	}
	return li.Taken
}

// Any implements Listing.
func (l RouterListing) Any() bool { return l.Router.HasListing() }

// Refreshes implements Listing.
func (l RouterListing) Refreshes() bool { return l.Refresh }

// JobState is what the controller knows about a runner pod's job.
type JobState int

const (
	// JobUnknown: nothing says either way (no job fields, no listing):
	// hints stay as they are.
	JobUnknown JobState = iota
	// JobRunning: a source proves the runner holds a job.
	JobRunning
	// JobNotProven: the pod's sources show no job (an EphemeralRunner
	// without job fields, a listing showing the runner idle). Not proof of
	// idle: only the atomic DELETE is.
	JobNotProven
	// JobEnded: the runner can hold no job any more: the pod is terminating
	// or completed, its runner container is not running, or its
	// EphemeralRunner is gone or done.
	JobEnded
)

func (s JobState) String() string {
	switch s {
	case JobRunning:
		return "running"
	case JobNotProven:
		return "not-proven"
	case JobEnded:
		return "ended"
	}
	return "unknown"
}

// jobFacts are what jobState decides on.
type jobFacts struct {
	// PodDone: the pod is terminating or its runner container is not running.
	PodDone bool
	// ARC is the pod's verified EphemeralRunner (nil: none read).
	ARC *arc.Runner
	// ARCGone: the pod's controller is an EphemeralRunner that no longer exists.
	ARCGone bool
	// Listed is the listing's answer (nil: not asked or failed).
	Listed *bool
}

// jobState reads a pod's job state from its facts, the strongest first.
func jobState(f jobFacts) JobState {
	switch {
	case f.PodDone, f.ARCGone:
		return JobEnded
	case f.ARC != nil && f.ARC.Removed != "":
		return JobEnded
	case f.ARC != nil && f.ARC.Job.Started():
		return JobRunning
	case f.ARC != nil:
		return JobNotProven
	case f.Listed != nil && *f.Listed:
		return JobRunning
	case f.Listed != nil:
		return JobNotProven
	}
	return JobUnknown
}

// podDone reports a pod whose runner can hold no job: terminating, or its
// runner container not running.
func podDone(g Guard, pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || !g.RunnerRunning(pod)
}

// ephemeralRunnerOwned reports whether the pod's controller is an EphemeralRunner.
func ephemeralRunnerOwned(pod metav1.Object) bool {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != arc.Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	return err == nil && gv.Group == arc.Group
}

// objectGone reports an arc error that says the pod's object does not exist.
func objectGone(err error) bool {
	var u *arc.UnavailableError
	return errors.As(err, &u) && u.Reason == arc.UnavailableNotFound
}
