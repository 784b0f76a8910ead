package webhook

import (
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/runner-guard/runner-guard/events/jobannotation"
)

func TestRuleJobAnnotated(t *testing.T) {
	secret := []byte("events-secret")
	job := jobannotation.Job{Repository: "acme/app", RunID: 3, Attempt: 1, JobID: 77, Name: "build"}
	annotated := func(value string) review {
		r := deleteOnPod
		r.Pod = runningPod.DeepCopy()
		r.Pod.Annotations = map[string]string{jobannotation.Annotation: value}
		return r
	}
	signed := annotated(jobannotation.Value(job, string(runningPod.UID), secret))
	withSecret := testPolicy(OnErrorDeny)
	withSecret.EventsSecret = secret
	bypass := withSecret
	bypass.BypassUsers = []string{"admin"}
	byAdmin := signed
	byAdmin.User = authenticationv1.UserInfo{Username: "admin"}
	tests := map[string]struct {
		r    review
		pol  policy
		want wantDecision
	}{
		"signed job: busy": {signed, withSecret, wantDecision{applies: true, reason: ReasonJobAnnotated, code: http.StatusForbidden, event: EventRunnerBusy,
			msg: []string{"runner busy", `job "build" (ID 77)`, "acme/app", "GitHub not asked"}}},
		"signed job, eviction: 429": {withOp(signed, OperationEvict), withSecret, wantDecision{applies: true, reason: ReasonJobAnnotated,
			code: http.StatusTooManyRequests, retryAfter: DefaultBusyRetryAfter, event: EventRunnerBusy, msg: []string{"runner busy"}}},
		"forged mac: passes":       {annotated(jobannotation.Value(job, string(runningPod.UID), []byte("guess"))), withSecret, wantDecision{}},
		"copied from another pod":  {annotated(jobannotation.Value(job, "another-uid", secret)), withSecret, wantDecision{}},
		"events off: passes":       {signed, testPolicy(OnErrorDeny), wantDecision{}},
		"no annotation: passes":    {deleteOnPod, withSecret, wantDecision{}},
		"dry run: its look-up":     {withDryRun(signed), withSecret, wantDecision{}},
		"bypass user: its look-up": {byAdmin, bypass, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := tc.r
			r.Target = testTarget
			got, ok := ruleJobAnnotated(&r, &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}
