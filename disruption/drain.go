package disruption

import (
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/internal/lru"
)

// Taints the planners put on a node they are about to remove.
const (
	// TaintKarpenterDisrupted: Karpenter chose the node for disruption.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// TaintClusterAutoscaler: the cluster autoscaler is removing the node.
	TaintClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"
)

// drainReason says why a node is being drained ("" when it is not): it is
// cordoned, a planner tainted it for removal, or a maintenance condition
// says so (maintenanceReasons).
func drainReason(node *corev1.Node) string {
	var why []string
	if node.Spec.Unschedulable {
		why = append(why, "cordoned")
	}
	for _, t := range node.Spec.Taints {
		switch t.Key {
		case TaintKarpenterDisrupted:
			why = append(why, "tainted "+TaintKarpenterDisrupted+" by Karpenter")
		case TaintClusterAutoscaler:
			why = append(why, "tainted "+TaintClusterAutoscaler+" by the cluster autoscaler")
		}
	}
	why = append(why, maintenanceReasons(node)...)
	return strings.Join(why, ", ")
}

// The node-maintenance conditions of Kubernetes 1.37 (KEP-5683, alpha, gate
// NodeLifecycleConditions), set by whoever runs the maintenance. They are
// read as plain strings, so a cluster without the gate, where no node
// carries them, sees nothing change.
const (
	ConditionDrainInProgress       corev1.NodeConditionType = "DrainInProgress"
	ConditionMaintenanceInProgress corev1.NodeConditionType = "MaintenanceInProgress"
	ConditionMaintenancePlanned    corev1.NodeConditionType = "MaintenancePlanned"
)

// maintenanceReasons are the node's maintenance conditions that are True,
// in words. DrainInProgress and MaintenanceInProgress are a drain like a
// cordon. MaintenancePlanned is the moment to stop idle runners from taking
// new jobs on the node: they are released as on a cordoned node, and busy
// ones when their job ends. runner-guard never cordons or taints the node
// itself: the operator, or the maintenance tool, does.
func maintenanceReasons(node *corev1.Node) []string {
	var why []string
	for _, c := range []corev1.NodeConditionType{ConditionDrainInProgress, ConditionMaintenanceInProgress, ConditionMaintenancePlanned} {
		if nodeCondition(node, c) {
			why = append(why, "marked "+string(c)+"=True")
		}
	}
	return why
}

// nodeCondition reports whether the node's condition t is True.
func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// karpenterDisrupted reports the taint Karpenter puts on a node it disrupts.
func karpenterDisrupted(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == TaintKarpenterDisrupted {
			return true
		}
	}
	return false
}

// NodeClaimGVK is Karpenter's NodeClaim, read as unstructured: the CRD may be absent.
func NodeClaimGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodeClaim"}
}

// graceDeadline is when Karpenter ends a NodeClaim's node whatever its pods
// say: its deletionTimestamp plus spec.terminationGracePeriod. ok is false
// while the NodeClaim is not being deleted or has no grace period.
func graceDeadline(nc *unstructured.Unstructured) (deadline time.Time, tgp time.Duration, ok bool) {
	del := nc.GetDeletionTimestamp()
	if del == nil {
		return time.Time{}, 0, false
	}
	s, found, err := unstructured.NestedString(nc.Object, "spec", "terminationGracePeriod")
	if err != nil || !found || s == "" {
		return time.Time{}, 0, false
	}
	tgp, err = time.ParseDuration(s)
	if err != nil || tgp < 0 {
		return time.Time{}, 0, false
	}
	return del.Add(tgp), tgp, true
}

// nodeClaimOf picks the NodeClaim of a node: status.nodeName, else the
// provider ID.
func nodeClaimOf(node *corev1.Node, claims []unstructured.Unstructured) *unstructured.Unstructured {
	for i := range claims {
		name, _, _ := unstructured.NestedString(claims[i].Object, "status", "nodeName")
		pid, _, _ := unstructured.NestedString(claims[i].Object, "status", "providerID")
		if name == node.Name || (pid != "" && pid == node.Spec.ProviderID) {
			return &claims[i]
		}
	}
	return nil
}

// graceWarning is the Warning said ahead of time when a NodeClaim's
// terminationGracePeriod will end a running job; honored is
// --honor-node-deadlines (webhook rule 4i).
func graceWarning(nodeClaim string, deadline time.Time, tgp time.Duration, pod types.NamespacedName, job string, now time.Time, honored bool) string {
	left := deadline.Sub(now).Round(time.Second)
	when := fmt.Sprintf("in %s", left)
	if left <= 0 {
		when = "now"
	}
	if honored {
		return fmt.Sprintf("NodeClaim %s's terminationGracePeriod (%s) ends at %s (%s): once pod %s's own grace period no longer fits before it, Karpenter deletes the pod past budgets and do-not-disrupt, and runner-guard lets it (--honor-node-deadlines): its job (%s) is then lost, recorded node-deadline (re-run once its run completes, with --rerun-lost-jobs)",
			nodeClaim, tgp, deadline.UTC().Format(time.RFC3339), when, pod, job)
	}
	return fmt.Sprintf("NodeClaim %s's terminationGracePeriod (%s) ends at %s (%s): Karpenter then deletes pod %s past budgets and do-not-disrupt; runner-guard still refuses while its job (%s) runs, so the node outlives its deadline until the job ends, unless the pod is force-deleted (which cancels the job)",
		nodeClaim, tgp, deadline.UTC().Format(time.RFC3339), when, pod, job)
}

// backoff is the per-pod wait between DELETEs of a busy runner on a draining
// node: first, doubling up to limit, so a job's end is seen within limit at
// the cost of one DELETE each time (5 points of GitHub's secondary limit).
// Its value says GitHub (or a listing) said busy: the next DELETE is then a
// re-check. A pod not asked for twice the limit starts over.
type backoff struct {
	pods *lru.Backoff[types.UID, bool]
}

// maxBackoffPods bounds the pods remembered, far above the runner pods of
// the nodes draining at once; past it, the least recently asked is forgotten.
const maxBackoffPods = 10000

func newBackoff(first, limit time.Duration, now func() time.Time) *backoff {
	return &backoff{pods: lru.NewBackoff[types.UID, bool](maxBackoffPods, first, limit, now)}
}

// due reports how long until the pod may be asked again (0: now).
func (b *backoff) due(uid types.UID) time.Duration {
	_, left, _ := b.pods.Recall(uid)
	return left
}

// retry records a failed answer and returns the wait before the next.
func (b *backoff) retry(uid types.UID) time.Duration {
	return b.retryAfter(uid, 0)
}

// retryBusy records that the runner was busy and returns the wait before
// the next DELETE, which is then a re-check (see knownBusy).
func (b *backoff) retryBusy(uid types.UID) time.Duration {
	return b.record(uid, 0, true)
}

// knownBusy reports whether the pod's runner was last seen busy.
func (b *backoff) knownBusy(uid types.UID) bool {
	busy, _, _ := b.pods.Recall(uid)
	return busy
}

// retryAfter is retry with at least the given wait (a rate limit's).
func (b *backoff) retryAfter(uid types.UID, least time.Duration) time.Duration {
	return b.record(uid, least, false)
}

// record doubles the pod's wait (at least least), and marks it busy when the
// answer said so; a busy mark stays until forget.
func (b *backoff) record(uid types.UID, least time.Duration, busy bool) time.Duration {
	return b.pods.NextAtLeast(uid, least, func(wasBusy bool) bool { return wasBusy || busy })
}

func (b *backoff) forget(uid types.UID) { b.pods.Forget(uid) }

// once remembers what was already said about a pod, so an Event is recorded
// once per pod and kind, not at every retry.
type once struct {
	mu   sync.Mutex
	said map[string]bool
}

func newOnce() *once { return &once{said: map[string]bool{}} }

// first reports whether key is new, and remembers it.
func (o *once) first(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.said[key] {
		return false
	}
	o.said[key] = true
	return true
}

// has reports whether key was said.
func (o *once) has(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.said[key]
}

// forget drops the keys of a pod.
func (o *once) forget(prefix string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.said {
		if strings.HasPrefix(k, prefix) {
			delete(o.said, k)
		}
	}
}
