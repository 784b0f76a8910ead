package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// Sizes of the attack on the events endpoint (issue 36).
const (
	floodConns       = 8                // concurrent requests of each kind of the flood
	floodBody        = 25 << 20         // 25 MiB, the largest delivery GitHub sends
	floodFor         = 10 * time.Second // how long waves follow each other while admission is measured
	slowBodyFor      = 3 * time.Second  // how long a slow body trickles in
	slowBodyStep     = 4 << 10          // bytes it sends every 100 ms
	rssEvery         = 20 * time.Millisecond
	admissionEvery   = 40 * time.Millisecond // 25 dry-run deletes a second through the API server
	staleRunners     = 100
	staleJobsEach    = 10 // 100 runners x 10 jobs in sequence: 1,000 in_progress/completed pairs
	staleReplays     = 100
	crossDeliveries  = 200
	jobAnnotationKey = "runner-guard.io/job" // jobannotation.Annotation
)

// eventsAttack attacks the real binary's events endpoint on a real API
// server: its memory under a flood of unsigned, slow and chunked bodies,
// admission's latency meanwhile, deliveries shuffled over two endpoint
// processes (one restarted) and replayed, and deliveries signed with one
// organization's secret naming another's runners.
//
// The endpoint runs as its own process (--events-only) when the binary has
// that flag, the admission webhook as another; before that, in the
// admission webhook's process, as deployed then.
func (e *env) eventsAttack() error {
	opts, err := harnessOptions()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "runner-guard-bench-attack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a := &attackBench{bin: opts.WebhookBin, dir: dir,
		eventsOnly: binaryHasFlag(opts.WebhookBin, "--events-only"), orgSecrets: binaryHasFlag(opts.WebhookBin, "--github-webhook-secrets")}
	const secret = "bench-attack-secret"
	eventsArgs, base, err := process.EventsEndpoint(dir, secret)
	if err != nil {
		return err
	}
	// The bind address, then the secret flag: every process the bench
	// starts has an address of its own.
	a.secretArgs = eventsArgs[1:]
	if a.eventsOnly {
		opts.WebhookArgs = append(opts.WebhookArgs, a.secretArgs...) // the webhook verifies job annotations
	} else {
		opts.WebhookArgs = append(opts.WebhookArgs, eventsArgs...)
	}
	// One process: each serves the events endpoint on an address of its own.
	ctx, h, stop, err := startHarnessWithin(15*time.Minute, opts, 1)
	if err != nil {
		return err
	}
	defer stop()
	fenv := h.fenv
	a.eventsBench = &eventsBench{fenv: fenv, secret: []byte(secret)}
	defer a.stopAll()
	mode := "in the admission webhook's process (no --events-only yet)"
	if a.eventsOnly {
		mode = "as its own process (--events-only)"
	}
	progress("events attack: the endpoint runs %s", mode)

	var target *process.Proc
	if a.eventsOnly {
		ep, err := a.startEndpoint(ctx, "events-flooded", a.secretArgs)
		if err != nil {
			return err
		}
		target = &process.Proc{Cmd: ep.child.Cmd}
		a.url = ep.url
	} else {
		if target, err = processWithArg(eventsArgs[0]); err != nil {
			return err
		}
		a.url = base + events.Path
	}
	if err := a.floodDuringAdmission(ctx, e, target); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	if err := a.staleDeliveries(ctx, e); err != nil {
		return fmt.Errorf("stale deliveries: %w", err)
	}
	return a.crossScope(ctx, e)
}

type attackBench struct {
	*eventsBench
	bin, dir string
	// The binary's flags: the endpoint as its own process, per-organization secrets.
	eventsOnly, orgSecrets bool
	// secretArgs give a process the webhook secret (--github-webhook-secret-file).
	secretArgs []string
	started    []*endpoint
}

// binaryHasFlag reports whether bin --help lists flag.
func binaryHasFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput() // --help exits non-zero
	return bytes.Contains(out, []byte(flag+" ")) || bytes.Contains(out, []byte(flag+"\n")) || bytes.Contains(out, []byte(flag+"="))
}

// processWithArg finds the running process whose command line holds arg:
// the harness's webhook, whose process the harness does not hand out.
func processWithArg(arg string) (*process.Proc, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			continue
		}
		p, err := os.FindProcess(pid)
		if err != nil {
			return nil, err
		}
		return &process.Proc{Cmd: &exec.Cmd{Process: p}}, nil
	}
	return nil, fmt.Errorf("no process runs with %s", arg)
}

// endpoint is an events endpoint process the bench started.
type endpoint struct {
	name  string
	args  []string
	url   string // http://127.0.0.1:PORT/github/events
	child *process.Child
}

// startEndpoint runs the binary with the events endpoint on a port of its
// own against the harness's API server, with secretArgs, and waits until it
// answers a delivery. Without --events-only the process is a whole
// runner-guard (its admission port unregistered).
func (a *attackBench) startEndpoint(ctx context.Context, name string, secretArgs []string) (*endpoint, error) {
	ports, err := process.FreePorts(4)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + a.fenv.Kubeconfig,
		fmt.Sprintf("--events-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]), "--metrics-secure=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]),
	}, secretArgs...)
	if a.eventsOnly {
		args = append(args, "--events-only")
	} else {
		certDir := filepath.Join(a.dir, name+"-certs")
		b, err := certs.Generate(certs.Options{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		if err != nil {
			return nil, err
		}
		if err := b.WriteDir(certDir); err != nil {
			return nil, err
		}
		token := filepath.Join(a.dir, "unused-github-token")
		if err := os.WriteFile(token, []byte("unused\n"), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[3]), "--cert-dir="+certDir,
			"--github-url="+a.fenv.GitHubURL, "--github-allow-http", "--github-token-file="+token)
	}
	ep := &endpoint{name: name, args: args, url: fmt.Sprintf("http://127.0.0.1:%d%s", ports[0], events.Path)}
	a.started = append(a.started, ep)
	return ep, ep.start(ctx, a.bin, a.dir)
}

// start runs the endpoint's process and waits until it answers an unsigned
// delivery.
func (ep *endpoint) start(ctx context.Context, bin, dir string) error {
	child, err := process.StartLogged(dir, fmt.Sprintf("%s-%d", ep.name, time.Now().UnixNano()), process.Command(bin, ep.args, nil))
	if err != nil {
		return err
	}
	ep.child = child
	return process.WaitReady(ctx, ep.name, 30*time.Second, child, func(ctx context.Context) error {
		_, _, err := deliver(ctx, ep.url, nil, "", "ready")
		return err
	})
}

// restart stops the endpoint's process and starts it again.
func (ep *endpoint) restart(ctx context.Context, bin, dir string) error {
	if err := ep.child.Stop(15 * time.Second); err != nil {
		return err
	}
	return ep.start(ctx, bin, dir)
}

func (a *attackBench) stopAll() {
	for _, ep := range a.started {
		_ = ep.child.Stop(15 * time.Second)
	}
}

// deliveryClient posts deliveries; no keep-alive, so a request the server
// refused early never spoils the next.
var deliveryClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// deliver POSTs a workflow_job delivery with signature (none when empty)
// and X-GitHub-Delivery id, and returns the answer's status and the first
// line of its body (the endpoint's outcome: applied, stale, ...).
func deliver(ctx context.Context, url string, body []byte, signature, id string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	return send(req, signature, id)
}

// send adds a delivery's headers to req and sends it.
func send(req *http.Request, signature, id string) (int, string, error) {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(events.HeaderEvent, "workflow_job")
	req.Header.Set(events.HeaderDelivery, id)
	if signature != "" {
		req.Header.Set(events.HeaderSignature, signature)
	}
	resp, err := deliveryClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	outcome, _, _ := strings.Cut(string(body), "\n")
	return resp.StatusCode, outcome, err
}

// What a flood request got besides an HTTP status.
const (
	answerNone   = "none"   // nothing before the client gave up
	answerClosed = "closed" // the connection closed or reset before an answer was read
)

// tally counts answers (an HTTP status, with the endpoint's outcome where
// it matters) from many goroutines.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[key]++
}

func (t *tally) count(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[key]
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.n)) {
		parts = append(parts, fmt.Sprintf("%s x%d", k, t.n[k]))
	}
	return strings.Join(parts, ", ")
}

// peakRSS samples p's VmRSS every rssEvery until stop is called, which
// returns the largest sample.
func peakRSS(p *process.Proc) (stop func() (int64, error)) {
	done := make(chan struct{})
	var peak int64
	var sampleErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(rssEvery)
		defer t.Stop()
		for {
			rss, _, err := p.RSS()
			if err != nil {
				sampleErr = err
				return
			}
			peak = max(peak, rss)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() (int64, error) {
		close(done)
		wg.Wait()
		return peak, sampleErr
	}
}

// floodDuringAdmission floods the events endpoint, target its process:
// first one wave (floodConns requests of each kind, one kind after
// another), for its growth in resident memory; then waves again and again
// for floodFor while dry-run deletes of idle runner pods go through the API
// server to the admission webhook, for admission's p99 meanwhile.
func (a *attackBench) floodDuringAdmission(ctx context.Context, e *env, target *process.Proc) error {
	const ns = "bench-attack-admission"
	names, err := a.legacyPods(ctx, ns, "adm", 20, org("bench-attack-admission"))
	if err != nil {
		return err
	}
	// Warm the API server's and the webhook's paths, then admission's p99
	// with the endpoint idle, for comparison.
	if _, err := a.admissionLatencies(ctx, ns, names, 2*time.Second, nil); err != nil {
		return err
	}
	quiet, err := a.admissionLatencies(ctx, ns, names, 4*time.Second, nil)
	if err != nil {
		return err
	}
	idle, _, err := target.RSS()
	if err != nil {
		return err
	}
	where := "the admission webhook's process"
	if a.eventsOnly {
		where = "an --events-only process"
	}

	wave := a.floodKinds(ctx)
	stopRSS := peakRSS(target)
	flood(wave, 0)
	peak, err := stopRSS()
	if err != nil {
		return err
	}
	growth := mib(peak - idle)
	progress("events flood, one wave: endpoint RSS idle %.1f MiB, peak %.1f MiB (+%.1f MiB); answers %s", mib(idle), mib(peak), growth, describe(wave))
	e.record("events_unsigned_flood_rss_growth_mib", growth, "MiB", "<= 16", growth <= 16,
		fmt.Sprintf("one wave of %d wrongly signed requests of each kind; peak VmRSS (every 20 ms) less idle %.1f MiB, endpoint in %s", floodConns, mib(idle), where))
	for _, code := range []int{http.StatusUnauthorized, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable} {
		n := 0
		for _, k := range wave {
			n += k.answers.count(strconv.Itoa(code))
		}
		e.record(fmt.Sprintf("events_flood_answers_%d", code), float64(n), "requests", "(info)", true,
			fmt.Sprintf("of the wave's %d requests", len(wave)*floodConns))
	}

	kinds := a.floodKinds(ctx)
	rounds := 0
	// The CPU the endpoint and the flood's client (this process) take
	// from the machine admission shares with them.
	self := &process.Proc{Cmd: &exec.Cmd{Process: &os.Process{Pid: os.Getpid()}}}
	endpointBefore, clientBefore := cpuTime(target), cpuTime(self)
	stopRSS = peakRSS(target)
	start := time.Now()
	during, err := a.admissionLatencies(ctx, ns, names, 0, func() { rounds = flood(kinds, floodFor) })
	took := time.Since(start)
	peak, rssErr := stopRSS()
	if err := errors.Join(err, rssErr); err != nil {
		return err
	}
	endpointCPU := (cpuTime(target) - endpointBefore) / took.Seconds() // cores
	clientCPU := (cpuTime(self) - clientBefore) / took.Seconds()
	sustained := mib(peak - idle)
	p99 := pct(during, 0.99)
	progress("events flood, %d waves in %s: endpoint RSS peak %.1f MiB (+%.1f MiB), CPU %.2f cores, the flood's client %.2f; admission p99 %s during, %s before (%d and %d dry-run deletes); answers %s",
		rounds, floodFor, mib(peak), sustained, endpointCPU, clientCPU, p99.Round(time.Millisecond), pct(quiet, 0.99).Round(time.Millisecond), len(during), len(quiet), describe(kinds))
	e.record("events_sustained_flood_rss_growth_mib", sustained, "MiB", "(info)", true,
		fmt.Sprintf("%d waves one after another for %s; peak VmRSS less idle, endpoint in %s", rounds, floodFor, where))
	e.record("admission_p99_ms_during_events_flood", ms(p99), "ms", "<= 100", ms(p99) <= 100,
		fmt.Sprintf("%d dry-run deletes of idle runner pods through the API server, 25/s, during those waves; p99 %.0f ms without them; the endpoint took %.2f cores, the flood's client %.2f",
			len(during), ms(pct(quiet, 0.99)), endpointCPU, clientCPU))
	return nil
}

// cpuTime is the CPU time, in seconds, p has spent so far (user and
// system, from /proc/PID/stat); 0 when it cannot be read.
func cpuTime(p *process.Proc) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// After the command name in parentheses: state, then 10 fields, then utime and stime.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// admissionLatencies sends dry-run deletes of the pods names in ns through
// the API server every admissionEvery, for d or, when load is set, until
// load returns, and returns their latencies sorted. A delete the webhook
// denies counts as an answer; one that fails otherwise is an error.
func (a *attackBench) admissionLatencies(ctx context.Context, ns string, names []string, d time.Duration, load func()) ([]time.Duration, error) {
	done := make(chan struct{})
	if load != nil {
		go func() {
			defer close(done)
			load()
		}()
	} else {
		time.AfterFunc(d, func() { close(done) })
	}
	lat := &durations{}
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(admissionEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-done:
			wg.Wait()
			slices.Sort(lat.d)
			if firstErr == nil && len(lat.d) == 0 {
				firstErr = errors.New("no admission request was sent")
			}
			return lat.d, firstErr
		case <-tick.C:
		}
		name := names[i%len(names)]
		wg.Go(func() {
			start := time.Now()
			err := a.fenv.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			lat.add(time.Since(start))
			if err != nil && !strings.Contains(err.Error(), "denied the request") {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("dry-run delete of %s/%s: %w", ns, name, err)
				}
				mu.Unlock()
			}
		})
	}
}

// floodKind is one kind of flood request and the answers it got.
type floodKind struct {
	name    string
	send    func(i int) string // the i-th concurrent request: its status, answerClosed or answerNone
	answers tally
}

// floodKinds are the flood's requests, all with a wrong signature: 25 MiB
// bodies, bodies of the endpoint's own limit (which it must read to check
// them), bodies claiming 1 GiB that trickle in, and chunked 25 MiB bodies.
func (a *attackBench) floodKinds(ctx context.Context) []*floodKind {
	big := bytes.Repeat([]byte("x"), floodBody)
	wrong := "sha256=" + strings.Repeat("0", 64)
	answer := func(code int, _ string, err error) string {
		if err != nil {
			return answerClosed
		}
		return strconv.Itoa(code)
	}
	return []*floodKind{
		{name: "25 MiB", send: func(i int) string { return answer(deliver(ctx, a.url, big, wrong, fmt.Sprintf("flood-%d", i))) }},
		{name: fmt.Sprintf("%d bytes (the limit)", events.MaxPayload), send: func(i int) string {
			return answer(deliver(ctx, a.url, big[:events.MaxPayload], wrong, fmt.Sprintf("limit-%d", i)))
		}},
		{name: "slow, claiming 1 GiB", send: func(int) string { return slowBody(ctx, a.url, wrong) }},
		{name: "chunked 25 MiB", send: func(i int) string {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, io.MultiReader(bytes.NewReader(big))) // no Content-Length
			if err != nil {
				return answerClosed
			}
			return answer(send(req, wrong, fmt.Sprintf("chunked-%d", i)))
		}},
	}
}

// flood sends waves of floodConns concurrent requests of each kind, one
// kind after another: one wave, and more until d has passed. It returns
// the waves sent.
func flood(kinds []*floodKind, d time.Duration) (waves int) {
	for start := time.Now(); waves == 0 || time.Since(start) < d; waves++ {
		for _, k := range kinds {
			_ = forEach(floodConns, floodConns, func(i int) error {
				k.answers.add(k.send(i))
				return nil
			})
		}
	}
	return waves
}

// describe lists each kind's answers.
func describe(kinds []*floodKind) string {
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s: %s", k.name, &k.answers))
	}
	return strings.Join(parts, "; ")
}

// slowBody sends a request claiming a 1 GiB body, then slowBodyStep bytes
// every 100 ms until the server answers or closes, for at most
// slowBodyFor, and returns the status it answered, answerClosed or
// answerNone.
func slowBody(ctx context.Context, url, signature string) string {
	host, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", host)
	if err != nil {
		return answerClosed
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s: workflow_job\r\n%s: %s\r\n\r\n",
		path, host, 1<<30, events.HeaderEvent, events.HeaderSignature, signature)
	if _, err := io.WriteString(conn, head); err != nil {
		return answerClosed
	}
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- answerClosed
			return
		}
		resp.Body.Close()
		answered <- strconv.Itoa(resp.StatusCode)
	}()
	chunk := bytes.Repeat([]byte("x"), slowBodyStep)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(slowBodyFor)
	for {
		select {
		case got := <-answered:
			return got
		case <-giveUp:
			return answerNone
		case <-tick.C:
			if _, err := conn.Write(chunk); err != nil {
				return <-answered // the server closed: the read ends too
			}
		}
	}
}

// workflowJob is a workflow_job delivery's body with the fields the
// endpoint reads (GITHUB-API.md, "Webhook deliveries").
type workflowJob struct {
	Action      string          `json:"action"`
	WorkflowJob workflowJobJob  `json:"workflow_job"`
	Repository  jobRepository   `json:"repository"`
	Org         jobOrganization `json:"organization"`
}

type workflowJobJob struct {
	ID          int64   `json:"id"`
	RunID       int64   `json:"run_id"`
	RunAttempt  int     `json:"run_attempt"`
	Name        string  `json:"name"`
	Status      string  `json:"status"`
	RunnerName  string  `json:"runner_name"`
	StartedAt   string  `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
}

type jobRepository struct {
	FullName string `json:"full_name"`
}

type jobOrganization struct {
	Login string `json:"login"`
}

// signedDelivery is a delivery as sent: its body and signature.
type signedDelivery struct {
	action    string
	jobID     int64
	body      []byte
	signature string
}

// jobDelivery renders the in_progress (completed zero) or completed
// delivery of job id on runner, of repository orgName/app, signed with secret.
func jobDelivery(orgName, runner string, id int64, started, completed time.Time, secret []byte) signedDelivery {
	p := workflowJob{
		Action:      "in_progress",
		WorkflowJob: workflowJobJob{ID: id, RunID: id * 10, RunAttempt: 1, Name: "build", Status: "in_progress", RunnerName: runner, StartedAt: started.UTC().Format(time.RFC3339)},
		Repository:  jobRepository{FullName: orgName + "/app"},
		Org:         jobOrganization{Login: orgName},
	}
	if !completed.IsZero() {
		at := completed.UTC().Format(time.RFC3339)
		p.Action, p.WorkflowJob.Status, p.WorkflowJob.CompletedAt = "completed", "completed", &at
	}
	body, _ := json.Marshal(p) // plain strings and integers always marshal
	return signedDelivery{action: p.Action, jobID: id, body: body, signature: events.Sign(body, secret)}
}

// podJob is what the bench reads of a pod's job annotation: the job and,
// once the endpoint records it, its state ("in_progress" or "completed").
type podJob struct {
	JobID int64  `json:"jobID"`
	State string `json:"state"`
}

// jobOf reads pod's job annotation; ok is false without one.
func jobOf(pod *corev1.Pod) (podJob, bool) {
	v, found := pod.Annotations[jobAnnotationKey]
	if !found {
		return podJob{}, false
	}
	var j podJob
	_ = json.Unmarshal([]byte(v), &j) // an unreadable one counts as held: it keeps the pod
	return j, true
}

// staleDeliveries: 1,000 in_progress/completed pairs of jobs run in
// sequence by staleRunners legacy runners, shuffled and spread round-robin
// over two endpoint processes, the second restarted halfway, then
// staleReplays replays of deliveries already sent under fresh delivery IDs.
// The figure counts pods left holding a job whose completed was delivered.
func (a *attackBench) staleDeliveries(ctx context.Context, e *env) error {
	const ns = "bench-attack-stale"
	orgName := "bench-attack-stale"
	names, err := a.legacyPods(ctx, ns, "st", staleRunners, org(orgName))
	if err != nil {
		return err
	}
	eps := make([]*endpoint, 2)
	for i := range eps {
		if eps[i], err = a.startEndpoint(ctx, fmt.Sprintf("events-%d", i), a.secretArgs); err != nil {
			return err
		}
	}
	var sent []signedDelivery
	// The jobs run on the pods: they start once the pods exist (a job
	// that started before its pod ran on an earlier one). One job after
	// another on each runner, a second apart, in whole seconds as GitHub's
	// timestamps are.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	for r, runner := range names {
		for k := range staleJobsEach {
			id := int64(700000 + r*staleJobsEach + k)
			began := start.Add(time.Duration(2*k) * time.Second)
			sent = append(sent, jobDelivery(orgName, runner, id, began, time.Time{}, a.secret),
				jobDelivery(orgName, runner, id, began, began.Add(time.Second), a.secret))
		}
	}
	rng := rand.New(rand.NewPCG(36, 1))
	rng.Shuffle(len(sent), func(i, j int) { sent[i], sent[j] = sent[j], sent[i] })
	for range staleReplays {
		sent = append(sent, sent[rng.IntN(len(sent))])
	}

	answers := &tally{}
	var mu sync.Mutex
	completed := map[int64]bool{} // jobs whose completed was answered 2xx
	deliverRange := func(from, to int) error {
		return forEach(to-from, 8, func(i int) error {
			i += from
			d := sent[i]
			code, outcome, err := deliver(ctx, eps[i%len(eps)].url, d.body, d.signature, fmt.Sprintf("00000000-0000-4000-8036-%012d", i))
			answers.add(fmt.Sprintf("%s: %d %s", d.action, code, outcome))
			if err == nil && code/100 == 2 && d.action == "completed" {
				mu.Lock()
				completed[d.jobID] = true
				mu.Unlock()
			}
			return nil
		})
	}
	pairs := (len(sent) - staleReplays) / 2
	if err := deliverRange(0, pairs); err != nil {
		return err
	}
	if err := eps[1].restart(ctx, a.bin, a.dir); err != nil {
		return err
	}
	if err := deliverRange(pairs, len(sent)); err != nil {
		return err
	}
	if answers.count("in_progress: 200 "+events.OutcomeApplied) == 0 {
		return fmt.Errorf("no in_progress delivery was applied, so none can be left stale (answers: %s)", answers)
	}
	stale, err := a.settled(ctx, func() (int, error) { return staleJobs(ctx, a.fenv, ns, completed) })
	if err != nil {
		return err
	}
	progress("stale deliveries: %d pairs and %d replays over 2 endpoints (one restarted halfway): answers %s; %d of %d pods hold a job whose completed was delivered",
		pairs, staleReplays, answers, stale, staleRunners)
	e.record("events_stale_applied", float64(stale), "pods", "0", stale == 0,
		fmt.Sprintf("%d in_progress/completed pairs (%d runners x %d jobs) shuffled over 2 processes, one restarted, %d replays; answers: %s",
			pairs, staleRunners, staleJobsEach, staleReplays, answers))
	return nil
}

// staleJobs counts the pods in ns whose job annotation holds a job in
// progress (an annotation without a state is one) that completed lists.
func staleJobs(ctx context.Context, fenv *framework.Env, ns string, completed map[int64]bool) (int, error) {
	pods, err := fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range pods.Items {
		if j, ok := jobOf(&pods.Items[i]); ok && j.State != "completed" && completed[j.JobID] {
			n++
		}
	}
	return n, nil
}

// settled calls count every second until it gives the same answer twice
// (an endpoint that answers before it applies has caught up), for at most
// 30 seconds, and returns the last answer.
func (a *attackBench) settled(ctx context.Context, count func() (int, error)) (int, error) {
	last, err := count()
	for deadline := time.Now().Add(30 * time.Second); err == nil && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		var n int
		if n, err = count(); n == last {
			break
		}
		last = n
	}
	return last, err
}

// crossScope: with one webhook secret per organization
// (--github-webhook-secrets), deliveries signed with org-a's secret that
// name org-b's repository and runners; the figure counts org-b's pods that
// changed.
func (a *attackBench) crossScope(ctx context.Context, e *env) error {
	if !a.orgSecrets {
		progress("events_cross_scope_applied: skipped: %s has no --github-webhook-secrets yet", a.bin)
		return nil
	}
	const ns = "bench-attack-cross"
	orgA, orgB := "bench-org-a", "bench-org-b"
	names, err := a.legacyPods(ctx, ns, "ob", 10, org(orgB))
	if err != nil {
		return err
	}
	mapping := "secrets:\n"
	for _, o := range []string{orgA, orgB} {
		file := filepath.Join(a.dir, o+"-secret")
		if err := os.WriteFile(file, []byte("secret-of-"+o+"\n"), 0o600); err != nil {
			return err
		}
		mapping += fmt.Sprintf("- {name: %s, secretFile: %s, scopes: [\"org:%s\"]}\n", o, file, o)
	}
	mappingFile := filepath.Join(a.dir, "webhook-secrets.yaml")
	if err := os.WriteFile(mappingFile, []byte(mapping), 0o600); err != nil {
		return err
	}
	ep, err := a.startEndpoint(ctx, "events-orgs", []string{"--github-webhook-secrets=" + mappingFile})
	if err != nil {
		return err
	}
	versions := func() (map[string]string, error) {
		pods, err := a.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			out[p.Name] = p.ResourceVersion
		}
		return out, nil
	}
	before, err := versions()
	if err != nil {
		return err
	}
	answers := &tally{}
	secretA := []byte("secret-of-" + orgA)
	began := time.Now().Truncate(time.Second).Add(time.Second) // after the pods' creation
	for i := range crossDeliveries {
		runner := names[i%len(names)]
		d := jobDelivery(orgB, runner, int64(800000+i), began, time.Time{}, secretA)
		if i%2 == 1 {
			// org-a's organization, org-b's repository and runner.
			var p workflowJob
			_ = json.Unmarshal(d.body, &p)
			p.Org.Login = orgA
			d.body, _ = json.Marshal(p)
			d.signature = events.Sign(d.body, secretA)
		}
		code, _, err := deliver(ctx, ep.url, d.body, d.signature, fmt.Sprintf("00000000-0000-4000-8037-%012d", i))
		if err != nil {
			return err
		}
		answers.add(strconv.Itoa(code))
	}
	changed, err := a.settled(ctx, func() (int, error) {
		after, err := versions()
		n := 0
		for name, rv := range after {
			if before[name] != rv {
				n++
			}
		}
		return n, err
	})
	if err != nil {
		return err
	}
	progress("cross-scope deliveries: %d signed with %s's secret naming %s's runners: answers %s; %d of %d pods changed",
		crossDeliveries, orgA, orgB, answers, changed, len(names))
	e.record("events_cross_scope_applied", float64(changed), "pods", "0", changed == 0,
		fmt.Sprintf("%d in_progress deliveries signed with org-a's secret naming org-b's repository and runners; answers: %s (401 expected)", crossDeliveries, answers))
	return nil
}
