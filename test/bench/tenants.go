package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

// One team's fault stays with that team: a pod naming a repository GitHub
// answers 404 for, deleted in a loop, must not spend the credential every
// team shares; and a tenant rotating its Secret in a loop must not grow the
// webhook's memory. These runs use the storm's simulated clock, the fake
// GitHub enforcing GitHub's secondary limit, and the default budget.

// tenantPod is a legacy runner pod of namespace ns naming repository repo,
// with its delete review.
type tenantPod struct {
	pod     *corev1.Pod
	request admission.Request
}

func newTenantPod(ns, name string, scope ghclient.Scope) (*tenantPod, error) {
	w := fixture.MakeLegacyRunnerPod(ns, name).Running()
	if scope.Kind == ghclient.ScopeRepo {
		w = w.Repo(scope.Name)
	} else {
		w = w.Org(scope.Name)
	}
	pod := w.Obj()
	body, err := process.DeleteReviewJSON(process.Review{Pod: pod})
	if err != nil {
		return nil, err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, err
	}
	return &tenantPod{pod: pod, request: admission.Request{AdmissionRequest: *review.Request}}, nil
}

// tenantWorld is a storm world with one replica deciding deletes of the
// given pods, GitHub answering 404 for every repository named acme/missing-*.
func tenantWorld(pods ...*tenantPod) (*stormWorld, *webhook.Handler, func(), error) {
	w, stop := newStormWorld()
	w.gh.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 404, PathContains: "/repos/acme/missing-"})
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
	for _, p := range pods {
		b = b.WithObjects(p.pod.DeepCopy())
	}
	w.pods = b.Build()
	h, err := w.replica(1)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return w, h, stop, nil
}

// missingScope: 30 deletes of one pod whose repository GitHub does not know,
// in 5 seconds.
func (e *env) missingScope() error {
	p, err := newTenantPod("team-a", "typo-0", ghclient.Scope{Kind: ghclient.ScopeRepo, Name: "acme/missing-0"})
	if err != nil {
		return err
	}
	w, h, stop, err := tenantWorld(p)
	if err != nil {
		return err
	}
	defer stop()
	for i := range 30 {
		if resp := h.Handle(context.Background(), p.request); resp.Allowed {
			return fmt.Errorf("delete %d of a pod in a missing repository was allowed: %s", i, resp.Result.Message)
		}
		w.clock.Advance(5 * time.Second / 30)
	}
	calls := w.gh.Count("")
	e.record("calls_missing_scope_30_deletes", float64(calls), "requests", "<= 2", calls <= 2,
		"one pod naming a repository GitHub answers 404 for, deleted 30 times in 5 s")
	return nil
}

// floodRelease: namespace team-a deletes 20 distinct pods, each naming
// another missing repository, 20 deletes a second for 60 s (simulated),
// while namespace team-b releases an idle runner every second.
func (e *env) floodRelease() error {
	const (
		failing   = 20
		perSecond = 20
		seconds   = 60
	)
	var flood, idle []*tenantPod
	for i := range failing {
		p, err := newTenantPod("team-a", fmt.Sprintf("typo-%d", i), ghclient.Scope{Kind: ghclient.ScopeRepo, Name: fmt.Sprintf("acme/missing-%d", i)})
		if err != nil {
			return err
		}
		flood = append(flood, p)
	}
	for i := range seconds {
		p, err := newTenantPod("team-b", fmt.Sprintf("idle-%d", i), org("beta"))
		if err != nil {
			return err
		}
		idle = append(idle, p)
	}
	w, h, stop, err := tenantWorld(append(slices.Clone(flood), idle...)...)
	if err != nil {
		return err
	}
	defer stop()
	for _, p := range idle {
		w.gh.AddRunner(org("beta"), p.pod.Name)
	}
	var took []time.Duration
	refused := 0
	for s := range seconds {
		for i := range perSecond {
			p := flood[(s*perSecond+i)%failing]
			if resp := h.Handle(context.Background(), p.request); resp.Allowed {
				return fmt.Errorf("flooding namespace's delete of %s was allowed: %s", p.pod.Name, resp.Result.Message)
			}
			w.clock.Advance(time.Second / perSecond)
			if i == perSecond/2 {
				start, simStart := time.Now(), w.clock.Now()
				resp := h.Handle(context.Background(), idle[s].request)
				took = append(took, time.Since(start)+w.clock.Now().Sub(simStart))
				if !resp.Allowed {
					refused++
					progress("team-b's release of %s refused: %s", idle[s].pod.Name, resp.Result.Message)
				}
			}
		}
	}
	slices.Sort(took)
	p99 := ms(pct(took, 0.99))
	e.record("other_namespace_release_p99_ms_during_flood", p99, "ms", "<= 1000, none refused", p99 <= 1000 && refused == 0,
		fmt.Sprintf("%d idle releases in team-b, %d refused, while team-a deletes %d pods naming missing repositories %d/s for %ds", len(took), refused, failing, perSecond, seconds))
	floodCalls := 0
	for _, r := range w.gh.Requests() {
		if strings.Contains(r.Path, "/repos/acme/missing-") {
			floodCalls++
		}
	}
	share := int(ghclient.DefaultNamespaceShare * ghclient.DefaultBudgetPointsPerMinute)
	e.record("github_requests_flood_60s", float64(floodCalls), "requests", fmt.Sprintf("<= %d (team-a's share of one window)", share), floodCalls <= share,
		fmt.Sprintf("%d deletes of team-a's %d failing pods in 60 s; %d GitHub requests in all", seconds*perSecond, failing, w.gh.Count("")))
	return nil
}

// rotations: a tenant rewriting its githubConfigSecret 10,000 times, each
// version deciding one delete (a new client, budget and listing each time).
func (e *env) rotations() error {
	const n = 10_000
	w, stop := newStormWorld()
	defer stop()
	w.gh.AddRunner(org("acme"), "runner-1")
	metrics := ghclient.NewMetrics()
	budgets, err := ghclient.NewBudgets(ghclient.BudgetConfig{Now: w.clock.Now, Sleep: w.clock.Sleep}, metrics)
	if err != nil {
		return err
	}
	router, err := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: true, Budgets: budgets, Metrics: metrics, Now: w.clock.Now})
	if err != nil {
		return err
	}
	before := heapRSS()
	for i := range n {
		creds := &ghclient.Credentials{Key: "team-a/arc-secret", Version: strconv.Itoa(i), BaseURL: w.url, Token: fmt.Sprintf("ghp_rotated_%05d", i)}
		// The fake knows one token: each rotated one is refused (401), which
		// is as much state as a good one makes, and more than a 204.
		_, _ = router.Status(context.Background(), ghclient.Runner{Scope: org("acme"), Name: "runner-1", Creds: creds})
		w.clock.Advance(10 * time.Millisecond)
	}
	after := heapRSS()
	e.record("rss_after_10k_credential_rotations_mib", mib(after), "MiB", "<= 100", mib(after) <= 100,
		fmt.Sprintf("this process's VmRSS after GC; %.1f MiB before the rotations", mib(before)))
	live := budgets.Len()
	e.record("budgets_live_after_10k_rotations", float64(live), "budgets", fmt.Sprintf("<= %d (the client LRU)", ghclient.DefaultMaxClients),
		live <= ghclient.DefaultMaxClients, fmt.Sprintf("%d clients held", router.Len()))
	return nil
}

// heapRSS is this process's VmRSS after a full GC returned what it could.
func heapRSS() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
