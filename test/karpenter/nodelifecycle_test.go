package karpenter

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNeedsUntaint(t *testing.T) {
	kwok := map[string]string{"kwok.x-k8s.io/node": "fake"}
	notReady := []corev1.Taint{{Key: notReadyTaint, Effect: corev1.TaintEffectNoSchedule}, {Key: DisruptedTaint, Effect: corev1.TaintEffectNoSchedule}}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	now := metav1.Now()
	cases := map[string]struct {
		annotations map[string]string
		taints      []corev1.Taint
		conditions  []corev1.NodeCondition
		deleting    bool
		want        bool
	}{
		"ready KWOK node with the taint": {annotations: kwok, taints: notReady, conditions: ready, want: true},
		"not a KWOK node":                {taints: notReady, conditions: ready},
		"not ready yet":                  {annotations: kwok, taints: notReady, conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}},
		"no Ready condition":             {annotations: kwok, taints: notReady},
		"taint already gone":             {annotations: kwok, taints: notReady[1:], conditions: ready},
		"being deleted":                  {annotations: kwok, taints: notReady, conditions: ready, deleting: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: c.annotations},
				Spec: corev1.NodeSpec{Taints: c.taints}, Status: corev1.NodeStatus{Conditions: c.conditions}}
			if c.deleting {
				n.DeletionTimestamp = &now
			}
			if got := needsUntaint(n); got != c.want {
				t.Errorf("needsUntaint = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWithoutTaint(t *testing.T) {
	taints := []corev1.Taint{{Key: notReadyTaint}, {Key: DisruptedTaint}, {Key: notReadyTaint, Effect: corev1.TaintEffectNoExecute}}
	got := withoutTaint(taints, notReadyTaint)
	if len(got) != 1 || got[0].Key != DisruptedTaint {
		t.Errorf("withoutTaint = %v, want only %s", got, DisruptedTaint)
	}
	if len(taints) != 3 {
		t.Errorf("withoutTaint changed its input: %v", taints)
	}
}
