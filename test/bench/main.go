// Command bench measures runner-guard side by side in one run: GitHub calls per
// decision (steady state, a cold burst against ARC's old list-everything
// algorithm, fast paths), admission throughput of the fast paths against a bare
// controller-runtime webhook, runner-pod decision latency over a fake GitHub
// with a fixed 50 ms answer, and the peak RSS of the real binary under load.
//
// It prints progress, then a table of figures with their targets, then one
// `name=value` line per figure. It never fails on speed: the exit code is
// non-zero only when a measurement could not be taken.
//
//	go run ./test/bench [-duration 4s] [-bin path/to/webhook]
//
// See docs/PERFORMANCE.md.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

const (
	token         = "bench-token"
	barePath      = "/bare"
	bareWaitPath  = "/bare-wait"
	githubLatency = 50 * time.Millisecond
	clients       = 64
)

var (
	duration = flag.Duration("duration", 4*time.Second, "how long each throughput run lasts (bare and fast path each get this, in two halves)")
	binFlag  = flag.String("bin", "", "webhook binary for the RSS run (default $RUNNER_GUARD_BIN, else built from ./cmd/webhook)")
	latencyN = flag.Int("latency-n", 400, "runner-pod decisions in the latency run")
	only     = flag.String("only", "", "run only the steps whose name contains this (default all)")
)

// figure is one result line.
type figure struct {
	name, target, unit string
	value              float64
	ok                 bool // meets the target
	note               string
}

func (e *env) record(name string, value float64, unit, target string, ok bool, note string) {
	e.figures = append(e.figures, figure{name: name, value: value, unit: unit, target: target, ok: ok, note: note})
}

func progress(format string, args ...any) {
	fmt.Printf("bench: "+format+"\n", args...)
}

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	figures, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	progress("done in %s (GOMAXPROCS=%d, NumCPU=%d, %s/%s, %s)", time.Since(start).Round(100*time.Millisecond),
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	printFigures(figures)
}

// env is the in-process setup: a fake GitHub over plain HTTP, and
// controller-runtime's webhook server over HTTPS serving runner-guard's handler
// (swappable, so a run can start with a cold GitHub client) and a bare
// allow-everything webhook.
type env struct {
	dir   string
	files *process.Files
	gh    *ghfake.Fake
	// pods are the live pods of the in-process handler's reads.
	pods   client.Client
	ghURL  string
	url    string // https://127.0.0.1:PORT
	client *http.Client
	cur    atomic.Pointer[webhook.Handler]
	// own, while set, collects runner-guard's own time per decision.
	own atomic.Pointer[durations]
	// ghTime records how long the fake GitHub spent on each request path
	// (its injected latency included), so the latency run can subtract it.
	ghTime sync.Map // string -> time.Duration
	// figures are the results, in the order measured.
	figures []figure
}

// run measures every figure and returns them.
func run() ([]figure, error) {
	dir, err := os.MkdirTemp("", "runner-guard-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	e, stop, err := setup(dir)
	if err != nil {
		return nil, err
	}
	defer stop()

	steps := []struct {
		name string
		fn   func(*env) error
	}{
		{"steady-state calls", (*env).steady},
		{"burst of 100 deletes, cold cache", (*env).burst},
		{"burst of 100 scale-set deletes, EphemeralRunners read", (*env).scaleSetBurst},
		{"ARC's clean-up of 100 runners it removed", (*env).arcCleanup},
		{"a busy runner's eviction retried every 5s for an hour", (*env).busyRetryHour},
		{"100 busy runners of one scope retried every 5s for an hour", (*env).busyRetryScope},
		{"a drain of 1,000 busy runners by 2 replicas, 10 minutes", (*env).stormDrain},
		{"tenant fault: 30 deletes of a pod in a missing repository", (*env).missingScope},
		{"tenant fault: a flood of missing repositories beside another namespace's releases", (*env).floodRelease},
		{"tenant fault: 10,000 credential rotations", (*env).rotations},
		{"fast-path calls", (*env).fastPathCalls},
		{"throughput, fast path vs bare webhook", (*env).throughput},
		{"runner-pod latency", (*env).latency},
		{"RSS of the real binary under load", (*env).rss},
		{"disruption controller on a real API server: hint lag, idle drain, job budgets", (*env).disruptionRun},
		{"certificate rotation during 64 clients' reviews on a real API server", (*env).rotationUnderLoad},
		{"disruption budgets on a real API server: evictions at once, a drain", (*env).budgetRun},
		{"GitHub's workflow_job events on a real API server: hint lag, requests, forgeries", (*env).eventsRun},
		{"GitHub's events endpoint under attack on a real API server: flood memory, admission meanwhile, stale and cross-scope deliveries", (*env).eventsAttack},
		{"100 jobs lost in 10 runs: re-run path", (*env).lostJobs},
		{"the chart at its defaults on a real API server: GitHub requests of 1,000 legacy runners, runner-guard scaled to 0", (*env).chartDefaultsRun},
	}
	for _, s := range steps {
		if !strings.Contains(s.name, *only) {
			continue
		}
		t := time.Now()
		progress("%s ...", s.name)
		if err := s.fn(e); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		progress("%s: done in %s", s.name, time.Since(t).Round(10*time.Millisecond))
	}
	return e.figures, nil
}

func setup(dir string) (*env, func(), error) {
	files, err := process.NewFiles(dir, token)
	if err != nil {
		return nil, nil, err
	}
	gh := ghfake.New()
	gh.SetToken(token)
	gh.SetRateLimit(1<<30, 1<<30, time.Time{})
	// The figures count requests, not GitHub's limits: the bursts alone spend
	// more than GitHub's 900 secondary points a minute within seconds
	// (calls_burst_100 500, calls_burst_100_noid 600, calls_burst_100_seed
	// 1,500), and the throughput and RSS runs far more. A figure about the
	// secondary limit turns enforcement on for itself.
	gh.SetSecondaryLimit(ghfake.SecondaryLimit{Off: true})
	e := &env{dir: dir, files: files, gh: gh, pods: fake.NewClientBuilder().Build()}
	ghSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		gh.ServeHTTP(w, r)
		e.ghTime.Store(r.Method+" "+r.URL.Path, time.Since(start))
	}))

	port, err := process.FreePort()
	if err != nil {
		return nil, nil, err
	}
	e.ghURL, e.url = ghSrv.URL+"/", fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := e.newHandler(); err != nil {
		return nil, nil, err
	}
	// The same server setup as cmd/webhook: controller-runtime's webhook server,
	// TLS 1.2+, HTTP/1.1 only.
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host: "127.0.0.1", Port: port, CertDir: files.CertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12; c.NextProtos = []string{"http/1.1"} }},
	})
	srv.Register(webhook.Path, &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, r admission.Request) admission.Response {
		rec := e.own.Load()
		if rec == nil {
			return e.cur.Load().Handle(ctx, r)
		}
		// runner-guard's own time: the handler's, less its GitHub round trips.
		var waited atomic.Int64
		start := time.Now()
		resp := e.cur.Load().Handle(context.WithValue(ctx, githubWaitKey{}, &waited), r)
		rec.add(time.Since(start) - time.Duration(waited.Load()))
		return resp
	})})
	// A bare webhook that waits as long as GitHub does, for the hop's baseline.
	srv.Register(bareWaitPath, &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, r admission.Request) admission.Response {
		start := time.Now()
		time.Sleep(githubLatency)
		e.ghTime.Store("bare "+string(r.UID), time.Since(start))
		return admission.Allowed("")
	})})
	srv.Register(barePath, &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	e.client = &http.Client{Timeout: 30 * time.Second, Transport: process.NewTransport(files.Pool, clients+8)}
	stop := func() {
		files.Close()
		e.client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			progress("bare webhook server: %v", err)
		}
		ghSrv.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, errors.New("webhook server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e, stop, nil
}

// newHandler installs a fresh handler with a fresh (cold) GitHub client.
func (e *env) newHandler() error {
	gc, err := ghclient.New(ghclient.Config{BaseURL: e.ghURL, AllowHTTP: true, Token: token, Metrics: ghclient.NewMetrics(), Budgets: unlimitedBudget(),
		Transport: githubWaitTimer{http.DefaultTransport.(*http.Transport).Clone()}})
	if err != nil {
		return err
	}
	router, err := ghclient.NewRouter(ghclient.RouterConfig{Default: gc})
	if err != nil {
		return err
	}
	h, err := webhook.NewHandler(webhook.Options{
		Config:  webhook.DefaultConfig(),
		GitHub:  router,
		Runners: arc.NewResolver(arc.Options{Reader: e.pods}),
		Pods:    e.pods,
		Metrics: webhook.NewMetrics(),
	})
	if err != nil {
		return err
	}
	e.cur.Store(h)
	return nil
}

// unlimitedBudget is the request budget of the figures that count requests:
// their bursts spend GitHub's minute within seconds on purpose (see setup),
// and a budget holding requests back would change what they count. The
// storm figures (storm.go) run with the default budget.
func unlimitedBudget() *ghclient.Budgets {
	b, err := ghclient.NewBudgets(ghclient.BudgetConfig{Unlimited: true}, nil)
	if err != nil {
		panic(err)
	}
	return b
}

// githubWaitKey carries, in a decision's context, the time it waited for GitHub.
type githubWaitKey struct{}

// githubWaitTimer adds each GitHub round trip's duration to the decision's counter.
type githubWaitTimer struct{ base http.RoundTripper }

func (g githubWaitTimer) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := g.base.RoundTrip(r)
	if w, ok := r.Context().Value(githubWaitKey{}).(*atomic.Int64); ok {
		w.Add(int64(time.Since(start)))
	}
	return resp, err
}

// forEach runs fn(0..n-1) on `workers` goroutines; a worker stops at its first
// error, and the first error is returned.
func forEach(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

// durations collects measurements from many goroutines.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *durations) add(v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.d = append(d.d, v)
}

func org(name string) ghclient.Scope { return fixture.Org(name) }

// body renders a DELETE review of pod and makes the pod live for the
// handler's and the binary's pod reads.
func (e *env) body(pod *corev1.Pod) []byte {
	if err := e.pods.Create(context.Background(), pod.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		panic(err)
	}
	e.files.API.Add(pod)
	b, err := process.DeleteReviewJSON(process.Review{Pod: pod})
	if err != nil {
		panic(err)
	}
	return b
}

// arcLegacyPod is the running pod ARC's legacy controller makes for a runner
// of org: controlled by a Runner of the same name (created here), with the
// runner's ID in actions-runner/id, which runner-guard checks against the
// scope's listing before use.
func (e *env) arcLegacyPod(ns, name, orgName string, id int64) *corev1.Pod {
	r := fixture.MakeLegacyRunner(ns, name).Org(orgName)
	if err := e.pods.Create(context.Background(), r.Obj()); err != nil && !apierrors.IsAlreadyExists(err) {
		panic(err)
	}
	return fixture.MakeLegacyRunnerPod(ns, name).Org(orgName).OwnedByLegacyRunner(r).RunnerID(id).Running().Obj()
}

// decide sends one DELETE review to path and returns whether it was allowed.
func (e *env) decide(path string, b []byte) (bool, error) {
	resp, err := process.Send(context.Background(), e.client, e.url+path, b)
	if err != nil {
		return false, err
	}
	return resp.Allowed, nil
}

// steady: with the runner ID known (the client's cache after a first look-up
// of a busy runner, or ARC's actions-runner/id annotation, which the scope's
// listing taken for the busy retries already vouches for), each decision
// costs one GitHub request.
func (e *env) steady() error {
	const n = 100
	scope := org("steady")
	busy := make([]*corev1.Pod, n)
	for i := range busy {
		name := fmt.Sprintf("busy-%03d", i)
		e.gh.AddRunner(scope, name)
		e.gh.SetBusy(scope, name, true)
		busy[i] = fixture.MakeLegacyRunnerPod("ci", name).Org("steady").Running().Obj()
	}
	// Warm-up: the first delete of each busy runner looks its ID up by name.
	for _, p := range busy {
		if ok, err := e.decide(webhook.Path, e.body(p)); err != nil || ok {
			return fmt.Errorf("warm-up: allowed=%v err=%v", ok, err)
		}
	}
	idle := make([]*corev1.Pod, n)
	for i := range idle {
		name := fmt.Sprintf("idle-%03d", i)
		id := e.gh.AddRunner(scope, name)
		idle[i] = e.arcLegacyPod("ci", name, "steady", id)
	}
	e.gh.ResetLog()
	decisions := 0
	for i := range n {
		// Retry the busy runner (ID cached) and delete an idle one (ID annotated).
		if ok, err := e.decide(webhook.Path, e.body(busy[i])); err != nil || ok {
			return fmt.Errorf("busy runner: allowed=%v err=%v", ok, err)
		}
		if ok, err := e.decide(webhook.Path, e.body(idle[i])); err != nil || !ok {
			return fmt.Errorf("idle runner: allowed=%v err=%v", ok, err)
		}
		decisions += 2
	}
	calls := float64(e.gh.Count(""))
	v := calls / float64(decisions)
	progress("steady: %d decisions (busy retries with cached ID, idle runners with ID annotation), %.0f GitHub requests", decisions, calls)
	e.record("calls_per_decision_steady", v, "req/decision", "<= 1.0", v <= 1.0, "ARC's pods: busy retries with cached ID, idle runners with their Runner's ID")

	// The others: an ID the pod carries without ARC's Runner behind it is
	// checked against GitHub's record (GET by ID) before the DELETE.
	untrusted := make([]*corev1.Pod, n)
	for i := range untrusted {
		name := fmt.Sprintf("untrusted-%03d", i)
		id := e.gh.AddRunner(scope, name)
		untrusted[i] = fixture.MakeLegacyRunnerPod("ci", name).Org("steady").RunnerID(id).Running().Obj()
	}
	e.gh.ResetLog()
	for _, p := range untrusted {
		if ok, err := e.decide(webhook.Path, e.body(p)); err != nil || !ok {
			return fmt.Errorf("idle runner with an untrusted ID: allowed=%v err=%v", ok, err)
		}
	}
	u := float64(e.gh.Count("")) / float64(n)
	progress("steady: %d idle runners whose pods carry an ID no Runner vouches for: %d GitHub requests", n, e.gh.Count(""))
	e.record("calls_per_decision_untrusted_id", u, "req/decision", "(info)", true, "pods no ARC object controls: GET by ID to check the name, then DELETE")
	return nil
}

// busyRetryHour: kubectl drain retries a refused eviction every 5 s whatever
// retryAfterSeconds says. One busy runner's pod, refused every 5 s for an hour
// of simulated time (an injected clock), must not cost 720 GitHub requests.
func (e *env) busyRetryHour() error {
	scope := org("busyhour")
	id := e.gh.AddRunner(scope, "runner-busy-hour")
	e.gh.SetBusy(scope, "runner-busy-hour", true)
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-busy-hour").Org("busyhour").RunnerID(id).Running().Obj()
	if err := e.pods.Create(context.Background(), pod.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	clock := fakeclock.New(time.Now())
	gc, err := ghclient.New(ghclient.Config{BaseURL: e.ghURL, AllowHTTP: true, Token: token, Budgets: unlimitedBudget(), Now: clock.Now})
	if err != nil {
		return err
	}
	router, err := ghclient.NewRouter(ghclient.RouterConfig{Default: gc, Now: clock.Now})
	if err != nil {
		return err
	}
	h, err := webhook.NewHandler(webhook.Options{Config: webhook.DefaultConfig(), GitHub: router, Pods: e.pods, Now: clock.Now})
	if err != nil {
		return err
	}
	body, err := process.EvictionReviewJSON(process.Review{Pod: pod})
	if err != nil {
		return err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return err
	}
	before := e.gh.Count("")
	const every, hour = 5 * time.Second, time.Hour
	for elapsed := time.Duration(0); elapsed < hour; elapsed += every {
		resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: *review.Request})
		if resp.Allowed || resp.Result.Code != http.StatusTooManyRequests {
			return fmt.Errorf("busy runner's eviction: allowed=%v code=%d, want a 429", resp.Allowed, resp.Result.Code)
		}
		clock.Advance(every)
	}
	calls := e.gh.Count("") - before
	progress("busy retry: %d evictions over an hour, %d GitHub requests", int(hour/every), calls)
	e.record("calls_busy_retry_hour_one_runner", float64(calls), "requests", "(info)", true,
		"one busy runner alone, eviction retried every 5s: a conditional listing each 15s (1 point, 304s spend no hourly quota) instead of DELETEs (5 points each)")
	return nil
}

// registerBurst registers `registered` runners named prefix-NNNN on scope and
// returns their IDs by name and the names of the `deletes` runners a burst
// deletes, spread evenly over them.
func (e *env) registerBurst(scope ghclient.Scope, prefix string, registered, deletes int) (ids map[string]int64, names []string) {
	ids = make(map[string]int64, registered)
	for i := range registered {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		ids[name] = e.gh.AddRunner(scope, name)
	}
	names = make([]string, deletes)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i*(registered/deletes))
	}
	return ids, names
}

// burst: 100 concurrent deletes of idle runner pods in an org with 1,000
// registered runners and a cold client cache; runner-guard vs the seed algorithm.
func (e *env) burst() error {
	const registered, deletes = 1000, 100
	scope := org("burst")
	ids, names := e.registerBurst(scope, "runner", registered, deletes)
	reRegister := func() {
		for _, n := range names {
			ids[n] = e.gh.AddRunner(scope, n)
		}
	}
	runBurst := func(label string, pod func(name string) *corev1.Pod) (int, error) {
		if err := e.newHandler(); err != nil { // cold cache
			return 0, err
		}
		reRegister()
		bodies := make([][]byte, deletes)
		for i, n := range names {
			bodies[i] = e.body(pod(n))
		}
		e.gh.ResetLog()
		err := forEach(len(bodies), len(bodies), func(i int) error {
			if ok, err := e.decide(webhook.Path, bodies[i]); err != nil || !ok {
				return fmt.Errorf("%s: allowed=%v err=%v", label, ok, err)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		calls := e.gh.Count("")
		for _, n := range names {
			if _, ok := e.gh.Runner(scope, n); ok {
				return 0, fmt.Errorf("%s: runner %s still registered", label, n)
			}
		}
		return calls, nil
	}

	withID, err := runBurst("legacy pods with actions-runner/id", func(n string) *corev1.Pod {
		return e.arcLegacyPod("ci", n, "burst", ids[n])
	})
	if err != nil {
		return err
	}
	progress("burst: runner-guard, legacy pods with ID annotation: %d requests", withID)
	// Another namespace: the legacy pods of the same names stay live in "ci",
	// and a DELETE is decided from the live pod of the review's name.
	noID, err := runBurst("scale-set pods (no ID annotation)", func(n string) *corev1.Pod {
		return fixture.MakeScaleSetRunnerPod("ci-scaleset", n).Label("actions.github.com/organization", "burst").Running().Obj()
	})
	if err != nil {
		return err
	}
	progress("burst: runner-guard, scale-set pods without ID: %d requests", noID)

	reRegister()
	e.gh.ResetLog()
	seedCalls, err := e.seedBurst(scope, names)
	if err != nil {
		return err
	}
	progress("burst: seed algorithm (list all runners page by page, check busy, DELETE by ID): %d requests", seedCalls)
	// Each ID is checked against GitHub's record before its DELETE: one
	// listing of the scope (10 pages for 1,000 runners) answers them all.
	e.record("calls_burst_100", float64(withID), "requests", "<= 110", withID <= 110, "ARC's legacy pods: Runner-controlled, carrying actions-runner/id (checked by one listing of the scope's 1,000 runners, then a DELETE each)")
	e.record("calls_burst_100_noid", float64(noID), "requests", "(info)", true, "scale-set pods: list by name + DELETE each")
	e.record("calls_burst_100_seed", float64(seedCalls), "requests", "(baseline)", true, "ARC's old way, same burst")
	return nil
}

// arcRunner is one scale-set runner: its EphemeralRunner and its pod.
type arcRunner struct {
	er  *unstructured.Unstructured
	pod *corev1.Pod
}

// arcRunners builds, for each name, an EphemeralRunner of org with the
// runner's ID in status.runnerId (edit shapes it further) and the running pod
// it controls, labelled as ARC labels it.
func arcRunners(orgName string, ids map[string]int64, names []string, edit func(i int, w *fixture.EphemeralRunnerWrapper)) []arcRunner {
	out := make([]arcRunner, len(names))
	for i, n := range names {
		w := fixture.MakeEphemeralRunner("arc-runners", n).ConfigURL("https://github.com/" + orgName).RunnerID(ids[n]).RunnerName(n)
		if edit != nil {
			edit(i, w)
		}
		out[i] = arcRunner{
			er: w.Obj(),
			pod: fixture.MakeScaleSetRunnerPod("arc-runners", n).Label("actions.github.com/organization", orgName).
				OwnedByEphemeralRunner(w).Running().Obj(),
		}
	}
	return out
}

// arcHandler is an in-process handler that reads the runners' pods and
// EphemeralRunners (arc.Resolver, static credentials) from a fake API client,
// with a cold GitHub client. It returns the client too, to see what was retired.
func (e *env) arcHandler(arcs []arcRunner) (*webhook.Handler, client.Client, error) {
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
	for _, r := range arcs {
		b = b.WithObjects(r.er.DeepCopy(), r.pod.DeepCopy())
	}
	c := b.Build()
	gc, err := ghclient.New(ghclient.Config{BaseURL: e.ghURL, AllowHTTP: true, Token: token, Budgets: unlimitedBudget()})
	if err != nil {
		return nil, nil, err
	}
	router, err := ghclient.NewRouter(ghclient.RouterConfig{Default: gc})
	if err != nil {
		return nil, nil, err
	}
	runners := arc.NewResolver(arc.Options{Reader: c, Writer: c})
	// As in the binary, the EphemeralRunners of unregistered runners are
	// retired after the admission call; the Retirer lives as long as the run.
	retirer := disruption.NewRetirer(runners, c, nil, logr.Discard())
	go func() { _ = retirer.Start(context.Background()) }()
	h, err := webhook.NewHandler(webhook.Options{
		Config:      webhook.DefaultConfig(),
		GitHub:      router,
		Pods:        c,
		Runners:     runners,
		Retirements: retirer,
		Metrics:     webhook.NewMetrics(),
	})
	return h, c, err
}

// handleDeletes sends the DELETE review of every runner's pod to h at once and
// returns how many were allowed.
func handleDeletes(h *webhook.Handler, runners []arcRunner) (int, error) {
	reqs := make([]admission.Request, len(runners))
	for i, r := range runners {
		body, err := process.DeleteReviewJSON(process.Review{Pod: r.pod})
		if err != nil {
			return 0, err
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil {
			return 0, err
		}
		reqs[i] = admission.Request{AdmissionRequest: *review.Request}
	}
	var allowed atomic.Int64
	err := forEach(len(reqs), len(reqs), func(i int) error {
		resp := h.Handle(context.Background(), reqs[i])
		if resp.Allowed {
			allowed.Add(1)
		} else if resp.Result != nil {
			return fmt.Errorf("pod %s refused: %s", runners[i].pod.Name, resp.Result.Message)
		}
		return nil
	})
	return int(allowed.Load()), err
}

// arcDeletes sends the DELETE review of every runner's pod at once to a fresh
// arcHandler and returns how many were allowed, the GitHub requests they cost
// and the handler's API client, to see what was retired.
func (e *env) arcDeletes(runners []arcRunner) (allowed, calls int, c client.Client, err error) {
	h, c, err := e.arcHandler(runners)
	if err != nil {
		return 0, 0, nil, err
	}
	e.gh.ResetLog()
	allowed, err = handleDeletes(h, runners)
	if err != nil {
		return 0, 0, nil, err
	}
	return allowed, e.gh.Count(""), c, nil
}

// scaleSetBurst: 100 concurrent deletes of idle scale-set runners' pods in an
// organisation of 1,000 registered runners, with their EphemeralRunners
// readable: the runner ID comes from status.runnerId, so one DELETE each, and
// each EphemeralRunner is retired.
func (e *env) scaleSetBurst() error {
	const registered, deletes = 1000, 100
	scope := org("scaleset")
	ids, names := e.registerBurst(scope, "scaleset-runner", registered, deletes)
	runners := arcRunners(scope.Name, ids, names, nil)
	allowed, calls, c, err := e.arcDeletes(runners)
	if err != nil {
		return err
	}
	if allowed != deletes {
		return fmt.Errorf("%d of %d deletes allowed", allowed, deletes)
	}
	for _, r := range runners {
		if _, ok := e.gh.Runner(scope, r.pod.Name); ok {
			return fmt.Errorf("runner %s still registered", r.pod.Name)
		}
	}
	// The API server deletes the admitted pods; the Retirer deletes their
	// EphemeralRunners once it sees them gone.
	for _, r := range runners {
		if err := c.Delete(context.Background(), r.pod.DeepCopy()); err != nil {
			return fmt.Errorf("deleting pod %s as the API server would: %w", r.pod.Name, err)
		}
	}
	retired := 0
	for deadline := time.Now().Add(10 * time.Second); retired < deletes && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		retired = 0
		for _, r := range runners {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(arc.GroupVersionKind())
			err := c.Get(context.Background(), types.NamespacedName{Namespace: r.er.GetNamespace(), Name: r.er.GetName()}, u)
			if apierrors.IsNotFound(err) || err == nil && u.GetDeletionTimestamp() != nil {
				retired++
			}
		}
	}
	progress("scale-set burst: %d deletes, %d GitHub requests, %d EphemeralRunners retired", deletes, calls, retired)
	e.record("calls_burst_100_scaleset", float64(calls), "requests", "<= 101", calls <= 101 && retired == deletes,
		fmt.Sprintf("scale-set pods, runner ID from the EphemeralRunner; %d retired", retired))
	return nil
}

// arcCleanup: ARC deletes the pods of 100 runners it already removed from
// GitHub, half with the EphemeralRunner being deleted and its registration
// finalizer gone, half in phase Succeeded. The runners are still listed busy
// on the fake GitHub, so a request would refuse: none may be sent.
func (e *env) arcCleanup() error {
	const n = 100
	scope := org("arccleanup")
	ids := map[string]int64{}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("arc-removed-%03d", i)
		ids[names[i]] = e.gh.AddRunner(scope, names[i])
		e.gh.SetBusy(scope, names[i], true)
	}
	runners := arcRunners(scope.Name, ids, names, func(i int, w *fixture.EphemeralRunnerWrapper) {
		if i%2 == 0 {
			w.Deleting().Registered(false)
		} else {
			w.Phase("Succeeded")
		}
	})
	allowed, calls, _, err := e.arcDeletes(runners)
	if err != nil {
		return err
	}
	progress("ARC clean-up: %d of %d deletes allowed, %d GitHub requests", allowed, n, calls)
	e.record("calls_arc_cleanup_100", float64(calls), "requests", "0", calls == 0 && allowed == n,
		"ARC deleting pods of runners it removed (EphemeralRunner deleted without registration finalizer, or Succeeded)")
	return nil
}

// seedBurst is ARC's old unregister, once per pod, 100 pods at once: list every
// runner of the scope (per_page=100, following pages), find the name, skip if
// busy, else DELETE by ID.
func (e *env) seedBurst(scope ghclient.Scope, names []string) (int, error) {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer c.CloseIdleConnections()
	get := func(url string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	seed := func(name string) error {
		var found *ghfake.Runner
		for page := 1; found == nil; page++ {
			resp, b, err := get(fmt.Sprintf("%sorgs/%s/actions/runners?per_page=100&page=%d", e.ghURL, scope.Name, page))
			if err != nil {
				return err
			}
			var list struct {
				Runners []ghfake.Runner `json:"runners"`
			}
			if err := json.Unmarshal(b, &list); err != nil {
				return err
			}
			for i := range list.Runners {
				if list.Runners[i].Name == name {
					found = &list.Runners[i]
				}
			}
			if !strings.Contains(resp.Header.Get("Link"), `rel="next"`) {
				break
			}
		}
		if found == nil || found.Busy {
			return nil
		}
		req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%sorgs/%s/actions/runners/%d", e.ghURL, scope.Name, found.ID), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := forEach(len(names), len(names), func(i int) error { return seed(names[i]) }); err != nil {
		return 0, err
	}
	return e.gh.Count(""), nil
}

// fastPathBodies are DELETE reviews decided without GitHub: a non-runner pod,
// a terminating runner pod and a runner pod whose container is not running.
func (e *env) fastPathBodies() [][]byte {
	return [][]byte{
		e.body(fixture.MakePod("apps", "web-0").Label("app", "web").Running().Obj()),
		e.body(fixture.MakeLegacyRunnerPod("ci", "fast-terminating").Org("fast").Running().Terminating().Obj()),
		e.body(fixture.MakeLegacyRunnerPod("ci", "fast-pending").Org("fast").Pending().Obj()),
	}
}

func (e *env) fastPathCalls() error {
	scope := org("fast")
	for _, n := range []string{"fast-terminating", "fast-pending"} {
		e.gh.AddRunner(scope, n)
		e.gh.SetBusy(scope, n, true)
	}
	bodies := e.fastPathBodies()
	e.gh.ResetLog()
	for i := range 1000 {
		if ok, err := e.decide(webhook.Path, bodies[i%len(bodies)]); err != nil || !ok {
			return fmt.Errorf("fast-path decision %d: allowed=%v err=%v", i, ok, err)
		}
	}
	calls := e.gh.Count("")
	e.record("calls_fast_path", float64(calls), "requests", "0", calls == 0, "1,000 decisions: non-runner, terminating, not running")
	return nil
}

// hammer posts bodies round-robin from `clients` goroutines for d and returns decisions/s.
func (e *env) hammer(path string, bodies [][]byte, d time.Duration) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for i := w; time.Now().Before(stop); i++ {
				ok, err := e.decide(path, bodies[i%len(bodies)])
				if err != nil || !ok {
					firstErr.CompareAndSwap(nil, fmt.Errorf("%s: allowed=%v err=%v", path, ok, err))
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n.Load()) / d.Seconds(), nil
}

func (e *env) throughput() error {
	bodies := e.fastPathBodies()
	// Warm connections and code paths.
	if _, err := e.hammer(barePath, bodies, 300*time.Millisecond); err != nil {
		return err
	}
	if _, err := e.hammer(webhook.Path, bodies, 300*time.Millisecond); err != nil {
		return err
	}
	half := *duration / 2
	var bare, fast float64
	// Interleave (bare, fast, fast, bare) so drift on a shared machine hits both.
	for _, path := range []string{barePath, webhook.Path, webhook.Path, barePath} {
		rps, err := e.hammer(path, bodies, half)
		if err != nil {
			return err
		}
		progress("throughput: %s %.0f decisions/s", path, rps)
		if path == barePath {
			bare += rps / 2
		} else {
			fast += rps / 2
		}
	}
	ratio := fast / bare
	e.record("fastpath_rps", fast, "decisions/s", "(info)", true, fmt.Sprintf("%d HTTPS clients, keep-alive", clients))
	e.record("bare_rps", bare, "decisions/s", "(info)", true, "controller-runtime webhook allowing everything, same server")
	e.record("fastpath_vs_bare", ratio, "ratio", ">= 0.8", ratio >= 0.8, "")
	return nil
}

// latency: idle runner pods with a known ID (one DELETE each) while the fake
// GitHub answers every request after a fixed 50 ms.
func (e *env) latency() error {
	n := *latencyN
	const concurrency = 4
	scope := org("latency")
	bodies := make([][]byte, n)
	ids := make([]int64, n)
	for i := range bodies {
		name := fmt.Sprintf("lat-%04d", i)
		ids[i] = e.gh.AddRunner(scope, name)
		bodies[i] = e.body(e.arcLegacyPod("ci", name, "latency", ids[i]))
	}
	e.gh.SetLatency(githubLatency)
	defer e.gh.SetLatency(0)
	// Warm up the client's connections to the fake GitHub.
	for i := range concurrency * 2 {
		warm := fmt.Sprintf("lat-warm-%d", i)
		id := e.gh.AddRunner(scope, warm)
		if _, err := e.decide(webhook.Path, e.body(e.arcLegacyPod("ci", warm, "latency", id))); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, n)
	own := &durations{}
	e.own.Store(own)
	defer e.own.Store(nil)
	err := forEach(n, concurrency, func(i int) error {
		t := time.Now()
		ok, err := e.decide(webhook.Path, bodies[i])
		lat[i] = time.Since(t)
		if err != nil || !ok {
			return fmt.Errorf("decision %d: allowed=%v err=%v", i, ok, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Beside the handler's own time, the whole hop: what the client waited
	// less what the fake GitHub spent on that decision's DELETE. It adds two
	// loopback round trips and the wake-ups of an idle process, which a bare
	// webhook pays as well.
	hop := make([]time.Duration, n)
	for i := range lat {
		gh, ok := e.ghTime.Load(fmt.Sprintf("DELETE /orgs/latency/actions/runners/%d", ids[i]))
		if !ok {
			return fmt.Errorf("decision %d: the fake GitHub saw no DELETE", i)
		}
		hop[i] = lat[i] - gh.(time.Duration)
	}
	slices.Sort(lat)
	slices.Sort(hop)
	slices.Sort(own.d)
	p50, p99 := pct(lat, 0.50), pct(lat, 0.99)
	ownP99 := pct(own.d, 0.99)
	progress("latency: %d decisions, %d concurrent: p50 %s p99 %s max %s; handler's own p50 %s p99 %s; client-observed minus GitHub p50 %s p99 %s",
		n, concurrency, p50, p99, lat[len(lat)-1], pct(own.d, 0.5), ownP99, pct(hop, 0.5), pct(hop, 0.99))
	e.record("runner_p50_ms", ms(p50), "ms", "(info)", true, "GitHub answers after 50 ms")
	e.record("runner_p99_ms", ms(p99), "ms", "(info)", true, fmt.Sprintf("p99 - 50 ms = %.2f ms", ms(p99-githubLatency)))
	e.record("runner_added_p99_ms", ms(ownP99), "ms", "<= 2", ms(ownP99) <= 2,
		"p99 of the handler's time less its GitHub round trips")
	bareHop, err := e.bareHop(min(n, 200), concurrency)
	if err != nil {
		return err
	}
	progress("latency: bare webhook waiting %s: client-observed minus the wait p50 %s p99 %s", githubLatency, pct(bareHop, 0.5), pct(bareHop, 0.99))
	e.record("runner_hop_p99_ms", ms(pct(hop, 0.99)), "ms", "(info)", true,
		"p99 of client-observed time less the fake GitHub's own: adds loopback hops and idle wake-ups")
	e.record("bare_hop_p99_ms", ms(pct(bareHop, 0.99)), "ms", "(info)", true,
		"the same for a bare webhook that waits 50 ms itself: this machine's share of the hop")
	return nil
}

// bareHop sends n reviews to the bare waiting webhook and returns, per
// request, the client-observed time less the handler's wait.
func (e *env) bareHop(n, concurrency int) ([]time.Duration, error) {
	out := &durations{}
	err := forEach(n, concurrency, func(i int) error {
		uid := fmt.Sprintf("bare-%d", i)
		b, err := process.DeleteReviewJSON(process.Review{Pod: fixture.MakePod("apps", uid).Obj(), UID: uid})
		if err != nil {
			return err
		}
		t := time.Now()
		if _, err := e.decide(bareWaitPath, b); err != nil {
			return err
		}
		took := time.Since(t)
		waited, ok := e.ghTime.Load("bare " + uid)
		if !ok {
			return fmt.Errorf("bare request %d: no wait recorded", i)
		}
		out.add(took - waited.(time.Duration))
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out.d)
	return out.d, nil
}

func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rss runs the real binary under the bench's load (the same 64 clients as the
// throughput run; mixed runner and non-runner pods, GitHub latency 20 ms) and
// reports its peak resident memory. A second, fresh process then takes 1,000
// simultaneous connections (the load test's shape), reported for information:
// an API server reuses a handful of keep-alive connections, not a thousand.
func (e *env) rss() error {
	bin := *binFlag
	if bin == "" {
		var err error
		progress("rss: building ./cmd/webhook (set RUNNER_GUARD_BIN to skip) ...")
		if bin, err = process.Binary(e.dir); err != nil {
			return err
		}
	}
	e.gh.SetLatency(20 * time.Millisecond)
	defer e.gh.SetLatency(0)

	base, peak, took, err := e.loadBinary(bin, "load", 1000, clients)
	if err != nil {
		return err
	}
	progress("rss: %d clients: baseline %.1f MiB, peak %.1f MiB; 1,000 requests answered in %s", clients, mib(base), mib(peak), took.Round(time.Millisecond))
	e.record("rss_mib", mib(peak), "MiB", "<= 64", mib(peak) <= 64,
		fmt.Sprintf("peak (VmHWM), %d clients; baseline %.1f MiB", clients, mib(base)))

	base, peak, took, err = e.loadBinary(bin, "load-wide", 1000, 1000)
	if err != nil {
		return err
	}
	progress("rss: 1,000 connections: baseline %.1f MiB, peak %.1f MiB; answered in %s", mib(base), mib(peak), took.Round(time.Millisecond))
	// The Deployment's memory limit (manifests/base/deployment.yaml, the
	// chart's resources.limits.memory) is sized from this peak, which must
	// leave a quarter of it free (issue 17).
	const limitMiB = 256
	const most = limitMiB * 3 / 4
	e.record("rss_1000_conns_mib", mib(peak), "MiB", fmt.Sprintf("<= %d (the %d MiB limit less 25%%)", most, limitMiB), mib(peak) <= most, "peak with 1,000 simultaneous TLS connections")
	return e.rss10kPods(bin)
}

// loadBinary starts a fresh webhook process, sends n mixed requests from
// `conns` concurrent connections, checks every answer, and returns the
// process's resident memory before and its peak.
func (e *env) loadBinary(bin, scopeName string, n, conns int, args ...string) (base, peak int64, took time.Duration, err error) {
	return e.loadBinaryAfter(bin, scopeName, n, conns, nil, args...)
}

// loadBinaryAfter is loadBinary with ready, when set, waited on before the
// baseline is read (the process's caches filled).
func (e *env) loadBinaryAfter(bin, scopeName string, n, conns int, ready <-chan struct{}, args ...string) (base, peak int64, took time.Duration, err error) {
	// The load is about memory, not GitHub's limits: 1,000 decisions at once
	// spend far more than the request budget, which would refuse some.
	cfg := filepath.Join(e.dir, "unlimited-budget.yaml")
	if err := os.WriteFile(cfg, []byte("githubBudget: {unlimited: true}\n"), 0o600); err != nil {
		return 0, 0, 0, err
	}
	args = append([]string{"--config=" + cfg}, args...)
	p, err := process.Start(process.Config{Bin: bin, Files: e.files, GitHubURL: e.ghURL, Args: args}, 60*time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _, _ = p.Stop(30 * time.Second) }()
	if ready != nil {
		select {
		case <-ready:
		case <-time.After(2 * time.Minute):
			return 0, 0, 0, errors.New("the process's caches did not list the pods within 2 minutes")
		}
	}
	if base, _, err = p.RSS(); err != nil {
		return 0, 0, 0, err
	}
	bodies, want, err := process.LoadMix(e.gh, e.files.API, org(scopeName), n)
	if err != nil {
		return 0, 0, 0, err
	}
	c := &http.Client{Timeout: 60 * time.Second, Transport: process.NewTransport(e.files.Pool, conns)}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var bad atomic.Int64
	var firstErr atomic.Value
	var next atomic.Int64
	gate := make(chan struct{})
	for range conns {
		wg.Go(func() {
			<-gate
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				resp, err := process.Send(context.Background(), c, p.WebhookURL, bodies[i])
				if err != nil || resp.Allowed != want[i] {
					bad.Add(1)
					var msg string
					if resp != nil && resp.Result != nil {
						msg = resp.Result.Message
					}
					firstErr.CompareAndSwap(nil, fmt.Errorf("request %d: %v (allowed=%v want %v): %s", i, err, resp != nil && resp.Allowed, want[i], msg))
				}
			}
		})
	}
	t := time.Now()
	close(gate)
	wg.Wait()
	took = time.Since(t)
	if _, peak, err = p.RSS(); err != nil {
		return 0, 0, 0, err
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, 0, fmt.Errorf("%d of %d answers wrong or failed; first: %w", bad.Load(), len(bodies), err)
	}
	return base, peak, took, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func printFigures(figures []figure) {
	fmt.Println()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-28s %14s  %-12s %-10s %s\n", "figure", "value", "target", "meets", "note")
	for _, f := range figures {
		meets := "yes"
		switch {
		case strings.HasPrefix(f.target, "("):
			meets = "-"
		case !f.ok:
			meets = "NO"
		}
		fmt.Fprintf(&b, "%-28s %14s  %-12s %-10s %s\n", f.name, format(f.value)+" "+shortUnit(f.unit), f.target, meets, f.note)
	}
	fmt.Print(b.String())
	fmt.Println()
	for _, f := range figures {
		fmt.Printf("%s=%s\n", f.name, format(f.value))
	}
}

func shortUnit(u string) string {
	switch u {
	case "requests", "ratio", "req/decision":
		return ""
	case "decisions/s":
		return "/s"
	}
	return u
}

func format(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
