package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/process"
)

const rgNamespace = "runner-guard-system"

// runner-guard as deployed: two Ready replicas behind the Service, with no
// restarts, and the API server reaching them through the Service with the
// certificate in the caBundle (a dry-run delete of a runner pod without a
// scope is denied by the webhook itself).
func TestNodeRunnerGuardDeployed(t *testing.T) {
	s := newScenario(t, "deployed")
	pods, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready && cs.RestartCount == 0 {
				ready++
			}
			if cs.RestartCount != 0 {
				t.Errorf("pod %s restarted %d times", p.Name, cs.RestartCount)
			}
		}
	}
	if ready != 2 {
		t.Fatalf("%d Ready webhook replicas without restarts, want 2", ready)
	}
	eps := s.kubectl("-n", rgNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name=runner-guard-webhook",
		"-o", "jsonpath={range .items[*].endpoints[*]}{.addresses[0]} {.conditions.ready}{\"\\n\"}{end}")
	if strings.Count(eps, "true") != 2 {
		t.Fatalf("Service endpoints: %q, want two ready", eps)
	}
	// The API server reaches the webhook through the Service with the
	// deployed certificate: server-side dry-run deletes of an idle runner's
	// pod are allowed after the webhook asked GitHub, which never unregisters
	// on a dry run.
	s.startRunners("probe")
	for i := 0; i < 4; i++ {
		if out, err := cluster.Kubectl(s.ctx, "-n", s.ns, "delete", "pod", "probe", "--dry-run=server"); err != nil {
			t.Fatalf("dry-run delete %d: %v: %s", i, err, out)
		}
	}
	if !s.registered("probe") || s.countDeletes(0) != 0 {
		t.Fatalf("a dry run unregistered the runner: %+v", s.githubRequests())
	}
	if n := len(s.githubRequests()); n < 1 {
		t.Fatalf("no GitHub request for 4 dry-run deletes: the webhook was not reached")
	}
}

// A busy runner's pod: kubectl delete is refused with "runner busy" and the
// container keeps running its job, untouched by the kubelet.
func TestNodeBusyRunnerDeleteRefused(t *testing.T) {
	s := newScenario(t, "busy")
	s.startRunners("runner-busy")
	s.startJob("runner-busy")

	out, err := s.deletePod("runner-busy")
	if err == nil || !strings.Contains(out, "runner busy") {
		t.Fatalf("kubectl delete of a busy runner: err %v, output %q; want refused as runner busy", err, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))
	// An admitted delete sets deletionTimestamp before kubectl returns, so
	// the refusal is checked on the API server at once; what the kubelet did
	// is checked once the job has ended, from the container's own log.
	p := s.pod("runner-busy")
	if p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("busy runner's pod is gone or terminating: %s", s.podSummary("runner-busy"))
	}
	if !s.registered("runner-busy") {
		t.Fatal("busy runner was unregistered")
	}

	// The job ends in the same container: it was neither stopped nor
	// restarted while the delete was refused. Then the same delete goes
	// through once runner-guard asks GitHub again (it remembers a busy answer
	// for a few seconds).
	s.setBusy("runner-busy", false)
	s.waitLog("runner-busy", "job finished")
	if p := s.pod("runner-busy"); p == nil || !s.containerRunning("runner-busy") || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("busy runner's container not running as before: %s", s.podSummary("runner-busy"))
	}
	if l := s.logs("runner-busy"); strings.Contains(l, "job cancelled") || strings.Contains(l, "exiting") {
		t.Fatalf("the runner was stopped during its job: %s", l)
	}
	s.eventually("delete admitted after the job", 30*time.Second, func() error {
		out, err := s.deletePod("runner-busy")
		if err != nil && !strings.Contains(out, "runner busy") {
			t.Fatalf("delete after the job: %v: %s", err, out)
		}
		if err != nil {
			return fmt.Errorf("%s", strings.TrimSpace(out))
		}
		return nil
	})
}

// An idle runner's pod: the delete unregisters the runner (one 204 from
// GitHub), the kubelet stops the container, and the pod is gone well before
// its 30 s grace period, because the runner exits as soon as it is removed
// or signalled.
func TestNodeIdleRunnerUnregisteredAndGone(t *testing.T) {
	s := newScenario(t, "idle")
	s.startRunners("runner-idle")
	var terminated sync.Map
	stop := watchTerminations(s, &terminated)
	defer stop()

	start := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	out, err := cluster.Kubectl(ctx, "-n", s.ns, "delete", "pod", "runner-idle", "--timeout=50s")
	if err != nil {
		t.Fatalf("kubectl delete of an idle runner: %v: %s", err, out)
	}
	took := time.Since(start)
	t.Logf("deleted and gone in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	if s.pod("runner-idle") != nil {
		t.Fatal("pod still there after kubectl delete returned")
	}
	if took > 25*time.Second {
		t.Errorf("pod took %s to go; the runner should exit at once", took)
	}
	if s.registered("runner-idle") {
		t.Fatal("runner still registered with GitHub")
	}
	if n := s.countDeletes(204); n != 1 {
		t.Fatalf("%d unregisters answered 204, want 1: %+v", n, s.githubRequests())
	}
	if v, ok := terminated.Load("runner-idle"); ok {
		t.Logf("kubelet reported the runner container terminated: %s", v)
	} else {
		t.Error("never saw the kubelet report the runner container terminated")
	}
}

// watchTerminations records the terminated state the kubelet reports for
// each pod's runner container.
func watchTerminations(s *scenario, into *sync.Map) func() {
	ctx, cancel := context.WithCancel(s.ctx)
	w, err := cluster.Client.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		s.t.Fatalf("watch pods: %v", err)
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil {
					into.Store(p.Name, fmt.Sprintf("exit code %d (%s)", t.ExitCode, t.Reason))
				}
			}
		}
	}()
	return func() { w.Stop(); cancel() }
}

// kubectl drain of the node (its runner pods) waits while the runner is
// busy: the eviction is refused with 429 and retried; it completes once the
// job ends. The drain is limited to runner pods: on a single node the
// webhook's own replicas and the fake GitHub have nowhere else to go.
func TestNodeDrainWaitsForBusyRunner(t *testing.T) {
	s := newScenario(t, "drain")
	s.startRunners("runner-drain")
	s.startJob("runner-drain")
	defer func() {
		if out, err := cluster.Kubectl(context.Background(), "uncordon", NodeName); err != nil {
			t.Errorf("uncordon: %v: %s", err, out)
		}
	}()

	ctx, cancel := context.WithTimeout(s.ctx, 4*time.Minute)
	defer cancel()
	var out process.LockedBuffer
	drain := cluster.KubectlCommand(ctx, "drain", NodeName, "--pod-selector=actions-runner",
		// --force: ARC's runner pods are owned by its custom resources,
		// which drain does not know as controllers.
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=200s")
	drainProc, err := process.StartChild("kubectl drain", drain, &out)
	if err != nil {
		t.Fatal(err)
	}

	s.eventually("drain retries the refused eviction", 60*time.Second, func() error {
		// The first decision's listing and DELETE, and at least one retry.
		if n := s.countBusyAnswers(); n < 3 {
			return fmt.Errorf("%d answers that the runner is busy so far; drain output %q", n, out.String())
		}
		return nil
	})
	if drainProc.Exited() {
		t.Fatalf("drain ended while the runner was busy: %v\n%s", drainProc.Err(), out.String())
	}
	if p := s.pod("runner-drain"); p == nil || p.DeletionTimestamp != nil || !s.containerRunning("runner-drain") {
		t.Fatalf("busy runner disturbed during drain: %s", s.podSummary("runner-drain"))
	}
	if ev := s.kubectl("-n", s.ns, "get", "events", "--field-selector", "reason=RunnerBusy", "-o", "name"); strings.TrimSpace(ev) == "" {
		t.Error("no RunnerBusy event for the refused eviction")
	}

	s.setBusy("runner-drain", false)
	if err := drainProc.Wait(150 * time.Second); err != nil {
		t.Fatalf("drain after the job ended: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "drained") {
		t.Errorf("drain output lacks 'drained': %s", out.String())
	}
	if s.pod("runner-drain") != nil {
		t.Fatalf("runner pod still there after the drain: %s", s.podSummary("runner-drain"))
	}
	if s.registered("runner-drain") {
		t.Fatal("drained runner still registered")
	}
	t.Logf("drain output:\n%s", lines(out.String(), "evict", "drained", "error"))
}

// decisionStream deletes runner pods while something disrupts runner-guard:
// busy runners must be refused as busy every time, idle ones allowed and
// unregistered. A busy runner let through is unsafe; a delete that got no
// decision (the API server failed to call the webhook) is lost.
type decisionStream struct {
	s          *scenario
	busy, idle []string
	outcomes   []outcome
	admitted   map[string]bool // idle runners whose delete went through
}

type outcome struct {
	at     time.Time
	unsafe bool // a busy runner's delete was admitted
	lost   bool // no decision: the webhook call failed
	msg    string
}

func (d *decisionStream) record(unsafe, lost bool, msg string) {
	d.outcomes = append(d.outcomes, outcome{at: time.Now(), unsafe: unsafe, lost: lost, msg: msg})
}

func (d *decisionStream) deleteBusy(name string) {
	out, err := d.s.deletePod(name)
	switch {
	case err == nil:
		d.record(true, false, "busy "+name+" deleted: "+strings.TrimSpace(out))
	case strings.Contains(out, "runner busy"):
		d.record(false, false, "")
	default:
		d.record(false, true, fmt.Sprintf("busy %s: %v: %s", name, err, strings.TrimSpace(out)))
	}
}

func (d *decisionStream) deleteIdle(name string) {
	out, err := d.s.deletePod(name)
	if err != nil {
		d.record(false, true, fmt.Sprintf("idle %s: %v: %s", name, err, strings.TrimSpace(out)))
		return
	}
	d.admitted[name] = true
	d.record(false, false, "")
}

// run deletes one busy and one idle runner per round until until() is true
// (after at least minRounds) or the idle runners run out.
func (d *decisionStream) run(minRounds int, until func() bool) {
	for i := 0; i < len(d.idle); i++ {
		d.deleteBusy(d.busy[i%len(d.busy)])
		d.deleteIdle(d.idle[i])
		if i+1 >= minRounds && until() {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// check asserts no busy runner was let through, no decision was lost after
// lossUntil (zero time: none at all), the busy runners still run and are
// registered, and every admitted idle runner was unregistered. It returns
// the lost decisions it tolerated.
func (d *decisionStream) check(t *testing.T, lossUntil time.Time) []outcome {
	t.Helper()
	var tolerated []outcome
	for _, o := range d.outcomes {
		switch {
		case o.unsafe:
			t.Errorf("unsafe decision: %s", o.msg)
		case o.lost && o.at.Before(lossUntil):
			tolerated = append(tolerated, o)
		case o.lost:
			t.Errorf("lost decision: %s", o.msg)
		}
	}
	for _, b := range d.busy {
		if !d.s.containerRunning(b) || !d.s.registered(b) {
			t.Errorf("busy runner %s disturbed: %s", b, d.s.podSummary(b))
		}
	}
	for n := range d.admitted {
		if d.s.registered(n) {
			t.Errorf("idle runner %s admitted for deletion but still registered", n)
		}
	}
	t.Logf("%d decisions, %d idle runners admitted, %d lost and tolerated", len(d.outcomes), len(d.admitted), len(tolerated))
	return tolerated
}

func newDecisionStream(s *scenario, busy, idle int) *decisionStream {
	d := &decisionStream{s: s, admitted: map[string]bool{}}
	for i := 0; i < busy; i++ {
		d.busy = append(d.busy, fmt.Sprintf("busy-%d", i))
	}
	for i := 0; i < idle; i++ {
		d.idle = append(d.idle, fmt.Sprintf("idle-%d", i))
	}
	s.startRunners(append(append([]string{}, d.busy...), d.idle...)...)
	for _, b := range d.busy {
		s.setBusy(b, true)
	}
	return d
}

// kubectl rollout restart of runner-guard under a stream of deletes: the
// rollout (maxUnavailable 0) replaces both replicas while every delete still
// gets its decision.
func TestNodeRollingRestartLosesNoDecision(t *testing.T) {
	s := newScenario(t, "rollout")
	d := newDecisionStream(s, 2, 12)

	s.kubectl("-n", rgNamespace, "rollout", "restart", "deployment/runner-guard-webhook")
	rolled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
		defer cancel()
		out, err := cluster.Kubectl(ctx, "-n", rgNamespace, "rollout", "status", "deployment/runner-guard-webhook", "--timeout=170s")
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		rolled <- err
	}()
	var rolloutErr error
	finished := false
	d.run(3, func() bool {
		select {
		case rolloutErr = <-rolled:
			finished = true
		default:
		}
		return finished
	})
	if !finished {
		rolloutErr = <-rolled
	}
	if rolloutErr != nil {
		t.Fatalf("rollout: %v", rolloutErr)
	}
	d.check(t, time.Time{})
	requireTwoReadyReplicas(t, s)
}

// Killing one runner-guard replica's process (SIGKILL, as a crash or the
// OOM killer would) keeps decisions flowing through the other after a short
// window in which calls routed to the dead pod fail (refused deletes, never
// a busy runner let through); the kubelet restarts the killed container.
func TestNodeKillOneReplicaKeepsDecisionsFlowing(t *testing.T) {
	s := newScenario(t, "kill")
	// Enough idle runners that the stream outlasts the kill window however
	// slowly the lost calls fail; it stops once decisions flow again.
	d := newDecisionStream(s, 2, 24)
	requireTwoReadyReplicas(t, s)
	victim := readyReplica(t, s)
	killReplica(t, s, victim)
	killed := time.Now()
	// Until the kubelet sees the container die and the endpoint is taken
	// out of the Service, kube-proxy still sends some calls to the dead pod
	// and the API server does not retry them on the other replica: those
	// deletes fail with "failed calling webhook" (refused, so still safe).
	// Measured here: about a second. Allow a short window; never after it.
	window := killed.Add(killLossWindow)
	d.run(1, func() bool { return decisionsAfter(d, window) >= 4 })
	for _, o := range d.check(t, window) {
		t.Logf("no decision %s after the kill: %s", o.at.Sub(killed).Round(time.Millisecond), o.msg)
		if !strings.Contains(o.msg, "failed calling webhook") {
			t.Errorf("lost decision in the kill window is not a failed webhook call: %s", o.msg)
		}
	}
	if after := decisionsAfter(d, window); after < 4 {
		t.Errorf("only %d decisions after the %s window; the stream ended too early to show decisions flowing", after, killLossWindow)
	}
	waitRestarted(s, victim.Name)
	requireTwoReadyReplicas(t, s)
}

// readyReplica is a Ready runner-guard pod that is not terminating (an
// earlier rollout's old pods may still be going).
func readyReplica(t *testing.T, s *scenario) corev1.Pod {
	t.Helper()
	pods, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		t.Fatalf("webhook pods: %v", err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready {
			return p
		}
	}
	t.Fatalf("no Ready runner-guard pod among %d", len(pods.Items))
	return corev1.Pod{}
}

// killLossWindow is how long after a replica's process is killed a delete may
// still fail to get a decision (see TestNodeKillOneReplicaKeepsDecisionsFlowing).
const killLossWindow = 5 * time.Second

func decisionsAfter(d *decisionStream, t time.Time) int {
	n := 0
	for _, o := range d.outcomes {
		if o.at.After(t) {
			n++
		}
	}
	return n
}

func requireTwoReadyReplicas(t *testing.T, s *scenario) {
	t.Helper()
	s.eventually("two Ready runner-guard replicas", 90*time.Second, func() error {
		out, err := cluster.Kubectl(s.ctx, "-n", rgNamespace, "get", "deployment", "runner-guard-webhook", "-o", "jsonpath={.status.readyReplicas}")
		if err != nil || strings.TrimSpace(out) != "2" {
			return fmt.Errorf("readyReplicas %q: %v", out, err)
		}
		return nil
	})
}

// The e2e suite's external-cluster mode (what make e2e-kind runs) against
// this node: E2E_CLUSTER=external with the admin kubeconfig, run inside the
// node's network namespace.
func TestNodeE2ESuiteExternal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// No listings of legacy runners' scopes (the chart's default): the suite
	// counts every GitHub request its runners cause and updates their pods,
	// which the leader's listing and hints would add to. Restored after.
	if err := cluster.UpgradeRunnerGuard(ctx, repoRoot, os.Getenv("HELM"), "disruption:\n  hintsFromListing: false\n"); err != nil {
		t.Fatalf("helm upgrade without listings: %v", err)
	}
	defer func() {
		if err := cluster.UpgradeRunnerGuard(context.Background(), repoRoot, os.Getenv("HELM"), ""); err != nil {
			t.Errorf("helm upgrade back to the node's values: %v", err)
		}
	}()
	bin := filepath.Join(t.TempDir(), "e2e.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./test/e2e")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the e2e suite: %v: %s", err, out)
	}
	logPath := filepath.Join(cluster.opts.Dir, "e2e-external.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := inNetnsCommand(ctx, bin, "-test.v", "-test.count=1", "-test.timeout=22m")
	cmd.Dir = filepath.Join(repoRoot, "test", "e2e")
	cmd.Env = append(os.Environ(), "E2E_CLUSTER=external", "KUBECONFIG="+cluster.Kubeconfig, "KUBECTL="+cluster.KubectlPath())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	runErr := cmd.Run()
	out, _ := os.ReadFile(logPath)
	t.Logf("e2e suite (external) in %s:\n%s", time.Since(start).Round(time.Second), lines(string(out), "--- ", "PASS", "FAIL", "ok ", "panic"))
	if runErr != nil {
		t.Fatalf("e2e suite against the node failed: %v; full output in %s", runErr, logPath)
	}
}

// dist/install.yaml, what a user applies with kubectl, on the node: the helm
// release is uninstalled as its NOTES say (the webhook configuration first),
// the rendered file applied (RenderInstallYAML: the node has no
// cert-manager), and both replicas come up and activate the webhook
// configuration; a busy runner's pod delete is refused and an idle runner's
// admitted and unregistered. It runs last: the node keeps this install.
func TestNodeInstallYAML(t *testing.T) {
	manifests, err := RenderInstallYAML(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, "install-yaml")
	s.kubectl("delete", "validatingwebhookconfiguration", "runner-guard")
	if out, err := cluster.Helm(s.ctx, os.Getenv("HELM"), "uninstall", releaseName, "--namespace", rgNamespace, "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm uninstall: %v: %s", err, out)
	}
	if err := cluster.DeployRunnerGuard(s.ctx, manifests); err != nil {
		t.Fatalf("apply dist/install.yaml: %v", err)
	}
	requireTwoReadyReplicas(t, s)

	s.startRunners("runner-busy", "runner-idle")
	s.startJob("runner-busy")
	if out, err := s.deletePod("runner-busy"); err == nil || !strings.Contains(out, "runner busy") {
		t.Fatalf("kubectl delete of a busy runner: err %v, output %q; want refused as runner busy", err, out)
	}
	if !s.registered("runner-busy") {
		t.Fatal("busy runner was unregistered")
	}
	if out, err := s.deletePod("runner-idle"); err != nil {
		t.Fatalf("kubectl delete of an idle runner: %v: %s", err, out)
	}
	if s.registered("runner-idle") || s.countDeletes(204) != 1 {
		t.Fatalf("the idle runner's delete did not unregister it once: %+v", s.githubRequests())
	}
}
