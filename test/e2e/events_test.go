package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

const eventsSecret = "e2e-webhook-secret"

// eventsOn restarts runner-guard with its events endpoint (and extra
// arguments) and has the fake GitHub deliver workflow_job events there
// (with knobs); both are undone when the test ends. It returns the
// endpoint's URL.
func eventsOn(s *scenario, knobs ghfake.Events, extra ...string) string {
	s.t.Helper()
	requireLocalEvents(s)
	args, base, err := process.EventsEndpoint(s.t.TempDir(), eventsSecret)
	if err != nil {
		s.t.Fatal(err)
	}
	knobs.Secret = eventsSecret
	return serveEvents(s, knobs, base, append(args, extra...))
}

// eventsWithSecrets is eventsOn with a secret per webhook
// (--github-webhook-secrets); knobs.Secrets sign the fake's deliveries.
func eventsWithSecrets(s *scenario, knobs ghfake.Events, secrets []process.WebhookSecret, extra ...string) string {
	s.t.Helper()
	requireLocalEvents(s)
	args, base, err := process.EventsEndpointSecrets(s.t.TempDir(), secrets...)
	if err != nil {
		s.t.Fatal(err)
	}
	return serveEvents(s, knobs, base, append(args, extra...))
}

func requireLocalEvents(s *scenario) {
	s.t.Helper()
	if !env.Local() {
		s.t.Skip("events need the local harness: the fake GitHub delivers to a port of this host")
	}
}

// eventsRestored holds the tests that restore the webhook and stop the
// fake's deliveries when they end: once, however often they restart it.
var eventsRestored sync.Map // *testing.T -> struct{}

// serveEvents restarts runner-guard with args, which serve its events
// endpoint at base, and points the fake's deliveries there.
func serveEvents(s *scenario, knobs ghfake.Events, base string, args []string) string {
	s.t.Helper()
	if _, again := eventsRestored.LoadOrStore(s.t, struct{}{}); !again {
		s.t.Cleanup(func() {
			eventsRestored.Delete(s.t)
			env.Fake().DeliverEvents(ghfake.Events{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := env.RestartWebhook(ctx); err != nil {
				s.t.Errorf("restore webhook: %v", err)
			}
		})
	}
	if err := env.RestartWebhook(s.ctx, args...); err != nil {
		s.t.Fatal(err)
	}
	url := base + events.Path
	knobs.URL = url
	env.Fake().DeliverEvents(knobs)
	return url
}

// jobOf is the verified job annotation of a pod.
func (s *scenario) jobOf(name string) (jobannotation.Job, bool) {
	s.t.Helper()
	p := s.pod(name)
	if p == nil {
		return jobannotation.Job{}, false
	}
	return fixture.JobKeys(s.t, eventsSecret).JobFromPod(p)
}

// eventsMetric is runner_guard_events_total for a workflow_job outcome.
func (s *scenario) eventsMetric(outcome string) float64 {
	s.t.Helper()
	v, _, err := env.Metric(s.ctx, fmt.Sprintf(`runner_guard_events_total{event="workflow_job",outcome=%q}`, outcome))
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// refusedByJobRecord deletes the pod with kubectl and fails the test
// unless runner-guard refuses it as busy by its job record (rule 4h); it
// returns kubectl's stderr.
func (s *scenario) refusedByJobRecord(name string) string {
	s.t.Helper()
	_, stderr, err := s.kubectl("delete", "pod", name, "--wait=false")
	if err == nil || !strings.Contains(stderr, "runner busy") || !strings.Contains(stderr, "[reason: "+string(webhook.ReasonJobAnnotated)+"]") {
		s.t.Fatalf("delete of pod %s, whose job record verifies: err %v, stderr %q; want refused as runner busy, reason %s", name, err, stderr, webhook.ReasonJobAnnotated)
	}
	return stderr
}

// podAge is the clause of a refusal that ages with the pod, absent in its
// first second.
var podAge = regexp.MustCompile(` \(its pod started [0-9hms.]+ ago\)|, its pod started [0-9hms.]+ ago`)

// withoutAge is a refusal without the pod's age, which differs between two
// refusals a second apart.
func withoutAge(refusal string) string { return podAge.ReplaceAllString(refusal, "") }

// jobDelivery is the body of a workflow_job delivery, as GitHub sends it,
// of job (in the organization owning its repository) on runner.
func jobDelivery(action string, job jobannotation.Job, runner string) []byte {
	owner, _, _ := strings.Cut(job.Repository, "/")
	at := time.Now().UTC().Format(time.RFC3339)
	wj := map[string]any{"id": job.JobID, "run_id": job.RunID, "run_attempt": job.Attempt, "name": job.Name,
		"status": action, "runner_name": runner, "started_at": at, "completed_at": nil}
	if action == events.ActionCompleted {
		wj["completed_at"] = at
	}
	b, _ := json.Marshal(map[string]any{"action": action, "workflow_job": wj, // maps of plain values always marshal
		"repository": map[string]any{"full_name": job.Repository}, "organization": map[string]any{"login": owner}})
	return b
}

// postDelivery sends body to the events endpoint at url as a workflow_job
// delivery, signed with secret ("": unsigned), and returns the answer.
func postDelivery(s *scenario, url, id string, body []byte, secret string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set(events.HeaderEvent, "workflow_job")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(events.HeaderDelivery, id)
	if secret != "" {
		req.Header.Set(events.HeaderSignature, events.Sign(body, []byte(secret)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(answer))
}

var hinted = map[string]string{
	disruption.AnnotationDoNotDisrupt: "true", disruption.AnnotationSafeToEvict: "false", disruption.AnnotationOwned: "do-not-disrupt,safe-to-evict,deletion-cost",
	disruption.AnnotationDeletionCost: disruption.DeletionCost.Value,
}

// A legacy runner pod gets its job from GitHub's in_progress delivery, and
// with it the hints and a busy refusal with no GitHub request: of the
// delete and its dry run alike, and of an eviction, real or dry, with 429.
// A forged delivery, or a signed one naming no runner, of an action not
// read, or malformed, changes nothing; a repeated one applies once;
// completed takes the job and the hints off.
func TestEventsGiveLegacyPodsTheirJob(t *testing.T) {
	s := newScenario(t, "events")
	url := eventsOn(s, ghfake.Events{Repeat: true})
	s.runnerPod("ev-runner", false, true)
	before := len(s.github())

	env.GitHub.SetBusy(s.scope, "ev-runner", true) // the fake delivers in_progress (twice)
	job, ok := s.jobOf("ev-runner")
	if !ok || job.Repository != s.scope.Name+"/app" || job.JobID == 0 {
		t.Fatalf("after in_progress the pod carries job %+v (verified %v): %v", job, ok, s.annotations("ev-runner"))
	}
	if n := s.eventsMetric(events.OutcomeDuplicate); n != 1 {
		t.Errorf("the repeated in_progress counted %v duplicates, want 1", n)
	}
	s.wantAnnotations("ev-runner", hinted)
	stderr := s.refusedByJobRecord("ev-runner")
	if !strings.Contains(stderr, "workflow_job") {
		t.Errorf("the refusal does not say the job came from a workflow_job delivery: %q", stderr)
	}
	_, dryRun, err := s.kubectl("delete", "pod", "ev-runner", "--dry-run=server")
	if err == nil || withoutAge(dryRun) != withoutAge(stderr) {
		t.Errorf("dry run of the delete: err %v, stderr %q; want it refused as the delete was: %q", err, dryRun, stderr)
	}
	dryEvict, evict := s.evict("ev-runner", true), s.evict("ev-runner", false)
	for name, err := range map[string]error{"dry run of the eviction": dryEvict, "eviction": evict} {
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "[reason: "+string(webhook.ReasonJobAnnotated)+"]") {
			t.Errorf("%s of the pod of an annotated job: %v; want 429 with reason %s", name, err, webhook.ReasonJobAnnotated)
		}
	}
	if withoutAge(fmt.Sprint(dryEvict)) != withoutAge(fmt.Sprint(evict)) {
		t.Errorf("dry run of the eviction refused with %q, the eviction with %q", dryEvict, evict)
	}
	s.requireAlive("ev-runner")
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("hints and the refusals from a delivery cost GitHub requests:%s", describe(reqs))
	}

	// Deliveries that must change nothing: forged (unsigned, or signed with
	// another secret) are refused with 401; signed ones naming no runner,
	// of an action runner-guard does not read, or malformed, are answered
	// and leave the record as it was.
	record := s.annotations("ev-runner")[jobannotation.Annotation]
	completed := jobDelivery(events.ActionCompleted, job, "ev-runner")
	noJobID := job
	noJobID.JobID = 0
	for _, d := range []struct {
		name, secret string
		body         []byte
		status       int
	}{
		{"unsigned", "", completed, http.StatusUnauthorized},
		{"another secret", "guess", completed, http.StatusUnauthorized},
		{"no runner", eventsSecret, jobDelivery(events.ActionCompleted, job, ""), http.StatusOK},
		{"an action not read", eventsSecret, jobDelivery("waiting", job, "ev-runner"), http.StatusAccepted},
		{"no job ID", eventsSecret, jobDelivery(events.ActionCompleted, noJobID, "ev-runner"), http.StatusBadRequest},
		{"not JSON", eventsSecret, completed[:len(completed)/2], http.StatusBadRequest},
	} {
		if code, answer := postDelivery(s, url, "bad-"+d.name, d.body, d.secret); code != d.status {
			t.Errorf("delivery with %s answered %d %q, want %d", d.name, code, answer, d.status)
		}
	}
	if got := s.annotations("ev-runner")[jobannotation.Annotation]; got != record {
		t.Fatalf("a forged or bad delivery changed the job record from %s to %s", record, got)
	}
	if n := s.eventsMetric(events.OutcomeNoPod); n != 1 {
		t.Errorf("the delivery naming no runner counted %v %s, want 1", n, events.OutcomeNoPod)
	}

	env.GitHub.SetBusy(s.scope, "ev-runner", false) // completed (twice)
	if _, ok := s.jobOf("ev-runner"); ok {
		t.Fatalf("completed left the job: %v", s.annotations("ev-runner"))
	}
	// The job's end makes the runner cheap to lose: its deletion cost goes
	// low, and runner-guard's other hints go.
	s.wantAnnotations("ev-runner", map[string]string{disruption.AnnotationOwned: "deletion-cost", disruption.AnnotationDeletionCost: disruption.DeletionCost.Idle})
	for _, d := range env.Fake().Deliveries() {
		if d.Status != http.StatusOK {
			t.Errorf("delivery %+v answered %d, want 200", d, d.Status)
		}
	}
	if n := s.eventsMetric(events.OutcomeDuplicate); n != 2 {
		t.Errorf("the repeated deliveries counted %v duplicates, want 2", n)
	}
}

// A lost completed leaves the job on the pod, and so the hints; the drain
// of its cordoned node still asks GitHub's DELETE, which finds the runner
// idle and releases it, as without events.
func TestEventsLostCompletedLeavesTheDrainToGitHub(t *testing.T) {
	s := newScenario(t, "events-lost")
	eventsOn(s, ghfake.Events{Lose: []string{"completed"}})
	node := "e2e-node-events-lost"
	if err := env.EnsureNode(s.ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.Kubectl(context.Background(), "uncordon", node) })
	pod := legacyRunnerPod(s.ns, "ev-lost", s.scope)
	pod.Spec.NodeName = node
	id := env.GitHub.AddRunner(s.scope, "ev-lost")
	pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(id)}
	if legacyRunnersServed(t) {
		pod = ownedBy(pod, s.legacyRunner("ev-lost", s.scope))
	}
	s.create(pod)
	env.GitHub.SetBusy(s.scope, "ev-lost", true)
	s.wantAnnotations("ev-lost", hinted)
	env.GitHub.SetBusy(s.scope, "ev-lost", false) // its completed is lost
	if _, ok := s.jobOf("ev-lost"); !ok {
		t.Fatal("the job went without its completed")
	}
	if _, stderr, err := s.kubectl("cordon", node); err != nil {
		t.Fatalf("cordon: %v: %s", err, stderr)
	}
	s.waitDeletionAdmitted("the drain releases the idle runner whose completed was lost", time.Minute, "ev-lost")
	if s.registered("ev-lost") {
		t.Error("the runner is still registered on GitHub")
	}
	if s.count(http.MethodDelete) == 0 {
		t.Errorf("the drain released the runner without GitHub's DELETE:%s", describe(s.github()))
	}
}

// ARC installed after runner-guard: with no EphemeralRunner CRD at start
// runner_guard_arc_crd_served is 0 and the controllers still guard legacy
// runners; once the CRD is installed it becomes 1 with no restart, and a
// scale-set pod's job fields give it hints.
func TestEphemeralRunnerCRDInstalledLater(t *testing.T) {
	if !env.Local() {
		t.Skip("needs the local harness: it removes and installs a CRD and restarts runner-guard")
	}
	crd := filepath.Join("testdata", "crds", "ephemeralrunners.actions.github.com.yaml")
	served := func(want float64) func() error {
		return func() error {
			// Each replica watches the CRD for itself.
			samples, err := env.ReplicaMetrics(context.Background(), "runner_guard_arc_crd_served")
			if err != nil {
				return err
			}
			for _, m := range samples {
				if !m.Found || m.Value != want {
					return fmt.Errorf("replica %s: runner_guard_arc_crd_served = %v (present %v), want %v", m.Replica, m.Value, m.Found, want)
				}
			}
			return nil
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, stderr, err := env.Kubectl(ctx, "apply", "-f", crd); err != nil {
			t.Errorf("reinstall the CRD: %v: %s", err, stderr)
		}
		_, _, _ = env.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", crd)
		if err := env.RestartWebhook(ctx); err != nil {
			t.Errorf("restore webhook: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, stderr, err := env.Kubectl(ctx, "delete", "-f", crd, "--wait=true", "--timeout=90s"); err != nil {
		t.Fatalf("remove the EphemeralRunner CRD: %v: %s", err, stderr)
	}
	if err := env.RestartWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, "crd-later")
	s.eventually("runner-guard sees no EphemeralRunners", 30*time.Second, served(0))

	// Meanwhile legacy runners are guarded by every controller: the drain of
	// a cordoned node releases an idle legacy runner.
	node := "e2e-node-crd-later"
	if err := env.EnsureNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.Kubectl(context.Background(), "uncordon", node) })
	pod := legacyRunnerPod(s.ns, "crd-later-legacy", s.scope)
	pod.Spec.NodeName = node
	pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(env.GitHub.AddRunner(s.scope, "crd-later-legacy"))}
	if legacyRunnersServed(t) {
		pod = ownedBy(pod, s.legacyRunner("crd-later-legacy", s.scope))
	}
	s.create(pod)
	if _, stderr, err := s.kubectl("cordon", node); err != nil {
		t.Fatalf("cordon: %v: %s", err, stderr)
	}
	s.waitDeletionAdmitted("the drain releases an idle legacy runner while no EphemeralRunner CRD is served", time.Minute, "crd-later-legacy")

	if _, stderr, err := env.Kubectl(ctx, "apply", "-f", crd); err != nil {
		t.Fatalf("install the CRD: %v: %s", err, stderr)
	}
	if _, stderr, err := env.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", crd); err != nil {
		t.Fatalf("CRD not established: %v: %s", err, stderr)
	}
	s.eventually("runner-guard picks up the EphemeralRunner CRD", 2*disruption.DefaultARCCheckInterval+10*time.Second, served(1))

	ss := newScaleSet(t, "crd-later-ss")
	r := ss.runner("crd-later-runner", "https://github.com/"+ss.scope.Name, ss.scope, true, nil)
	ss.setJob(r.name, 303, "build")
	ss.wantAnnotationsWithin(r.name, hinted, 30*time.Second)
	if p := ss.pod(r.name); p != nil && p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s is %s", r.name, p.Status.Phase)
	}
}
