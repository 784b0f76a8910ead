package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// Sizes of the events run.
const (
	eventRuns        = 60
	eventCycleRuns   = 100 // legacy runners cycled busy and idle for the hourly figure
	forgedDeliveries = 1000
)

// eventsRun drives the real binary's events endpoint on a real API server,
// with the fake GitHub delivering signed workflow_job events: the lag from
// an in_progress delivery to the hint on a legacy pod, the GitHub requests
// legacy pods' hints cost with events on and --hint-from-listing off, and
// how many forged deliveries change anything.
func (e *env) eventsRun() error {
	opts, err := harnessOptions()
	if err != nil {
		return err
	}
	secret := "bench-webhook-secret"
	dir, err := os.MkdirTemp("", "runner-guard-bench-events-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		return err
	}
	port, err := process.FreePort()
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, events.Path)
	opts.WebhookArgs = append(opts.WebhookArgs, fmt.Sprintf("--events-bind-address=127.0.0.1:%d", port), "--github-webhook-secret-file="+secretFile)
	// One process: each serves the events endpoint on an address of its own.
	ctx, h, stop, err := startHarnessWithin(10*time.Minute, opts, 1)
	if err != nil {
		return err
	}
	defer stop()
	fenv := h.fenv
	fenv.Fake().DeliverEvents(ghfake.Events{URL: url, Secret: secret})
	b := &eventsBench{fenv: fenv, url: url, secret: []byte(secret)}
	if err := b.hintLag(ctx, e); err != nil {
		return fmt.Errorf("event hint lag: %w", err)
	}
	if err := b.requestsPerHour(ctx, e); err != nil {
		return fmt.Errorf("requests: %w", err)
	}
	return b.forged(ctx, e)
}

type eventsBench struct {
	fenv   *framework.Env
	url    string
	secret []byte
}

// legacyPods creates n idle legacy runners of scope and their running pods.
func (b *eventsBench) legacyPods(ctx context.Context, ns, prefix string, n int, scope ghclient.Scope) ([]string, error) {
	if err := b.fenv.CreateNamespace(ctx, ns); err != nil {
		return nil, err
	}
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		b.fenv.GitHub.AddRunner(scope, name)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"actions-runner": "", "runner-deployment-name": "bench"}},
			Spec: corev1.PodSpec{NodeName: framework.NodeName, Containers: []corev1.Container{{Name: "runner", Image: "actions-runner:bench",
				Env: []corev1.EnvVar{{Name: "RUNNER_NAME", Value: name}, {Name: "RUNNER_ORG", Value: scope.Name}}}}},
		}
		if _, err := b.fenv.CreateRunningPod(ctx, pod); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// hintLag: SetBusy (the fake delivers in_progress) -> do-not-disrupt on the pod.
func (b *eventsBench) hintLag(ctx context.Context, e *env) error {
	ns, scope := "bench-event-hints", org("bench-event-hints")
	names, err := b.legacyPods(ctx, ns, "ev", eventRuns, scope)
	if err != nil {
		return err
	}
	return e.measureLags("event_hint_lag_p99_ms", "<= 1000", fmt.Sprintf("signed in_progress delivery -> %s on a legacy pod, real binary and API server", disruption.AnnotationDoNotDisrupt), b.fenv.GitHub, names, func(_ int, name string) ([]time.Duration, error) {
		lag, err := hintLagOf(ctx, b.fenv, ns, name, func() error {
			b.fenv.GitHub.SetBusy(scope, name, true) // the fake delivers in_progress
			return nil
		})
		return []time.Duration{lag}, err
	})
}

// requestsPerHour: eventCycleRuns legacy runners each take and finish jobs
// for a while, with events on and --hint-from-listing off; the GitHub
// requests their hints cost, scaled to 1,000 runners and an hour.
func (b *eventsBench) requestsPerHour(ctx context.Context, e *env) error {
	ns, scope := "bench-event-cycle", org("bench-event-cycle")
	names, err := b.legacyPods(ctx, ns, "cy", eventCycleRuns, scope)
	if err != nil {
		return err
	}
	before := len(b.fenv.GitHub.Requests())
	start := time.Now()
	window := 45 * time.Second // three listing TTLs: a listing-driven hint would show
	for round := 0; time.Since(start) < window; round++ {
		for _, name := range names {
			b.fenv.GitHub.SetBusy(scope, name, round%2 == 0)
		}
		time.Sleep(5 * time.Second)
	}
	elapsed := time.Since(start)
	requests := len(b.fenv.GitHub.Requests()) - before
	perHour := float64(requests) * float64(time.Hour) / float64(elapsed) * 1000 / eventCycleRuns
	progress("%d legacy runners cycled busy/idle for %s with events: %d GitHub requests", eventCycleRuns, elapsed.Round(time.Second), requests)
	e.record("github_requests_hints_1000_legacy_runners_hour", perHour, "requests", "0", requests == 0,
		fmt.Sprintf("events on, --hint-from-listing off; %d runners cycled for %s, scaled to 1,000 and an hour", eventCycleRuns, elapsed.Round(time.Second)))
	return nil
}

// forged: forgedDeliveries in_progress deliveries, unsigned or signed with
// another secret, naming the idle legacy runners; how many pods got a job.
func (b *eventsBench) forged(ctx context.Context, e *env) error {
	ns, scope := "bench-event-forged", org("bench-event-forged")
	names, err := b.legacyPods(ctx, ns, "fg", 10, scope)
	if err != nil {
		return err
	}
	refused := 0
	for i := range forgedDeliveries {
		name := names[i%len(names)]
		body := fmt.Sprintf(`{"action":"in_progress","workflow_job":{"id":%d,"run_id":1,"run_attempt":1,"name":"forged","runner_name":%q},"repository":{"full_name":"%s/app"}}`, 900000+i, name, scope.Name)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set(events.HeaderEvent, "workflow_job")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(events.HeaderDelivery, fmt.Sprintf("forged-%d", i))
		switch i % 3 {
		case 0: // unsigned
		case 1:
			req.Header.Set(events.HeaderSignature, events.Sign([]byte(body), []byte("guessed")))
		case 2:
			req.Header.Set(events.HeaderSignature, "sha256="+strings.Repeat("0", 64))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			refused++
		}
	}
	applied := 0
	pods, err := b.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if _, found := p.Annotations[jobannotation.Annotation]; found {
			applied++
		}
	}
	progress("%d forged deliveries: %d refused with 401, %d pods given a job", forgedDeliveries, refused, applied)
	e.record("events_forged_applied", float64(applied), "pods", "0", applied == 0 && refused == forgedDeliveries,
		fmt.Sprintf("%d deliveries unsigned or wrongly signed to the real binary; %d answered 401", forgedDeliveries, refused))
	return nil
}
