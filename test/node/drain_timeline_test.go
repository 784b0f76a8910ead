package node

import (
	"context"
	"fmt"
	"sort"
	"strconv"
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
	// writes are the budget's statuses, in resourceVersion order.
	writes []budgetWrite
}

// budgetWrite is one status of the scenario's budget as the API server
// stored it.
type budgetWrite struct {
	rv        uint64
	allowed   int32
	disrupted map[string]bool
}

// podObserver is told of a scenario's pods as the timeline's watch sees
// them: every list (which may follow a broken watch), then every event.
type podObserver interface {
	listed(ctx context.Context, pods []corev1.Pod)
	observe(ctx context.Context, p *corev1.Pod, deleted bool)
}

// follow watches ns's budgets and pods until ctx ends, telling pods of the
// pods, and logs the timeline once the scenario has failed.
func (tl *drainTimeline) follow(ctx context.Context, s *scenario, pods podObserver) {
	tl.pods = map[string]string{}
	go tl.watch(ctx, func(ctx context.Context) (watch.Interface, error) {
		l, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			tl.budget(&l.Items[i])
		}
		return cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	}, pods)
	go tl.watch(ctx, func(ctx context.Context) (watch.Interface, error) {
		l, err := cluster.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			tl.pod(&l.Items[i], false)
		}
		pods.listed(ctx, l.Items)
		return cluster.Client.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	}, pods)
	s.onFailure(func(context.Context) {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		s.t.Logf("budgets and pods of %s, as the API server wrote them:\n%s", s.ns, strings.Join(tl.lines, "\n"))
	})
}

// watch follows what start lists and then watches, again after each watch
// ends, until ctx ends, telling pods of the pods' events.
func (tl *drainTimeline) watch(ctx context.Context, start func(context.Context) (watch.Interface, error), pods podObserver) {
	for ctx.Err() == nil {
		w, err := start(ctx)
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
				pods.observe(ctx, o, ev.Type == watch.Deleted)
			}
		}
		w.Stop()
	}
}

func (tl *drainTimeline) budget(b *policyv1.PodDisruptionBudget) {
	var disrupted []string
	w := budgetWrite{rv: resourceVersion(b.ResourceVersion), allowed: b.Status.DisruptionsAllowed, disrupted: map[string]bool{}}
	for p := range b.Status.DisruptedPods {
		disrupted = append(disrupted, p)
		w.disrupted[p] = true
	}
	sort.Strings(disrupted)
	tl.mu.Lock()
	if n := len(tl.writes); n == 0 || tl.writes[n-1].rv < w.rv {
		tl.writes = append(tl.writes, w)
	}
	tl.mu.Unlock()
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

// chargedTwice reports whether, between the budget's resourceVersions from
// and to, the disruption controller took a disruption off the budget that
// no eviction wrote: disruptionsAllowed fell with no pod added to
// status.disruptedPods. That is a pod counted unhealthy while not being
// deleted: a runner that exited once runner-guard unregistered it, its pod
// turning unready before the API server read the budget for its eviction,
// which it then charges too (docs/DESIGN.md, "An eviction charged twice").
// An eviction runner-guard admitted that the API server refuses with no
// such write is one runner-guard let through beyond the budget.
func (tl *drainTimeline) chargedTwice(from, to uint64) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i := 1; i < len(tl.writes); i++ {
		w, prev := tl.writes[i], tl.writes[i-1]
		if w.rv <= from || w.rv > to || w.allowed >= prev.allowed {
			continue
		}
		added := false
		for p := range w.disrupted {
			added = added || !prev.disrupted[p]
		}
		if !added {
			return true
		}
	}
	return false
}

// resourceVersion reads a resourceVersion of this cluster's etcd, a
// revision: the budget's writes are ordered by it (0 if it is not one,
// which orders nothing).
func resourceVersion(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// budgetVersion is the scenario's budget's resourceVersion now (a
// consistent read), 0 when it cannot be read.
func budgetVersion(ctx context.Context, ns string) uint64 {
	b, err := cluster.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "runners", metav1.GetOptions{})
	if err != nil {
		return 0
	}
	return resourceVersion(b.ResourceVersion)
}
