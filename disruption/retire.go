package disruption

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
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
// Every replica runs one (it needs no leader): the replica whose webhook
// admitted a deletion retires its EphemeralRunner, so a decision on any
// replica is followed up whoever leads. The delete carries the object's UID
// as precondition, so a newer EphemeralRunner of the same name is never
// deleted; a failed one is retried with backoff, retireAttempts times.
type Retirer struct {
	runners EphemeralRunnerRetirer
	metrics *webhook.Metrics
	log     logr.Logger
	queue   workqueue.TypedRateLimitingInterface[retireItem]
}

var (
	_ webhook.Retirements            = &Retirer{}
	_ manager.Runnable               = &Retirer{}
	_ manager.LeaderElectionRunnable = &Retirer{}
)

type retireItem struct {
	key types.NamespacedName
	uid types.UID
}

// NewRetirer returns a Retirer; metrics may be nil.
func NewRetirer(runners EphemeralRunnerRetirer, metrics *webhook.Metrics, log logr.Logger) *Retirer {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[retireItem](500*time.Millisecond, 30*time.Second)
	return &Retirer{
		runners: runners, metrics: metrics, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[retireItem]{Name: "retire"}),
	}
}

// Add queues the EphemeralRunner of run; it never blocks.
func (r *Retirer) Add(run arc.Runner) {
	if run.Kind != arc.Kind || run.EphemeralRunner.Name == "" {
		return
	}
	r.queue.Add(retireItem{key: run.EphemeralRunner, uid: run.UID})
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

// Len is how many EphemeralRunners wait to be retired.
func (r *Retirer) Len() int { return r.queue.Len() }

func (r *Retirer) next(ctx context.Context) bool {
	item, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(item)
	run := &arc.Runner{Kind: arc.Kind, EphemeralRunner: item.key, UID: item.uid}
	err := r.runners.Retire(ctx, run)
	r.metrics.ObserveRetired(err)
	switch {
	case err == nil:
		r.queue.Forget(item)
		r.log.V(1).Info("retired the EphemeralRunner of an unregistered runner", "ephemeralRunner", item.key.String())
	case r.queue.NumRequeues(item) < retireAttempts-1:
		r.log.Info("cannot retire the EphemeralRunner yet; retrying", "ephemeralRunner", item.key.String(), "error", err.Error())
		r.queue.AddRateLimited(item)
	default:
		r.queue.Forget(item)
		r.log.Error(err, "cannot retire the EphemeralRunner; ARC replaces it after its runner fails to start", "ephemeralRunner", item.key.String())
	}
	return true
}
