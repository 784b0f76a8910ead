package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// drainTimeline records what a drain scenario's budget is computed from, for
// the log of a failed scenario: every status the disruption controller or an
// eviction writes into the namespace's budgets, and every change of a pod's
// readiness or deletion. A refusal by the API server of an eviction
// runner-guard admitted is explained (or not) by what the budget showed then.
type drainTimeline struct {
	mu    sync.Mutex
	lines []string
	pods  map[string]string
}

// follow watches ns's budgets and pods until ctx ends, and logs the timeline
// once the scenario has failed.
func (tl *drainTimeline) follow(ctx context.Context, s *scenario) {
	tl.pods = map[string]string{}
	go tl.watch(ctx, func(ctx context.Context, rv string) (watch.Interface, string, error) {
		l, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			tl.budget(&l.Items[i])
		}
		w, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		return w, l.ResourceVersion, err
	})
	go tl.watch(ctx, func(ctx context.Context, rv string) (watch.Interface, string, error) {
		l, err := cluster.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			tl.pod(&l.Items[i], false)
		}
		w, err := cluster.Client.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		return w, l.ResourceVersion, err
	})
	s.onFailure(func(context.Context) {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		s.t.Logf("budgets and pods of %s, as the API server wrote them:\n%s", s.ns, strings.Join(tl.lines, "\n"))
	})
}

func (tl *drainTimeline) watch(ctx context.Context, start func(context.Context, string) (watch.Interface, string, error)) {
	for ctx.Err() == nil {
		w, _, err := start(ctx, "")
		if err != nil {
			tl.add("watch: %v", err)
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			switch o := ev.Object.(type) {
			case *policyv1.PodDisruptionBudget:
				tl.budget(o)
			case *corev1.Pod:
				tl.pod(o, ev.Type == watch.Deleted)
			}
		}
		w.Stop()
	}
}

func (tl *drainTimeline) budget(b *policyv1.PodDisruptionBudget) {
	var disrupted []string
	for p := range b.Status.DisruptedPods {
		disrupted = append(disrupted, p)
	}
	sort.Strings(disrupted)
	tl.add("budget %s rv=%s allowed=%d healthy=%d desired=%d expected=%d observed=%d/%d disrupted=%v",
		b.Name, b.ResourceVersion, b.Status.DisruptionsAllowed, b.Status.CurrentHealthy, b.Status.DesiredHealthy,
		b.Status.ExpectedPods, b.Status.ObservedGeneration, b.Generation, disrupted)
}

func (tl *drainTimeline) pod(p *corev1.Pod, deleted bool) {
	state := "gone"
	if !deleted {
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		state = fmt.Sprintf("ready=%t deleting=%t", ready, p.DeletionTimestamp != nil)
	}
	tl.mu.Lock()
	changed := tl.pods[p.Name] != state
	tl.pods[p.Name] = state
	tl.mu.Unlock()
	if changed {
		tl.add("pod %s rv=%s %s", p.Name, p.ResourceVersion, state)
	}
}

func (tl *drainTimeline) add(f string, a ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.lines = append(tl.lines, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(f, a...))
}
