package disruption

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Defaults of the drain's busy-runner backoff.
const (
	DefaultBusyRetryFirst = time.Second
	DefaultBusyRetryMax   = 15 * time.Second
)

// Options configure the controllers Setup adds.
type Options struct {
	// Guard is the webhook's handler: which pods are guarded, which runner each runs.
	Guard Guard
	// PodDeleted, when set, hears of each guarded pod the controllers' cache
	// sees deleted (the re-run controller's lost-job watch), so runner-guard
	// keeps one cache of pods, not two.
	PodDeleted func(ctx context.Context, pod *corev1.Pod)
	// GitHub unregisters runners of draining nodes (the webhook's Router).
	GitHub GitHub
	// Listing is asked by the drain before a DELETE while the budget is
	// pressed; nil: never.
	Listing Listing
	// HintListing is the job source of the hints of pods without job fields
	// (legacy runners); nil: they get no hints.
	HintListing Listing
	// Retirer retires the EphemeralRunners of released runners; nil: none.
	Retirer *Retirer
	// Hints are the hints kept on busy runners' pods; empty turns the hint
	// controller off (hints it set earlier then stay).
	Hints []Hint
	// Budgets keeps a job budget (budgets.go) for each busy runner's pod;
	// off, the job budgets made earlier are removed at start.
	Budgets bool
	// Drain releases the runners of draining nodes.
	Drain bool
	// HonorNodeDeadlines is --honor-node-deadlines: the webhook lets
	// Karpenter delete a busy runner's pod past its NodeClaim's deadline.
	HonorNodeDeadlines bool
	// BusyRetryFirst and BusyRetryMax bound the backoff of a busy runner's
	// DELETE on a draining node (defaults 1s and 15s).
	BusyRetryFirst, BusyRetryMax time.Duration
	// Metrics are the drain reports' and lost jobs'; nil: unregistered ones.
	Metrics *Metrics
	// Events records Events on Nodes; nil records none.
	Events events.EventRecorder
	Log    logr.Logger
	// Namespaces limits the controllers' watches of pods and EphemeralRunners
	// (the webhook's runnerNamespaces); empty: every namespace.
	Namespaces []string
	// Now is the clock of messages; default time.Now.
	Now func() time.Time
	// JobKeys verifies legacy pods' runner-guard.io/job annotations,
	// a job source of their hints; nil: none is read.
	JobKeys *jobannotation.Keyring
}

// Setup adds the hint and drain controllers (leader-elected) to mgr. The
// Retirer is added by the caller: it runs on every replica.
//
// The controllers read from a cache of their own, started with them on the
// leader only: the manager's cache stays empty, so nothing the webhook or
// the Retirer needs waits for a watch that cannot sync (RBAC missing, an API
// server that is slow), and a replica that does not lead watches nothing.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Guard == nil {
		return errors.New("disruption: Options.Guard is required")
	}
	if o.Drain && o.GitHub == nil {
		return errors.New("disruption: Options.GitHub is required to drain")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Events == nil {
		o.Events = &events.FakeRecorder{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.BusyRetryFirst <= 0 {
		o.BusyRetryFirst = DefaultBusyRetryFirst
	}
	if o.BusyRetryMax <= 0 {
		o.BusyRetryMax = DefaultBusyRetryMax
	}
	erServed, err := ephemeralRunnersServed(mgr.GetRESTMapper())
	switch {
	case err != nil:
		o.Log.Error(err, "cannot tell whether the API server serves EphemeralRunners: scale-set pods get no hints from job fields until a restart")
	case !erServed:
		o.Log.Info("the API server serves no EphemeralRunners (actions.github.com/v1alpha1): scale-set pods get no hints from job fields until ARC's CRDs are installed (runner-guard then starts reading them)")
	}
	scheme, err := cacheScheme()
	if err != nil {
		return err
	}
	// podReader copies every pod it reads into a new *corev1.Pod, so the
	// cache's deep copy before that would be a second copy of each.
	noDeepCopy := true
	copts := cache.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper(), DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&cachedPod{}: {UnsafeDisableDeepCopy: &noDeepCopy}}}
	if len(o.Namespaces) > 0 {
		copts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			copts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cacheConfig(mgr.GetConfig()), copts)
	if err != nil {
		return fmt.Errorf("disruption cache: %w", err)
	}
	// A cache.Cache is no LeaderElectionRunnable: the manager starts it on the leader.
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("disruption cache: %w", err)
	}
	// Reads from the controllers' cache (pods as *corev1.Pod), writes to the API server.
	cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: podReader{cache: c}}})
	if err != nil {
		return fmt.Errorf("disruption client: %w", err)
	}
	isRunnerPod := func(cp *cachedPod) bool {
		return o.Guard.Guards(cp.Namespace, cp.labels) || cp.carriesOurs()
	}
	runnerPods := predicate.NewTypedPredicateFuncs(isRunnerPod)
	// The drain's reports learn from a held job's pod's last state how its
	// job ended, as does the lost-job watch.
	var reports *drainReports
	if o.Drain {
		reports = newDrainReports(o.Now, o.Events, o.Metrics)
	}
	if o.PodDeleted != nil || reports != nil {
		inf, err := c.GetInformer(ctx, &cachedPod{})
		if err != nil {
			return fmt.Errorf("disruption cache: pods: %w", err)
		}
		deleted := func(ctx context.Context, pod *corev1.Pod) {
			reports.gone(pod, o.Guard)
			if o.PodDeleted != nil {
				o.PodDeleted(ctx, pod)
			}
		}
		if _, err := inf.AddEventHandler(podDeletes(ctx, isRunnerPod, deleted)); err != nil {
			return fmt.Errorf("disruption cache: pods: %w", err)
		}
	}
	if !o.Budgets {
		live, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return fmt.Errorf("job budget clean-up: %w", err)
		}
		if err := mgr.Add(removeJobBudgetsAtStart(live, o.Namespaces, o.Log)); err != nil {
			return fmt.Errorf("job budget clean-up: %w", err)
		}
	}
	if len(o.Hints) > 0 || o.Budgets {
		r := &hintReconciler{pods: cl, guard: o.Guard, listing: o.HintListing, enabled: o.Hints, budgets: o.Budgets, events: o.Events, said: newOnce(), jobKeys: o.JobKeys, unverifiedGauge: o.Metrics.unverifiedGauge()}
		hintPods := runnerPods
		if o.HintListing != nil && !o.HintListing.Refreshes() {
			r.watch = newListingWatch(o.HintListing, c, o.Guard, ghclient.ListingTTL/2)
			hintPods = predicate.NewTypedPredicateFuncs(func(cp *cachedPod) bool {
				return isRunnerPod(cp) && (ephemeralRunnerOwned(cp) || hasJobAnnotation(cp) || r.watch.admits(cp))
			})
		}
		b := ctrl.NewControllerManagedBy(mgr).Named("runner-hints").
			WatchesRawSource(source.Kind(c, &cachedPod{}, &handler.TypedEnqueueRequestForObject[*cachedPod]{}, hintPods)).
			WithOptions(controller.Options{MaxConcurrentReconciles: 4})
		if r.watch != nil {
			b = b.WatchesRawSource(source.TypedFunc[reconcile.Request](r.watch.start))
		}
		if o.Budgets {
			b = b.WatchesRawSource(source.Kind(c, &policyv1.PodDisruptionBudget{}, budgetPods(c, isRunnerPod)))
		}
		if erServed {
			r.ephemeral = arc.NewResolver(arc.Options{Reader: c})
			b = b.WatchesRawSource(source.Kind(c, ephemeralRunner(), handler.TypedEnqueueRequestsFromMapFunc(samePod)))
		}
		if err := b.Complete(r); err != nil {
			return fmt.Errorf("hint controller: %w", err)
		}
	}
	if !o.Drain {
		return nil
	}
	if err := c.IndexField(ctx, &cachedPod{}, podNodeNameIndex, func(obj client.Object) []string {
		if pod, ok := obj.(*cachedPod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	evictor, err := newOnceEvictor(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("drain controller: %w", err)
	}
	d := &drainReconciler{
		cached: cl, live: mgr.GetAPIReader(), guard: o.Guard, github: o.GitHub, listing: o.Listing, retirer: o.Retirer,
		events: o.Events, backoff: newBackoff(o.BusyRetryFirst, o.BusyRetryMax, o.Now), said: newOnce(), now: o.Now,
		log: o.Log.WithName("drain"), budgets: budgetLedgerOf(o.Guard, o.Now), budgetLocks: newKeyedLocks(), evictLocks: newKeyedLocks(), grants: newEvictionGrants(o.Now),
		reports: reports, evictor: evictor, jobKeys: o.JobKeys,
		budgetPoll: budgetPollEvery, honorNodeDeadlines: o.HonorNodeDeadlines,
	}
	// A node drained no more, or gone, is looked at once more for its report.
	draining := predicate.NewTypedPredicateFuncs(func(node *corev1.Node) bool { return drainReason(node) != "" || d.reports.tracking(node.Name) })
	b := ctrl.NewControllerManagedBy(mgr).Named("runner-drain").
		WatchesRawSource(source.Kind(c, &corev1.Node{}, &handler.TypedEnqueueRequestForObject[*corev1.Node]{}, draining)).
		WatchesRawSource(source.Kind(c, &cachedPod{}, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, cp *cachedPod) []reconcile.Request {
			return nodeRequest(cp.Spec.NodeName)
		}), runnerPods)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4})
	if erServed {
		b = b.WatchesRawSource(source.Kind(c, ephemeralRunner(), handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, er *unstructured.Unstructured) []reconcile.Request {
			pod := &corev1.Pod{}
			if err := cl.Get(ctx, types.NamespacedName{Namespace: er.GetNamespace(), Name: er.GetName()}, pod); err != nil {
				return nil
			}
			return nodeRequest(pod.Spec.NodeName)
		})))
	}
	if err := b.Complete(d); err != nil {
		return fmt.Errorf("drain controller: %w", err)
	}
	return nil
}

// ephemeralRunner is an empty EphemeralRunner to watch.
func ephemeralRunner() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(arc.GroupVersionKind())
	return u
}

// samePod maps an EphemeralRunner to its pod: ARC names them alike.
func samePod(_ context.Context, obj *unstructured.Unstructured) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
}

// ephemeralRunnersServed asks discovery whether EphemeralRunners exist.
func ephemeralRunnersServed(m meta.RESTMapper) (bool, error) {
	gvk := arc.GroupVersionKind()
	_, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("discovery of %s: %w", gvk, err)
}

// budgetLedgerOf is the webhook's ledger of evictions in flight when the
// Guard is this replica's webhook, so both count the same evictions; else
// one of the drain's own.
func budgetLedgerOf(g Guard, now func() time.Time) *webhook.BudgetLedger {
	if h, ok := g.(interface{ Budgets() *webhook.BudgetLedger }); ok {
		return h.Budgets()
	}
	return webhook.NewBudgetLedger(webhook.DefaultWebhookTimeout, now)
}

// podDeletes hands each deleted guarded pod to deleted, as a *corev1.Pod
// (also one the watch missed the deletion of, seen gone at a relist).
func podDeletes(ctx context.Context, isRunnerPod func(*cachedPod) bool, deleted func(context.Context, *corev1.Pod)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if cp, ok := obj.(*cachedPod); ok && isRunnerPod(cp) {
			deleted(ctx, cp.pod())
		}
	}}
}
