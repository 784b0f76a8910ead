package disruption

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

func TestJobState(t *testing.T) {
	yes, no := true, false
	started := &arc.Runner{Kind: arc.Kind, Job: arc.Job{ID: "7", Repository: "acme/app"}}
	cases := map[string]struct {
		facts jobFacts
		want  JobState
	}{
		"nothing known":                          {jobFacts{}, JobUnknown},
		"job fields set":                         {jobFacts{ARC: started}, JobRunning},
		"job fields empty":                       {jobFacts{ARC: &arc.Runner{Kind: arc.Kind}}, JobNotProven},
		"job fields set, EphemeralRunner done":   {jobFacts{ARC: &arc.Runner{Kind: arc.Kind, Job: started.Job, Removed: "phase Succeeded"}}, JobEnded},
		"job fields set, pod completed":          {jobFacts{PodDone: true, ARC: started}, JobEnded},
		"EphemeralRunner gone":                   {jobFacts{ARCGone: true}, JobEnded},
		"listing busy":                           {jobFacts{Listed: &yes}, JobRunning},
		"listing idle: not proof":                {jobFacts{Listed: &no}, JobNotProven},
		"job fields beat the listing":            {jobFacts{ARC: &arc.Runner{Kind: arc.Kind}, Listed: &yes}, JobNotProven},
		"pod done beats a busy listing":          {jobFacts{PodDone: true, Listed: &yes}, JobEnded},
		"request ID alone is proof of a started": {jobFacts{ARC: &arc.Runner{Kind: arc.Kind, Job: arc.Job{RequestID: 9}}}, JobRunning},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := jobState(c.facts); got != c.want {
				t.Errorf("jobState = %s, want %s", got, c.want)
			}
		})
	}
}

func TestDrainReason(t *testing.T) {
	cases := map[string]struct {
		spec corev1.NodeSpec
		want string // substring; "" means not draining
	}{
		"schedulable":        {corev1.NodeSpec{}, ""},
		"cordoned":           {corev1.NodeSpec{Unschedulable: true}, "cordoned"},
		"Karpenter":          {corev1.NodeSpec{Taints: []corev1.Taint{{Key: TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}}, "by Karpenter"},
		"cluster autoscaler": {corev1.NodeSpec{Taints: []corev1.Taint{{Key: TaintClusterAutoscaler, Effect: corev1.TaintEffectNoSchedule}}}, "cluster autoscaler"},
		"another taint":      {corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}}, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := drainReason(&corev1.Node{Spec: c.spec})
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("drainReason = %q, want %q", got, c.want)
			}
		})
	}
}

func nodeClaim(deleted *time.Time, tgp string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	u.SetGroupVersionKind(NodeClaimGVK())
	u.SetName("default-abcde")
	if tgp != "" {
		_ = unstructured.SetNestedField(u.Object, tgp, "spec", "terminationGracePeriod")
	}
	if deleted != nil {
		ts := metav1.NewTime(*deleted)
		u.SetDeletionTimestamp(&ts)
	}
	return u
}

func TestGraceDeadline(t *testing.T) {
	del := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		nc   *unstructured.Unstructured
		want time.Time // zero: no deadline
	}{
		"being deleted with a grace period": {nodeClaim(&del, "1h"), del.Add(time.Hour)},
		"not being deleted":                 {nodeClaim(nil, "1h"), time.Time{}},
		"no grace period":                   {nodeClaim(&del, ""), time.Time{}},
		"unparsable grace period":           {nodeClaim(&del, "soon"), time.Time{}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, _, ok := graceDeadline(c.nc)
			if ok != !c.want.IsZero() || !got.Equal(c.want) {
				t.Errorf("graceDeadline = %s, %v; want %s", got, ok, c.want)
			}
		})
	}
	for honored, last := range map[bool]string{false: "outlives its deadline", true: "recorded node-deadline"} {
		msg := graceWarning("default-abcde", del.Add(time.Hour), time.Hour, types.NamespacedName{Namespace: "ci", Name: "r-1"}, `job "build" of acme/app`, del.Add(20*time.Minute), honored)
		for _, want := range []string{"default-abcde", "1h0m0s", "in 40m0s", "ci/r-1", `job "build" of acme/app`, last} {
			if !strings.Contains(msg, want) {
				t.Errorf("warning %q lacks %q", msg, want)
			}
		}
	}
}

func TestNodeClaimOf(t *testing.T) {
	byName := *nodeClaim(nil, "")
	_ = unstructured.SetNestedField(byName.Object, "node-a", "status", "nodeName")
	byProvider := *nodeClaim(nil, "")
	byProvider.SetName("other")
	_ = unstructured.SetNestedField(byProvider.Object, "kwok://node-b", "status", "providerID")
	claims := []unstructured.Unstructured{byName, byProvider}
	cases := map[string]struct {
		node *corev1.Node
		want string
	}{
		"by status.nodeName": {&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, "default-abcde"},
		"by providerID":      {&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{ProviderID: "kwok://node-b"}}, "other"},
		"none":               {&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := nodeClaimOf(c.node, claims)
			if (got == nil) != (c.want == "") || (got != nil && got.GetName() != c.want) {
				t.Errorf("nodeClaimOf = %v, want %q", got, c.want)
			}
		})
	}
}

func TestBackoffIsBounded(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBackoff(time.Second, 8*time.Second, func() time.Time { return now })
	const uid = types.UID("u")
	if d := b.due(uid); d != 0 {
		t.Fatalf("a pod never asked is due in %s, want now", d)
	}
	var waits []time.Duration
	for range 6 {
		waits = append(waits, b.retry(uid))
	}
	want := []time.Duration{1, 2, 4, 8, 8, 8}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("waits %v, want %v seconds", waits, want)
		}
	}
	if d := b.due(uid); d != 8*time.Second {
		t.Errorf("due in %s, want 8s", d)
	}
	if d := b.retryAfter(uid, time.Minute); d != time.Minute {
		t.Errorf("a rate limit's wait: %s, want 1m", d)
	}
	b.forget(uid)
	if d := b.due(uid); d != 0 {
		t.Errorf("forgotten pod due in %s, want now", d)
	}
}

// The maintenance conditions drain a node like a cordon when True, and only then.
func TestDrainReasonFromMaintenanceConditions(t *testing.T) {
	cases := map[string]struct {
		conds []corev1.NodeCondition
		want  string // substring; "" means not draining
	}{
		"none":                         {nil, ""},
		"Ready only":                   {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, ""},
		"DrainInProgress":              {[]corev1.NodeCondition{{Type: "DrainInProgress", Status: corev1.ConditionTrue}}, "DrainInProgress=True"},
		"MaintenanceInProgress":        {[]corev1.NodeCondition{{Type: "MaintenanceInProgress", Status: corev1.ConditionTrue}}, "MaintenanceInProgress=True"},
		"MaintenancePlanned":           {[]corev1.NodeCondition{{Type: "MaintenancePlanned", Status: corev1.ConditionTrue}}, "MaintenancePlanned=True"},
		"MaintenancePlanned False":     {[]corev1.NodeCondition{{Type: "MaintenancePlanned", Status: corev1.ConditionFalse}}, ""},
		"DrainInProgress Unknown":      {[]corev1.NodeCondition{{Type: "DrainInProgress", Status: corev1.ConditionUnknown}}, ""},
		"Drained is not a drain to do": {[]corev1.NodeCondition{{Type: "Drained", Status: corev1.ConditionTrue}}, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := drainReason(&corev1.Node{Status: corev1.NodeStatus{Conditions: c.conds}})
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("drainReason = %q, want %q", got, c.want)
			}
		})
	}
}
