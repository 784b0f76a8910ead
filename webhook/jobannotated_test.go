package webhook

import (
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestRuleJobAnnotated(t *testing.T) {
	secret := "events-secret"
	job := jobannotation.Job{Repository: "acme/app", RunID: 3, Attempt: 1, JobID: 77, Name: "build"}
	annotated := func(value string) review {
		r := deleteOnPod
		r.Pod = runningPod.DeepCopy()
		r.Pod.Annotations = map[string]string{jobannotation.Annotation: value}
		return r
	}
	signed := annotated(fixture.JobAnnotation(t, secret, job, jobannotation.StateInProgress, string(runningPod.UID)))
	withSecret := testPolicy(OnErrorDeny)
	withSecret.JobKeys = fixture.JobKeys(t, secret)
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
		"forged mac: passes":      {annotated(fixture.JobAnnotation(t, "guess", job, jobannotation.StateInProgress, string(runningPod.UID))), withSecret, wantDecision{}},
		"copied from another pod": {annotated(fixture.JobAnnotation(t, secret, job, jobannotation.StateInProgress, "another-uid")), withSecret, wantDecision{}},
		"events off: passes":      {signed, testPolicy(OnErrorDeny), wantDecision{}},
		"no annotation: passes":   {deleteOnPod, withSecret, wantDecision{}},
		"dry run: as the delete": {withDryRun(signed), withSecret, wantDecision{applies: true, reason: ReasonJobAnnotated, code: http.StatusForbidden, event: EventRunnerBusy,
			msg: []string{"runner busy"}}},
		"completed job: passes":    {annotated(fixture.JobAnnotation(t, secret, job, jobannotation.StateCompleted, string(runningPod.UID))), withSecret, wantDecision{}},
		"bypass user: its look-up": {byAdmin, bypass, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := tc.r
			r.Target = testTarget
			r.ReadOnly = r.readOnly(&tc.pol) // as decide sets it
			got, ok := ruleJobAnnotated(&r, &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}
