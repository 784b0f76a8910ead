package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// The storm: a node pool drained while its runners hold jobs. Every runner's
// pod is evicted every 5 s (kubectl drain's retry, whatever retryAfterSeconds
// says), by replicas that each hold their share of the credential's budget,
// for minutes of simulated time (an injected clock, shared by GitHub's fake,
// the clients and the handlers). The fake enforces GitHub's secondary limit.
const (
	stormEvery    = 5 * time.Second
	stormReplicas = 2
)

// stormRunner is one runner of the storm: its pod, the object that controls
// it, and its eviction review.
type stormRunner struct {
	name    string
	scope   ghclient.Scope
	legacy  bool
	pod     *corev1.Pod
	owner   *unstructured.Unstructured
	request admission.Request
	gone    bool // its eviction was admitted
}

// stormWorld is the fake GitHub and API server of one storm, and its replicas.
type stormWorld struct {
	clock    *fakeclock.Clock
	gh       *ghfake.Fake
	url      string
	pods     client.Client
	replicas []*webhook.Handler
	runners  []*stormRunner
}

// newStormWorld serves a fake GitHub enforcing GitHub's secondary limit, on
// a simulated clock; add runners, then start the replicas.
func newStormWorld() (*stormWorld, func()) {
	w := &stormWorld{clock: fakeclock.New(time.Unix(1_900_000_000, 0)), gh: ghfake.New()}
	w.gh.SetToken(token)
	w.gh.SetClock(w.clock.Now)
	w.gh.SetRateLimit(15000, 15000, w.clock.Now().Add(time.Hour))
	srv := httptest.NewServer(w.gh)
	w.url = srv.URL + "/"
	return w, srv.Close
}

// start stores the runners' pods and owners in the fake API server and
// starts the replicas.
func (w *stormWorld) start(replicas int, runners ...[]*stormRunner) error {
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
	for _, rs := range runners {
		for _, r := range rs {
			if err := r.review(); err != nil {
				return err
			}
			b = b.WithObjects(r.pod.DeepCopy(), r.owner.DeepCopy())
			w.runners = append(w.runners, r)
		}
	}
	w.pods = b.Build()
	for range replicas {
		h, err := w.replica(replicas)
		if err != nil {
			return err
		}
		w.replicas = append(w.replicas, h)
	}
	return nil
}

// replica is one runner-guard replica: its own client and budget, holding
// 1/replicas of the Deployment's.
func (w *stormWorld) replica(replicas int) (*webhook.Handler, error) {
	cfg := webhook.DefaultConfig()
	cfg.GitHubBudget.Replicas = replicas
	bc := cfg.GitHubBudget.BudgetConfig()
	bc.Now, bc.Sleep = w.clock.Now, w.clock.Sleep
	budgets, err := ghclient.NewBudgets(bc, nil)
	if err != nil {
		return nil, err
	}
	gc, err := ghclient.New(ghclient.Config{BaseURL: w.url, AllowHTTP: true, Token: token, Now: w.clock.Now, Budgets: budgets})
	if err != nil {
		return nil, err
	}
	router, err := ghclient.NewRouter(ghclient.RouterConfig{Default: gc, Now: w.clock.Now, Budgets: budgets})
	if err != nil {
		return nil, err
	}
	return webhook.NewHandler(webhook.Options{Config: cfg, GitHub: router, Pods: w.pods,
		Runners: arc.NewResolver(arc.Options{Reader: w.pods}), Now: w.clock.Now})
}

// legacyStormRunners are ARC's legacy runners: a Runner controls each pod,
// which carries the runner's ID.
func (w *stormWorld) addLegacy(scope ghclient.Scope, prefix string, n int, busy bool) []*stormRunner {
	out := make([]*stormRunner, n)
	for i := range n {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		id := w.gh.AddRunner(scope, name)
		w.gh.SetBusy(scope, name, busy)
		owner := fixture.MakeLegacyRunner("ci", name).Org(scope.Name)
		pod := fixture.MakeLegacyRunnerPod("ci", name).Org(scope.Name).RunnerID(id).OwnedByLegacyRunner(owner).Running().Obj()
		out[i] = &stormRunner{name: name, scope: scope, legacy: true, pod: pod, owner: owner.Obj()}
	}
	return out
}

// addScaleSet adds scale-set runners whose EphemeralRunners record a job.
func (w *stormWorld) addScaleSet(scope ghclient.Scope, prefix string, n int) []*stormRunner {
	out := make([]*stormRunner, n)
	for i := range n {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		id := w.gh.AddRunner(scope, name)
		w.gh.SetBusy(scope, name, true)
		er := fixture.MakeEphemeralRunner("arc-runners", name).ConfigURL("https://github.com/"+scope.Name).
			RunnerID(id).RunnerName(name).JobID(fmt.Sprintf("job-%d", i)).Field(int64(1000+i), "status", "jobRequestId")
		pod := fixture.MakeScaleSetRunnerPod("arc-runners", name).Label("actions.github.com/organization", scope.Name).
			OwnedByEphemeralRunner(er).Running().Obj()
		out[i] = &stormRunner{name: name, scope: scope, pod: pod, owner: er.Obj()}
	}
	return out
}

func (r *stormRunner) review() error {
	body, err := process.EvictionReviewJSON(process.Review{Pod: r.pod})
	if err != nil {
		return err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return err
	}
	r.request = admission.Request{AdmissionRequest: *review.Request}
	return nil
}

// evict sends r's eviction to replica i and reports whether it was admitted
// and how long it took: real time plus any simulated time the budget waited.
func (w *stormWorld) evict(i int, r *stormRunner) (bool, *admissionv1.AdmissionResponse, time.Duration) {
	start, simStart := time.Now(), w.clock.Now()
	resp := w.replicas[i%len(w.replicas)].Handle(context.Background(), r.request)
	took := time.Since(start) + w.clock.Now().Sub(simStart)
	if resp.Allowed {
		r.gone = true
	}
	return resp.Allowed, &resp.AdmissionResponse, took
}

// stormDrain: 1,000 busy runners (half legacy with IDs, half scale-set whose
// EphemeralRunners record their job) evicted every 5 s by 2 replicas for 10
// minutes, with idle runners evicted among them and some busy legacy
// runners' jobs ending half-way.
func (e *env) stormDrain() error {
	w, stop := newStormWorld()
	defer stop()
	legacyOrg, setsOrg := org("storm-legacy"), org("storm-sets")
	busy := append(w.addLegacy(legacyOrg, "busy", 500, true), w.addScaleSet(setsOrg, "set", 500)...)
	idle := w.addLegacy(legacyOrg, "idle", 60, false)
	if err := w.start(stormReplicas, busy, idle); err != nil {
		return err
	}

	const minutes = 10
	ticks := int(minutes * time.Minute / stormEvery)
	// The jobs of 20 busy legacy runners end from minute 5, a tick apart in
	// turn, so every phase of the listing's renewal is seen; their evictions
	// must then be admitted quickly (ephemeral runners' pods complete instead).
	ending := busy[:20]
	endAt := func(r *stormRunner) int { return ticks/2 + slices.Index(ending, r)%6 }
	released := map[string]time.Duration{}
	var idleTimes []time.Duration
	idleRefused := 0
	for tick := range ticks {
		for _, r := range ending {
			if tick == endAt(r) {
				w.gh.SetBusy(r.scope, r.name, false)
			}
		}
		for i, r := range busy {
			if r.gone {
				continue
			}
			ok, resp, _ := w.evict(tick+i, r)
			if ok {
				if !slices.Contains(ending, r) || tick < endAt(r) {
					return fmt.Errorf("busy runner %s's eviction was admitted: %s", r.name, resp.Result.Message)
				}
				// Its job ended just after the previous retry: count from there.
				released[r.name] = time.Duration(tick-endAt(r)+1) * stormEvery
			}
		}
		// One idle runner evicted every 10 s, in the middle of the storm.
		if tick%2 == 1 && tick/2 < len(idle) {
			r := idle[tick/2]
			ok, resp, took := w.evict(tick, r)
			idleTimes = append(idleTimes, took)
			if !ok {
				idleRefused++
				progress("storm: idle runner %s refused: %s", r.name, resp.Result.Message)
			}
		}
		w.clock.Advance(stormEvery)
	}
	peak, limited, whileLimited := 0, 0, 0
	for _, u := range w.gh.SecondaryUsage() {
		peak = max(peak, u.MaxPoints)
		limited += u.Limited
		whileLimited += u.SentWhileLimited
	}
	slices.Sort(idleTimes)
	var releaseMax time.Duration
	for _, d := range released {
		releaseMax = max(releaseMax, d)
	}
	progress("storm: %d GitHub requests in %d minutes, peak %d points in a rolling minute, %d limited, %d of %d jobs' runners released (slowest after %s)",
		w.gh.Count(""), minutes, peak, limited, len(released), len(ending), releaseMax)
	e.record("points_per_min_drain_1000_busy", float64(peak), "points", "<= 450", peak <= 450 && limited == 0 && whileLimited == 0,
		fmt.Sprintf("most points in any rolling minute; 1,000 busy runners (500 legacy with IDs, 500 scale-set with job fields), evicted every 5s by 2 replicas for 10 simulated minutes; GitHub limited %d requests", limited))
	p99 := pct(idleTimes, 0.99)
	e.record("idle_release_p99_ms_storm", ms(p99), "ms", "<= 1000, none refused", p99 <= time.Second && idleRefused == 0,
		fmt.Sprintf("%d idle runners evicted during the storm, %d refused", len(idleTimes), idleRefused))
	ok := len(released) == len(ending) && releaseMax <= 30*time.Second
	e.record("busy_release_after_job_s", releaseMax.Seconds(), "s", "<= 30", ok,
		fmt.Sprintf("slowest of %d busy legacy runners whose jobs ended mid-storm, until their pod's eviction was admitted (%d released)", len(ending), len(released)))
	return nil
}

// busyRetryScope: one scope of 100 busy runners whose evictions are retried
// every 5 s for an hour by one replica: GitHub requests per busy runner-hour.
func (e *env) busyRetryScope() error {
	w, stop := newStormWorld()
	defer stop()
	runners := w.addLegacy(org("busy-scope"), "busy", 100, true)
	if err := w.start(1, runners); err != nil {
		return err
	}
	for range int(time.Hour / stormEvery) {
		for i, r := range runners {
			if ok, resp, _ := w.evict(i, r); ok {
				return fmt.Errorf("busy runner %s's eviction was admitted: %s", r.name, resp.Result.Message)
			}
		}
		w.clock.Advance(stormEvery)
	}
	calls := w.gh.Count("")
	perRunner := float64(calls) / float64(len(runners))
	progress("busy scope: 100 busy runners retried every 5s for an hour: %d GitHub requests (%d DELETEs)", calls, w.gh.Count(http.MethodDelete))
	e.record("calls_busy_retry_hour", perRunner, "req/runner-hour", "<= 6", perRunner <= 6,
		"one scope of 100 busy runners, each eviction retried every 5s for an hour (62 for one runner alone before the shared listing)")
	return nil
}

// rss10kPods: the binary with 10,000 runner pods in its controllers' caches
// (the hint and drain controllers watch runner pods), under the bench's load.
func (e *env) rss10kPods(bin string) error {
	api := process.NewPodAPI()
	defer api.Close()
	e.gh.AddScope(org("cached"))
	for i := range 10000 {
		api.Add(fixture.MakeLegacyRunnerPod(fmt.Sprintf("ci-%02d", i%50), fmt.Sprintf("cached-%05d", i)).
			Org("cached").RunnerID(int64(100000 + i)).Node(fmt.Sprintf("node-%03d", i%200)).Running().Obj())
	}
	files := *e.files
	if err := files.UseAPI(api); err != nil {
		return err
	}
	saved := e.files
	e.files = &files
	defer func() { e.files = saved }()
	base, peak, took, err := e.loadBinaryAfter(bin, "load-10k", 1000, clients, api.PodsListed(), "--leader-elect=false")
	if err != nil {
		return err
	}
	progress("rss: 10,000 runner pods cached: baseline %.1f MiB, peak %.1f MiB; 1,000 requests answered in %s", mib(base), mib(peak), took.Round(time.Millisecond))
	e.record("rss_10k_runner_pods_mib", mib(peak), "MiB", "<= 100", mib(peak) <= 100,
		fmt.Sprintf("peak (VmHWM) with 10,000 runner pods in the controllers' caches, %d clients; baseline %.1f MiB after the list", clients, mib(base)))
	return nil
}
