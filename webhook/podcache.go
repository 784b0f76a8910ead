package webhook

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// RunnerPods tells, without a request, whether an evicted pod is a runner pod.
// An Eviction names a pod but carries none of its labels, so without it every
// eviction in the guarded namespaces needs a read, and a read that fails would
// block the drain of pods that hold no job at all.
type RunnerPods interface {
	// Get returns the runner pod of that name (found), or found=false when
	// there is none; synced=false when the cache cannot answer yet.
	Get(namespace, name string) (pod *corev1.Pod, found, synced bool)
}

// RunnerPodCache is an informer per runner pod spec, each listing and
// watching only the pods its selector matches: memory grows with the runner
// pods, not with the cluster. Given runner namespaces, it runs one informer
// per spec and namespace instead, so listing and watching needs a Role in each
// of those namespaces only, never a cluster-wide grant.
type RunnerPodCache struct {
	informers []cache.SharedIndexInformer
	// namespaces, when not nil, are the only namespaces watched.
	namespaces map[string]bool
}

var _ RunnerPods = &RunnerPodCache{}

// NewRunnerPodCache builds the informers; Start runs them. With namespaces
// (Config.RunnerNamespaces) only the runner pods of those namespaces are
// watched, and a pod elsewhere is answered as not a runner pod; without, the
// runner pods of every namespace are.
func NewRunnerPodCache(cs kubernetes.Interface, specs []RunnerPodSpec, namespaces []string) (*RunnerPodCache, error) {
	c := &RunnerPodCache{}
	scopes := []string{metav1.NamespaceAll}
	if len(namespaces) > 0 {
		c.namespaces = map[string]bool{}
		scopes = nil
		for _, ns := range namespaces {
			if !c.namespaces[ns] {
				c.namespaces[ns] = true
				scopes = append(scopes, ns)
			}
		}
	}
	for _, spec := range specs {
		sel, err := metav1.LabelSelectorAsSelector(&spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("runner pod spec %q: %w", spec.Name, err)
		}
		for _, ns := range scopes {
			f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Hour,
				informers.WithNamespace(ns),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
			inf := f.Core().V1().Pods().Informer()
			// Keep what the rules read; drop managed fields, the largest part of a pod.
			if err := inf.SetTransform(func(obj any) (any, error) {
				if pod, ok := obj.(*corev1.Pod); ok {
					pod.ManagedFields = nil
				}
				return obj, nil
			}); err != nil {
				return nil, fmt.Errorf("runner pod cache: %w", err)
			}
			c.informers = append(c.informers, inf)
		}
	}
	return c, nil
}

// Start runs the informers until ctx ends (a manager Runnable).
func (c *RunnerPodCache) Start(ctx context.Context) error {
	for _, inf := range c.informers {
		go inf.Run(ctx.Done())
	}
	<-ctx.Done()
	return nil
}

// Get looks the pod up in every informer. A pod outside the watched
// namespaces is no runner pod runner-guard guards: found=false, synced=true.
func (c *RunnerPodCache) Get(namespace, name string) (*corev1.Pod, bool, bool) {
	if c.namespaces != nil && !c.namespaces[namespace] {
		return nil, false, true
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	for _, inf := range c.informers {
		if !inf.HasSynced() {
			return nil, false, false
		}
		obj, exists, err := inf.GetStore().GetByKey(key)
		if err != nil {
			return nil, false, false
		}
		if exists {
			if pod, ok := obj.(*corev1.Pod); ok {
				return pod, true, true
			}
		}
	}
	return nil, false, true
}
