package karpenter

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

// Karpenter's names, as its API spells them (sigs.k8s.io/karpenter/pkg/apis/v1).
const (
	// DoNotDisrupt is the pod annotation that keeps Karpenter from choosing
	// the pod's node for consolidation.
	DoNotDisrupt = "karpenter.sh/do-not-disrupt"
	// DisruptedTaint is the taint Karpenter puts on a node it has chosen.
	DisruptedTaint = "karpenter.sh/disrupted"
	// NodePoolLabel names the NodePool of a Karpenter node.
	NodePoolLabel = "karpenter.sh/nodepool"
	// PodDeletionCost orders Karpenter's candidates (and ReplicaSet scale-down).
	PodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
)

// The sizes that DefaultInstanceTypes is chosen for.
var (
	// FillerCPU is a pod that takes a node to itself: two never share one.
	FillerCPU = resource.MustParse("2000m")
	// RunnerCPU is a runner: four share a node, or two beside a filler.
	RunnerCPU = resource.MustParse("900m")
)

var (
	NodePools   = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	NodeClaims  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	nodeClasses = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

func (c *Cluster) createNodeClass(ctx context.Context) error {
	nc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
		"metadata": map[string]any{"name": "default"},
	}}
	_, err := c.Dynamic.Resource(nodeClasses).Create(ctx, nc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// NodePoolSpec is what a scenario chooses of a NodePool.
type NodePoolSpec struct {
	Name string
	// ConsolidateAfter is disruption.consolidateAfter ("1s" when empty).
	ConsolidateAfter string
	// BudgetNodes is the one disruption budget's nodes ("1" when empty):
	// one node at a time keeps Karpenter's choices one by one.
	BudgetNodes string
	// TerminationGracePeriod, when set, is the NodeClaims' terminationGracePeriod.
	TerminationGracePeriod string
	// ConsolidationPolicy is disruption.consolidationPolicy
	// ("WhenEmptyOrUnderutilized" when empty; v1.14+ also "Balanced").
	ConsolidationPolicy string
}

// NodePool renders spec: its consolidation policy (WhenEmptyOrUnderutilized
// by default), the DefaultInstanceTypes' architecture, OS and capacity type,
// the KWOKNodeClass "default".
func NodePool(spec NodePoolSpec) *unstructured.Unstructured {
	if spec.ConsolidateAfter == "" {
		spec.ConsolidateAfter = "1s"
	}
	if spec.BudgetNodes == "" {
		spec.BudgetNodes = "1"
	}
	if spec.ConsolidationPolicy == "" {
		spec.ConsolidationPolicy = "WhenEmptyOrUnderutilized"
	}
	req := func(key string, values ...string) map[string]any {
		vs := make([]any, len(values))
		for i, v := range values {
			vs[i] = v
		}
		return map[string]any{"key": key, "operator": "In", "values": vs}
	}
	template := map[string]any{
		"requirements": []any{
			req("kubernetes.io/arch", "amd64"), req("kubernetes.io/os", "linux"),
			req("karpenter.sh/capacity-type", "on-demand"),
		},
		"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
		"expireAfter":  "Never",
	}
	if spec.TerminationGracePeriod != "" {
		template["terminationGracePeriod"] = spec.TerminationGracePeriod
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
		"metadata": map[string]any{"name": spec.Name},
		"spec": map[string]any{
			"template": map[string]any{"spec": template},
			"disruption": map[string]any{
				"consolidationPolicy": spec.ConsolidationPolicy,
				"consolidateAfter":    spec.ConsolidateAfter,
				"budgets":             []any{map[string]any{"nodes": spec.BudgetNodes}},
			},
		},
	}}
}

// CreateNodePool creates the NodePool; DeleteNodePool removes it again.
func (c *Cluster) CreateNodePool(ctx context.Context, spec NodePoolSpec) error {
	if _, err := c.Dynamic.Resource(NodePools).Create(ctx, NodePool(spec), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create NodePool %s: %w", spec.Name, err)
	}
	return nil
}

// DeleteNodePool deletes the NodePool and waits until Karpenter has removed
// its nodes (draining whatever pods are left on them).
func (c *Cluster) DeleteNodePool(ctx context.Context, name string) error {
	err := c.Dynamic.Resource(NodePools).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete NodePool %s: %w", name, err)
	}
	return process.Poll(ctx, "nodes of NodePool "+name+" gone", 3*time.Minute, func(ctx context.Context) error {
		nodes, err := c.PoolNodes(ctx, name)
		if err != nil {
			return err
		}
		if len(nodes) > 0 {
			return fmt.Errorf("%w: %s", errNotYet, strings.Join(nodes, ", "))
		}
		return nil
	})
}

// PoolNodes lists the names of the NodePool's nodes, sorted.
func (c *Cluster) PoolNodes(ctx context.Context, pool string) ([]string, error) {
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodePoolLabel + "=" + pool})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out, nil
}

// withCPU requests cpu on every container of the pod.
func withCPU(pod *corev1.Pod, cpu resource.Quantity) *corev1.Pod {
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: cpu}
	}
	return pod
}

// InPool keeps the pod on the NodePool's nodes, for kube-scheduler and for
// Karpenter's simulations alike; node, when set, binds it there at once (no
// scheduler), which is how a scenario puts a pod on a node of its choosing
// while Karpenter stays free to move it.
func InPool(pod *corev1.Pod, pool, node string, cpu resource.Quantity) *corev1.Pod {
	pod = withCPU(pod.DeepCopy(), cpu)
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[NodePoolLabel] = pool
	pod.Spec.NodeName = node
	zero := int64(0)
	pod.Spec.TerminationGracePeriodSeconds = &zero
	return pod
}

// LaunchNodes makes Karpenter launch n nodes of the pool: it creates n
// filler pods (FillerCPU each, so each needs a node of its own) and waits
// until kube-scheduler has bound each to its node and KWOK runs it. It
// returns the fillers' names and their nodes, in the same order.
func (c *Cluster) LaunchNodes(ctx context.Context, ns, pool string, n int) (fillers, nodes []string, err error) {
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("filler-%s-%d", pool, i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "filler"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "filler"}}},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, InPool(pod, pool, "", FillerCPU), metav1.CreateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("create filler %s: %w", name, err)
		}
		fillers = append(fillers, name)
	}
	nodes = make([]string, n)
	for i, name := range fillers {
		pod, err := c.WaitRunning(ctx, ns, name)
		if err != nil {
			return nil, nil, err
		}
		nodes[i] = pod.Spec.NodeName
	}
	return fillers, nodes, nil
}

// WaitRunning waits until the pod is bound and KWOK reports it running, and
// returns it.
func (c *Cluster) WaitRunning(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := process.Poll(ctx, fmt.Sprintf("pod %s/%s running on a node", ns, name), 3*time.Minute, func(ctx context.Context) error {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%w: node %q, phase %s", errNotYet, p.Spec.NodeName, p.Status.Phase)
		}
		pod = p
		return nil
	})
	return pod, err
}

// DeletePods deletes the pods (a scale-down) and waits until they are gone.
func (c *Cluster) DeletePods(ctx context.Context, ns string, names ...string) error {
	for _, n := range names {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s: %w", ns, n, err)
		}
	}
	for _, n := range names {
		if err := c.WaitPodGone(ctx, ns, n, 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAllPods deletes every pod in ns at once (grace period 0) and waits
// until they are gone. runner-guard still decides on runner pods.
func (c *Cluster) DeleteAllPods(ctx context.Context, ns string) error {
	// A runner whose EphemeralRunner still records a job is refused without
	// GitHub; clean-up cancels such jobs the documented way.
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the pods of %s: %w", ns, err)
	}
	force := []byte(`{"metadata":{"annotations":{"runner-guard.io/force-delete":"true"}}}`)
	for _, p := range pods.Items {
		if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, force, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("annotate pod %s/%s for clean-up: %w", ns, p.Name, err)
		}
	}
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete the pods of %s: %w", ns, err)
	}
	return process.Poll(ctx, "pods of "+ns+" gone", 2*time.Minute, func(ctx context.Context) error {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%w: %d left", errNotYet, len(list.Items))
		}
		return nil
	})
}

// WaitPodGone waits until the pod no longer exists.
func (c *Cluster) WaitPodGone(ctx context.Context, ns, name string, timeout time.Duration) error {
	return process.Poll(ctx, fmt.Sprintf("pod %s/%s gone", ns, name), timeout, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errNotYet
	})
}

// SetAnnotation sets (or, with remove, removes) an annotation on a pod.
func (c *Cluster) SetAnnotation(ctx context.Context, ns, pod, key, value string, remove bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if remove {
			delete(p.Annotations, key)
		} else {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[key] = value
		}
		_, err = c.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// WaitAnnotation waits until the pod's annotation key is value (absent when
// value is ""), e.g. runner-guard's hint on a busy runner's pod.
func (c *Cluster) WaitAnnotation(ctx context.Context, ns, pod, key, value string, timeout time.Duration) error {
	what := fmt.Sprintf("pod %s/%s annotated %s=%q", ns, pod, key, value)
	if value == "" {
		what = fmt.Sprintf("pod %s/%s without annotation %s", ns, pod, key)
	}
	return process.Poll(ctx, what, timeout, func(ctx context.Context) error {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got, ok := p.Annotations[key]; got != value || (value == "" && ok) {
			return fmt.Errorf("%w: annotations %v", errNotYet, p.Annotations)
		}
		return nil
	})
}

// WaitJobBudget waits until runner-guard's job budget of the pod of uid is
// in place. The harness runs no disruption controller, so its status stays
// zero: disruptionsAllowed 0, which is what Karpenter reads.
func (c *Cluster) WaitJobBudget(ctx context.Context, ns, uid string, timeout time.Duration) error {
	return process.Poll(ctx, "job budget of pod "+uid, timeout, func(ctx context.Context) error {
		list, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{LabelSelector: webhook.LabelJobBudget + "=" + uid})
		if err != nil {
			return err
		}
		for i := range list.Items {
			b := &list.Items[i]
			if webhook.IsJobBudget(b) && b.Status.DisruptionsAllowed == 0 {
				return nil
			}
		}
		return fmt.Errorf("%w: %d budgets", errNotYet, len(list.Items))
	})
}

// Nudge makes Karpenter look at consolidation again. Karpenter re-evaluates
// only when its cluster state changes (a pod bound or deleted, a node or
// NodeClaim changed) or every 5 minutes, never on a pod's annotation: after
// changing one, a scenario calls Nudge, which binds a pod without requests
// to node and deletes it.
func (c *Cluster) Nudge(ctx context.Context, ns, node string) error {
	name := fmt.Sprintf("nudge-%d", time.Now().UnixNano())
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "main", Image: "nudge"}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create nudge pod: %w", err)
	}
	return c.DeletePods(ctx, ns, name)
}

// NodeRecord is what NodeLog saw of one node.
type NodeRecord struct {
	// Tainted is when the node was first seen with DisruptedTaint.
	Tainted time.Time
	// Deleting is when the node was first seen with a deletionTimestamp
	// (Karpenter deletes the Node before it drains it).
	Deleting time.Time
	// Gone is when the Node object was seen removed.
	Gone time.Time
}

// NodeLog watches every Node from its start and records when each was
// first tainted DisruptedTaint and when it went: "never tainted" is
// asserted on it, not on Events, which the API server deduplicates.
type NodeLog struct {
	mu    sync.Mutex
	nodes map[string]*NodeRecord
	stop  chan struct{}
}

// WatchNodes starts a NodeLog; Stop ends it.
func (c *Cluster) WatchNodes(ctx context.Context) (*NodeLog, error) {
	l := &NodeLog{nodes: map[string]*NodeRecord{}, stop: make(chan struct{})}
	err := watchNodes(ctx, c.Client, l.stop, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(obj, false) },
		UpdateFunc: func(_, obj any) { l.observe(obj, false) },
		DeleteFunc: func(obj any) { l.observe(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// watchNodes runs a Node informer with handlers until stop closes, and
// waits for its first list. On error it closes stop.
func watchNodes(ctx context.Context, client kubernetes.Interface, stop chan struct{}, handlers cache.ResourceEventHandler) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(handlers); err != nil {
		close(stop)
		return err
	}
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		close(stop)
		return fmt.Errorf("node informer did not sync: %w", ctx.Err())
	}
	return nil
}

func (l *NodeLog) observe(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.nodes[node.Name]
	if r == nil {
		r = &NodeRecord{}
		l.nodes[node.Name] = r
	}
	if r.Tainted.IsZero() && HasTaint(node, DisruptedTaint) {
		r.Tainted = now
	}
	if r.Deleting.IsZero() && (deleted || node.DeletionTimestamp != nil) {
		r.Deleting = now
	}
	if r.Gone.IsZero() && deleted {
		r.Gone = now
	}
}

// Record is what the log saw of the node (zero times: not seen).
func (l *NodeLog) Record(node string) NodeRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.nodes[node]; r != nil {
		return *r
	}
	return NodeRecord{}
}

// Stop ends the watch.
func (l *NodeLog) Stop() { close(l.stop) }

// HasTaint reports whether the node carries a taint with key.
func HasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// WaitNodeGone waits until the Node object no longer exists.
func (c *Cluster) WaitNodeGone(ctx context.Context, node string, timeout time.Duration) error {
	return process.Poll(ctx, "node "+node+" gone", timeout, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errNotYet
	})
}

// WaitTainted waits until Karpenter has tainted the node DisruptedTaint.
func (c *Cluster) WaitTainted(ctx context.Context, node string, timeout time.Duration) error {
	return process.Poll(ctx, "node "+node+" tainted "+DisruptedTaint, timeout, func(ctx context.Context) error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !HasTaint(n, DisruptedTaint) {
			return errNotYet
		}
		return nil
	})
}

// PodOn reports whether the pod exists, is not being deleted and is bound to node.
func (c *Cluster) PodOn(ctx context.Context, ns, name, node string) (bool, error) {
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return p.DeletionTimestamp == nil && p.Spec.NodeName == node, nil
}

// PodUID is the pod's UID, to tell a pod from a later one of the same name.
func (c *Cluster) PodUID(ctx context.Context, ns, name string) (types.UID, error) {
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return p.UID, nil
}
