package process_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/test/process"
)

// eventsOnlyLimit is the chart's default memory limit of the events
// Deployment (events.resources.limits.memory): the process must stay below
// it under a flood of deliveries, with the GOMEMLIMIT the chart derives.
const (
	eventsOnlyLimit    = 96 << 20
	eventsOnlyGOMEMLIM = "86MiB"
)

// TestEventsOnly runs the binary as the chart's events Deployment does:
// --events-only, with no serving certificate, no GitHub credentials and no
// webhook configuration. It serves signed deliveries, refuses unsigned ones,
// serves metrics and readiness, starts no admission webhook, and a flood of
// deliveries keeps it under the chart's memory limit.
func TestEventsOnly(t *testing.T) {
	files := newFiles(t)
	dir := t.TempDir()
	secret := "events-only-secret"
	secretFile := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := process.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])
	health := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	args := []string{"--events-only",
		"--events-bind-address=127.0.0.1:" + fmt.Sprint(ports[0]),
		"--github-webhook-secret-file=" + secretFile,
		"--kubeconfig=" + files.Kubeconfig,
		"--metrics-bind-address=127.0.0.1:" + fmt.Sprint(ports[1]), "--metrics-secure=false",
		"--health-probe-bind-address=127.0.0.1:" + fmt.Sprint(ports[2]),
		// Nothing there: the endpoint needs no serving certificate.
		"--cert-dir=" + filepath.Join(dir, "no-certs"),
	}
	log := &process.LockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(withoutGitHubToken(os.Environ()), "GOMEMLIMIT="+eventsOnlyGOMEMLIM)
	child, err := process.StartChild("events-only", cmd, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := child.Stop(10 * time.Second); err != nil {
			t.Errorf("stop: %v\n%s", err, log.String())
		}
	}()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer c.CloseIdleConnections()
	if err := process.WaitReady(context.Background(), "events-only", 30*time.Second, child, func(context.Context) error {
		return process.Ready(c, health)
	}); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	idle, _ := rss(t, cmd)

	// send POSTs one delivery; the error is the transport's.
	send := func(event, delivery string, body []byte, sign string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, base+events.Path, strings.NewReader(string(body)))
		if err != nil {
			return 0, err
		}
		req.Header.Set(events.HeaderEvent, event)
		req.Header.Set(events.HeaderDelivery, delivery)
		req.Header.Set("Content-Type", "application/json")
		if sign != "" {
			req.Header.Set(events.HeaderSignature, events.Sign(body, []byte(sign)))
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	deliver := func(event, delivery string, body []byte, sign string) int {
		t.Helper()
		code, err := send(event, delivery, body, sign)
		if err != nil {
			t.Error(err)
		}
		return code
	}
	job := func(id int) []byte {
		return fmt.Appendf(nil, `{"action":"in_progress","workflow_job":{"id":%d,"run_id":1,"run_attempt":1,"name":"build","runner_name":"runner-%d","started_at":"2026-12-01T10:00:00Z"},"repository":{"full_name":"acme/app"},"organization":{"login":"acme"},"pad":%q}`,
			id, id%50, strings.Repeat("x", 8<<10))
	}
	if code := deliver("ping", "ping-1", []byte(`{"zen":"hi"}`), secret); code != http.StatusOK {
		t.Errorf("signed ping: %d, want 200", code)
	}
	if code := deliver("workflow_job", "forged", job(1), "another secret"); code != http.StatusUnauthorized {
		t.Errorf("delivery signed with another secret: %d, want 401", code)
	}
	// No pod runs the runner: answered, nothing to apply.
	if code := deliver("workflow_job", "job-1", job(1), secret); code != http.StatusOK {
		t.Errorf("signed in_progress: %d, want 200\n%s", code, log.String())
	}

	// A flood: signed deliveries (each lists pods) and forged ones, at once.
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				id := 1000 + w*100 + i
				sign := secret
				if i%2 == 1 {
					sign = "guess"
				}
				deliver("workflow_job", fmt.Sprintf("flood-%d", id), job(id), sign)
			}
		}()
	}
	wg.Wait()
	_, loaded := rss(t, cmd)
	// The worst the endpoint accepts from anyone who reaches it: bodies of
	// its largest size (events.MaxPayload) with forged signatures, which it
	// reads whole before it can tell, from 64 connections at once.
	forged := make([]byte, events.MaxPayload-1)
	copy(forged, job(1))
	for i := len(job(1)); i < len(forged); i++ {
		forged[i] = ' '
	}
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				// The endpoint may answer (503, 401) and close the
				// connection before a forged body is all sent: the
				// sender's write error is the attack refused.
				_, _ = send("workflow_job", "", forged, "guess")
			}
		}()
	}
	wg.Wait()
	_, peak := rss(t, cmd)
	t.Logf("--events-only RSS idle %.1f MiB; peak after 3200 deliveries from 32 senders %.1f MiB, after 1280 forged 1 MiB bodies from 64 senders %.1f MiB (GOMEMLIMIT %s)",
		float64(idle)/(1<<20), float64(loaded)/(1<<20), float64(peak)/(1<<20), eventsOnlyGOMEMLIM)
	if peak >= eventsOnlyLimit {
		t.Errorf("peak RSS %d MiB reaches the chart's events memory limit (%d MiB)", peak>>20, eventsOnlyLimit>>20)
	}

	resp, err := c.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n, _, _ := process.SumMetric(string(body), "runner_guard_events_total", `outcome="unauthorized"`); n < 1 {
		t.Errorf("runner_guard_events_total{outcome=unauthorized} = %v, want the forged deliveries counted", n)
	}
	if n, _, _ := process.SumMetric(string(body), "runner_guard_build_info"); n != 1 {
		t.Errorf("runner_guard_build_info = %v, want 1", n)
	}
	for _, name := range []string{"runner_guard_decisions_total", "runner_guard_github_requests_total"} {
		if strings.Contains(string(body), name) {
			t.Errorf("/metrics exposes %s: --events-only decides nothing and asks GitHub nothing", name)
		}
	}
	if out := log.String(); strings.Contains(out, "webhook server") || strings.Contains(out, "leader") {
		t.Errorf("--events-only started a webhook server or leader election:\n%s", out)
	}
}

// TestEventsOnlyStartupErrors: --events-only needs the endpoint's address
// and a webhook secret, and says which flag is missing.
func TestEventsOnlyStartupErrors(t *testing.T) {
	files := newFiles(t)
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no address": {[]string{"--github-webhook-secret-file=" + files.TokenFile}, "--events-bind-address"},
		"no secret":  {[]string{"--events-bind-address=127.0.0.1:0"}, "--github-webhook-secret"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out := runOnce(t, nil, append([]string{"--events-only", "--kubeconfig=" + files.Kubeconfig, "--metrics-bind-address=0"}, c.args...)...)
			if code != 1 || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("exit %d, output %q; want 1 and one line naming %s", code, out, c.want)
			}
		})
	}
}

// rss is the process's resident set and its peak, in bytes.
func rss(t *testing.T, cmd *exec.Cmd) (now, peak int64) {
	t.Helper()
	p := &process.Proc{Cmd: cmd}
	now, peak, err := p.RSS()
	if err != nil {
		t.Skip(err)
	}
	return now, peak
}
