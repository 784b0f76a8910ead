package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

var theJob = jobannotation.Job{Repository: "acme/app", RunID: 7, Attempt: 2, JobID: 42, Name: "build"}

func mustKeyring(t *testing.T, secrets ...jobannotation.Secret) *jobannotation.Keyring {
	t.Helper()
	k, err := jobannotation.NewKeyring(secrets, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedRecord is the annotation value secret signs for job in state on the
// pod with uid "uid-1".
func signedRecord(t *testing.T, state string, secret jobannotation.Secret) string {
	t.Helper()
	r := jobannotation.Record{Job: theJob, State: state, At: now.Add(-3 * time.Minute), Secret: secret.Name}
	v, err := mustKeyring(t, secret).Value(r, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func annotatedPod(value string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r1", UID: types.UID("uid-1")}}
	if value != "" {
		p.Annotations = map[string]string{jobannotation.Annotation: value}
	}
	return p
}

func TestJobLine(t *testing.T) {
	orgA := jobannotation.Secret{Name: "org-a", Value: []byte("s1")}
	rotated := jobannotation.Secret{Name: "org-a", Value: []byte("s2"), Previous: []byte("s1"), PreviousUntil: now.Add(time.Hour)}
	expired := jobannotation.Secret{Name: "org-a", Value: []byte("s2"), Previous: []byte("s1"), PreviousUntil: now.Add(-time.Hour)}
	single := jobannotation.Secret{Value: []byte("one")}
	running := signedRecord(t, jobannotation.StateInProgress, orgA)
	multi := func(keys *jobannotation.Keyring) WebhookSecrets {
		return WebhookSecrets{Flag: "--github-webhook-secrets=/etc/runner-guard/webhook-secrets.yaml", Keys: keys}
	}
	secretNeed := "get secrets in namespace rg (org-a-webhook)"
	unreadable := &forbiddenError{What: "Secret rg/org-a-webhook", Need: secretNeed}
	cases := map[string]struct {
		pod        *corev1.Pod
		secrets    WebhookSecrets
		notGuarded string
		// want* are the line's facts; wantIn the phrases its text holds.
		wantVerified, wantHolds, wantRecord, wantEventsOff bool
		wantNeeds, wantProblem, wantUntil                  string
		wantIn                                             []string
	}{
		"verifies, in progress": {
			pod: annotatedPod(running), secrets: multi(mustKeyring(t, orgA)), wantVerified: true, wantHolds: true, wantRecord: true,
			wantIn: []string{`job "build" (ID 42) of run 7 attempt 2 in acme/app, in_progress since 2026-12-04T19:57:00Z (3m0s ago), signed under webhook secret "org-a"`,
				"verifies: runner-guard refuses the pod's delete and eviction as runner-job-annotated, dry runs included"},
		},
		"verifies, the single secret": {
			pod:          annotatedPod(signedRecord(t, jobannotation.StateInProgress, single)),
			secrets:      WebhookSecrets{Flag: "--github-webhook-secret-file=/etc/runner-guard/events/webhook-secret", Keys: mustKeyring(t, single)},
			wantVerified: true, wantHolds: true, wantRecord: true,
			wantIn: []string{"signed under the single webhook secret (--github-webhook-secret-file)", "verifies: runner-guard refuses"},
		},
		"completed: a tombstone": {
			pod: annotatedPod(signedRecord(t, jobannotation.StateCompleted, orgA)), secrets: multi(mustKeyring(t, orgA)), wantVerified: true, wantRecord: true,
			wantIn: []string{"completed at 2026-12-04T19:57:00Z", "verifies; the job completed, so the record is a tombstone and holds nothing"},
		},
		"verifies, the pod not guarded": {
			pod: annotatedPod(running), secrets: multi(mustKeyring(t, orgA)), notGuarded: "namespace ns is exempt (exemptNamespaces)", wantVerified: true, wantRecord: true,
			wantIn: []string{"verifies, but runner-guard does not guard the pod (namespace ns is exempt (exemptNamespaces)), so it holds nothing"},
		},
		"previous value inside its window": {
			pod: annotatedPod(running), secrets: multi(mustKeyring(t, rotated)), wantVerified: true, wantHolds: true, wantRecord: true,
			wantUntil: "2026-12-04T21:00:00Z",
			wantIn:    []string{`verifies (under webhook secret "org-a"'s previous value, accepted until 2026-12-04T21:00:00Z)`},
		},
		"previous value past its window": {
			pod: annotatedPod(running), secrets: multi(mustKeyring(t, expired)), wantRecord: true,
			wantProblem: `runner-guard.io/job is signed under webhook secret "org-a"'s previous value, accepted until 2026-12-04T19:00:00Z`,
			wantIn:      []string{"does not verify, so it holds nothing: runner-guard.io/job is signed under webhook secret \"org-a\"'s previous value"},
		},
		"unknown secret": {
			pod: annotatedPod(running), secrets: multi(mustKeyring(t, jobannotation.Secret{Name: "org-b", Value: []byte("s1")})), wantRecord: true,
			wantProblem: `runner-guard.io/job is signed under webhook secret "org-a", which is not configured`,
			wantIn:      []string{`signed under webhook secret "org-a"; does not verify, so it holds nothing`},
		},
		"tampered": {
			pod: annotatedPod(strings.Replace(running, `"jobID":42`, `"jobID":43`, 1)), secrets: multi(mustKeyring(t, orgA)), wantRecord: true,
			wantProblem: "runner-guard.io/job: its MAC does not verify",
			wantIn:      []string{"(ID 43)", "does not verify, so it holds nothing: runner-guard.io/job: its MAC does not verify"},
		},
		"malformed": {
			pod: annotatedPod("busy"), secrets: multi(mustKeyring(t, orgA)),
			wantProblem: "runner-guard.io/job is not a record",
			wantIn:      []string{"does not verify, so it holds nothing: runner-guard.io/job is not a record"},
		},
		"malformed, its secrets unreadable": {
			pod: annotatedPod(`{"repository":"acme/app","jobID":1,"state":"queued","secret":"org-a"}`), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", All: unreadable},
			wantProblem: `has state "queued"`,
			wantIn:      []string{"does not verify, so it holds nothing"},
		},
		"cannot read the secret": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", Keys: mustKeyring(t), Each: map[string]error{"org-a": unreadable}},
			wantRecord: true, wantNeeds: secretNeed, wantProblem: "Secret rg/org-a-webhook unknown: needs " + secretNeed,
			wantIn: []string{`signed under webhook secret "org-a"`, "cannot be verified here: Secret rg/org-a-webhook unknown: needs " + secretNeed,
				"if it verifies, runner-guard refuses the pod's delete and eviction"},
		},
		"cannot read the previous value": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", Keys: mustKeyring(t, jobannotation.Secret{Name: "org-a", Value: []byte("s2")}),
				Each: map[string]error{"org-a": unreadable}},
			wantRecord: true, wantNeeds: secretNeed, wantProblem: "needs " + secretNeed,
			wantIn: []string{"cannot be verified here"},
		},
		"the current value readable, the previous not: the current verifies": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", Keys: mustKeyring(t, orgA), Each: map[string]error{"org-a": unreadable}},
			wantVerified: true, wantHolds: true, wantRecord: true,
			wantIn: []string{"verifies: runner-guard refuses"},
		},
		"another secret unreadable": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", Keys: mustKeyring(t, orgA), Each: map[string]error{"org-b": errors.New("no")}},
			wantVerified: true, wantHolds: true, wantRecord: true,
			wantIn: []string{"verifies"},
		},
		"cannot read the mapping file": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/x", All: &forbiddenError{What: "ConfigMap rg/m", Need: "get configmaps in namespace rg (m)"}},
			wantRecord: true, wantNeeds: "get configmaps in namespace rg (m)", wantProblem: "ConfigMap rg/m unknown",
			wantIn: []string{"cannot be verified here: ConfigMap rg/m unknown: needs get configmaps in namespace rg (m)"},
		},
		"no Deployment": {
			pod: annotatedPod(running), secrets: WebhookSecrets{All: errors.New("no runner-guard Deployment (label x) in namespace rg, so its webhook secrets are unknown (pass --guard-namespace)")},
			wantRecord: true, wantProblem: "no runner-guard Deployment",
			wantIn: []string{"cannot be verified here: no runner-guard Deployment"},
		},
		"events off": {
			pod: annotatedPod(running), secrets: WebhookSecrets{Keys: mustKeyring(t)}, wantRecord: true, wantEventsOff: true,
			wantIn: []string{`signed under webhook secret "org-a"`, "events are off (runner-guard's Deployment passes neither --github-webhook-secret-file nor --github-webhook-secrets), so it holds nothing"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := jobLine(tc.pod, tc.secrets, tc.notGuarded, now)
			if l == nil {
				t.Fatal("jobLine = nil, want a line")
			}
			if l.Verified != tc.wantVerified || l.Holds != tc.wantHolds || (l.Record != nil) != tc.wantRecord || l.EventsOff != tc.wantEventsOff ||
				l.Needs != tc.wantNeeds || l.Unknown != (tc.wantNeeds != "") || l.VerifiedUntil != tc.wantUntil {
				t.Errorf("jobLine = %+v", *l)
			}
			if !strings.Contains(l.Problem, tc.wantProblem) || (tc.wantProblem == "") != (l.Problem == "") {
				t.Errorf("problem %q, want one with %q", l.Problem, tc.wantProblem)
			}
			for _, in := range tc.wantIn {
				if !strings.Contains(l.Text, in) {
					t.Errorf("text\n %s\nlacks\n %s", l.Text, in)
				}
			}
			var signed struct{ MAC string }
			if json.Unmarshal([]byte(tc.pod.Annotations[jobannotation.Annotation]), &signed) == nil && signed.MAC != "" && strings.Contains(l.Text, signed.MAC) {
				t.Errorf("text %q shows the record's MAC", l.Text)
			}
		})
	}
}

func TestJobLineWithoutTheAnnotation(t *testing.T) {
	if l := jobLine(annotatedPod(""), WebhookSecrets{}, "", now); l != nil {
		t.Errorf("jobLine = %+v, want nil for a pod without %s", *l, jobannotation.Annotation)
	}
}

// The text and JSON outputs agree: the line is printed exactly when the
// field is set, with the field's text.
func TestReportAnnotatedJobOutputs(t *testing.T) {
	line := &JobLine{Status: Status{Text: "job \"build\" (ID 42) ...; verifies"}, Verified: true, Holds: true}
	cases := map[string]*JobLine{"with the annotation": line, "without": nil}
	for name, l := range cases {
		t.Run(name, func(t *testing.T) {
			r := Report{Pod: "ns/r1", AnnotatedJob: l}
			var text, js bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back map[string]json.RawMessage
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			_, inJSON := back["annotatedJob"]
			inText := strings.Contains(text.String(), "\nannotated job: ")
			if inJSON != (l != nil) || inText != (l != nil) {
				t.Fatalf("annotatedJob in JSON %v, line in text %v; want both %v\n%s", inJSON, inText, l != nil, text.String())
			}
			if l == nil {
				return
			}
			if !strings.Contains(text.String(), "\nannotated job: "+l.Text+"\n") {
				t.Errorf("text output lacks the line %q:\n%s", l.Text, text.String())
			}
			if !strings.Contains(text.String(), "runner:        \nannotated job: ") {
				t.Errorf("the line does not follow the runner line:\n%s", text.String())
			}
		})
	}
}

// The lines docs/explain.md shows, in full.
func TestJobLineDocExamples(t *testing.T) {
	at := time.Date(2026, 12, 6, 14, 4, 12, 0, time.UTC)
	acme := jobannotation.Secret{Name: "org-acme", Value: []byte("x")}
	keys, err := jobannotation.NewKeyring([]jobannotation.Secret{acme}, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	rec := jobannotation.Record{Job: jobannotation.Job{Repository: "acme/app", RunID: 9876543210, Attempt: 1, JobID: 27182818284, Name: "build"},
		State: jobannotation.StateInProgress, At: at.Add(-4*time.Minute - 12*time.Second), Secret: acme.Name}
	value, err := keys.Value(rec, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	const head = `job "build" (ID 27182818284) of run 9876543210 attempt 1 in acme/app, in_progress since 2026-12-06T14:00:00Z (4m12s ago), signed under webhook secret "org-acme"; `
	cases := map[string]struct {
		secrets WebhookSecrets
		want    string
	}{
		"verifies": {
			secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/etc/runner-guard/webhook-secrets.yaml", Keys: keys},
			want:    head + "verifies: runner-guard refuses the pod's delete and eviction as runner-job-annotated, dry runs included (a bypass user's or a disrupted pod's real request is looked up on GitHub instead)",
		},
		"its Secret unreadable": {
			secrets: WebhookSecrets{Flag: "--github-webhook-secrets=/etc/runner-guard/webhook-secrets.yaml", Keys: mustKeyring(t), Each: map[string]error{"org-acme": &forbiddenError{
				What: `webhook secret "org-acme": secretFile /etc/runner-guard/webhook-secrets/org-acme/secret: Secret runner-guard-system/acme-webhook`,
				Need: "get secrets in namespace runner-guard-system (acme-webhook)"}}},
			want: head + `cannot be verified here: webhook secret "org-acme": secretFile /etc/runner-guard/webhook-secrets/org-acme/secret: Secret runner-guard-system/acme-webhook unknown: needs get secrets in namespace runner-guard-system (acme-webhook); if it verifies, runner-guard refuses the pod's delete and eviction (delete now and eviction now say what it answers)`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := jobLine(annotatedPod(value), tc.secrets, "", at).Text; got != tc.want {
				t.Errorf("text\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
