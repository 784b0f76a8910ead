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
// pods, not with the cluster.
type RunnerPodCache struct {
	informers []cache.SharedIndexInformer
}

var _ RunnerPods = &RunnerPodCache{}

// NewRunnerPodCache builds the informers; Start runs them.
func NewRunnerPodCache(cs kubernetes.Interface, specs []RunnerPodSpec) (*RunnerPodCache, error) {
	c := &RunnerPodCache{}
	for _, spec := range specs {
		sel, err := metav1.LabelSelectorAsSelector(&spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("runner pod spec %q: %w", spec.Name, err)
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Hour,
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

// Get looks the pod up in every informer.
func (c *RunnerPodCache) Get(namespace, name string) (*corev1.Pod, bool, bool) {
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
