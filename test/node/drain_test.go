package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/ghclient"
)

// Issue 37, item 3: rollouts and crashes lose nothing. Each scenario drains
// 10 runners, 3 of them busy, under a PodDisruptionBudget that allows two
// disruptions at a time (drainBudgetAllows), as a team's budget over its
// runners would, with both runner-guard replicas deciding the evictions;
// something happens to runner-guard once the first eviction is admitted.
// The drain is every runner pod's eviction sent at once and again after
// each refusal (drainRun, as kubectl drain, Karpenter and the cluster
// autoscaler retry), the node cordoned right after, which starts
// runner-guard's own drain controller beside them.
//
// Every scenario asserts (drainRun.check):
//   - no busy runner's pod evicted or its job cancelled while the job runs:
//     the pod and its container are the same, the runner registered and busy
//     on the fake GitHub;
//   - no runner unregistered whose pod stays beyond one retry of the drain
//     (evictUntilGone says precisely);
//   - the drain finishes once the jobs end, every runner unregistered;
//   - no eviction refused more than once beyond what its budget or a busy
//     job explains (unexplainedRefusals).
//
// Before runner-guard shared its replicas' reservations (webhook/
// reservations.go), each replica let through what its own ledger allowed:
// two replicas admitted up to four evictions for two disruptions, and the
// API server kept the pods of the runners unregistered beyond the budget.

// The drain scenarios' runners: drainRunners of them, the first drainBusy busy.
const (
	drainRunners      = 10
	drainBusy         = 3
	drainBudgetAllows = 2
	// budgetLabel marks the pods a drain scenario's budget selects: its
	// runners, and the stand-ins started for those that go.
	budgetLabel = "runner-guard-node/budget"
	// drainRetry is how long kubectl drain waits before evicting again a pod
	// whose eviction was refused.
	drainRetry = 5 * time.Second
)

// A replica killed (SIGKILL, as a crash or the OOM killer would) while the
// drain's evictions are being admitted.
func TestNodeDrainSurvivesKilledReplica(t *testing.T) {
	d := startDrainRun(newScenario(t, "drain-kill"))
	victim := readyReplica(t, d.s)
	killReplica(t, d.s, victim)
	d.finish(func() { waitRestarted(d.s, victim.Name) })
}

// `helm upgrade` rolling both replicas (a changed pod annotation) while the
// drain runs.
func TestNodeDrainSurvivesRollingUpgrade(t *testing.T) {
	d := startDrainRun(newScenario(t, "drain-roll"))
	// The annotation may stay: it changes no decision, and the next helm
	// upgrade drops it. A failed test restores the node's values at once.
	d.s.restoreValuesAfterFailure()
	upgraded := make(chan error, 1)
	go func() {
		upgraded <- cluster.UpgradeRunnerGuard(d.s.ctx, repoRoot, os.Getenv("HELM"), "podAnnotations:\n  runner-guard-node/rolled: "+d.s.ns+"\n")
	}()
	d.finish(func() {
		if err := <-upgraded; err != nil {
			t.Fatalf("helm upgrade during the drain: %v", err)
		}
	})
}

// The leader, whose drain controller releases the cordoned node's runners,
// killed while it does.
func TestNodeDrainSurvivesLeaderLoss(t *testing.T) {
	d := startDrainRun(newScenario(t, "drain-leader"))
	leader := leaderReplica(t, d.s)
	killReplica(t, d.s, leader)
	d.finish(func() { waitRestarted(d.s, leader.Name) })
}

// drainRun is one drain scenario: its runners, the evictions sent and their
// answers, and what the pods' watch saw.
type drainRun struct {
	s    *scenario
	busy map[string]bool
	// names are the runners, in order.
	names []string
	// held are the busy runners' pods as they were before the drain.
	held map[string]*corev1.Pod

	mu sync.Mutex
	// attempts are each pod's eviction answers, in order.
	attempts map[string][]evictAttempt
	// exited is when the watch first saw a runner's container ended while
	// its pod was not being deleted.
	exited map[string]time.Time
	// kept are the runners unregistered whose pod stayed, and why.
	kept []string
	// replaced are the runners whose pod went, its stand-in created.
	replaced map[string]bool
	// problems are errors of the watch and the stand-ins, for the check.
	problems []string
	// jobsEnded is when the busy runners' jobs ended (zero: still running).
	jobsEnded time.Time
	// timeline is the budget's history, which explains the API server's
	// refusals of evictions runner-guard admitted.
	timeline drainTimeline
	// standInGate, when set, holds the stand-ins until it closes.
	standInGate <-chan struct{}
	// burst, closed by sendBurst, sends every waiting eviction again at once.
	burst chan struct{}
}

// nextBurst is the channel the next sendBurst closes.
func (d *drainRun) nextBurst() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.burst
}

// sendBurst sends every eviction waiting to be retried again now, at once,
// as several drains or an autoscaler do when a budget reopens.
func (d *drainRun) sendBurst() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.burst)
	d.burst = make(chan struct{})
}

// evictAttempt is one eviction's answer: refused ("" when admitted), and
// when it was sent.
type evictAttempt struct {
	at      time.Time
	refused string
}

// startDrainRun starts the runners and their budget, cordons the node and
// evicts every runner pod as kubectl drain does, and returns once the first
// eviction has been admitted.
func startDrainRun(s *scenario) *drainRun { return startDrainRunGated(s, nil) }

// startDrainRunGated is startDrainRun with the stand-ins of the pods that go
// held until gate closes (nil: none held): the budget then allows no
// disruption once drainBudgetAllows runners have gone.
func startDrainRunGated(s *scenario, gate <-chan struct{}) *drainRun {
	t := s.t
	s.uncordonAfterTest()
	s.logRunnerGuardOnFailure()
	d := &drainRun{s: s, busy: map[string]bool{}, held: map[string]*corev1.Pod{}, attempts: map[string][]evictAttempt{},
		exited: map[string]time.Time{}, replaced: map[string]bool{}, standInGate: gate, burst: make(chan struct{})}
	var docs []string
	for i := range drainRunners {
		n := fmt.Sprintf("runner-%d", i)
		d.names = append(d.names, n)
		d.busy[n] = i < drainBusy
		docs = append(docs, s.fakeRunnerPod(n, fmt.Sprintf("  labels: {actions-runner: \"\", %s: %s, %s: %s}", drainLabel, s.ns, budgetLabel, s.ns)))
	}
	s.apply(strings.Join(docs, "---\n"))
	s.waitRegistered(d.names...)
	for _, n := range d.names {
		if d.busy[n] {
			s.startJob(n)
			d.held[n] = s.pod(n)
		}
	}
	d.createBudget()
	ctx, cancel := context.WithCancel(s.ctx)
	t.Cleanup(cancel)
	d.timeline.follow(ctx, s, d)

	// The evictions go at once, as the cluster autoscaler and Karpenter send
	// them, and the cordon that starts runner-guard's drain controller right
	// after: the first burst is the webhook replicas' alone to decide, which
	// is where replicas that did not share their reservations let more
	// evictions through than the budget allows.
	start := make(chan struct{})
	for _, n := range d.names {
		go func() {
			<-start
			d.evictUntilGone(ctx, n)
		}()
	}
	close(start)
	s.kubectl("cordon", NodeName)
	s.eventually("the drain's first eviction admitted", 60*time.Second, func() error {
		for _, n := range d.names {
			if p := s.pod(n); p == nil || p.DeletionTimestamp != nil {
				return nil
			}
		}
		return fmt.Errorf("every runner pod still there")
	})
	return d
}

// createBudget creates the runners' budget, minAvailable drainRunners less
// drainBudgetAllows (an integer: the runner pods have no controller), and
// waits until the disruption controller counts it.
func (d *drainRun) createBudget() {
	s := d.s
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "runners", Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(drainRunners - drainBudgetAllows)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{budgetLabel: s.ns}},
		},
	}
	if _, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).Create(s.ctx, pdb, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("create the runners' budget: %v", err)
	}
	s.eventually("the runners' budget counted", 60*time.Second, func() error {
		b, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).Get(s.ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.Status.ObservedGeneration < b.Generation || b.Status.CurrentHealthy != drainRunners || b.Status.DisruptionsAllowed != drainBudgetAllows {
			return fmt.Errorf("budget status %+v", b.Status)
		}
		return nil
	})
}

// evictUntilGone evicts the pod as kubectl drain does: again drainRetry
// after each refusal, until it is admitted or the pod is gone. Unlike
// kubectl drain it also retries a failed webhook call (an operator runs the
// drain again; Karpenter and the cluster autoscaler retry every error).
// A runner unregistered whose pod stays is one of:
//   - the API server refused an eviction runner-guard had admitted (for a
//     registered runner, admitting is unregistering it), the budget's
//     history does not explain the refusal by an eviction charged twice
//     (drainTimeline.chargedTwice), and one retry later the pod is still
//     there, not being deleted: runner-guard let it through beyond the
//     budget (an eviction of the pod runner-guard's drain controller sent
//     first, which charged the budget and took the pod, is not that);
//   - the API server refused such an eviction for a double charge, and the
//     drain's next eviction of it was refused too, the pod still there, not
//     being deleted: the retry should have evicted the unready pod without
//     charging the budget;
//   - the runner exited (the fake runner exits once GitHub removed it) while
//     its pod was not being deleted, and the drain's next eviction of it was
//     refused (runner-guard's drain controller unregisters, then evicts, a
//     moment apart; a leader lost between the two leaves that eviction to
//     the drain).
func (d *drainRun) evictUntilGone(ctx context.Context, name string) {
	keptByBudget, exitChecked := "", false
	beyondBudget := ""
	for ctx.Err() == nil {
		if beyondBudget != "" {
			if p := d.getPod(ctx, name); p != nil && p.DeletionTimestamp == nil {
				d.keep(name, "eviction admitted by runner-guard beyond the budget: refused by the API server ("+beyondBudget+") with no disruption in the budget's history but the evictions', its pod not being deleted one retry later")
			}
			beyondBudget = ""
		}
		began, from := time.Now(), budgetVersion(ctx, d.s.ns)
		err := evictOnce(ctx, d.s.ns, name)
		if ctx.Err() != nil {
			return
		}
		if keptByBudget != "" && err != nil && !apierrors.IsNotFound(err) {
			if p := d.getPod(ctx, name); p != nil && p.DeletionTimestamp == nil {
				d.keep(name, "eviction admitted by runner-guard, refused by the API server ("+keptByBudget+"), and the next one refused too ("+err.Error()+"), its pod not being deleted")
			}
		}
		if err != nil && refusedByAPIServerBudget(err.Error()) && !d.timeline.chargedTwice(from, budgetVersion(ctx, d.s.ns)) {
			// Unless another eviction of the pod took it meanwhile (the drain
			// controller's, which charged the budget first).
			beyondBudget = err.Error()
		}
		d.mu.Lock()
		exited := d.exited[name]
		d.mu.Unlock()
		if !exitChecked && !exited.IsZero() && began.After(exited) {
			exitChecked = true
			if err != nil && !apierrors.IsNotFound(err) {
				d.keep(name, "its runner exited (unregistered) with its pod not being deleted, and the drain's next eviction was refused: "+err.Error())
			}
		}
		if apierrors.IsNotFound(err) {
			return
		}
		d.mu.Lock()
		a := evictAttempt{at: began}
		if err != nil {
			a.refused = err.Error()
		}
		d.attempts[name] = append(d.attempts[name], a)
		d.mu.Unlock()
		if err == nil {
			return
		}
		keptByBudget = ""
		if refusedByAPIServerBudget(a.refused) {
			keptByBudget = a.refused
		}
		select {
		case <-ctx.Done():
		case <-time.After(drainRetry):
		case <-d.nextBurst():
		}
	}
}

// evictOnce sends one eviction and returns its answer: client-go would
// otherwise retry a 429 with Retry-After (runner-guard's refusals carry one)
// by itself, and the drain must see each refusal.
func evictOnce(ctx context.Context, ns, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := json.Marshal(&policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
	})
	if err != nil {
		return err
	}
	return cluster.Client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(name).SubResource("eviction").
		SetHeader("Content-Type", "application/json").Body(body).MaxRetries(0).Do(ctx).Error()
}

// refusedByAPIServerBudget says whether an eviction was refused by the API
// server for the budget, after the webhooks admitted it (runner-guard's own
// budget refusals name its webhook).
func refusedByAPIServerBudget(refused string) bool {
	return strings.Contains(refused, "violate the pod's disruption budget") && !strings.Contains(refused, "admission webhook")
}

// getPod is the pod, nil when it is gone or cannot be read (a problem then).
func (d *drainRun) getPod(ctx context.Context, name string) *corev1.Pod {
	p, err := cluster.Client.CoreV1().Pods(d.s.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			d.problem("get pod %s: %v", name, err)
		}
		return nil
	}
	return p
}

// keep records a runner unregistered whose pod stayed.
func (d *drainRun) keep(name, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kept = append(d.kept, name+": "+why)
}

var _ podObserver = &drainRun{}

// listed and observe follow the runner pods (from the timeline's watch): a
// runner pod that goes gets its stand-in (as ARC replaces a runner
// elsewhere, so the budget allows the next disruption); when a runner
// container ends while its pod is not being deleted is recorded (for
// evictUntilGone).
func (d *drainRun) listed(ctx context.Context, pods []corev1.Pod) {
	present := map[string]bool{}
	for i := range pods {
		if _, runner := pods[i].Labels[drainLabel]; runner {
			present[pods[i].Name] = true
			d.observe(ctx, &pods[i], false)
		}
	}
	for _, n := range d.names {
		if !present[n] {
			d.observe(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{drainLabel: d.s.ns}}}, true)
		}
	}
}

func (d *drainRun) observe(ctx context.Context, p *corev1.Pod, deleted bool) {
	if _, runner := p.Labels[drainLabel]; !runner {
		return // a stand-in
	}
	if deleted || p.DeletionTimestamp != nil {
		d.standIn(ctx, p.Name)
		return
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "runner" && cs.State.Terminated != nil {
			d.mu.Lock()
			if d.exited[p.Name].IsZero() {
				d.exited[p.Name] = time.Now()
			}
			d.mu.Unlock()
		}
	}
}

// standIn starts, once, a pod the runners' budget counts in place of a
// runner's that goes: a pause container pinned to the node (the cordon
// keeps the scheduler away, not the kubelet).
func (d *drainRun) standIn(ctx context.Context, runner string) {
	d.mu.Lock()
	done := d.replaced[runner]
	d.replaced[runner] = true
	d.mu.Unlock()
	if done {
		return
	}
	if d.standInGate != nil {
		go func() {
			select {
			case <-d.standInGate:
				d.createStandIn(ctx, runner)
			case <-ctx.Done():
			}
		}()
		return
	}
	d.createStandIn(ctx, runner)
}

// createStandIn creates runner's stand-in pod.
func (d *drainRun) createStandIn(ctx context.Context, runner string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stand-in-" + runner, Namespace: d.s.ns, Labels: map[string]string{budgetLabel: d.s.ns}},
		Spec: corev1.PodSpec{
			NodeName:                      NodeName,
			Tolerations:                   []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods(d.s.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		d.problem("stand-in for %s: %v", runner, err)
	}
}

func (d *drainRun) problem(f string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problems = append(d.problems, fmt.Sprintf(f, a...))
}

// finish waits, once disrupted has returned (runner-guard back to two
// replicas), for the idle runners to be gone, checks the busy ones are held,
// ends their jobs, waits for the drain to finish and checks what it did.
func (d *drainRun) finish(disrupted func()) {
	s := d.s
	start := time.Now()
	d.waitIdleGone()
	disrupted()
	requireTwoReadyReplicas(s.t, s)
	d.waitHeld(time.Time{})
	d.checkHeld()
	d.endJobs()
	d.waitDrained()
	s.t.Logf("drain finished %s after its first admitted eviction", time.Since(start).Round(time.Second))
	d.check()
}

// waitIdleGone waits until every idle runner's pod is gone.
func (d *drainRun) waitIdleGone() {
	d.s.eventually("the idle runners' pods gone", 3*time.Minute, func() error {
		for _, n := range d.names {
			if !d.busy[n] && d.s.pod(n) != nil {
				return fmt.Errorf("%s still there: %s", n, d.s.podSummary(n))
			}
		}
		return nil
	})
}

// checkHeld checks the busy runners are untouched: the same pod and
// container, not being deleted, the job running, registered and busy at GitHub.
func (d *drainRun) checkHeld() {
	s := d.s
	s.t.Helper()
	registered := map[string]bool{}
	for _, r := range s.runners() {
		registered[r.Name] = r.Busy
	}
	for n, before := range d.held {
		p := s.pod(n)
		switch {
		case p == nil || p.UID != before.UID || p.DeletionTimestamp != nil:
			s.t.Errorf("busy runner %s's pod evicted during its job: %s", n, s.podSummary(n))
		case !s.containerRunning(n) || p.Status.ContainerStatuses[0].RestartCount != 0:
			s.t.Errorf("busy runner %s's container disturbed: %s", n, s.podSummary(n))
		case !registered[n]:
			s.t.Errorf("busy runner %s not registered and busy at GitHub during its job", n)
		}
		if l := s.logs(n); strings.Contains(l, "job cancelled") {
			s.t.Errorf("busy runner %s's job cancelled: %s", n, l)
		}
	}
	if s.t.Failed() {
		s.t.FailNow()
	}
}

// endJobs ends the busy runners' jobs (GitHub marks them idle).
func (d *drainRun) endJobs() {
	for n := range d.held {
		d.s.setBusy(n, false)
	}
	d.mu.Lock()
	d.jobsEnded = time.Now()
	d.mu.Unlock()
}

// waitDrained waits until no runner pod is left: the drain has finished.
func (d *drainRun) waitDrained() {
	d.s.eventually("the drain finished (no runner pod left)", 2*time.Minute, func() error {
		var left []string
		for _, n := range d.names {
			if d.s.pod(n) != nil {
				left = append(left, n)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("runner pods left: %v", left)
		}
		return nil
	})
}

// check asserts what the drain has done so far: no runner unregistered
// whose pod stayed, none left registered whose pod is gone, and no eviction refused more than once
// beyond what its budget or a busy job explains.
func (d *drainRun) check() {
	t := d.s.t
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.problems {
		t.Errorf("drain scenario: %s", p)
	}
	for _, kept := range d.kept {
		t.Errorf("runner unregistered whose pod stayed: %s", kept)
	}
	for _, r := range d.s.runners() {
		if d.s.pod(r.Name) == nil {
			t.Errorf("runner %s still registered at GitHub, its pod gone", r.Name)
		}
	}
	names := append([]string{}, d.names...)
	sort.Strings(names)
	var summary []string
	for _, n := range names {
		busyUntil := time.Time{}
		if d.busy[n] {
			// Still running: every busy refusal so far is its job's.
			busyUntil = d.jobsEnded
			if busyUntil.IsZero() {
				busyUntil = time.Now()
			}
		}
		extra := unexplainedRefusals(d.attempts[n], busyUntil)
		summary = append(summary, fmt.Sprintf("%s %d/%d", n, len(extra), len(d.attempts[n])))
		if len(extra) > 1 {
			t.Errorf("%s's eviction refused %d times beyond what its budget or job explains: %v", n, len(extra), extra)
		} else if len(extra) == 1 {
			t.Logf("%s's eviction refused once beyond what its budget or job explains: %s", n, extra[0])
		}
	}
	t.Logf("evictions per runner (unexplained refusals/answers): %s", strings.Join(summary, ", "))
}

// unexplainedRefusals are the refusals among attempts that neither a budget
// (the API server's "disruption budget" 429, runner-guard's rule 5d, or
// runner-guard's GitHub request budget) nor a running job (busyUntil: when
// the pod's job ended, zero for an idle runner) explains. A refusal from GitHub's listing (reason
// runner-listed-busy) is the job's for as long as a listing taken while it
// ran may still be answered from: ghclient.ListedBusyMaxAge (a decision
// renews a busy listing that old), one retry.
func unexplainedRefusals(attempts []evictAttempt, busyUntil time.Time) []string {
	var out []string
	for _, a := range attempts {
		switch {
		case a.refused == "":
		case strings.Contains(a.refused, "disruption budget") || strings.Contains(a.refused, "allows no disruption of pod"):
		case a.at.Before(busyUntil) && strings.Contains(a.refused, "runner busy"):
		case strings.Contains(a.refused, "GitHub request budget for this credential is spent"):
			// runner-guard's own GitHub budget, spent by a replica the
			// rollout just started (seen once in five rolling-upgrade runs:
			// the three busy runners' re-checks refused together for 12 to
			// 17 s after their jobs ended); it names when it has room.
		case !busyUntil.IsZero() && a.at.Before(busyUntil.Add(ghclient.ListedBusyMaxAge)) && strings.Contains(a.refused, "[reason: runner-listed-busy]"):
		default:
			out = append(out, a.refused)
		}
	}
	return out
}

// killReplica kills the webhook process of a runner-guard replica with
// SIGKILL, as a crash or the OOM killer would.
func killReplica(t *testing.T, s *scenario, victim corev1.Pod) {
	t.Helper()
	id := strings.TrimPrefix(victim.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if err := cluster.ctr(s.ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
		t.Fatalf("kill %s: %v", victim.Name, err)
	}
	t.Logf("killed the webhook process of %s", victim.Name)
}

// waitRestarted waits until the kubelet has restarted the killed replica's
// container and it is Ready again.
func waitRestarted(s *scenario, name string) {
	s.t.Helper()
	s.eventually("killed replica "+name+" restarted by the kubelet", 90*time.Second, func() error {
		p, err := cluster.Client.CoreV1().Pods(rgNamespace).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cs := p.Status.ContainerStatuses[0]
		if cs.RestartCount < 1 || !cs.Ready {
			return fmt.Errorf("restarts %d ready %v", cs.RestartCount, cs.Ready)
		}
		return nil
	})
}

// leaderReplica is the replica holding the disruption controllers' lease
// (its holder is the pod's name, then "_" and a UUID).
func leaderReplica(t *testing.T, s *scenario) corev1.Pod {
	t.Helper()
	var leader corev1.Pod
	s.eventually("a leading runner-guard replica", 60*time.Second, func() error {
		l, err := cluster.Client.CoordinationV1().Leases(rgNamespace).Get(s.ctx, "runner-guard-disruption", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil {
			return fmt.Errorf("lease without holder")
		}
		name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		p, err := cluster.Client.CoreV1().Pods(rgNamespace).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("leader %s not Ready", name)
		}
		leader = *p
		return nil
	})
	return leader
}

// answers are the pod's eviction answers so far, for messages.
func (d *drainRun) answers(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, a := range d.attempts[name] {
		out = append(out, fmt.Sprintf("%s %q", a.at.Format("15:04:05.000"), a.refused))
	}
	return strings.Join(out, "; ")
}

// waitHeld waits until every busy runner's eviction has been refused as
// busy at or after since: the drain sees each answer, and runner-guard
// holds the same pods.
func (d *drainRun) waitHeld(since time.Time) {
	want := strings.Join(d.names[:drainBusy], ",")
	d.s.eventually("the busy runners' evictions refused as busy", 3*drainRetry+30*time.Second, func() error {
		if held := d.heldSince(since); held != want {
			return fmt.Errorf("refused as busy: %q, want %q; answers of %s: %s", held, want, d.names[0], d.answers(d.names[0]))
		}
		return nil
	})
}
