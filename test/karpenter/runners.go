package karpenter

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// ScaleSetRunner is one ARC scale-set runner: its EphemeralRunner and pod
// (both named Name) and its registration on the fake GitHub.
type ScaleSetRunner struct {
	Namespace, Name string
	Scope           ghclient.Scope
	// ID is the runner's ID on the fake GitHub.
	ID int64
}

// Registered reports whether the fake GitHub still has the runner.
func (c *Cluster) Registered(r ScaleSetRunner) bool {
	_, ok := c.GitHub.Runner(r.Scope, r.Name)
	return ok
}

// CreateScaleSetRunner registers a runner on the fake GitHub, busy or idle,
// creates its EphemeralRunner with the status ARC's controller leaves once
// the runner is registered (edit may change it first, e.g. set job fields),
// and its pod as ARC builds it: controlled by the EphemeralRunner, labelled
// with the organization, requesting RunnerCPU, in pool and bound to node.
// scope must be an organization.
func (c *Cluster) CreateScaleSetRunner(ctx context.Context, ns, name string, scope ghclient.Scope, busy bool, pool, node string,
	edit func(*fixture.EphemeralRunnerWrapper)) (ScaleSetRunner, error) {
	if scope.Kind != ghclient.ScopeOrg {
		return ScaleSetRunner{}, fmt.Errorf("scope %s: only organizations are supported here", scope)
	}
	id := c.GitHub.AddRunner(scope, name)
	c.GitHub.SetBusy(scope, name, busy)
	w := fixture.MakeEphemeralRunner(ns, name).ConfigURL("https://github.com/" + scope.Name).RunnerID(id).RunnerName(name)
	if edit != nil {
		edit(w)
	}
	want := w.Obj()
	want.SetUID("")
	created, err := framework.CreateEphemeralRunner(ctx, c.Dynamic, want)
	if err != nil {
		return ScaleSetRunner{}, err
	}
	owner := &fixture.EphemeralRunnerWrapper{Unstructured: *created}
	pod := fixture.MakeScaleSetRunnerPod(ns, name).OwnedByEphemeralRunner(owner).
		Label("actions.github.com/organization", scope.Name).Obj()
	pod.UID = ""
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, InPool(pod, pool, node, RunnerCPU), metav1.CreateOptions{}); err != nil {
		return ScaleSetRunner{}, fmt.Errorf("create runner pod %s/%s: %w", ns, name, err)
	}
	return ScaleSetRunner{Namespace: ns, Name: name, Scope: scope, ID: id}, nil
}

// WithJob sets the job fields ARC's listener writes into an EphemeralRunner's
// status on JobStarted (a job of request id on acme/app): an edit for
// CreateScaleSetRunner.
func WithJob(id int64) func(*fixture.EphemeralRunnerWrapper) {
	return func(w *fixture.EphemeralRunnerWrapper) {
		w.JobID(fmt.Sprint(id)).Field(id, "status", "jobRequestId").
			Field("acme/app", "status", "jobRepositoryName").
			Field("acme/app/.github/workflows/ci.yaml@refs/heads/main", "status", "jobWorkflowRef").
			Field(int64(4242), "status", "workflowRunId").Field("build", "status", "jobDisplayName")
	}
}

// SetEphemeralRunnerPhase sets the EphemeralRunner's status.phase, as ARC's
// controller does (Succeeded once the runner has exited after its job).
func (c *Cluster) SetEphemeralRunnerPhase(ctx context.Context, r ScaleSetRunner, phase string) error {
	patch := []byte(fmt.Sprintf(`{"status":{"phase":%q}}`, phase))
	_, err := c.Dynamic.Resource(framework.EphemeralRunnerResource()).Namespace(r.Namespace).Patch(ctx, r.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("phase of EphemeralRunner %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}

// LegacyRunner is one ARC legacy (summerwind) runner: its Runner and pod
// (both named Name) and its registration on the fake GitHub. It has a
// ScaleSetRunner's fields, so Registered and Unregistered read either.
type LegacyRunner = ScaleSetRunner

// legacyRunnerResource is ARC's legacy Runner (test/e2e/testdata/crds).
func legacyRunnerResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "actions.summerwind.dev", Version: "v1alpha1", Resource: "runners"}
}

// CreateLegacyRunner registers a runner on the fake GitHub, busy or idle,
// and creates what ARC's legacy runner controller makes for it: a Runner of
// the organization, without finalizers (no ARC here to drop them), and its
// pod, controlled by the Runner and carrying the runner's ID, with no job
// anywhere on it; requesting RunnerCPU, in pool and bound to node. scope
// must be an organization.
func (c *Cluster) CreateLegacyRunner(ctx context.Context, ns, name string, scope ghclient.Scope, busy bool, pool, node string) (LegacyRunner, error) {
	if scope.Kind != ghclient.ScopeOrg {
		return LegacyRunner{}, fmt.Errorf("scope %s: only organizations are supported here", scope)
	}
	id := c.GitHub.AddRunner(scope, name)
	c.GitHub.SetBusy(scope, name, busy)
	want := fixture.MakeLegacyRunner(ns, name).Org(scope.Name).Obj()
	want.SetUID("")
	created, err := c.Dynamic.Resource(legacyRunnerResource()).Namespace(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return LegacyRunner{}, fmt.Errorf("create Runner %s/%s: %w", ns, name, err)
	}
	pod := fixture.MakeLegacyRunnerPod(ns, name).Org(scope.Name).RunnerID(id).
		OwnedByLegacyRunner(&fixture.LegacyRunnerWrapper{Unstructured: *created}).Obj()
	pod.UID = ""
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, InPool(pod, pool, node, RunnerCPU), metav1.CreateOptions{}); err != nil {
		return LegacyRunner{}, fmt.Errorf("create runner pod %s/%s: %w", ns, name, err)
	}
	return LegacyRunner{Namespace: ns, Name: name, Scope: scope, ID: id}, nil
}

// Unregistered returns the fake GitHub's answered DELETE that removed the
// runner (status 204), ok false when there was none.
func (c *Cluster) Unregistered(r ScaleSetRunner) (ghfake.Request, bool) {
	for _, req := range c.GitHub.Requests() {
		if req.Op == ghfake.OpRemove && req.RunnerID == r.ID && req.Status == http.StatusNoContent &&
			req.Scope != nil && strings.EqualFold(req.Scope.Name, r.Scope.Name) {
			return req, true
		}
	}
	return ghfake.Request{}, false
}

// CreatePod creates a plain pod (no runner: runner-guard lets it go) with
// annotations, requesting RunnerCPU, in pool and bound to node.
func (c *Cluster) CreatePod(ctx context.Context, ns, name, pool, node string, annotations map[string]string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "runner-like"}, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "runner-like"}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, InPool(pod, pool, node, RunnerCPU), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// ReleaseEphemeralRunners drops the finalizers of every EphemeralRunner in
// ns (no ARC controller runs here to drop them), so they and, through the
// garbage collector, their pods can go.
func (c *Cluster) ReleaseEphemeralRunners(ctx context.Context, ns string) error {
	list, err := c.Dynamic.Resource(framework.EphemeralRunnerResource()).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	for _, er := range list.Items {
		_, err := c.Dynamic.Resource(framework.EphemeralRunnerResource()).Namespace(ns).Patch(ctx, er.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release EphemeralRunner %s/%s: %w", ns, er.GetName(), err)
		}
	}
	return nil
}

// KarpenterMetric is the sum of Karpenter's samples of metric name whose
// labels include labels.
func (c *Cluster) KarpenterMetric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	text, err := c.KarpenterMetrics(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := MetricSum(text, name, labels)
	return n, nil
}

// RefusedPOSTs counts the POST requests of Karpenter's client answered 429:
// here, only evictions are. It counts every attempt: client-go retries a 429
// that carries Retry-After (runner-guard's refusals do) by itself, up to 10
// times, before Karpenter sees one failed eviction, so Karpenter's own
// karpenter_pods_eviction_requests_total moves ten times slower.
func (c *Cluster) RefusedPOSTs(ctx context.Context) (float64, error) {
	return c.KarpenterMetric(ctx, "client_go_request_total", map[string]string{"code": "429", "method": "POST"})
}

// WaitRefusedPOSTs waits until RefusedPOSTs reaches n.
func (c *Cluster) WaitRefusedPOSTs(ctx context.Context, n float64, timeout time.Duration) error {
	return process.Poll(ctx, fmt.Sprintf("%v of Karpenter's POSTs answered 429", n), timeout, func(ctx context.Context) error {
		text, err := c.KarpenterMetrics(ctx)
		if err != nil {
			return err
		}
		got, _ := MetricSum(text, "client_go_request_total", map[string]string{"code": "429", "method": "POST"})
		if got < n {
			return fmt.Errorf("%w: %v; Karpenter's client requests:\n%s", errNotYet, got, grepLines(text, "client_go_request_total"))
		}
		return nil
	})
}

// grepLines keeps the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// EndJob ends a scale-set runner's job as the runner, GitHub and ARC do:
// the runner process exits (its pod's containers terminate with code 0 and
// the pod, restartPolicy Never, is Succeeded: the status a kubelet writes,
// which KWOK's stages leave alone), GitHub shows the runner idle (and
// would soon remove it: a DELETE answers 204 either way), and ARC's
// controller marks the EphemeralRunner Succeeded.
func (c *Cluster) EndJob(ctx context.Context, r ScaleSetRunner) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.Client.CoreV1().Pods(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.Ready, cs.Started = false, new(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now,
			}}
		}
		for i := range p.Status.Conditions {
			if t := p.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].Reason = "PodCompleted"
				p.Status.Conditions[i].LastTransitionTime = now
			}
		}
		p.Status.Phase = corev1.PodSucceeded
		_, err = c.Client.CoreV1().Pods(r.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("runner %s/%s exits: %w", r.Namespace, r.Name, err)
	}
	c.GitHub.SetBusy(r.Scope, r.Name, false)
	return c.SetEphemeralRunnerPhase(ctx, r, "Succeeded")
}
