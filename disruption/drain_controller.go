package disruption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Events the drain records on a runner's pod, in its namespace (the Node is
// the related object): a Node's Events are read in another namespace, and
// must not name other teams' pods or jobs.
const (
	EventEvictionRefused   = "DrainEvictionRefused"
	EventDrainWaitsForJob  = "DrainWaitsForJob"
	EventJobOutlivesGrace  = "JobOutlivesGracePeriod"
	EventRunnerReleased    = "RunnerReleasedForDrain"
	EventRunnerNotReleased = "RunnerNotReleased"
	EventDrainWaitsForPDB  = "DrainWaitsForDisruptionBudget"
	podNodeNameIndex       = "spec.nodeName"
	provenBusyRecheck      = time.Minute
	unresolvedRecheck      = 30 * time.Second
	budgetRecheck          = time.Second
	budgetPollEvery        = 50 * time.Millisecond
	budgetWait             = 2 * time.Second
	refusedRecheck         = 10 * time.Second
	// refusedHold is how long a refused eviction keeps the drain from
	// unregistering more runners in its namespace, unless one is admitted.
	refusedHold             = 2 * time.Minute
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
	// honorNodeDeadlines: the webhook lets Karpenter's DELETE past a
	// NodeClaim's deadline go (the grace warning says so).
	honorNodeDeadlines bool
	// noNodeClaims says once that the API server serves no NodeClaims.
	noNodeClaims sync.Once
	// noEviction says once that pods/eviction is not granted.
	noEviction sync.Once
	// budgets counts the evictions in flight under each budget (shared
	// with this replica's webhook); budgetLocks serialises the releases
	// under one budget.
	budgets     *webhook.BudgetLedger
	budgetLocks *keyedLocks
	evictLocks  *keyedLocks
	// grants says where pods/eviction is granted.
	grants *evictionGrants
	// evictor posts the drain's evictions (onceEvictor: without client-go's
	// retries).
	evictor evictor
	// jobKeys signs the completed record left on a released runner's pod.
	jobKeys *jobannotation.Keyring
	// refused remembers, per namespace, when a policy last refused an
	// eviction there: no further runner is unregistered there meanwhile.
	refused refusals
	// budgetPoll, when set, is how often a budget this drain just released
	// under is read again while it allows no disruption (up to budgetWait).
	budgetPoll    time.Duration
	lastReleaseMu sync.Mutex
	lastRelease   map[types.NamespacedName]time.Time
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
	)
	for i := range pods.Items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := r.release(ctx, node, why, &pods.Items[i], claim)
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
func (r *drainReconciler) release(ctx context.Context, node *corev1.Node, why string, pod *corev1.Pod, claim *nodeClaimOnce) time.Duration {
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
			r.events.Eventf(pod, node, corev1.EventTypeWarning, EventRunnerNotReleased, "Drain",
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
	if !r.refused.proven(pod.Namespace, r.now()) {
		// Until an eviction was admitted in the namespace, its releases go
		// one at a time: a policy that refuses them then costs one runner
		// unregistered, not the whole node's.
		unlockNS := r.budgetLocks.lock(types.NamespacedName{Namespace: pod.Namespace})
		if r.refused.proven(pod.Namespace, r.now()) {
			unlockNS()
		} else {
			defer unlockNS()
		}
	}
	if r.refused.recent(pod.Namespace, r.now()) && !r.said.has(string(pod.UID)+"/refused/"+node.Name) {
		// A policy refuses evictions here: unregistering another runner
		// would leave another pod with a dead runner. Only the pods whose
		// runners are already gone are evicted again.
		if r.said.first(string(pod.UID) + "/refusedhere/" + node.Name) {
			r.events.Eventf(pod, node, corev1.EventTypeNormal, EventEvictionRefused, "Drain",
				"node %s is %s; an eviction in namespace %s was refused by a policy a moment ago, so runner-guard leaves runner %q of pod %s registered until one is admitted",
				node.Name, why, pod.Namespace, res.Runner.Name, key)
		}
		return refusedRecheck
	}
	hold, unlock, budget := r.reserveBudget(ctx, pod)
	// The hold counts this release in flight under the budget (the ledger),
	// so the next release under it may read the budget now rather than
	// wait for this one's GitHub request and eviction.
	unlock()
	if budget != "" {
		// The pod's eviction would be refused: unregistering its runner
		// first would leave a pod with a dead runner the budget keeps.
		if r.said.first(string(pod.UID) + "/pdb/" + node.Name) {
			r.events.Eventf(pod, node, corev1.EventTypeNormal, EventDrainWaitsForPDB, "Drain",
				"node %s is %s; %s allows no disruption of pod %s now, so runner-guard leaves runner %q registered and asks again", node.Name, why, budget, key, res.Runner.Name)
		}
		// No GitHub request was made: look again soon, not on the busy
		// backoff, so the node empties as fast as the budget lets it.
		return budgetRecheck
	}
	// The disruption is given back unless the pod was evicted, or its runner
	// was unregistered: a pod whose runner is gone must go, so its disruption
	// stays reserved for the next eviction (until the reservation expires)
	// rather than let another runner be unregistered under the budget.
	evicted, unregistered := false, false
	defer func() {
		switch {
		case evicted:
			hold.Admitted()
		case !unregistered:
			hold.Cancel()
		}
	}()
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
		// Evictions under one budget go one at a time: the API server
		// retries an eviction whose budget write conflicts with another's
		// only after 500 ms, longer than a dozen evictions in a row take.
		if b := hold.Budget(); b != "" {
			unlockEv := r.evictLocks.lock(types.NamespacedName{Namespace: pod.Namespace, Name: b})
			defer unlockEv()
		}
		unregistered = true
		if evicted = r.released(ctx, node, why, pod, res, out); !evicted {
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
// EphemeralRunner once the pod goes), so nothing restarts it with a dead
// registration. It reports false when a PodDisruptionBudget or an admission
// webhook refused the eviction: the pod is evicted again at the next look.
func (r *drainReconciler) released(ctx context.Context, node *corev1.Node, why string, pod *corev1.Pod, res webhook.Resolved, out ghclient.Outcome) bool {
	key := client.ObjectKeyFromObject(pod)
	// This replica's webhook answers the pod's eviction without asking GitHub again.
	r.guard.Unregistered(pod, res.Target)
	r.dropJobHold(ctx, pod)
	err := r.evict(ctx, pod)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
	case apierrors.IsTooManyRequests(err):
		// A budget that allowed it a moment ago no longer does.
		r.log.Info("runner unregistered, but a PodDisruptionBudget refused evicting its pod; evicting it again later", "node", node.Name, "pod", key, "error", err.Error())
		return false
	case apierrors.IsForbidden(err):
		r.refused.mark(pod.Namespace, r.now())
		// pods/eviction is granted here (evict checked), so an admission
		// webhook or policy refused it: deleting the pod instead would
		// bypass that policy and the budgets. The pod stays for the next look.
		r.log.Info("runner unregistered, but the eviction of its pod was refused; the pod is kept and evicted again later", "node", node.Name, "pod", key, "error", err.Error())
		if r.said.first(string(pod.UID) + "/refused/" + node.Name) {
			r.events.Eventf(pod, node, corev1.EventTypeWarning, EventEvictionRefused, "Drain",
				"node %s is %s; runner %q of pod %s is %s on GitHub, but the eviction of the pod was refused (%v); runner-guard does not delete it instead, so that policy holds, and evicts it again later",
				node.Name, why, res.Runner.Name, key, outcomeWord(out), err)
		}
		return false
	default:
		r.log.Error(err, "runner unregistered, but its pod could not be evicted; the drain evicts it", "node", node.Name, "pod", key)
	}
	r.refused.admitted(pod.Namespace, r.now())
	if res.ARC != nil && res.ARC.Kind == arc.Kind && r.retirer != nil {
		r.retirer.Add(*res.ARC, pod.UID)
	}
	what := outcomeWord(out)
	r.log.Info("released the runner of a draining node", "node", node.Name, "pod", key, "runner", res.Runner.Name, "github", what)
	if r.reports.releasedIdle(node, pod) {
		// Once per pod and drain, as the report counts it.
		r.events.Eventf(pod, node, corev1.EventTypeNormal, EventRunnerReleased, "Drain",
			"node %s is %s: runner %q of pod %s was idle and is %s on GitHub; its pod is evicted so it takes no job here", node.Name, why, res.Runner.Name, key, what)
	}
	r.forget(pod)
	return true
}

// dropJobHold lets the pod of a runner GitHub no longer has go: no job can
// hold it, whatever a job annotation whose completed delivery was lost still
// says. Its job budget would refuse the eviction for good, and the
// annotation would bring the budget back, so both go before the eviction.
// A verified in_progress record becomes its job's completed (a tombstone),
// so a replay of that delivery cannot hold the pod again if it stays.
func (r *drainReconciler) dropJobHold(ctx context.Context, pod *corev1.Pod) {
	key := client.ObjectKeyFromObject(pod)
	if patch, ok := r.jobHoldPatch(pod); ok {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch.values()}})
		if err == nil {
			err = r.cached.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body))
		}
		if client.IgnoreNotFound(err) != nil {
			r.log.Info("cannot end the job annotation of a released runner's pod", "pod", key, "error", err.Error())
		}
	}
	if pod.Labels[webhook.LabelJobBudget] == "" {
		return
	}
	if err := deleteJobBudgets(ctx, r.cached, pod, []string{jobBudgetName(pod)}); err != nil {
		r.log.Info("cannot delete the job budget of a released runner's pod; the eviction may wait for it", "pod", key, "error", err.Error())
	}
}

// jobHoldPatch is the change that leaves pod's job annotation holding
// nothing (false: it holds nothing already): a verified in_progress record
// rewritten as completed now, under the secret that signed it; any other
// annotation that could still verify (one this replica cannot read or sign)
// removed.
func (r *drainReconciler) jobHoldPatch(pod *corev1.Pod) (HintPatch, bool) {
	if _, found := pod.Annotations[jobannotation.Annotation]; !found {
		return nil, false
	}
	rec, err := r.jobKeys.Read(pod)
	if err == nil && !rec.Running() {
		return nil, false
	}
	if err == nil {
		rec.State, rec.At, rec.VerifiedUntil = jobannotation.StateCompleted, r.now(), time.Time{}
		if value, err := r.jobKeys.Value(rec, string(pod.UID)); err == nil {
			return HintPatch{jobannotation.Annotation: &value}, true
		}
	}
	return HintPatch{jobannotation.Annotation: nil}, true
}

// outcomeWord says what GitHub answered, for messages.
func outcomeWord(out ghclient.Outcome) string {
	if out == ghclient.NotFound {
		return "not registered"
	}
	return "unregistered"
}

// evict evicts pod through the eviction subresource, so PodDisruptionBudgets
// and other admission policies hold as they do for a drain. Only where
// pods/eviction is not granted (RBAC from before it was needed) does it
// delete the pod, as runner-guard used to; a 403 from an eviction that is
// granted is a refusal, returned as it is.
func (r *drainReconciler) evict(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	background := metav1.DeletePropagationBackground
	if !r.grants.mayEvict(ctx, r.cached, pod.Namespace) {
		r.noEviction.Do(func() {
			r.log.Info("may not evict pods (grant create on pods/eviction); deleting the pods of released runners instead, which PodDisruptionBudgets do not hold", "namespace", pod.Namespace)
		})
		return r.cached.Delete(ctx, pod, client.Preconditions{UID: &uid}, client.PropagationPolicy(background))
	}
	eviction := &policyv1.Eviction{
		// The replica that gets it asks GitHub, not a listing taken while
		// the job ran.
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Annotations: map[string]string{webhook.EvictionReleasedAnnotation: "drain"}},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background},
	}
	return r.evictor.evict(ctx, eviction)
}

// evictor posts one eviction and returns the API server's answer.
type evictor interface {
	evict(ctx context.Context, eviction *policyv1.Eviction) error
}

var _ evictor = &onceEvictor{}

// onceEvictor posts evictions and returns the first answer. client-go
// retries a 429 that carries Retry-After (runner-guard's own refusals do,
// 10 s) up to ten times inside one call, holding the budget's eviction
// lock all along: the drain's own backoff retries instead, the disruption
// given back meanwhile.
type onceEvictor struct{ rest rest.Interface }

// newOnceEvictor returns an onceEvictor for cfg, sharing httpClient.
func newOnceEvictor(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme) (*onceEvictor, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &policyv1.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("eviction client: %w", err)
	}
	return &onceEvictor{rest: rc}, nil
}

func (e *onceEvictor) evict(ctx context.Context, eviction *policyv1.Eviction) error {
	return e.rest.Post().AbsPath("/api/v1").Namespace(eviction.Namespace).Resource("pods").Name(eviction.Name).
		SubResource("eviction").Body(eviction).MaxRetries(0).Do(ctx).Error()
}

// reserveBudget takes one disruption of the PodDisruptionBudget the pod's
// eviction is charged to (the ledger's ReserveFor, as the webhook does) and
// holds the budget's lock until unlock: reservations under one budget go
// one at a time, each reading the budget with the previous one counted in
// flight by the ledger. blocked names what refuses the eviction now (""
// when nothing does); hold is zero then, and when no budget selects the
// pod. A failed list blocks nothing: the eviction checks the budgets itself.
func (r *drainReconciler) reserveBudget(ctx context.Context, pod *corev1.Pod) (hold webhook.BudgetHold, unlock func(), blocked string) {
	unlock = func() {}
	charged, several := r.chargedBudget(ctx, pod)
	if len(several) > 0 {
		return hold, unlock, fmt.Sprintf("more than one PodDisruptionBudget (%s)", strings.Join(several, ", "))
	}
	if charged == nil {
		return hold, unlock, ""
	}
	key := types.NamespacedName{Namespace: charged.Namespace, Name: charged.Name}
	unlock = r.budgetLocks.lock(key)
	// Read again under the lock: the release before this one has evicted.
	// Right after a release here the budget is about to reopen (the
	// disruption controller counts the replacement pods): wait for it under
	// the lock, polling, rather than leave the pod to the next look.
	// The pods are read from the cache: one seen going there was deleted,
	// after its eviction's budget write, before the live read of the budget.
	for polls := 0; ; polls++ {
		// Shared with the other replicas (a Lease per budget): their
		// admissions take the same disruptions. A failure to reserve
		// waits, as a refusal does: the runner stays registered.
		blocking, several, inFlight, h, err := r.budgets.ReserveFor(ctx, r.cached, r.live, pod)
		switch {
		case len(several) > 0:
			return hold, unlock, fmt.Sprintf("more than one PodDisruptionBudget (%s)", strings.Join(several, ", "))
		case blocking == "":
			if h.Budget() != "" {
				r.releasedUnder(key)
			}
			return h, unlock, ""
		case err != nil:
			r.log.V(1).Info("cannot reserve a disruption shared with the other replicas; the release waits", "pod", client.ObjectKeyFromObject(pod), "budget", key, "error", err.Error())
		}
		if !r.budgetMoving(key, polls) {
			if inFlight > 0 {
				return hold, unlock, fmt.Sprintf("PodDisruptionBudget %s (with %d eviction(s) in flight under it)", blocking, inFlight)
			}
			return hold, unlock, "PodDisruptionBudget " + blocking
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.budgetPoll):
		}
	}
}

// budgetMoving reports whether to read budget key again after polls reads:
// polling is on (budgetPoll), this drain released a runner under it within
// budgetWait, and budgetWait has not been spent polling.
func (r *drainReconciler) budgetMoving(key types.NamespacedName, polls int) bool {
	if r.budgetPoll <= 0 || time.Duration(polls)*r.budgetPoll >= budgetWait {
		return false
	}
	r.lastReleaseMu.Lock()
	defer r.lastReleaseMu.Unlock()
	at, ok := r.lastRelease[key]
	return ok && time.Since(at) < budgetWait
}

// releasedUnder records a disruption reserved under budget key.
func (r *drainReconciler) releasedUnder(key types.NamespacedName) {
	r.lastReleaseMu.Lock()
	defer r.lastReleaseMu.Unlock()
	if r.lastRelease == nil {
		r.lastRelease = map[types.NamespacedName]time.Time{}
	}
	r.lastRelease[key] = time.Now()
}

// chargedBudget reads the pod's namespace's budgets live (webhook.ChargedBudget).
func (r *drainReconciler) chargedBudget(ctx context.Context, pod *corev1.Pod) (*policyv1.PodDisruptionBudget, []string) {
	var list policyv1.PodDisruptionBudgetList
	if err := r.live.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		r.log.V(1).Info("cannot list PodDisruptionBudgets; the eviction checks them", "namespace", pod.Namespace, "error", err.Error())
		return nil, nil
	}
	return webhook.ChargedBudget(pod, webhook.BudgetsThatCount(list.Items))
}

// keyedLocks is a mutex per key, made on first use.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[types.NamespacedName]*sync.Mutex
}

func newKeyedLocks() *keyedLocks { return &keyedLocks{locks: map[types.NamespacedName]*sync.Mutex{}} }

// lock locks key's mutex and returns its unlock; a nil keyedLocks locks nothing.
func (k *keyedLocks) lock(key types.NamespacedName) func() {
	if k == nil {
		return func() {}
	}
	k.mu.Lock()
	m := k.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		k.locks[key] = m
	}
	k.mu.Unlock()
	m.Lock()
	return m.Unlock
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
		r.events.Eventf(pod, node, corev1.EventTypeWarning, EventDrainWaitsForJob, "Drain",
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
	r.events.Eventf(pod, node, corev1.EventTypeWarning, EventJobOutlivesGrace, "Drain", "%s",
		graceWarning(nc.GetName(), deadline, tgp, key, job, r.now(), r.honorNodeDeadlines))
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

// refusals is, per namespace, when a policy last refused an eviction and
// when one was last admitted.
type refusals struct {
	mu sync.Mutex
	at map[string]evictionSeen
}

type evictionSeen struct{ refused, admitted time.Time }

func (f *refusals) update(ns string, edit func(*evictionSeen)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]evictionSeen{}
	}
	e := f.at[ns]
	edit(&e)
	f.at[ns] = e
}

func (f *refusals) mark(ns string, now time.Time) {
	f.update(ns, func(e *evictionSeen) { e.refused = now })
}

func (f *refusals) admitted(ns string, now time.Time) {
	f.update(ns, func(e *evictionSeen) { e.admitted = now })
}

func (f *refusals) seen(ns string) evictionSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[ns]
}

// recent reports a refusal in ns within refusedHold, none admitted since.
func (f *refusals) recent(ns string, now time.Time) bool {
	e := f.seen(ns)
	return !e.refused.IsZero() && e.refused.After(e.admitted) && now.Sub(e.refused) < refusedHold
}

// proven reports an eviction admitted in ns within refusedHold, none refused since.
func (f *refusals) proven(ns string, now time.Time) bool {
	e := f.seen(ns)
	return !e.admitted.IsZero() && !e.refused.After(e.admitted) && now.Sub(e.admitted) < refusedHold
}
