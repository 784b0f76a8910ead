package node

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// ephemeralRunnersCRD is ARC's EphemeralRunner CustomResourceDefinition as
// the e2e suite installs it.
const ephemeralRunnersCRD = "ephemeralrunners.actions.github.com"

// podGCUser is the pod garbage collector's identity
// (kube-controller-manager's --use-service-account-credentials).
const podGCUser = "system:serviceaccount:kube-system:pod-garbage-collector"

// A busy scale-set runner's node lost: its kubelet and the runner's process
// killed (SIGKILL), the runner offline on GitHub, its pod force-deleted as
// the pod garbage collector does (marked Failed with a DisruptionTarget
// condition, then deleted with grace period 0, as that user), and the Node
// NotReady. With re-runs on (chart rerun.enabled), runner-guard records the
// job its EphemeralRunner names, and once the workflow run completes failed
// it re-runs the job once: one POST .../actions/jobs/{id}/rerun on the fake
// GitHub answered 201, the run's attempt 2, and an Event naming the job.
//
// On this single node the delete comes before the Node is NotReady, not
// after: the node lifecycle controller then marks every pod of the node not
// Ready, runner-guard's and the fake GitHub's too, so their Services have no
// endpoint left; the delete (deletes entry at failurePolicy Fail) could not
// reach runner-guard, nor runner-guard GitHub. In a cluster runner-guard
// runs on other nodes. The test logs the endpoints it sees while NotReady.
func TestNodeLostNodeJobRerunOnce(t *testing.T) {
	s := newScenario(t, "rerun")
	// Cleanups run last first: the kubelet back, the CRD gone, the values
	// restored (runner-guard restarted without EphemeralRunners served).
	s.restoreValuesAfterTest()
	dyn := s.installEphemeralRunnerCRD()
	s.upgradeRunnerGuard("rerun:\n  enabled: true\n")
	s.logRunnerGuardOnFailure()

	const name = "runner-lost"
	repo := s.org + "/app"
	run := s.fakeCreate("/_fake/runs", ghfake.RunRequest{Repository: repo, Name: "ci"})
	t.Cleanup(func() { s.deleteLostJobRecords(run) })
	s.startScaleSetRunner(dyn, name)
	job := s.fakeCreate("/_fake/jobs", ghfake.JobRequest{RunID: run, Name: "build", Runner: name})
	s.startJob(name)
	s.setEphemeralRunnerJob(dyn, name, repo, run)
	s.eventually("runner-guard sees the job on pod "+name, 60*time.Second, func() error {
		if p := s.pod(name); p == nil || p.Annotations["karpenter.sh/do-not-disrupt"] != "true" {
			return fmt.Errorf("no do-not-disrupt hint yet")
		}
		return nil
	})

	t.Cleanup(func() {
		if cluster.kubelet() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cluster.RestartKubelet(ctx); err != nil {
			t.Errorf("restart the kubelet: %v", err)
		}
	})
	// The node fails: its kubelet and the runner's process die with it, and
	// GitHub, which no longer hears from the runner, shows it offline.
	containerID := strings.TrimPrefix(s.pod(name).Status.ContainerStatuses[0].ContainerID, "containerd://")
	if err := cluster.KillKubelet(); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	if err := cluster.ctr(s.ctx, "tasks", "kill", "--signal", "SIGKILL", containerID); err != nil {
		t.Fatalf("kill the runner's process: %v", err)
	}
	s.setOnline(name, false)
	s.forceDeleteAsPodGC(name)
	rec := s.lostJobRecord(run, rerun.StateWaiting)
	t.Logf("recorded %s after the kubelet was killed: %v", time.Since(lost).Round(time.Millisecond), rec)
	if rec["runner"] != name || rec["repository"] != repo || rec["cause"] == "" {
		t.Errorf("record %v: want runner %s of %s and a cause", rec, name, repo)
	}

	s.eventually("the Node NotReady without its kubelet", 3*time.Minute, func() error {
		if nodeReady(s) {
			return fmt.Errorf("still Ready")
		}
		return nil
	})
	t.Logf("Node NotReady %s after the kubelet was killed; endpoints meanwhile:\n%s", time.Since(lost).Round(time.Second),
		s.kubectl("-n", rgNamespace, "get", "endpointslices", "-o",
			`jsonpath={range .items[*]}{.metadata.labels.kubernetes\.io/service-name}:{range .endpoints[*]} ready={.conditions.ready}{end}{"\n"}{end}`))
	if err := cluster.RestartKubelet(s.ctx); err != nil {
		t.Fatalf("restart the kubelet: %v", err)
	}
	requireTwoReadyReplicas(t, s)
	s.eventually("the fake GitHub reachable again", 90*time.Second, func() error {
		_, err := s.fake("GET", "/_fake/runs?id="+strconv.FormatInt(run, 10), nil)
		return err
	})
	if n := len(s.reruns(run, job)); n != 0 {
		t.Fatalf("%d re-run requests before the run completed", n)
	}

	// GitHub fails the job ("lost communication with the server") and
	// completes the run.
	s.fakeDo("/_fake/jobs/finish", ghfake.ConclusionRequest{ID: job, Conclusion: ghfake.ConclusionFailure})
	completed := time.Now()
	s.fakeDo("/_fake/runs/complete", ghfake.ConclusionRequest{ID: run, Conclusion: ghfake.ConclusionFailure})
	s.lostJobRecord(run, rerun.StateRerun)
	t.Logf("re-run %s after the run completed", time.Since(completed).Round(time.Millisecond))

	rs := s.reruns(run, job)
	if len(rs) != 1 || rs[0].Op != ghfake.OpRerunJob || rs[0].Status != 201 {
		t.Fatalf("re-run requests %+v, want one POST .../jobs/%d/rerun answered 201", rs, job)
	}
	if st := s.runState(run); st.Run.RunAttempt != 2 {
		t.Errorf("run attempt %d after the re-run, want 2", st.Run.RunAttempt)
	}
	ev := s.kubectl("-n", s.ns, "get", "events", "--field-selector", "reason="+rerun.ReasonJobRerun+",involvedObject.name="+name,
		"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if !strings.Contains(ev, `"build"`) || !strings.Contains(ev, repo) {
		t.Errorf("%s Events %q do not name the job and its repository", rerun.ReasonJobRerun, ev)
	}
}

// installEphemeralRunnerCRD installs ARC's EphemeralRunner CRD (runner-guard
// sees it once restarted) and removes it, with the scenario's
// EphemeralRunners, after the test; it returns a dynamic client.
func (s *scenario) installEphemeralRunnerCRD() dynamic.Interface {
	s.t.Helper()
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ers, err := dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, er := range ers.Items {
				// No ARC controller runs here to drop its finalizers.
				_, _ = dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Patch(ctx, er.GetName(), types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
		if out, err := cluster.Kubectl(ctx, "delete", "crd", ephemeralRunnersCRD, "--timeout=90s"); err != nil {
			s.t.Errorf("delete the EphemeralRunner CRD: %v: %s", err, out)
		}
	})
	s.kubectl("apply", "--server-side", "-f", filepath.Join(repoRoot, "test", "e2e", "testdata", "crds", ephemeralRunnersCRD+".yaml"))
	s.kubectl("wait", "--for=condition=Established", "crd/"+ephemeralRunnersCRD, "--timeout=60s")
	return dyn
}

// startScaleSetRunner creates an EphemeralRunner of the scenario's
// organization and its runner pod, as ARC's scale-set mode does, and waits
// until the fake runner is registered; the EphemeralRunner's status then
// carries its runner ID.
func (s *scenario) startScaleSetRunner(dyn dynamic.Interface, name string) {
	s.t.Helper()
	want := fixture.MakeEphemeralRunner(s.ns, name).ConfigURL("https://github.com/" + s.org).RunnerName(name).Obj()
	want.SetUID("")
	er, err := framework.CreateEphemeralRunner(s.ctx, dyn, want)
	if err != nil {
		s.t.Fatal(err)
	}
	s.apply(s.fakeRunnerPod(name, fmt.Sprintf(`  labels:
    actions-ephemeral-runner: "True"
    app.kubernetes.io/component: runner
    actions.github.com/organization: %s
  ownerReferences:
  - {apiVersion: %s, kind: %s, name: %s, uid: %s, controller: true, blockOwnerDeletion: true}`,
		s.org, fixture.EphemeralRunnerAPIVersion, fixture.EphemeralRunnerKind, name, er.GetUID())))
	s.waitRegistered(name)
	var id int64
	for _, r := range s.runners() {
		if r.Name == name {
			id = r.ID
		}
	}
	s.patchEphemeralRunnerStatus(dyn, name, map[string]any{"runnerId": id})
}

// setEphemeralRunnerJob writes the job fields ARC's listener puts on an
// EphemeralRunner whose runner took a job of run in repo.
func (s *scenario) setEphemeralRunnerJob(dyn dynamic.Interface, name, repo string, run int64) {
	s.t.Helper()
	s.patchEphemeralRunnerStatus(dyn, name, map[string]any{
		"jobRequestId": 7, "jobId": "7", "jobRepositoryName": repo, "workflowRunId": run, "jobDisplayName": "build",
	})
}

func (s *scenario) patchEphemeralRunnerStatus(dyn dynamic.Interface, name string, status map[string]any) {
	s.t.Helper()
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Patch(s.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		s.t.Fatalf("status of EphemeralRunner %s: %v", name, err)
	}
}

// forceDeleteAsPodGC does what the pod garbage collector does to a pod its
// node cannot stop any more, as that user: mark it Failed with a
// DisruptionTarget condition, then delete it with grace period 0.
func (s *scenario) forceDeleteAsPodGC(name string) {
	s.t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: podGCUser}
	podGC, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	status := fmt.Sprintf(`{"status":{"phase":"Failed","conditions":[{"type":%q,"status":"True","reason":"DeletionByPodGC","message":"PodGC: node no longer exists","lastTransitionTime":%q}]}}`,
		corev1.DisruptionTarget, time.Now().UTC().Format(time.RFC3339))
	if _, err := podGC.CoreV1().Pods(s.ns).Patch(s.ctx, name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		s.t.Fatalf("mark pod %s Failed as the pod GC: %v", name, err)
	}
	// The pod GC retries a delete that fails, as runner-guard's refusal of
	// a runner it still remembers busy would make it.
	zero := int64(0)
	s.eventually("pod "+name+" force-deleted as the pod GC", 30*time.Second, func() error {
		err := podGC.CoreV1().Pods(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if s.pod(name) != nil {
			return fmt.Errorf("pod %s still there after its force delete", name)
		}
		return nil
	})
}

// lostJobRecord waits for the one lost-job record of run, in state, and
// returns its data.
func (s *scenario) lostJobRecord(run int64, state rerun.State) map[string]string {
	s.t.Helper()
	var data map[string]string
	s.eventually(fmt.Sprintf("the lost-job record of run %d %s", run, state), 2*time.Minute, func() error {
		list, err := cluster.Client.CoreV1().ConfigMaps(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%d", rerun.LabelRun, run)})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d records", len(list.Items))
		}
		data = list.Items[0].Data
		if data["state"] != string(state) {
			return fmt.Errorf("record %v", data)
		}
		return nil
	})
	return data
}

func (s *scenario) deleteLostJobRecords(run int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := cluster.Kubectl(ctx, "-n", rgNamespace, "delete", "configmaps", "-l", fmt.Sprintf("%s=%d", rerun.LabelRun, run)); err != nil {
		s.t.Logf("delete the lost-job records of run %d: %v: %s", run, err, out)
	}
}

// reruns are the fake GitHub's re-run requests for job or its run.
func (s *scenario) reruns(run, job int64) []ghfake.Request {
	s.t.Helper()
	b, err := s.fake("GET", "/_fake/requests", nil)
	if err != nil {
		s.t.Fatalf("fake requests: %v: %s", err, b)
	}
	var all []ghfake.Request
	if err := json.Unmarshal(b, &all); err != nil {
		s.t.Fatalf("decode fake requests: %v", err)
	}
	var out []ghfake.Request
	for _, r := range all {
		if r.Op == ghfake.OpRerunJob && strings.Contains(r.Path, fmt.Sprintf("/jobs/%d/", job)) ||
			r.Op == ghfake.OpRerunFailedJobs && strings.Contains(r.Path, fmt.Sprintf("/runs/%d/", run)) {
			out = append(out, r)
		}
	}
	return out
}

func (s *scenario) runState(run int64) ghfake.RunState {
	s.t.Helper()
	b, err := s.fake("GET", "/_fake/runs?id="+strconv.FormatInt(run, 10), nil)
	if err != nil {
		s.t.Fatalf("run %d on the fake: %v: %s", run, err, b)
	}
	var st ghfake.RunState
	if err := json.Unmarshal(b, &st); err != nil {
		s.t.Fatalf("decode run %d: %v", run, err)
	}
	return st
}

// fakeCreate POSTs body to a control path answering {"id":N} and returns N.
func (s *scenario) fakeCreate(path string, body any) int64 {
	s.t.Helper()
	b, err := s.fake("POST", path, body)
	if err != nil {
		s.t.Fatalf("POST %s: %v: %s", path, err, b)
	}
	var out struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.ID == 0 {
		s.t.Fatalf("POST %s: answer %s: %v", path, b, err)
	}
	return out.ID
}

// fakeDo POSTs body to a control path.
func (s *scenario) fakeDo(path string, body any) {
	s.t.Helper()
	if b, err := s.fake("POST", path, body); err != nil {
		s.t.Fatalf("POST %s: %v: %s", path, err, b)
	}
}

func nodeReady(s *scenario) bool {
	n, err := cluster.Client.CoreV1().Nodes().Get(s.ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("get node: %v", err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
