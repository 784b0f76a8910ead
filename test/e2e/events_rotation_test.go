package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

// wantJobRecord fails the test unless the pod's job record holds a job in
// progress, signed under value, the current value of the secret named secret.
func (s *scenario) wantJobRecord(pod, secret, value string) {
	s.t.Helper()
	keys, err := jobannotation.NewKeyring([]jobannotation.Secret{{Name: secret, Value: []byte(value)}}, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	p := s.pod(pod)
	if p == nil {
		s.t.Fatalf("pod %s is gone", pod)
	}
	if rec, err := keys.Read(p); err != nil || !rec.Running() || rec.Secret != secret {
		s.t.Fatalf("pod %s's job record %+v (%v), want a job in progress signed under secret %q's value %q", pod, rec, err, secret, value)
	}
}

// guardOnly is the --config of runner-guard guarding the scenario's
// namespace alone (runnerNamespaces): its controllers then count this
// test's pods, not those other tests leave behind.
func (s *scenario) guardOnly() string {
	s.t.Helper()
	file := filepath.Join(s.t.TempDir(), "runner-guard.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("runnerNamespaces: [%q]\n", s.ns)), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return "--config=" + file
}

// Rotating an organization's webhook secret from S1 to S2 keeps every hold:
// while S1 is the previous value, the records signed under it still refuse
// their pods' deletes, and jobs starting then are recorded (under S2)
// whichever value GitHub signs with. Once S1's window ends, the stragglers'
// records no longer hold their pods: their deletes go to GitHub, which
// still says busy, and the leader counts and reports them.
func TestEventsSecretRotationKeepsEveryHold(t *testing.T) {
	const s1, s2 = "e2e-org-secret-one", "e2e-org-secret-two"
	s := newScenario(t, "events-rotation")
	only := s.guardOnly()
	stragglers := []string{"rot-1", "rot-2", "rot-3"}
	signedS1, signedS2 := "rot-new-s1", "rot-new-s2" // their jobs start during the rotation
	for _, name := range append(slices.Clone(stragglers), signedS1, signedS2) {
		s.runnerPod(name, false, true)
	}
	orgA := func(value, previous string, until time.Time) []process.WebhookSecret {
		return []process.WebhookSecret{{Name: "org-a", Value: value, Previous: previous, PreviousUntil: until, Scopes: []string{"org:" + s.scope.Name}}}
	}
	signedWith := func(secret string) ghfake.Events {
		return ghfake.Events{Secrets: map[string]string{s.scope.Name: secret}}
	}

	eventsWithSecrets(s, signedWith(s1), orgA(s1, "", time.Time{}), only)
	for _, name := range stragglers {
		env.GitHub.SetBusy(s.scope, name, true) // in_progress, signed with S1
		s.wantJobRecord(name, "org-a", s1)
	}

	// S2 is current and S1 accepted for an hour yet.
	url := eventsWithSecrets(s, signedWith(s1), orgA(s2, s1, time.Now().Add(time.Hour)), only)
	before := len(s.github())
	for _, name := range stragglers {
		s.refusedByJobRecord(name)
	}
	env.GitHub.SetBusy(s.scope, signedS1, true) // GitHub still signs with S1
	// By hand: the fake, given another secret, numbers its delivery IDs
	// anew, and runner-guard answers an ID it has applied as a duplicate.
	job := jobannotation.Job{Repository: s.scope.Name + "/app", RunID: 600, Attempt: 1, JobID: 6001, Name: "build"}
	if code, answer := postDelivery(s, url, "signed-with-s2", jobDelivery(events.ActionInProgress, job, signedS2), s2); code != http.StatusOK || answer != events.OutcomeApplied {
		t.Fatalf("a delivery signed with S2 answered %d %q, want 200 %s", code, answer, events.OutcomeApplied)
	}
	for _, name := range []string{signedS1, signedS2} {
		s.wantJobRecord(name, "org-a", s2)
		s.refusedByJobRecord(name)
	}
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("the holds during the rotation cost GitHub requests:%s", describe(reqs))
	}

	// S1's window has ended.
	eventsWithSecrets(s, signedWith(s2), orgA(s2, s1, time.Now().Add(-time.Minute)), only)
	s.eventually("runner_guard_job_annotations_unverified counts the stragglers", 30*time.Second, func() error {
		v, ok, err := env.Metric(s.ctx, "runner_guard_job_annotations_unverified")
		if err != nil || !ok || v != float64(len(stragglers)) {
			return fmt.Errorf("runner_guard_job_annotations_unverified = %v (present %v, %v), want %d", v, ok, err, len(stragglers))
		}
		return nil
	})
	for _, name := range stragglers {
		if ev := s.waitForEvent(name, disruption.EventJobAnnotationUnverified); !strings.HasPrefix(ev, "Warning ") || !strings.Contains(ev, `"org-a"'s previous value`) {
			t.Errorf("pod %s: Event %q, want a Warning saying its record is signed under org-a's previous value", name, ev)
		}
	}
	asked := len(s.github())
	for _, name := range stragglers {
		// GitHub's DELETE answers busy, or the listing it then reads does.
		_, stderr, err := s.kubectl("delete", "pod", name, "--wait=false")
		if err == nil || !strings.Contains(stderr, "runner busy") ||
			(!strings.Contains(stderr, "[reason: "+string(webhook.ReasonRunnerBusy)+"]") && !strings.Contains(stderr, "[reason: "+string(webhook.ReasonListedBusy)+"]")) {
			t.Errorf("delete of straggler %s: err %v, stderr %q; want refused by GitHub's busy answer (reason %s or %s)", name, err, stderr, webhook.ReasonRunnerBusy, webhook.ReasonListedBusy)
		}
		s.requireAlive(name)
	}
	if reqs := s.github()[asked:]; !slices.ContainsFunc(reqs, func(r ghfake.Request) bool { return r.Method == http.MethodDelete }) {
		t.Errorf("the stragglers' deletes did not ask GitHub's DELETE:%s", describe(reqs))
	}
	for _, name := range []string{signedS1, signedS2} {
		s.refusedByJobRecord(name)
	}
}

// A delivery signed with one organization's webhook secret cannot speak for
// another organization's runner: naming that organization's repository it
// is refused with 401, naming its own it finds no pod of its scope; neither
// changes the pod, which the same delivery signed with its own
// organization's secret gives the job.
func TestEventsSecretSpeaksOnlyForItsOrganization(t *testing.T) {
	const secretA, secretB = "e2e-secret-of-org-a", "e2e-secret-of-org-b"
	a, b := newScenario(t, "events-org-a"), newScenario(t, "events-org-b")
	url := eventsWithSecrets(a, ghfake.Events{}, []process.WebhookSecret{
		{Name: "org-a", Value: secretA, Scopes: []string{"org:" + a.scope.Name}},
		{Name: "org-b", Value: secretB, Scopes: []string{"org:" + b.scope.Name}},
	})
	b.runnerPod("org-b-runner", false, true)
	// By hand: the fake, given another secret, numbers its delivery IDs
	// anew, and runner-guard answers an ID it has applied as a duplicate.
	job := jobannotation.Job{Repository: b.scope.Name + "/app", RunID: 700, Attempt: 1, JobID: 7001, Name: "build"}
	ownRepo := job
	ownRepo.Repository, ownRepo.JobID = a.scope.Name+"/app", 7002

	if code, answer := postDelivery(a, url, "cross-scope", jobDelivery(events.ActionInProgress, job, "org-b-runner"), secretA); code != http.StatusUnauthorized {
		t.Errorf("org-a's delivery naming org-b's repository answered %d %q, want 401", code, answer)
	}
	if code, answer := postDelivery(a, url, "cross-runner", jobDelivery(events.ActionInProgress, ownRepo, "org-b-runner"), secretA); code != http.StatusOK || answer != events.OutcomeNoPod {
		t.Errorf("org-a's delivery of its own repository naming org-b's runner answered %d %q, want 200 %s", code, answer, events.OutcomeNoPod)
	}
	if p := b.pod("org-b-runner"); jobannotation.Found(p) {
		t.Fatalf("org-a's deliveries gave org-b's pod a job record: %s", p.Annotations[jobannotation.Annotation])
	}
	if n := a.eventsMetric(events.OutcomeWrongScope); n != 1 {
		t.Errorf("deliveries counted %v %s, want 1", n, events.OutcomeWrongScope)
	}

	if code, answer := postDelivery(b, url, "own-scope", jobDelivery(events.ActionInProgress, job, "org-b-runner"), secretB); code != http.StatusOK || answer != events.OutcomeApplied {
		t.Fatalf("org-b's own delivery answered %d %q, want 200 %s", code, answer, events.OutcomeApplied)
	}
	b.wantJobRecord("org-b-runner", "org-b", secretB)
	b.refusedByJobRecord("org-b-runner")
}

// A --github-webhook-secrets file runner-guard cannot use stops it at
// start-up with one line naming the flag and what is wrong.
func TestEventsSecretsFileUnusable(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	emptySecret, err := process.WriteWebhookSecrets(dir, process.WebhookSecret{Name: "org-a", Scopes: []string{"org:org-a"}})
	if err != nil {
		t.Fatal(err)
	}
	bin, err := process.Binary(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := process.NewFiles(dir, "ghp_unused")
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	for name, c := range map[string]struct{ flag, want string }{
		"an empty file":               {"--github-webhook-secrets=" + empty, empty + " names no secret"},
		"a missing file":              {"--github-webhook-secrets=" + filepath.Join(dir, "missing.yaml"), "no such file"},
		"a secret file that is empty": {emptySecret, "secrets[0].secretFile"},
	} {
		p, err := process.Start(process.Config{Bin: bin, Files: files, Args: []string{"--events-bind-address=127.0.0.1:0", c.flag}}, 30*time.Second)
		if err == nil {
			p.Kill()
			t.Fatalf("%s: runner-guard started", name)
		}
		_, out, _ := strings.Cut(err.Error(), "process output:\n")
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if !strings.Contains(err.Error(), "exit status 1") || len(lines) != 1 ||
			!strings.HasPrefix(lines[0], "runner-guard: --github-webhook-secrets: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%s: %v\nwant exit status 1 and one line naming --github-webhook-secrets and %q", name, err, c.want)
		}
	}
}
