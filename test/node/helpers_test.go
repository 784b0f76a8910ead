package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/process"
)

// The fake GitHub's control API through the API server's service proxy.
const fakeProxy = "/api/v1/namespaces/runner-guard-system/services/http:fakegithub:http/proxy"

// scenario is one test's namespace and GitHub organization.
type scenario struct {
	t   *testing.T
	ctx context.Context
	ns  string
	org string
}

func newScenario(t *testing.T, name string) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	s := &scenario{t: t, ctx: ctx, ns: "node-" + name, org: "node-" + name}
	if out, err := cluster.Kubectl(ctx, "create", "namespace", s.ns); err != nil {
		cancel()
		t.Fatalf("create namespace: %v: %s", err, out)
	}
	// The fake GitHub answers 404 for an organization it does not hold, as GitHub does.
	if out, err := s.fake("POST", "/_fake/scopes", map[string]string{"kind": "org", "name": s.org}); err != nil {
		cancel()
		t.Fatalf("add organization %s to the fake GitHub: %v: %s", s.org, err, out)
	}
	t.Cleanup(func() {
		// Let every runner go so the namespace can be deleted.
		_ = s.removeAllRunners()
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if out, err := cluster.Kubectl(dctx, "delete", "namespace", s.ns, "--timeout=100s"); err != nil {
			t.Logf("delete namespace %s: %v: %s", s.ns, err, out)
		}
		cancel()
	})
	return s
}

// kubectl runs kubectl and fails the test on error.
func (s *scenario) kubectl(args ...string) string {
	s.t.Helper()
	out, err := cluster.Kubectl(s.ctx, args...)
	if err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runnerPod is an ARC legacy-mode runner pod running the fake runner.
func (s *scenario) runnerPod(name string) string {
	return s.fakeRunnerPod(name, `  labels: {actions-runner: ""}`)
}

// fakeRunnerPod is a pod running the fake runner as runner name; meta is the
// rest of its metadata (YAML lines indented by two spaces).
func (s *scenario) fakeRunnerPod(name, meta string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[2]s
%[6]s
spec:
  nodeSelector: {kubernetes.io/hostname: %[3]s}
  # As ARC's runner pods: a runner that exits is done, not restarted.
  restartPolicy: Never
  terminationGracePeriodSeconds: 30
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: runner
    image: runner-guard-fakerunner:latest
    imagePullPolicy: Never
    env:
    - {name: RUNNER_ORG, value: %[4]s}
    - {name: GITHUB_URL, value: %[5]q}
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
`, name, s.ns, NodeName, s.org, FakeGitHubURL, meta)
}

// startRunners creates runner pods and waits until each runs and its runner
// is registered with the fake GitHub.
func (s *scenario) startRunners(names ...string) {
	s.t.Helper()
	var docs []string
	for _, n := range names {
		docs = append(docs, s.runnerPod(n))
	}
	s.apply(strings.Join(docs, "---\n"))
	s.waitRegistered(names...)
}

// apply creates or updates the objects of the YAML documents.
func (s *scenario) apply(docs string) {
	s.t.Helper()
	cmd := cluster.KubectlCommand(s.ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(docs)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// waitRegistered waits until each runner pod runs and its runner is
// registered with the fake GitHub.
func (s *scenario) waitRegistered(names ...string) {
	s.t.Helper()
	for _, n := range names {
		s.eventually("runner "+n+" running and registered", 90*time.Second, func() error {
			if !s.containerRunning(n) {
				return fmt.Errorf("container not running: %s", s.podSummary(n))
			}
			if !s.registered(n) {
				return fmt.Errorf("not registered; logs: %s", s.logs(n))
			}
			return nil
		})
	}
}

// eventually polls check until it passes; it fails the test once timeout
// passes or the scenario's context ends.
func (s *scenario) eventually(what string, timeout time.Duration, check func() error) {
	s.t.Helper()
	process.Eventually(s.t, s.ctx, what, timeout, check)
}

func (s *scenario) pod(name string) *corev1.Pod {
	p, err := cluster.Client.CoreV1().Pods(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		s.t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// containerRunning says whether the pod's runner container runs now.
func (s *scenario) containerRunning(name string) bool {
	p := s.pod(name)
	if p == nil {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "runner" && cs.State.Running != nil {
			return true
		}
	}
	return false
}

func (s *scenario) podSummary(name string) string {
	p := s.pod(name)
	if p == nil {
		return "gone"
	}
	b, _ := json.Marshal(p.Status.ContainerStatuses)
	return fmt.Sprintf("phase %s deleting %v containers %s", p.Status.Phase, p.DeletionTimestamp != nil, b)
}

func (s *scenario) logs(name string) string {
	out, err := cluster.Kubectl(s.ctx, "-n", s.ns, "logs", name, "-c", "runner")
	if err != nil {
		return "(no logs: " + strings.TrimSpace(out) + ")"
	}
	return out
}

// fake calls the fake GitHub's control API.
func (s *scenario) fake(method, path string, body any) ([]byte, error) {
	req := cluster.Client.CoreV1().RESTClient().Verb(method).AbsPath(fakeProxy + path)
	if i := strings.IndexByte(path, '?'); i >= 0 {
		q, _ := url.ParseQuery(path[i+1:])
		req = cluster.Client.CoreV1().RESTClient().Verb(method).AbsPath(fakeProxy + path[:i])
		for k, vs := range q {
			for _, v := range vs {
				req = req.Param(k, v)
			}
		}
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		req = req.Body(b).SetHeader("Content-Type", "application/json")
	}
	return req.DoRaw(s.ctx)
}

type fakeRunner struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Busy bool   `json:"busy"`
}

func (s *scenario) runners() []fakeRunner {
	s.t.Helper()
	b, err := s.fake("GET", "/_fake/runners?kind=org&name="+s.org, nil)
	if err != nil {
		s.t.Fatalf("list fake runners: %v: %s", err, b)
	}
	var rs []fakeRunner
	if err := json.Unmarshal(b, &rs); err != nil {
		s.t.Fatalf("decode fake runners: %v: %s", err, b)
	}
	return rs
}

func (s *scenario) registered(name string) bool {
	for _, r := range s.runners() {
		if r.Name == name {
			return true
		}
	}
	return false
}

// startJob is GitHub handing the runner a job; it returns once the runner
// has started it.
func (s *scenario) startJob(name string) {
	s.t.Helper()
	s.setBusy(name, true)
	s.waitLog(name, "job started")
}

// setBusy is GitHub handing the runner a job (true) or the job ending.
func (s *scenario) setBusy(name string, busy bool) { s.setRunnerState(name, "busy", busy) }

// setOnline is GitHub seeing the runner connect (true) or losing it.
func (s *scenario) setOnline(name string, online bool) { s.setRunnerState(name, "online", online) }

// setRunnerState sets one field of the runner's state on the fake GitHub.
func (s *scenario) setRunnerState(name, field string, value bool) {
	s.t.Helper()
	body := map[string]any{"scope": map[string]string{"kind": "org", "name": s.org}, "name": name, field: value}
	if b, err := s.fake("POST", "/_fake/runners/state", body); err != nil {
		s.t.Fatalf("set %s %s=%v: %v: %s", name, field, value, err, b)
	}
}

func (s *scenario) removeAllRunners() error {
	for _, r := range s.runners() {
		if _, err := s.fake("DELETE", "/_fake/runners?kind=org&name="+s.org+"&runner="+r.Name, nil); err != nil {
			return err
		}
	}
	return nil
}

type fakeRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Status int    `json:"status"`
}

// githubRequests are the GitHub API requests the fake answered for this
// scenario's organization.
func (s *scenario) githubRequests() []fakeRequest {
	s.t.Helper()
	b, err := s.fake("GET", "/_fake/requests", nil)
	if err != nil {
		s.t.Fatalf("fake requests: %v: %s", err, b)
	}
	var all []fakeRequest
	if err := json.Unmarshal(b, &all); err != nil {
		s.t.Fatalf("decode fake requests: %v", err)
	}
	var mine []fakeRequest
	for _, r := range all {
		if strings.Contains(r.Path, "/orgs/"+s.org+"/") {
			mine = append(mine, r)
		}
	}
	return mine
}

// countDeletes counts the fake's DELETE answers with status (0 for any).
func (s *scenario) countDeletes(status int) int {
	n := 0
	for _, r := range s.githubRequests() {
		if r.Method == "DELETE" && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// countBusyAnswers counts GitHub's answers that a runner is busy: a DELETE
// refused with 422, or a listing of a scope's runners (the webhook reads a
// runner's busy state from a fresh listing, a point where a DELETE costs
// five).
func (s *scenario) countBusyAnswers() int {
	n := 0
	for _, r := range s.githubRequests() {
		listing := r.Method == "GET" && strings.HasSuffix(strings.SplitN(r.Path, "?", 2)[0], "/actions/runners")
		if r.Method == "DELETE" && r.Status == 422 || listing && (r.Status == 200 || r.Status == 304) {
			n++
		}
	}
	return n
}

// waitLog waits for a line in the runner's output.
func (s *scenario) waitLog(name, line string) {
	s.t.Helper()
	s.eventually(name+" logs "+line, 30*time.Second, func() error {
		if l := s.logs(name); !strings.Contains(l, line) {
			return fmt.Errorf("logs: %q", l)
		}
		return nil
	})
}

// deletePod runs kubectl delete without waiting for the pod to go.
func (s *scenario) deletePod(name string) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	return cluster.Kubectl(ctx, "-n", s.ns, "delete", "pod", name, "--wait=false")
}

// lines keeps the non-empty lines of out that contain any of subs.
func lines(out string, subs ...string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(out, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}

// withRunnerGuardValues upgrades the release with overrides (values YAML)
// for this test; the node's values are restored after it.
func (s *scenario) withRunnerGuardValues(overrides string) {
	s.t.Helper()
	s.restoreValuesAfterTest()
	s.upgradeRunnerGuard(overrides)
}

// restoreValuesAfterTest upgrades the release back to the node's values once
// the test ends (before its namespace goes), also after a failed upgrade.
func (s *scenario) restoreValuesAfterTest() { s.restoreValuesWhen(func() bool { return true }) }

// restoreValuesAfterFailure does so only if the test has failed: for a
// change that leaves runner-guard's decisions as they were, which the next
// helm upgrade drops anyway.
func (s *scenario) restoreValuesAfterFailure() { s.restoreValuesWhen(s.t.Failed) }

func (s *scenario) restoreValuesWhen(restore func() bool) {
	s.t.Cleanup(func() {
		if !restore() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := cluster.UpgradeRunnerGuard(ctx, repoRoot, os.Getenv("HELM"), ""); err != nil {
			s.t.Errorf("restore runner-guard's values: %v", err)
		}
	})
}

// upgradeRunnerGuard upgrades the release with overrides; its pods restart.
func (s *scenario) upgradeRunnerGuard(overrides string) {
	s.t.Helper()
	start := time.Now()
	if err := cluster.UpgradeRunnerGuard(s.ctx, repoRoot, os.Getenv("HELM"), overrides); err != nil {
		s.t.Fatalf("helm upgrade with %q: %v", overrides, err)
	}
	s.t.Logf("runner-guard upgraded with %q in %s", overrides, time.Since(start).Round(time.Second))
}

// failurePolicies are the live failurePolicy of each entry of runner-guard's
// webhook configuration, by entry name.
func (s *scenario) failurePolicies() map[string]string {
	s.t.Helper()
	vwc, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("runner-guard's webhook configuration: %v", err)
	}
	out := map[string]string{}
	for _, wh := range vwc.Webhooks {
		out[wh.Name] = "Fail" // the API's default
		if wh.FailurePolicy != nil {
			out[wh.Name] = string(*wh.FailurePolicy)
		}
	}
	return out
}

// scaleRunnerGuardToZero scales the webhook's Deployment to 0 and waits until
// no replica is left; it scales back to 2 after the test.
func (s *scenario) scaleRunnerGuardToZero() {
	s.t.Helper()
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := cluster.Kubectl(ctx, "-n", rgNamespace, "scale", "deployment/runner-guard-webhook", "--replicas=2"); err != nil {
			s.t.Errorf("scale runner-guard back to 2: %v: %s", err, out)
			return
		}
		if out, err := cluster.Kubectl(ctx, "-n", rgNamespace, "rollout", "status", "deployment/runner-guard-webhook", "--timeout=150s"); err != nil {
			s.t.Errorf("runner-guard back to 2 replicas: %v: %s", err, out)
		}
	})
	s.kubectl("-n", rgNamespace, "scale", "deployment/runner-guard-webhook", "--replicas=0")
	s.eventually("no runner-guard replica left", 90*time.Second, func() error {
		pods, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d webhook pods", n)
		}
		return nil
	})
}

// uncordonAfterTest uncordons the node once the test ends.
func (s *scenario) uncordonAfterTest() {
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := cluster.Kubectl(ctx, "uncordon", NodeName); err != nil {
			s.t.Errorf("uncordon: %v: %s", err, out)
		}
	})
}

// logRunnerGuardOnFailure logs runner-guard's recent output and the
// scenario's pods when the test has failed, before the cleanups registered
// earlier run.
func (s *scenario) logRunnerGuardOnFailure() {
	s.onFailure(func(ctx context.Context) {
		logs, _ := cluster.Kubectl(ctx, "-n", rgNamespace, "logs", "-l", "app.kubernetes.io/component=webhook", "--prefix", "--tail=150")
		// A replica killed during the scenario: what it decided before.
		names, _ := cluster.Kubectl(ctx, "-n", rgNamespace, "get", "pods", "-l", "app.kubernetes.io/component=webhook", "-o", "name")
		for _, name := range strings.Fields(names) {
			if previous, err := cluster.Kubectl(ctx, "-n", rgNamespace, "logs", name, "--prefix", "--tail=150", "--previous"); err == nil {
				logs = "before " + name + " restarted:\n" + previous + "\n" + logs
			}
		}
		pods, _ := cluster.Kubectl(ctx, "-n", s.ns, "get", "pods,poddisruptionbudgets,events", "-o", "wide", "--show-labels")
		s.t.Logf("runner-guard's logs:\n%s\nnamespace %s:\n%s", logs, s.ns, pods)
	})
}

// onFailure runs log, with a deadline of its own, once the test has failed,
// before the cleanups registered earlier run.
func (s *scenario) onFailure(log func(ctx context.Context)) {
	s.t.Cleanup(func() {
		if !s.t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		log(ctx)
	})
}
