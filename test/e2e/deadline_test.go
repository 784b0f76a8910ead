package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// A runner pod evicted the moment it exists is guarded: every evicted pod is
// read live from the API server, never from a cache that may not have it yet.
func TestEvictionOfAJustCreatedRunnerPodIsGuarded(t *testing.T) {
	s := newScenario(t, "fresh-pod")
	for i := range 5 {
		name := fmt.Sprintf("fresh-%d", i)
		s.runnerPod(name, true, true)
		err := s.evict(name, false) // at once: no wait for any watch
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "runner busy") {
			t.Fatalf("eviction of %s right after its creation: %v; want 429 runner busy", name, err)
		}
		s.requireAlive(name)
	}
}

// With a slow API server (a proxy holding every request the webhook sends it)
// and a slow GitHub, every answer still comes from runner-guard inside the API
// server's deadline (webhookTimeout, 10 s), and no GitHub write starts after
// the decision's own deadline (1 s before it): an unregister that could not
// finish in time is never sent.
func TestSlowAPIServerAndGitHubStayInsideTheDeadline(t *testing.T) {
	if !env.Local() {
		t.Skip("needs the local harness: the webhook is restarted behind a slow proxy")
	}
	s := newScenario(t, "slow")
	target, err := env.APIServerAddr()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := framework.NewSlowProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kubeconfig, err := env.WebhookKubeconfigVia(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	restartWebhook(t, "--kubeconfig="+kubeconfig, "--github-timeout=5s", "--webhook-timeout=10s")
	gh := fakeGitHub(t)
	t.Cleanup(func() { gh.SetLatency(0) })

	type delays struct{ apiDelay, githubDelay time.Duration }
	cases := map[string]delays{
		"fast":                            {},
		"slow GitHub":                     {githubDelay: 7 * time.Second},
		"slow API server":                 {apiDelay: 300 * time.Millisecond},
		"slower API server":               {apiDelay: time.Second},
		"API server too slow for a read":  {apiDelay: 4 * time.Second},
		"slow API server and slow GitHub": {apiDelay: 300 * time.Millisecond, githubDelay: 4 * time.Second},
	}
	i := 0
	check := func(name string, c delays) {
		t.Run(name, func(t *testing.T) {
			s := *s
			s.t = t
			runner := fmt.Sprintf("slow-%d", i)
			i++
			s.runnerPod(runner, true, true)
			proxy.SetDelay(c.apiDelay)
			gh.SetLatency(c.githubDelay)
			defer proxy.SetDelay(0)
			defer gh.SetLatency(0)

			before := len(env.GitHub.Requests())
			start := time.Now()
			err := s.evict(runner, false)
			took := time.Since(start)
			proxy.SetDelay(0)
			gh.SetLatency(0)

			// The answer is runner-guard's (a reason in the message), not the
			// API server giving up on the webhook.
			if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "[reason: ") {
				t.Fatalf("eviction after %s: %v; want runner-guard's 429 with a reason", took, err)
			}
			deadline := start.Add(9 * time.Second)
			for _, r := range requestsFor(env.GitHub.Requests()[before:], scopePath(s.scope)) {
				if r.Method == http.MethodDelete && r.Arrived.After(deadline) {
					t.Errorf("DELETE %s sent %s after the eviction started, past the decision's deadline (9s)", r.Path, r.Arrived.Sub(start))
				}
			}
			t.Logf("answered in %s: %v", took.Round(10*time.Millisecond), err)
			s.requireAlive(runner)
			if !s.registered(runner) {
				t.Errorf("busy runner %s was unregistered", runner)
			}
		})
	}
	// First, while the restarted webhook has read nothing yet: nothing it
	// would learn on first use (API discovery) may cost time past the deadline.
	check("API server too slow for the first decision after a start", delays{apiDelay: 4 * time.Second})
	for name, c := range cases {
		check(name, c)
	}
}
