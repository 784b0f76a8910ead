package chart

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/webhook/activation"
)

// The install window: from before helm install until after an upgrade's
// rollout, deletes and evictions in a guarded namespace never fail, and the
// webhook configuration takes its annotated failurePolicy once a webhook
// serves a certificate its caBundle verifies (package webhook/activation).

// windowNamespace is opted in to evictions (the guard label) and bound to
// org-* by the external-url values; its runner pods name an organization
// outside the binding, so the webhook lets them go without GitHub and the
// churn never spends the GitHub budget the scenarios use.
const windowNamespace = "chart-window"

// window deletes and evicts pods in windowNamespace in a loop until stopped.
type window struct {
	e      *installEnv
	prefix string // names of this window's pods
	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	rounds   int
	failures []string
	progress chan struct{} // a round ended
}

// startWindow creates the guarded namespace and starts the loop. Each round
// evicts a running pod that is not a runner's (the evictions entry reviews
// it) and deletes a running runner pod (a DELETE entry reviews it).
func (e *installEnv) startWindow() *window {
	e.t.Helper()
	if err := e.env.CreateNamespace(e.ctx, windowNamespace); err != nil {
		e.t.Fatal(err)
	}
	e.optIn(windowNamespace)
	e.windows++
	w := &window{e: e, prefix: fmt.Sprintf("w%d-", e.windows), stopCh: make(chan struct{}), done: make(chan struct{}), progress: make(chan struct{}, 1)}
	go w.run()
	e.t.Cleanup(w.halt)
	return w
}

func (w *window) run() {
	defer close(w.done)
	for i := 0; ; i++ {
		select {
		case <-w.stopCh:
			return
		default:
		}
		w.round(i)
		w.mu.Lock()
		w.rounds++
		w.mu.Unlock()
		select {
		case w.progress <- struct{}{}:
		default:
		}
		// A pause between rounds, only to spare the shared machine.
		select {
		case <-w.stopCh:
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *window) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
}

func (w *window) round(i int) {
	ctx := w.e.ctx
	app := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%sapp-%d", w.prefix, i), Namespace: windowNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:e2e"}}},
	}
	if _, err := w.e.env.CreateRunningPod(ctx, app); err != nil {
		w.fail("round %d: create %s: %v", i, app.Name, err)
		return
	}
	body, err := json.Marshal(&policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: windowNamespace},
		// No kubelet here to finish a graceful deletion: gone at once.
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))},
	})
	if err != nil {
		w.fail("round %d: %v", i, err)
		return
	}
	if err := w.e.env.Client.CoreV1().RESTClient().Post().Namespace(windowNamespace).Resource("pods").Name(app.Name).
		SubResource("eviction").MaxRetries(0).SetHeader("Content-Type", "application/json").
		Body(body).Do(ctx).Error(); err != nil {
		w.fail("round %d: eviction of %s: %v", i, app.Name, err)
	}
	runner := legacyRunnerPod(windowNamespace, fmt.Sprintf("%srunner-%d", w.prefix, i), "unbound-window")
	if _, err := w.e.env.CreateRunningPod(ctx, runner); err != nil {
		w.fail("round %d: create %s: %v", i, runner.Name, err)
		return
	}
	if err := w.e.env.Client.CoreV1().Pods(windowNamespace).Delete(ctx, runner.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		w.fail("round %d: delete of running runner pod %s: %v", i, runner.Name, err)
	}
}

// passes waits until n more rounds have ended.
func (w *window) passes(n int) {
	w.e.t.Helper()
	w.mu.Lock()
	target := w.rounds + n
	w.mu.Unlock()
	w.e.eventually(fmt.Sprintf("%d more rounds of deletes and evictions", n), 60*time.Second, func() error {
		select {
		case <-w.done:
			return fmt.Errorf("the loop ended")
		case <-w.progress:
		case <-time.After(time.Second):
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.rounds < target {
			return fmt.Errorf("%d rounds, want %d", w.rounds, target)
		}
		return nil
	})
}

func (w *window) halt() {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	<-w.done
}

// stop ends the loop and fails the test for every delete or eviction that failed.
func (w *window) stop() {
	w.e.t.Helper()
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.e.t.Logf("install window: %d rounds of one eviction and one delete", w.rounds)
	for _, f := range w.failures {
		w.e.t.Errorf("install window: %s", f)
	}
}

// policies is each entry's failurePolicy, by name.
func (e *installEnv) policies() map[string]admissionregistrationv1.FailurePolicyType {
	e.t.Helper()
	vwc, err := e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]admissionregistrationv1.FailurePolicyType{}
	for _, wh := range vwc.Webhooks {
		out[wh.Name] = deref(wh.FailurePolicy)
	}
	return out
}

// requireFailurePolicies checks every entry has failurePolicy p now.
func (e *installEnv) requireFailurePolicies(p admissionregistrationv1.FailurePolicyType) {
	e.t.Helper()
	for name, got := range e.policies() {
		if got != p {
			e.t.Errorf("%s failurePolicy %s, want %s", name, got, p)
		}
	}
}

// activatedPolicies is each entry's failurePolicy once a replica has
// activated it: the one the configuration's annotation for its kind names
// (Fail at the defaults; Ignore for evictions only when job budgets hold
// every busy runner, or where the values say so).
func (e *installEnv) activatedPolicies() map[string]admissionregistrationv1.FailurePolicyType {
	e.t.Helper()
	vwc, err := e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	wanted, err := activation.Wanted(vwc)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]admissionregistrationv1.FailurePolicyType{}
	for _, wh := range vwc.Webhooks {
		p, ok := wanted[activation.KindOf(wh)]
		if !ok {
			p = deref(wh.FailurePolicy)
		}
		out[wh.Name] = p
	}
	return out
}

// requireActivated checks every entry has its activated policy now.
func (e *installEnv) requireActivated() {
	e.t.Helper()
	want := e.activatedPolicies()
	for name, got := range e.policies() {
		if got != want[name] {
			e.t.Errorf("%s failurePolicy %s, want %s", name, got, want[name])
		}
	}
}

// waitActivated waits until the webhook has set every entry to the policy
// its annotation names, and at least one entry to Fail.
func (e *installEnv) waitActivated() {
	e.t.Helper()
	e.eventually("webhook configuration activated (every entry at its annotated policy)", 60*time.Second, func() error {
		want := e.activatedPolicies()
		var pending []string
		fail := false
		for name, p := range e.policies() {
			if p != want[name] {
				pending = append(pending, name+"="+string(p))
			}
			fail = fail || p == admissionregistrationv1.Fail
		}
		if len(pending) > 0 {
			return fmt.Errorf("entries not activated: %s", strings.Join(pending, ", "))
		}
		if !fail {
			return fmt.Errorf("no entry activated to Fail")
		}
		return nil
	})
}

// rollWebhook replaces the running webhook as a rolling update does
// (maxUnavailable 0): the new process starts and, once Ready, takes the
// Service's new connections; then the old one stops.
func (e *installEnv) rollWebhook() {
	e.t.Helper()
	old, oldWait := e.webhook, e.waitErr
	e.webhook = nil
	e.startWebhook()
	e.stopProcess(old, oldWait)
}
