package rerun

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

func ephemeralRunner(status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetName("runner-1")
	u.SetNamespace("ci")
	return u
}

func TestJobOf(t *testing.T) {
	secret := "events-secret"
	annotated := func(uid types.UID, j jobannotation.Job, key string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy-1", Namespace: "ci", UID: uid,
			Annotations: map[string]string{AnnotationJob: fixture.JobAnnotation(t, key, j, jobannotation.StateInProgress, "uid-1")}}}
	}
	delivered := jobannotation.Job{Repository: "acme/app", RunID: 88, Attempt: 1, JobID: 901, Name: "build"}
	tests := map[string]struct {
		pod         *corev1.Pod
		er          *unstructured.Unstructured
		secret      string
		want        Job
		wantAttempt int
		ok          bool
	}{
		"job fields": {er: ephemeralRunner(map[string]any{"jobRepositoryName": "acme/app", "workflowRunId": int64(77), "runnerName": "rn"}),
			want: Job{Repository: "acme/app", RunID: 77, Runner: "rn"}, ok: true},
		"runner name from the object": {er: ephemeralRunner(map[string]any{"jobRepositoryName": "acme/app", "workflowRunId": int64(77)}),
			want: Job{Repository: "acme/app", RunID: 77, Runner: "runner-1"}, ok: true},
		"no job yet":           {er: ephemeralRunner(map[string]any{"phase": "Running"})},
		"repository not named": {er: ephemeralRunner(map[string]any{"workflowRunId": int64(77)})},
		"no run ID":            {er: ephemeralRunner(map[string]any{"jobRepositoryName": "acme/app"})},
		"no EphemeralRunner":   {},
		"legacy pod named by a delivery": {pod: annotated("uid-1", delivered, secret), secret: secret,
			want: Job{Repository: "acme/app", RunID: 88, Runner: "legacy-1", ID: 901}, wantAttempt: 1, ok: true},
		"legacy annotation without a job ID":      {pod: annotated("uid-1", jobannotation.Job{Repository: "acme/app", RunID: 88, Attempt: 1}, secret), secret: secret},
		"legacy annotation under another secret":  {pod: annotated("uid-1", delivered, "forged"), secret: secret},
		"legacy annotation copied to another pod": {pod: annotated("uid-2", delivered, secret), secret: secret},
		"legacy annotation with events off":       {pod: annotated("uid-1", delivered, secret)},
		"legacy annotation without a run":         {pod: annotated("uid-1", jobannotation.Job{Repository: "acme/app", JobID: 901}, secret), secret: secret},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod
			if pod == nil {
				pod = &corev1.Pod{}
			}
			got, attempt, ok := jobOf(pod, tc.er, fixture.JobKeys(t, tc.secret))
			if ok != tc.ok || got != tc.want || attempt != tc.wantAttempt {
				t.Errorf("jobOf = %+v, %d, %v; want %+v, %d, %v", got, attempt, ok, tc.want, tc.wantAttempt, tc.ok)
			}
		})
	}
}

func TestFinishedNormally(t *testing.T) {
	exited := func(code int32) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "runner", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}},
		}}
	}
	tests := map[string]struct {
		status corev1.PodStatus
		want   bool
	}{
		"succeeded":              {status: corev1.PodStatus{Phase: corev1.PodSucceeded}, want: true},
		"runner exited 0":        {status: exited(0), want: true},
		"runner exited 1":        {status: exited(1)},
		"running":                {status: corev1.PodStatus{Phase: corev1.PodRunning}},
		"failed":                 {status: corev1.PodStatus{Phase: corev1.PodFailed}},
		"another container at 0": {status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "sidecar", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := finishedNormally(&corev1.Pod{Status: tc.status}, "runner"); got != tc.want {
				t.Errorf("finishedNormally = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLossCause(t *testing.T) {
	zero := int64(0)
	ready := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}}}
	}
	cordoned := ready(corev1.ConditionTrue)
	cordoned.Spec.Unschedulable = true
	onNode := corev1.PodSpec{NodeName: "n1"}
	tests := map[string]struct {
		pod          corev1.Pod
		node         *corev1.Node
		nodeKnown    bool
		pastDeadline bool
		want         Cause
	}{
		"node gone":                   {pod: corev1.Pod{Spec: onNode}, nodeKnown: true, want: CauseNodeGone},
		"node not ready":              {pod: corev1.Pod{Spec: onNode}, node: ready(corev1.ConditionUnknown), nodeKnown: true, want: CauseNodeNotReady},
		"node draining":               {pod: corev1.Pod{Spec: onNode}, node: cordoned, nodeKnown: true, want: CauseNodeDraining},
		"node deadline":               {pod: corev1.Pod{Spec: onNode}, node: cordoned, nodeKnown: true, pastDeadline: true, want: CauseNodeDeadline},
		"node gone past its deadline": {pod: corev1.Pod{Spec: onNode}, nodeKnown: true, pastDeadline: true, want: CauseNodeGone},
		"evicted": {pod: corev1.Pod{Spec: onNode, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}},
			node: ready(corev1.ConditionTrue), nodeKnown: true, want: CauseEvicted},
		"deleted by the pod GC": {pod: corev1.Pod{Spec: onNode, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"}}}},
			node: ready(corev1.ConditionTrue), nodeKnown: true, want: CauseNodeGone},
		"deleted for a NoExecute taint": {pod: corev1.Pod{Spec: onNode, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}}}},
			node: ready(corev1.ConditionTrue), nodeKnown: true, want: CauseNodeNotReady},
		"force-deleted": {pod: corev1.Pod{Spec: onNode, ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: &zero}}, node: ready(corev1.ConditionTrue), nodeKnown: true, want: CauseForceDeleted},
		"pod failed":    {pod: corev1.Pod{Spec: onNode, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, node: ready(corev1.ConditionTrue), nodeKnown: true, want: CausePodFailed},
		"deleted":       {pod: corev1.Pod{Spec: onNode}, node: ready(corev1.ConditionTrue), nodeKnown: true, want: CauseDeleted},
		"node unknown":  {pod: corev1.Pod{Spec: onNode}, want: CauseDeleted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := lossCause(&tc.pod, tc.node, tc.nodeKnown, tc.pastDeadline); got != tc.want {
				t.Errorf("lossCause = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	rec := lostRecord(77, "runner-1")
	rec.Attempt, rec.JobID, rec.JobName, rec.State, rec.Outcome, rec.Message = 2, 9, "build", StateRerun, OutcomeRerun, "re-ran it"
	rec.Credentials = CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: "ci", Name: "gh"}, BaseURL: "https://api.github.com/"}
	rec.RunStarted = rec.Recorded.Add(-time.Hour)
	cm := rec.ConfigMap("runner-guard-system")
	if cm.Labels[LabelRun] != "77" || cm.Labels[LabelLostJob] != "true" || cm.Name != rec.Name() {
		t.Fatalf("ConfigMap %s labels %v", cm.Name, cm.Labels)
	}
	got, err := parseRecord(cm)
	if err != nil || got != rec {
		t.Fatalf("parseRecord = %+v, %v; want %+v", got, err, rec)
	}
	if other := lostRecord(77, "runner-2"); other.Name() == rec.Name() {
		t.Error("two jobs of one run share a record name")
	}
	cm.Data["runID"] = "x"
	if _, err := parseRecord(cm); err == nil {
		t.Error("a record without a run ID parsed")
	}
}

func TestDeletedPastDeadline(t *testing.T) {
	deadline := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	dl := webhook.NodeDeadline{NodeClaim: "default-abc", At: deadline}
	sec := func(i int64) *int64 { return &i }
	// deleted is a pod whose deletion was asked for at asked with grace.
	deleted := func(tgp *int64, asked time.Time, grace int64) *corev1.Pod {
		ts := metav1.NewTime(asked.Add(time.Duration(grace) * time.Second))
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &ts, DeletionGracePeriodSeconds: &grace},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: tgp},
		}
	}
	tests := map[string]struct {
		pod  *corev1.Pod
		dl   webhook.NodeDeadline
		want bool
	}{
		// Karpenter asks with the grace period left before the deadline.
		"Karpenter's DELETE past the deadline less the grace period": {pod: deleted(sec(30), deadline.Add(-20*time.Second), 20), dl: dl, want: true},
		"past the deadline itself":                                   {pod: deleted(sec(30), deadline.Add(5*time.Second), 1), dl: dl, want: true},
		"the kubelet's final delete keeps the request time":          {pod: deleted(sec(30), deadline.Add(-20*time.Second), 0), dl: dl, want: true},
		"before the deadline less the grace period":                  {pod: deleted(sec(30), deadline.Add(-90*time.Second), 30), dl: dl, want: false},
		"a long grace period moves it earlier":                       {pod: deleted(sec(600), deadline.Add(-90*time.Second), 600), dl: dl, want: true},
		"no grace period of its own":                                 {pod: deleted(nil, deadline.Add(5*time.Second), 1), dl: dl, want: false},
		"no deadline":                                                {pod: deleted(sec(30), deadline.Add(5*time.Second), 1), want: false},
		"not deleted":                                                {pod: &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: sec(30)}}, dl: dl, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := deletedPastDeadline(tc.pod, tc.dl); got != tc.want {
				t.Errorf("deletedPastDeadline = %v, want %v", got, tc.want)
			}
		})
	}
}
