package webhook

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

func TestJobClause(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := &corev1.Pod{Status: corev1.PodStatus{StartTime: &metav1.Time{Time: now.Add(-5*time.Minute - 3*time.Second)}}}
	job := &arc.Runner{Kind: arc.Kind, Job: arc.Job{ID: "7", DisplayName: "build", Repository: "acme/app", WorkflowRunID: 42}}
	cases := map[string]struct {
		run  *arc.Runner
		pod  *corev1.Pod
		want string
	}{
		"job and start":              {job, started, `job "build" of acme/app (workflow run 42), its pod started 5m3s ago`},
		"job only":                   {job, &corev1.Pod{}, `job "build" of acme/app (workflow run 42)`},
		"start only":                 {&arc.Runner{Kind: arc.Kind}, started, "its pod started 5m3s ago"},
		"legacy pod, started":        {nil, started, "its pod started 5m3s ago"},
		"nothing known":              {nil, nil, ""},
		"started under a second ago": {nil, &corev1.Pod{Status: corev1.PodStatus{StartTime: &metav1.Time{Time: now.Add(-time.Millisecond)}}}, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := JobClause(c.run, c.pod, now); got != c.want {
				t.Errorf("JobClause = %q, want %q", got, c.want)
			}
		})
	}
}
