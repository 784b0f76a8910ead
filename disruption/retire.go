package disruption

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// A decision's pod is looked at every retireLook, for up to retireWatch, to
// see it go: an admitted eviction may still be refused by a budget, another
// webhook or another replica's count, and the pod then stays.
const (
	retireLook  = 500 * time.Millisecond
	retireWatch = 30 * time.Second
)

// retireAttempts bounds the deletes of one EphemeralRunner: after them ARC
// replaces it anyway, once its runner fails to start.
const retireAttempts = 6

// EphemeralRunnerRetirer deletes an EphemeralRunner (*arc.Resolver.Retire).
type EphemeralRunnerRetirer interface {
	Retire(ctx context.Context, run *arc.Runner) error
}

var _ EphemeralRunnerRetirer = &arc.Resolver{}

// Retirer deletes, outside the admission call, the EphemeralRunners of
// runners runner-guard unregistered, so ARC's EphemeralRunnerSet creates a
// fresh runner instead of restarting the pod with a dead registration.
//
// It retires one only once the pod the decision was about (its UID) is seen
// terminating or gone: an admitted eviction the API server then refuses
// leaves the pod, and deleting its EphemeralRunner would have ARC delete the
// pod the budget kept. A pod that stays for retireWatch is forgotten, with a
// log line; nothing else reads the EphemeralRunner of a review (an eviction
// review carries no UID, and a forged one must not delete anything).
//
// Every replica runs one (it needs no leader): the replica whose webhook
// admitted a deletion retires its EphemeralRunner, so a decision on any
// replica is followed up whoever leads. The delete carries the object's UID
// as precondition, so a newer EphemeralRunner of the same name is never
// deleted; a failed one is retried with backoff, retireAttempts times.
type Retirer struct {
	runners EphemeralRunnerRetirer
	// pods reads the decision's pod live.
	pods    client.Reader
	now     func() time.Time
	look    time.Duration
	watch   time.Duration
	metrics *webhook.Metrics
	log     logr.Logger
	queue   workqueue.TypedRateLimitingInterface[retireItem]
	// pending counts the items queued or waiting for their pod.
	pending atomic.Int64
}

var (
	_ webhook.Retirements            = &Retirer{}
	_ manager.Runnable               = &Retirer{}
	_ manager.LeaderElectionRunnable = &Retirer{}
)

type retireItem struct {
	key types.NamespacedName
	uid types.UID
	// pod is the UID of the pod the decision was about; since is when it was queued.
	pod   types.UID
	since time.Time
}

// NewRetirer returns a Retirer; pods reads pods live (not a cache, which
// may not have seen the pod go yet); metrics may be nil.
func NewRetirer(runners EphemeralRunnerRetirer, pods client.Reader, metrics *webhook.Metrics, log logr.Logger) *Retirer {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[retireItem](500*time.Millisecond, 30*time.Second)
	return &Retirer{
		runners: runners, pods: pods, metrics: metrics, log: log, now: time.Now, look: retireLook, watch: retireWatch,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[retireItem]{Name: "retire"}),
	}
}

// Add queues the EphemeralRunner of run, to retire once the pod of UID pod
// (ARC names it after the EphemeralRunner) is going; it never blocks.
func (r *Retirer) Add(run arc.Runner, pod types.UID) {
	if run.Kind != arc.Kind || run.EphemeralRunner.Name == "" {
		return
	}
	r.pending.Add(1)
	r.queue.Add(retireItem{key: run.EphemeralRunner, uid: run.UID, pod: pod, since: r.now()})
}

// NeedLeaderElection is false: each replica retires what its webhook admitted.
func (r *Retirer) NeedLeaderElection() bool { return false }

// Start deletes queued EphemeralRunners until ctx ends.
func (r *Retirer) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	for r.next(ctx) {
	}
	return nil
}

// Len is how many EphemeralRunners wait to be retired (or for their pod to go).
func (r *Retirer) Len() int { return int(r.pending.Load()) }

func (r *Retirer) next(ctx context.Context) bool {
	item, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(item)
	going, err := r.podGoing(ctx, item)
	if err == nil && !going {
		if r.now().Sub(item.since) < r.watch {
			r.queue.AddAfter(item, r.look)
			return true
		}
		r.queue.Forget(item)
		r.pending.Add(-1)
		r.log.Info("the pod of an unregistered runner stayed (its eviction was refused after runner-guard admitted it); its EphemeralRunner is kept, and ARC replaces the runner once it fails",
			"pod", item.key.String(), "uid", item.pod, "watched", r.watch.String())
		return true
	}
	if err == nil {
		run := &arc.Runner{Kind: arc.Kind, EphemeralRunner: item.key, UID: item.uid}
		err = r.runners.Retire(ctx, run)
	}
	r.metrics.ObserveRetired(err)
	switch {
	case err == nil:
		r.queue.Forget(item)
		r.pending.Add(-1)
		r.log.V(1).Info("retired the EphemeralRunner of an unregistered runner", "ephemeralRunner", item.key.String())
	case r.queue.NumRequeues(item) < retireAttempts-1:
		r.log.Info("cannot retire the EphemeralRunner yet; retrying", "ephemeralRunner", item.key.String(), "error", err.Error())
		r.queue.AddRateLimited(item)
	default:
		r.queue.Forget(item)
		r.pending.Add(-1)
		r.log.Error(err, "cannot retire the EphemeralRunner; ARC replaces it after its runner fails to start", "ephemeralRunner", item.key.String())
	}
	return true
}

// podGoing reports whether the decision's pod is terminating or gone (no
// pod of that name, or one with another UID).
func (r *Retirer) podGoing(ctx context.Context, item retireItem) (bool, error) {
	if r.pods == nil {
		return true, nil
	}
	pod := &corev1.Pod{}
	err := r.pods.Get(ctx, item.key, pod)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading pod %s: %w", item.key, err)
	}
	return pod.UID != item.pod || pod.DeletionTimestamp != nil, nil
}
