package disruption

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Events the drain records on the Node (and, for released runners, the pod).
const (
	EventDrainWaitsForJob   = "DrainWaitsForJob"
	EventJobOutlivesGrace   = "JobOutlivesGracePeriod"
	EventRunnerReleased     = "RunnerReleasedForDrain"
	EventRunnerNotReleased  = "RunnerNotReleased"
	EventDrainWaitsForPDB   = "DrainWaitsForDisruptionBudget"
	podNodeNameIndex        = "spec.nodeName"
	provenBusyRecheck       = time.Minute
	unresolvedRecheck       = 30 * time.Second
	drainUnregisterDeadline = 10 * time.Second
	// legacyRegistrationGrace is how long a legacy runner's container may
	// run before GitHub knowing nothing of it counts as "not found": its
	// config.sh registers only after the container starts, and ARC writes
	// actions-runner/id once it has. (A scale-set runner's JIT registration
	// exists before its pod.)
	legacyRegistrationGrace = 2 * time.Minute
)

// drainReconciler releases the runners of a draining node: an idle one is
// unregistered at once and its pod deleted, so it takes no new job there;
// a busy one is asked again, with a bounded backoff, until its job ends.
type drainReconciler struct {
	// cached reads Nodes and pods from the cache and deletes pods.
	cached client.Client
	// live lists NodeClaims (rare; no watch, no cache).
	live    client.Reader
	guard   Guard
	github  GitHub
	listing Listing
	retirer *Retirer
	events  events.EventRecorder
	backoff *backoff
	said    *once
	reports *drainReports
	now     func() time.Time
	log     logr.Logger
	// noNodeClaims says once that the API server serves no NodeClaims.
	noNodeClaims sync.Once
	// noEviction says once that pods/eviction is not granted.
	noEviction sync.Once
}

var _ reconcile.Reconciler = &drainReconciler{}

// Reconcile releases what it can on one node and comes back when the next
// busy runner is due.
func (r *drainReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := r.cached.Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			r.reports.finish(req.Name, true)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	why := drainReason(node)
	if why == "" {
		r.reports.finish(node.Name, false)
		return reconcile.Result{}, nil
	}
	r.reports.draining(node)
	var pods corev1.PodList
	if err := r.cached.List(ctx, &pods, client.MatchingFields{podNodeNameIndex: node.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the pods of node %s: %w", node.Name, err)
	}
	// Release the node's runners side by side: a GitHub DELETE takes a few
	// hundred milliseconds, and a node of idle runners should empty at once.
	var (
		mu   sync.Mutex
		next time.Duration
		wg   sync.WaitGroup
		sem  = make(chan struct{}, releaseConcurrency)
		// The node's NodeClaim, listed once for all its pods.
		claim = &nodeClaimOnce{}
		// Each namespace's PodDisruptionBudgets, listed once for its pods.
		budgets = &budgetsOnce{byNS: map[string][]policyv1.PodDisruptionBudget{}}
	)
	for i := range pods.Items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := r.release(ctx, node, why, &pods.Items[i], claim, budgets)
			mu.Lock()
			defer mu.Unlock()
			if d > 0 && (next == 0 || d < next) {
				next = d
			}
		})
	}
	wg.Wait()
	r.reports.observe(node, pods.Items, r.guard)
	return reconcile.Result{RequeueAfter: next}, nil
}

// releaseConcurrency bounds the GitHub requests one node's drain has in
// flight (GitHub allows 100 concurrent requests per credential, shared with
// the webhook).
const releaseConcurrency = 8

// release handles one pod of a draining node and returns when to look again
// (0: nothing more to do for it).
func (r *drainReconciler) release(ctx context.Context, node *corev1.Node, why string, pod *corev1.Pod, claim *nodeClaimOnce, budgets *budgetsOnce) time.Duration {
	key := client.ObjectKeyFromObject(pod)
	if _, ok := r.guard.RunnerContainer(pod); !ok {
		return 0
	}
	if podDone(r.guard, pod) {
		r.forget(pod)
		return 0
	}
	log := r.log.WithValues("node", node.Name, "pod", key)
	res, err := r.guard.Resolve(ctx, pod)
	if err != nil {
		if errors.Is(err, webhook.ErrNotGuarded) {
			return 0
		}
		if r.said.first(string(pod.UID) + "/unresolved") {
			log.Info("cannot tell which runner the pod runs; it is left to the drain and the webhook", "error", err.Error())
			r.events.Eventf(node, pod, corev1.EventTypeWarning, EventRunnerNotReleased, "Drain",
				"node %s is %s; runner-guard cannot release the runner of pod %s: %v", node.Name, why, key, err)
		}
		return unresolvedRecheck
	}
	if res.ARC != nil && res.ARC.Removed != "" {
		return 0 // ARC removed it itself and deletes the pod.
	}
	if res.ARC != nil && res.ARC.Job.Started() {
		// The job fields prove a job runs: no GitHub request until they
		// change (ARC then marks the EphemeralRunner done, an event).
		r.waiting(ctx, node, why, pod, res, claim)
		return provenBusyRecheck
	}
	if wait := r.backoff.due(pod.UID); wait > 0 {
		return wait
	}
	if budget := r.blockingBudget(ctx, pod, budgets); budget != "" {
		// The pod's eviction would be refused: unregistering its runner
		// first would leave a pod with a dead runner the budget keeps.
		if r.said.first(string(pod.UID) + "/pdb/" + node.Name) {
			r.events.Eventf(node, pod, corev1.EventTypeNormal, EventDrainWaitsForPDB, "Drain",
				"node %s is %s; %s allows no disruption of pod %s now, so runner-guard leaves runner %q registered and asks again", node.Name, why, budget, key, res.Runner.Name)
		}
		return r.backoff.retry(pod.UID)
	}
	if r.listing != nil && r.listing.Pressed(res.Runner) {
		// The budget is pressed: a listing that shows the runner busy
		// (shared by its scope, a point per 100 runners) saves a DELETE.
		if busy, err := r.listing.Busy(ctx, res.Runner); err == nil && busy {
			r.waiting(ctx, node, why, pod, res, claim)
			return r.backoff.retryBusy(pod.UID)
		}
	}
	prio := ghclient.PriorityRelease
	if r.backoff.knownBusy(pod.UID) {
		// Asking again about a runner seen busy yields to the unregisters
		// that can let a pod go now, as the webhook's re-checks do.
		prio = ghclient.PriorityRecheck
	}
	gctx, cancel := context.WithTimeout(ghclient.WithPriority(ctx, prio), drainUnregisterDeadline)
	out, err := r.github.Unregister(gctx, res.Runner)
	cancel()
	var rl *ghclient.RateLimited
	switch {
	case errors.As(err, &rl):
		return r.backoff.retryAfter(pod.UID, rl.RetryAfter)
	case err != nil:
		log.Info("cannot unregister the runner of a draining node's pod; retrying", "error", err.Error())
		return r.backoff.retry(pod.UID)
	case out == ghclient.Busy:
		r.waiting(ctx, node, why, pod, res, claim)
		return r.backoff.retryBusy(pod.UID)
	case out == ghclient.NotFound && r.mayStillRegister(pod, res):
		// Deleting the pod of a runner that registers in a moment could kill
		// the job it then takes: the drain, not someone's delete, would
		// cancel it. Asked again until it registers or the grace ends.
		return r.backoff.retry(pod.UID)
	case out == ghclient.Removed, out == ghclient.NotFound:
		if !r.released(ctx, node, why, pod, res, out) {
			return r.backoff.retry(pod.UID)
		}
		return 0
	}
	log.Info("unexpected unregister outcome; retrying", "outcome", out.String())
	return r.backoff.retry(pod.UID)
}

// mayStillRegister reports a legacy runner GitHub may not know yet: no
// actions-runner/id on its pod, and its container started less than
// legacyRegistrationGrace ago.
func (r *drainReconciler) mayStillRegister(pod *corev1.Pod, res webhook.Resolved) bool {
	if res.ARC != nil && res.ARC.Kind != arc.LegacyKind || res.Target.IDHint != 0 {
		return false
	}
	name, _ := r.guard.RunnerContainer(pod)
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name && cs.State.Running != nil && !cs.State.Running.StartedAt.IsZero() {
			return r.now().Sub(cs.State.Running.StartedAt.Time) < legacyRegistrationGrace
		}
	}
	return false
}

// released evicts the pod of a runner GitHub no longer has (and retires its
// EphemeralRunner), so nothing restarts it with a dead registration. It
// reports false when a PodDisruptionBudget refused the eviction: the pod is
// evicted again at the next look.
func (r *drainReconciler) released(ctx context.Context, node *corev1.Node, why string, pod *corev1.Pod, res webhook.Resolved, out ghclient.Outcome) bool {
	key := client.ObjectKeyFromObject(pod)
	// This replica's webhook answers the pod's eviction without asking GitHub again.
	r.guard.Unregistered(pod, res.Target)
	err := r.evict(ctx, pod)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
	case apierrors.IsTooManyRequests(err):
		// A budget that allowed it a moment ago no longer does.
		r.log.Info("runner unregistered, but a PodDisruptionBudget refused evicting its pod; evicting it again later", "node", node.Name, "pod", key, "error", err.Error())
		return false
	default:
		r.log.Error(err, "runner unregistered, but its pod could not be evicted; the drain evicts it", "node", node.Name, "pod", key)
	}
	if res.ARC != nil && res.ARC.Kind == arc.Kind && r.retirer != nil {
		r.retirer.Add(*res.ARC)
	}
	what := "unregistered"
	if out == ghclient.NotFound {
		what = "not registered"
	}
	r.log.Info("released the runner of a draining node", "node", node.Name, "pod", key, "runner", res.Runner.Name, "github", what)
	r.reports.releasedIdle(node, pod)
	r.events.Eventf(node, pod, corev1.EventTypeNormal, EventRunnerReleased, "Drain",
		"node %s is %s: runner %q of pod %s was idle and is %s on GitHub; its pod is evicted so it takes no job here", node.Name, why, res.Runner.Name, key, what)
	r.forget(pod)
	return true
}

// evict evicts pod through the eviction subresource, so PodDisruptionBudgets
// hold as they do for a drain. Without pods/eviction granted (RBAC from
// before it was needed) it deletes the pod, as runner-guard used to.
func (r *drainReconciler) evict(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	background := metav1.DeletePropagationBackground
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background},
	}
	err := r.cached.SubResource("eviction").Create(ctx, pod, eviction)
	if !apierrors.IsForbidden(err) {
		return err
	}
	r.noEviction.Do(func() {
		r.log.Info("cannot evict pods (grant create on pods/eviction); deleting the pods of released runners instead, which PodDisruptionBudgets do not hold", "error", err.Error())
	})
	return r.cached.Delete(ctx, pod, client.Preconditions{UID: &uid}, client.PropagationPolicy(background))
}

// budgetsOnce is one reconcile's PodDisruptionBudgets, listed at most once
// per namespace.
type budgetsOnce struct {
	mu   sync.Mutex
	byNS map[string][]policyv1.PodDisruptionBudget
}

// blockingBudget names what keeps the eviction subresource from evicting pod
// now: a PodDisruptionBudget that allows no disruption, or several selecting
// it; "" when nothing does. A failed list blocks nothing: the eviction
// checks the budgets itself.
func (r *drainReconciler) blockingBudget(ctx context.Context, pod *corev1.Pod, budgets *budgetsOnce) string {
	budgets.mu.Lock()
	defer budgets.mu.Unlock()
	pdbs, ok := budgets.byNS[pod.Namespace]
	if !ok {
		var list policyv1.PodDisruptionBudgetList
		if err := r.live.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			r.log.V(1).Info("cannot list PodDisruptionBudgets; the eviction checks them", "namespace", pod.Namespace, "error", err.Error())
		}
		pdbs = list.Items
		budgets.byNS[pod.Namespace] = pdbs
	}
	blocking, several := webhook.BlockingBudgets(pod, webhook.WithoutJobBudgets(pdbs))
	switch {
	case len(several) > 0:
		return fmt.Sprintf("more than one PodDisruptionBudget (%s)", strings.Join(several, ", "))
	case blocking != "":
		return "PodDisruptionBudget " + blocking
	}
	return ""
}

// waiting says, once per pod, what the drain waits for, and warns ahead of
// time when Karpenter's terminationGracePeriod will end the job.
func (r *drainReconciler) waiting(ctx context.Context, node *corev1.Node, why string, pod *corev1.Pod, res webhook.Resolved, claim *nodeClaimOnce) {
	key := client.ObjectKeyFromObject(pod)
	job := webhook.JobClause(res.ARC, pod, r.now())
	if job == "" {
		job = "a job"
	}
	r.reports.waitsFor(node, pod, job)
	if r.said.first(string(pod.UID) + "/waits/" + node.Name) {
		r.events.Eventf(node, pod, corev1.EventTypeWarning, EventDrainWaitsForJob, "Drain",
			"node %s is %s; runner %q of pod %s is running %s; runner-guard releases it as soon as the job ends", node.Name, why, res.Runner.Name, key, job)
	}
	graceSaid := string(pod.UID) + "/grace/" + node.Name
	if !karpenterDisrupted(node) || r.said.has(graceSaid) {
		return
	}
	nc := claim.get(func() *unstructured.Unstructured { return r.nodeClaim(ctx, node) })
	if nc == nil {
		return
	}
	deadline, tgp, ok := graceDeadline(nc)
	if !ok || !r.said.first(graceSaid) {
		return
	}
	r.events.Eventf(node, pod, corev1.EventTypeWarning, EventJobOutlivesGrace, "Drain", "%s",
		graceWarning(nc.GetName(), deadline, tgp, key, job, r.now()))
}

// nodeClaimOnce is one reconcile's look-up of its node's NodeClaim: a live
// list of every NodeClaim, made at most once, and only for a pod whose
// grace warning is still to be said.
type nodeClaimOnce struct {
	once sync.Once
	nc   *unstructured.Unstructured
}

func (o *nodeClaimOnce) get(find func() *unstructured.Unstructured) *unstructured.Unstructured {
	o.once.Do(func() { o.nc = find() })
	return o.nc
}

// nodeClaim finds the node's NodeClaim, nil when there is none or the API
// server serves no NodeClaims (said once).
func (r *drainReconciler) nodeClaim(ctx context.Context, node *corev1.Node) *unstructured.Unstructured {
	var list unstructured.UnstructuredList
	gvk := NodeClaimGVK()
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.live.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			r.noNodeClaims.Do(func() {
				r.log.Info("the API server serves no Karpenter NodeClaims; no terminationGracePeriod warnings", "kind", gvk.String())
			})
			return nil
		}
		r.log.V(1).Info("cannot list NodeClaims", "error", err.Error())
		return nil
	}
	return nodeClaimOf(node, list.Items)
}

func (r *drainReconciler) forget(pod *corev1.Pod) {
	r.backoff.forget(pod.UID)
	r.said.forget(string(pod.UID) + "/")
}

// nodeRequest maps a runner pod's event to its node, so a job's end (the pod
// completes) is seen at once.
func nodeRequest(nodeName string) []reconcile.Request {
	if nodeName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: nodeName}}}
}
