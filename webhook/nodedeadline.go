package webhook

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationNodeClaimTerminationTimestamp is where Karpenter keeps a
// deleting NodeClaim's deadline (its deletionTimestamp plus
// spec.terminationGracePeriod, or sooner): its node termination controller
// deletes, past budgets and do-not-disrupt, every pod whose grace period
// would outlast it.
const AnnotationNodeClaimTerminationTimestamp = "karpenter.sh/nodeclaim-termination-timestamp"

// DefaultKarpenterUsers are the ServiceAccounts Karpenter's chart runs as
// (installed in kube-system, as Karpenter's docs do, or in karpenter).
func DefaultKarpenterUsers() []string {
	return []string{
		"system:serviceaccount:kube-system:karpenter",
		"system:serviceaccount:karpenter:karpenter",
	}
}

// nodeClaimGVK is Karpenter's NodeClaim, read as unstructured: the CRD may be absent.
func nodeClaimGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodeClaim"}
}

// NodeDeadline is a deleting NodeClaim's termination deadline, as Karpenter
// computes it.
type NodeDeadline struct {
	// NodeClaim names the node's NodeClaim.
	NodeClaim string
	// At is when Karpenter ends the node whatever its pods say.
	At time.Time
}

// NodeClaimDeadline is the deadline of a NodeClaim Karpenter is deleting:
// its termination-timestamp annotation (which Karpenter's node termination
// reads; it may tighten it), else its deletionTimestamp plus
// spec.terminationGracePeriod, which the annotation is written from. ok is
// false while the NodeClaim is not being deleted or has no deadline.
func NodeClaimDeadline(nc *unstructured.Unstructured) (NodeDeadline, bool) {
	if nc == nil || nc.GetDeletionTimestamp() == nil {
		return NodeDeadline{}, false
	}
	if s, ok := nc.GetAnnotations()[AnnotationNodeClaimTerminationTimestamp]; ok {
		if at, err := time.Parse(time.RFC3339, s); err == nil {
			return NodeDeadline{NodeClaim: nc.GetName(), At: at}, true
		}
	}
	s, found, err := unstructured.NestedString(nc.Object, "spec", "terminationGracePeriod")
	if err != nil || !found || s == "" {
		return NodeDeadline{}, false
	}
	tgp, err := time.ParseDuration(s)
	if err != nil || tgp < 0 {
		return NodeDeadline{}, false
	}
	return NodeDeadline{NodeClaim: nc.GetName(), At: nc.GetDeletionTimestamp().Add(tgp)}, true
}

// NodeDeadlinePassed reports whether, at now, Karpenter deletes the pod for
// its node's deadline: once now is past the deadline less the pod's
// terminationGracePeriodSeconds (a pod without one is never deleted for it).
func NodeDeadlinePassed(dl NodeDeadline, pod *corev1.Pod, now time.Time) bool {
	if dl.At.IsZero() || pod == nil || pod.Spec.TerminationGracePeriodSeconds == nil {
		return false
	}
	return now.After(dl.At.Add(-time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second))
}

// NodeClaimOwner names the NodeClaim that owns a Karpenter node ("" for
// another node).
func NodeClaimOwner(node *corev1.Node) string {
	gvk := nodeClaimGVK()
	for _, o := range node.OwnerReferences {
		if o.Kind == gvk.Kind && o.APIVersion == gvk.GroupVersion().String() {
			return o.Name
		}
	}
	return ""
}

// ReadNodeDeadline reads the deadline of the pod's node: its Node, then the
// NodeClaim owning it. ok is false for a node Karpenter does not own or
// whose NodeClaim is not being deleted with a deadline.
func ReadNodeDeadline(ctx context.Context, c client.Reader, nodeName string) (NodeDeadline, bool, error) {
	if nodeName == "" {
		return NodeDeadline{}, false, nil
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: nodeName}, node); err != nil {
		return NodeDeadline{}, false, fmt.Errorf("node %s: %w", nodeName, err)
	}
	name := NodeClaimOwner(node)
	if name == "" {
		return NodeDeadline{}, false, nil
	}
	nc := &unstructured.Unstructured{}
	nc.SetGroupVersionKind(nodeClaimGVK())
	if err := c.Get(ctx, types.NamespacedName{Name: name}, nc); err != nil {
		return NodeDeadline{}, false, fmt.Errorf("NodeClaim %s of node %s: %w", name, nodeName, err)
	}
	if pid, _, _ := unstructured.NestedString(nc.Object, "status", "providerID"); pid != "" && node.Spec.ProviderID != "" && pid != node.Spec.ProviderID {
		return NodeDeadline{}, false, fmt.Errorf("NodeClaim %s has provider ID %s, node %s has %s", name, pid, nodeName, node.Spec.ProviderID)
	}
	dl, ok := NodeClaimDeadline(nc)
	return dl, ok, nil
}

// karpenterUser reports whether the requester is Karpenter.
func karpenterUser(username string, p *policy) bool {
	return slices.Contains(p.KarpenterUsers, username)
}

// readNodeDeadline reads, for Karpenter's DELETE (resolve calls it for a
// DELETE that is no dry run, with --honor-node-deadlines), the deadline of the pod's node into the review,
// and whether Karpenter deletes the pod for it now: resolve's one call here,
// so rule 4i (ruleNodeDeadline) decides on what was read without calling
// back.
func (d *decider) readNodeDeadline(ctx context.Context, r *review) {
	if !karpenterUser(r.User.Username, &d.policy) {
		return
	}
	dl, ok, err := ReadNodeDeadline(ctx, d.pods, r.Pod.Spec.NodeName)
	if err != nil {
		// Unread, the node is held as without the flag.
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot read the NodeClaim of the pod's node", "node", r.Pod.Spec.NodeName, "error", err.Error())
	}
	if ok {
		r.NodeDeadline = dl
	}
	r.NodeDeadlinePassed = nodeDeadlinePasses(r, &d.policy)
}

// nodeDeadlinePasses reports whether Karpenter deletes the review's pod for
// its node's deadline (r.NodeDeadline) now: only Karpenter's DELETE, not a
// dry run, with --honor-node-deadlines.
func nodeDeadlinePasses(r *review, p *policy) bool {
	return p.HonorNodeDeadlines && !r.DryRun && r.Operation == OperationDelete && karpenterUser(r.User.Username, p) &&
		NodeDeadlinePassed(r.NodeDeadline, r.Pod, r.arrived())
}

// arrived is when the review reached the handler (now for a review without
// an arrival time, as in tests that call the decider directly).
func (r *review) arrived() time.Time {
	if r.Arrived.IsZero() {
		return time.Now()
	}
	return r.Arrived
}
