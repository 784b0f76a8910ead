package karpenter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// The API server's TaintNodesByCondition admission puts this taint on every
// new Node; in a cluster the node lifecycle controller removes it once the
// node reports Ready. The e2e controller manager does not run that
// controller (its other nodes have no kubelet and would be evicted), so the
// harness plays its part for the nodes KWOK runs.
const notReadyTaint = "node.kubernetes.io/not-ready"

// kwokNode reports whether KWOK manages the node (the KWOK provider's annotation).
func kwokNode(n *corev1.Node) bool { return n.Annotations["kwok.x-k8s.io/node"] == "fake" }

// readyCondition reports whether the node's Ready condition is True.
func readyCondition(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// needsUntaint reports whether the lifecycle controller would now remove
// the not-ready taint from n.
func needsUntaint(n *corev1.Node) bool {
	return kwokNode(n) && n.DeletionTimestamp == nil && readyCondition(n) && HasTaint(n, notReadyTaint)
}

// withoutTaint is taints less every taint with key.
func withoutTaint(taints []corev1.Taint, key string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != key {
			out = append(out, t)
		}
	}
	return out
}

// nodeLifecycle removes the not-ready taint from Ready KWOK nodes until stop closes.
type nodeLifecycle struct {
	client kubernetes.Interface
	stop   chan struct{}
	logf   func(string, ...any)
}

func startNodeLifecycle(ctx context.Context, client kubernetes.Interface, logf func(string, ...any)) (*nodeLifecycle, error) {
	l := &nodeLifecycle{client: client, stop: make(chan struct{}), logf: logf}
	handle := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && needsUntaint(n) {
			go l.untaint(n.Name)
		}
	}
	err := watchNodes(ctx, client, l.stop, cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (l *nodeLifecycle) untaint(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := l.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !needsUntaint(n) {
			return err
		}
		n.Spec.Taints = withoutTaint(n.Spec.Taints, notReadyTaint)
		_, err = l.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		l.logf("remove %s from node %s: %v", notReadyTaint, name, err)
	}
}

func (l *nodeLifecycle) close() {
	if l != nil {
		close(l.stop)
	}
}
