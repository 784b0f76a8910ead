// Package process runs the real runner-guard binary (cmd/webhook) as a child
// process over HTTPS, against a fake GitHub, for the process-level tests in this
// directory and for the benchmark program in test/bench. No API server is
// needed: the binary gets a kubeconfig pointing at a PodAPI, which serves the
// pod reads it makes before asking GitHub.
//
// It is also the one process runner of every harness (child.go): Child starts
// a process in its own process group with its output in a log file, WaitReady
// waits for a starting process, and Eventually and Poll wait for a condition.
// test/e2e/framework, test/node and test/karpenter use them.
package process

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// BinEnv names the environment variable holding a prebuilt webhook binary.
const BinEnv = "RUNNER_GUARD_BIN"

// ValidatePath is the webhook's admission path (webhook.Path).
const ValidatePath = "/validate-runner-pods"

// Binary returns $RUNNER_GUARD_BIN, or builds ./cmd/webhook into dir and
// returns that path. repoRoot is found from the working directory.
func Binary(dir string) (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", BinEnv, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "webhook")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/webhook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/webhook: %w\n%s", err, b)
	}
	return out, nil
}

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct loopback TCP ports that were free a moment ago.
// All n are held open together: the kernel may hand a just-closed port out again.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Ports hands out loopback ports, never the same one twice, to callers that
// take them one at a time: the kernel may offer a just-closed port again
// before its first taker has bound it. The zero value is ready to use.
type Ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// Free returns a port that was free a moment ago and that p never gave out.
func (p *Ports) Free() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == nil {
		p.used = map[int]bool{}
	}
	for range 100 {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if !p.used[port] {
			p.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

// ClosedURL returns an http URL on a loopback port nothing listens on.
func ClosedURL() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://127.0.0.1:%d/", p), nil
}

// Files are the inputs a webhook process reads: certificates, kubeconfig, token.
type Files struct {
	Dir        string
	CertDir    string
	Kubeconfig string
	TokenFile  string
	CA         *certs.CA
	// Pool trusts CA (and any CA added with Trust).
	Pool *x509.CertPool
	// API answers the webhook's pod reads; add the pods a review names.
	API *PodAPI
}

// Close stops the PodAPI.
func (f *Files) Close() { f.API.Close() }

// NewFiles writes a fresh CA and serving certificate (127.0.0.1, localhost), a
// kubeconfig for a PodAPI it starts (Close stops it), and a token file into dir.
func NewFiles(dir, token string) (*Files, error) {
	ca, err := certs.NewCA(certs.CAOptions{})
	if err != nil {
		return nil, err
	}
	b, err := ca.Issue(certs.Options{})
	if err != nil {
		return nil, err
	}
	f := &Files{
		Dir:        dir,
		CertDir:    filepath.Join(dir, "certs"),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		TokenFile:  filepath.Join(dir, "token"),
		CA:         ca,
		Pool:       x509.NewCertPool(),
	}
	f.Pool.AddCert(ca.Certificate())
	if err := b.WriteDir(f.CertDir); err != nil {
		return nil, err
	}
	if err := f.UseAPI(NewPodAPI()); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.TokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// UseAPI points the files' kubeconfig (a copy, beside the original) at api.
func (f *Files) UseAPI(api *PodAPI) error {
	f.API = api
	f.Kubeconfig = filepath.Join(f.Dir, fmt.Sprintf("kubeconfig-%s", strings.NewReplacer(":", "-", "/", "-").Replace(api.URL())))
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: none
  cluster:
    server: %s
    insecure-skip-tls-verify: true
contexts:
- name: none
  context: {cluster: none, user: none}
current-context: none
users:
- name: none
  user: {token: unused}
`, f.API.URL())
	return os.WriteFile(f.Kubeconfig, []byte(kc), 0o600)
}

// Proc is a running webhook process.
type Proc struct {
	Cmd         *exec.Cmd
	WebhookURL  string // https://127.0.0.1:PORT/validate-runner-pods
	WebhookAddr string // 127.0.0.1:PORT
	MetricsURL  string // http://127.0.0.1:PORT/metrics
	HealthURL   string // http://127.0.0.1:PORT (append /healthz, /readyz)
	Files       *Files
	// Client speaks HTTPS to the webhook and trusts Files.Pool.
	Client *http.Client

	log   *LockedBuffer
	child *Child
}

// Config starts a webhook process.
type Config struct {
	Bin       string
	Files     *Files
	GitHubURL string
	// Args are extra flags (e.g. --on-error=allow, --github-timeout=300ms).
	Args []string
	// Env is added to the process environment (GITHUB_TOKEN is removed first).
	Env []string
	// NoTokenFlag leaves out --github-token-file.
	NoTokenFlag bool
}

// Args returns the command line Start uses, without the binary, with the ports
// filled in.
func (c Config) args(webhookPort, metricsPort, healthPort int) []string {
	a := []string{
		"--webhook-host=127.0.0.1",
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--cert-dir=" + c.Files.CertDir,
		"--kubeconfig=" + c.Files.Kubeconfig,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--metrics-secure=false",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
	}
	if c.GitHubURL != "" {
		// The fake GitHub serves plain HTTP on loopback.
		a = append(a, "--github-url="+c.GitHubURL, "--github-allow-http")
	}
	if !c.NoTokenFlag {
		a = append(a, "--github-token-file="+c.Files.TokenFile)
	}
	return append(a, c.Args...)
}

// Start runs the binary and waits until /readyz answers 200 and the webhook
// port accepts TLS, or the process exits, or timeout passes.
func Start(cfg Config, timeout time.Duration) (*Proc, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	p := &Proc{
		WebhookAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		MetricsURL:  fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]),
		HealthURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		Files:       cfg.Files,
		log:         &LockedBuffer{},
	}
	p.WebhookURL = "https://" + p.WebhookAddr + ValidatePath
	p.Client = &http.Client{
		Timeout:   30 * time.Second,
		Transport: NewTransport(cfg.Files.Pool, 64),
	}
	p.Cmd = exec.Command(cfg.Bin, cfg.args(ports[0], ports[1], ports[2])...)
	p.Cmd.Env = append(withoutEnv(os.Environ(), "GITHUB_TOKEN"), cfg.Env...)
	if p.child, err = StartChild("webhook", p.Cmd, p.log); err != nil {
		return nil, err
	}
	if err := p.waitReady(timeout); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w\nprocess output:\n%s", err, p.Log())
	}
	return p, nil
}

// NewTransport is an HTTP/1.1 TLS transport trusting pool.
func NewTransport(pool *x509.CertPool, conns int) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

// waitReady waits until /readyz answers 200 and the webhook port accepts TLS.
func (p *Proc) waitReady(timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	return WaitReady(context.Background(), "webhook", timeout, p.child, func(ctx context.Context) error {
		if err := Ready(c, p.HealthURL); err != nil {
			return err
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{RootCAs: p.Files.Pool, ServerName: "127.0.0.1"}}
		conn, err := d.DialContext(ctx, "tcp", p.WebhookAddr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// Ready asks the /readyz of a process (healthURL: http://HOST:PORT) with c:
// nil once it answers 200.
func Ready(c *http.Client, healthURL string) error {
	code, _, err := get(c, healthURL+"/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET /readyz: %d", code)
	}
	return nil
}

func get(c *http.Client, url string) (int, []byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Get fetches a plain-HTTP URL of the process (metrics, probes).
func (p *Proc) Get(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	code, b, err := get(c, url)
	return code, string(b), err
}

// Log returns everything the process wrote so far.
func (p *Proc) Log() string { return p.log.String() }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.child.Done() }

// ExitCode is the exit status once Done is closed (-1 when killed by a signal).
func (p *Proc) ExitCode() int { return p.child.ExitCode() }

// Stop sends SIGTERM and waits up to timeout, then kills. It returns the exit code.
func (p *Proc) Stop(timeout time.Duration) (int, error) {
	p.Client.CloseIdleConnections()
	if err := p.child.Stop(timeout); err != nil {
		return -1, err
	}
	return p.ExitCode(), nil
}

// Kill ends the process at once and waits for it.
func (p *Proc) Kill() {
	p.Client.CloseIdleConnections()
	p.child.Kill()
}

// RSS returns the process's resident set (VmRSS) and peak (VmHWM) in bytes.
func (p *Proc) RSS() (rss, peak int64, err error) {
	if runtime.GOOS != "linux" {
		return 0, 0, errors.New("RSS needs /proc (linux)")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", line, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// Metric returns the sum of a metric's samples whose line contains every
// filter (e.g. `decision="deny"`), and whether any sample matched.
func (p *Proc) Metric(name string, filters ...string) (float64, bool, error) {
	code, body, err := p.Get(p.MetricsURL)
	if err != nil {
		return 0, false, err
	}
	if code != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: %d", p.MetricsURL, code)
	}
	return SumMetric(body, name, filters...)
}

// SumMetric sums the samples of name in a Prometheus text exposition.
func SumMetric(body, name string, filters ...string) (float64, bool, error) {
	var sum float64
	found := false
lines:
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, f := range filters {
			if !strings.Contains(line, f) {
				continue lines
			}
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, false, fmt.Errorf("%q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, nil
}

// Review is one admission request to send.
type Review = fixture.Review

// DeleteReviewJSON renders an AdmissionReview for DELETE of r.Pod.
func DeleteReviewJSON(r Review) ([]byte, error) {
	r.Evict = false
	return r.JSON()
}

// EvictionReviewJSON renders an AdmissionReview for CREATE pods/eviction of r.Pod.
func EvictionReviewJSON(r Review) ([]byte, error) {
	r.Evict = true
	return r.JSON()
}

// Send posts an AdmissionReview body and decodes the response.
func Send(ctx context.Context, c *http.Client, url string, body []byte) (*admissionv1.AdmissionResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("response is not an AdmissionReview: %w: %s", err, data)
	}
	if out.Response == nil {
		return nil, fmt.Errorf("AdmissionReview without response: %s", data)
	}
	return out.Response, nil
}

// Delete sends a DELETE review of pod to the process; the pod is live in its PodAPI.
func (p *Proc) Delete(ctx context.Context, r Review) (*admissionv1.AdmissionResponse, error) {
	p.Files.API.Add(r.Pod)
	body, err := DeleteReviewJSON(r)
	if err != nil {
		return nil, err
	}
	return Send(ctx, p.Client, p.WebhookURL, body)
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// LockedBuffer collects a running command's output safely; it keeps the
// last few MiB.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Keep the last few MiB: long load runs log every denial.
	if b.buf.Len() > 8<<20 {
		rest := b.buf.Bytes()[b.buf.Len()-4<<20:]
		b.buf = *bytes.NewBuffer(append([]byte("...[truncated]\n"), rest...))
	}
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// LoadMix registers runners in scope on gh and returns n DELETE reviews with
// the expected decisions: 40% non-runner pods (allowed), 40% idle runners
// (allowed), 20% busy runners (denied). The runner pods carry no ID
// annotation, so each costs a list by name and a DELETE.
func LoadMix(gh *ghfake.Fake, api *PodAPI, scope ghclient.Scope, n int) (bodies [][]byte, allowed []bool, err error) {
	bodies = make([][]byte, n)
	allowed = make([]bool, n)
	for i := range n {
		name := fmt.Sprintf("load-%s-%d", scope.Name, i)
		var pod *corev1.Pod
		switch i % 5 {
		case 0, 1:
			pod, allowed[i] = fixture.MakePod("apps", name).Running().Obj(), true
		case 2, 3:
			gh.AddRunner(scope, name)
			pod, allowed[i] = fixture.MakeLegacyRunnerPod("ci", name).Org(scope.Name).Running().Obj(), true
		default:
			gh.AddRunner(scope, name)
			gh.SetBusy(scope, name, true)
			pod = fixture.MakeLegacyRunnerPod("ci", name).Org(scope.Name).Running().Obj()
		}
		api.Add(pod)
		if bodies[i], err = DeleteReviewJSON(Review{Pod: pod}); err != nil {
			return nil, nil, err
		}
	}
	return bodies, allowed, nil
}

// EventsEndpoint readies runner-guard's GitHub events endpoint for a test:
// a free loopback port and the webhook secret written to a file in dir. It
// returns the flags that turn the endpoint on and its base URL (the
// events package's Path is added by the caller: that package's tests use this one).
func EventsEndpoint(dir, secret string) (args []string, base string, err error) {
	secretFile := filepath.Join(dir, "webhook-secret")
	// A Secret's value often ends in a newline: runner-guard must trim it.
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	return eventsEndpoint("--github-webhook-secret-file=" + secretFile)
}

// EventsEndpointSecrets is EventsEndpoint with a secret per webhook
// (--github-webhook-secrets, written by WriteWebhookSecrets).
func EventsEndpointSecrets(dir string, secrets ...WebhookSecret) (args []string, base string, err error) {
	flag, err := WriteWebhookSecrets(dir, secrets...)
	if err != nil {
		return nil, "", err
	}
	return eventsEndpoint(flag)
}

// eventsEndpoint is the endpoint's flags, on a free loopback port, with
// the flag of its secrets, and its base URL.
func eventsEndpoint(secretsFlag string) (args []string, base string, err error) {
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	return []string{fmt.Sprintf("--events-bind-address=127.0.0.1:%d", port), secretsFlag}, fmt.Sprintf("http://127.0.0.1:%d", port), nil
}

// WebhookSecret is one GitHub webhook's entry of --github-webhook-secrets.
type WebhookSecret struct {
	// Name names the secret in job records, Events and messages.
	Name string
	// Value is the webhook's secret; Previous, when set, is its value
	// before a rotation, still accepted until PreviousUntil.
	Value, Previous string
	PreviousUntil   time.Time
	// Scopes are what the webhook may speak for: org:ORG, repo:OWNER/REPO,
	// enterprise:SLUG.
	Scopes []string
}

// WriteWebhookSecrets writes each secret's values to files in dir (with a
// trailing newline, as a Secret's often are) and the YAML file naming them;
// it returns the flag --github-webhook-secrets=FILE.
func WriteWebhookSecrets(dir string, secrets ...WebhookSecret) (string, error) {
	write := func(name, value string) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, []byte(value+"\n"), 0o600)
	}
	// The format spelled out by its documented keys (docs/events.md), not
	// the binary's type: a change to what the binary reads fails here.
	var entries []map[string]any
	for _, s := range secrets {
		e := map[string]any{"name": s.Name, "scopes": s.Scopes}
		file, err := write(s.Name+".secret", s.Value)
		if err != nil {
			return "", err
		}
		e["secretFile"] = file
		if s.Previous != "" {
			if e["previousSecretFile"], err = write(s.Name+".previous", s.Previous); err != nil {
				return "", err
			}
			e["previousUntil"] = s.PreviousUntil.UTC().Format(time.RFC3339)
		}
		entries = append(entries, e)
	}
	b, err := json.Marshal(map[string]any{"secrets": entries}) // JSON is YAML
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "webhook-secrets.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return "--github-webhook-secrets=" + path, nil
}
