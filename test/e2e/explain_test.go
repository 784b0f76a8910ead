package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/explain"
	"github.com/runner-guard/runner-guard/test/process"
)

// explainCmd is `runner-guard explain` (the webhook's binary) with the
// admin kubeconfig and args.
func explainCmd(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	bin := os.Getenv("RUNNER_GUARD_BIN")
	if bin == "" {
		root, err := process.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "bin", "webhook")
	}
	return exec.CommandContext(ctx, bin, append([]string{"explain", "--kubeconfig=" + env.ControlPlane.Kubeconfig}, args...)...)
}

// runExplain runs explainCmd and returns its stdout; it fails the test on a
// non-zero exit.
func runExplain(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	cmd := explainCmd(t, ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("runner-guard explain %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func explainJSON(t *testing.T, ctx context.Context, args ...string) explain.Report {
	t.Helper()
	out := runExplain(t, ctx, append(args, "-o", "json")...)
	var r explain.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	return r
}

// explain tells, for real pods of a scale set, the runner and the source of
// each fact, the hints, the last decision and what a delete and an eviction
// would get now, through server-side dry runs that change nothing; a user
// who may read less learns which permission would show the rest.
func TestExplain(t *testing.T) {
	s, scope, url := newOrgScaleSet(t, "explain")
	busy := s.runner("explain-busy", url, scope, true, nil)
	idle := s.runner("explain-idle", url, scope, false, nil)
	s.setJob(busy.name, 301, "build")
	s.wantAnnotations(busy.name, map[string]string{
		disruption.AnnotationDoNotDisrupt: "true", disruption.AnnotationSafeToEvict: "false", disruption.AnnotationOwned: "do-not-disrupt,safe-to-evict,deletion-cost",
		disruption.AnnotationDeletionCost: disruption.DeletionCost.Value,
	})
	if _, err := s.deletePod(busy.name, scope); err == nil || !strings.Contains(err.Error(), "runner busy") {
		t.Fatalf("delete of the busy runner's pod: %v; want runner busy", err)
	}
	s.waitForEvent(busy.name, "RunnerBusy")

	t.Run("busy runner, as admin", func(t *testing.T) {
		before := len(env.GitHub.Requests())
		r := explainJSON(t, s.ctx, busy.name, "-n", s.ns)
		if r.Runner.Name == nil || r.Runner.Name.Value != busy.name || !strings.Contains(r.Runner.Name.Source, "arc-object EphemeralRunner "+s.ns+"/"+busy.name) {
			t.Errorf("runner name = %+v; want %s from its EphemeralRunner", r.Runner.Name, busy.name)
		}
		if r.Runner.Scope == nil || r.Runner.Scope.Value != "org:"+scope.Name || !strings.Contains(r.Runner.Scope.Source, "(trusted)") {
			t.Errorf("runner scope = %+v; want org:%s, trusted", r.Runner.Scope, scope.Name)
		}
		if r.Runner.ID == nil || r.Runner.ID.Value != fmt.Sprint(busy.id) {
			t.Errorf("runner ID = %+v; want %d", r.Runner.ID, busy.id)
		}
		if !strings.Contains(r.Runner.Job, "build") || r.Runner.Problem != "" {
			t.Errorf("runner job %q problem %q; want the job named build and no problem", r.Runner.Job, r.Runner.Problem)
		}
		if !r.Binding.Allowed {
			t.Errorf("binding = %+v; want allowed (no scopeBindings in the harness)", r.Binding)
		}
		if r.Hints.Annotations[disruption.AnnotationDoNotDisrupt] != "true" || len(r.Hints.Owned) != 3 {
			t.Errorf("hints = %+v; want do-not-disrupt set by runner-guard", r.Hints)
		}
		if r.LastDecision.EventReason != "RunnerBusy" || r.LastDecision.Reason == "" {
			t.Errorf("last decision = %+v; want the RunnerBusy Event and its reason", r.LastDecision)
		}
		// ARC records the job, so the webhook refuses without asking GitHub.
		if r.Delete.Allowed || r.Delete.Unknown || !strings.Contains(r.Delete.Message, "runner busy") || r.Delete.Reason == "" {
			t.Errorf("delete = %+v; want refused, runner busy, with its reason", r.Delete)
		}
		if r.Evict.Allowed || r.Evict.Code != 429 {
			t.Errorf("eviction = %+v; want refused with 429", r.Evict)
		}
		if r.Credentials.Mode != "static" || r.Credentials.Unknown {
			t.Errorf("credentials = %+v; want the flags' (static)", r.Credentials)
		}
		s.requireAlive(busy.name)
		// The dry runs asked GitHub read-only at most: nothing was removed.
		// Only this scenario's scope counts: the leader may still be
		// releasing runners of earlier scenarios' nodes meanwhile.
		for _, req := range env.GitHub.Requests()[before:] {
			if req.Method != "GET" && req.Scope != nil && strings.EqualFold(req.Scope.Name, scope.Name) {
				t.Errorf("explain made GitHub request %s %s; a dry run only reads", req.Method, req.Path)
			}
		}
		if !busy.registered() {
			t.Error("the busy runner is gone from GitHub after explain")
		}
	})

	t.Run("idle runner: a delete would go, and nothing went", func(t *testing.T) {
		r := explainJSON(t, s.ctx, idle.name, "-n", s.ns)
		if !r.Delete.Allowed || !r.Evict.Allowed {
			t.Errorf("delete %+v, eviction %+v; want both allowed", r.Delete, r.Evict)
		}
		if !strings.Contains(r.LastDecision.Text, "none recorded") {
			t.Errorf("last decision = %q; want none recorded", r.LastDecision.Text)
		}
		s.requireAlive(idle.name)
		if !idle.registered() {
			t.Error("the idle runner was unregistered by a dry run")
		}
	})

	t.Run("text output", func(t *testing.T) {
		out := runExplain(t, s.ctx, busy.name, "--namespace", s.ns)
		t.Logf("runner-guard explain %s -n %s:\n%s", busy.name, s.ns, out)
		for _, label := range []string{"pod:", "install:", "runner:", "binding:", "credentials:", "hints:", "budget:", "last decision:", "delete now:", "eviction now:"} {
			if !strings.Contains(out, "\n"+label) && !strings.HasPrefix(out, label) {
				t.Errorf("text output lacks the line %q", label)
			}
		}
		if strings.Contains(out, "ghp_") {
			t.Error("text output shows a token")
		}
	})

	t.Run("installed runner-guard: its config and Secrets, named", func(t *testing.T) {
		installBaseDeployment(t, s, fmt.Sprintf("scopeBindings:\n  - name: explain\n    namespaces: [%s]\n    scopes: [\"org:%s\"]\n", s.ns, scope.Name))
		r := explainJSON(t, s.ctx, busy.name, "-n", s.ns)
		if r.Install.Deployment != "runner-guard-system/runner-guard-webhook" || r.Install.Defaults || !strings.Contains(r.Install.ConfigMap, "runner-guard-config") {
			t.Errorf("install = %+v; want manifests/base's Deployment and its ConfigMap", r.Install)
		}
		if r.Binding.Name != `scope binding "explain"` || !r.Binding.Allowed {
			t.Errorf("binding = %+v; want the ConfigMap's binding, allowing org:%s", r.Binding, scope.Name)
		}
		if len(r.Credentials.Secrets) != 1 || r.Credentials.Secrets[0] != "runner-guard-system/runner-guard-github" {
			t.Errorf("credentials = %+v; want the Secret manifests/base mounts for --github-token-file", r.Credentials)
		}
	})

	t.Run("installed in ARC credentials mode: the EphemeralRunner's Secret, named, and whether it exists", func(t *testing.T) {
		installBaseDeployment(t, s, "{}\n", "--credentials-mode=arc")
		r := explainJSON(t, s.ctx, busy.name, "-n", s.ns)
		if r.Credentials.Mode != "arc" || len(r.Credentials.Secrets) != 1 || r.Credentials.Secrets[0] != s.ns+"/arc-secret" || !strings.Contains(r.Credentials.Text, "does not exist") {
			t.Errorf("credentials = %+v; want the EphemeralRunner's githubConfigSecret %s/arc-secret, missing", r.Credentials, s.ns)
		}
		s.secret("arc-secret", map[string]string{"github_token": "ghp_explain-must-not-print"})
		out := runExplain(t, s.ctx, busy.name, "-n", s.ns, "-o", "json")
		if strings.Contains(out, "does not exist") || !strings.Contains(out, s.ns+"/arc-secret") || strings.Contains(out, "ghp_explain") {
			t.Errorf("explain with the Secret in place:\n%s\nwant it named, present, and its token nowhere", out)
		}
	})

	t.Run("a user with less RBAC learns what would show the rest", func(t *testing.T) {
		const user = "explain-reader"
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: user}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		}}
		if _, err := env.Client.RbacV1().Roles(s.ns).Create(s.ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
		if _, err := env.Client.RbacV1().RoleBindings(s.ns).Create(s.ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var r explain.Report
		// RBAC takes effect once the API server's informers see the binding.
		s.eventually("explain as "+user+" reads the pod", 20*time.Second, func() error {
			out, err := explainCmd(t, s.ctx, "--as="+user, busy.name, "-n", s.ns, "-o", "json").Output()
			if err != nil {
				return fmt.Errorf("%w: %s", err, stderrOf(err))
			}
			return json.Unmarshal(out, &r)
		})
		if out, err := explainCmd(t, s.ctx, "--as="+user, busy.name, "-n", s.ns).Output(); err == nil {
			t.Logf("runner-guard explain --as=%s %s -n %s:\n%s", user, busy.name, s.ns, out)
		}
		want := map[string]explain.Status{
			"runner":      r.Runner.Status,
			"delete":      r.Delete.Status,
			"eviction":    r.Evict.Status,
			"install":     r.Install.Status,
			"credentials": r.Credentials.Status,
		}
		needs := map[string]string{
			"runner":      "get ephemeralrunners.actions.github.com in namespace " + s.ns,
			"delete":      "delete pods in namespace " + s.ns,
			"eviction":    "create pods/eviction in namespace " + s.ns,
			"install":     "list deployments in namespace runner-guard-system",
			"credentials": "list deployments in namespace runner-guard-system",
		}
		for line, st := range want {
			if !st.Unknown || !strings.Contains(st.Needs, needs[line]) || !strings.Contains(st.Text, needs[line]) {
				t.Errorf("%s line = %+v; want unknown, naming %q", line, st, needs[line])
			}
		}
		// Without the EphemeralRunner the webhook's resolver reads the pod's
		// labels, and so does explain: it says so.
		if r.Runner.Scope == nil || !strings.Contains(r.Runner.Scope.Source, "pod-labels") {
			t.Errorf("runner scope = %+v; want it read from the pod's labels", r.Runner.Scope)
		}
		if r.LastDecision.EventReason != "RunnerBusy" {
			t.Errorf("last decision = %+v; the user may list Events", r.LastDecision)
		}
		if r.Budget.PDBsUnknown == "" {
			t.Errorf("budget = %+v; want the PodDisruptionBudgets unknown", r.Budget)
		}
		s.requireAlive(busy.name)
	})

	t.Run("kubectl plugin", func(t *testing.T) {
		dir := t.TempDir()
		root, err := process.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		build := exec.CommandContext(s.ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-runner_guard"), "./cmd/kubectl-runner_guard")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/kubectl-runner_guard: %v: %s", err, out)
		}
		cmd := exec.CommandContext(s.ctx, env.KubectlPath(), "runner-guard", "explain", idle.name, "-n", s.ns)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.ControlPlane.Kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl runner-guard explain: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "delete now:") || !strings.Contains(string(out), "allowed") {
			t.Errorf("kubectl runner-guard explain printed:\n%s", out)
		}
	})
}

// stderrOf is what a failed command printed on stderr.
func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

// installBaseDeployment creates manifests/base's runner-guard Deployment,
// scaled to 0 (the harness runs the binary itself), with args added to its
// container's, and its ConfigMap with config, as an install leaves them for explain to read; both go when the
// test ends.
func installBaseDeployment(t *testing.T, s *scaleSet, config string, args ...string) {
	t.Helper()
	root, err := process.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kustomize := os.Getenv("KUSTOMIZE")
	if kustomize == "" {
		kustomize = filepath.Join(root, "bin", "kustomize")
	}
	rendered, err := exec.CommandContext(s.ctx, kustomize, "build", filepath.Join(root, "manifests", "base")).Output()
	if err != nil {
		t.Fatalf("kustomize build manifests/base: %v: %s", err, stderrOf(err))
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	var dep *appsv1.Deployment
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() == "Deployment" {
			dep = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dep == nil {
		t.Fatal("manifests/base renders no Deployment")
	}
	zero := int32(0)
	dep.Spec.Replicas = &zero
	dep.Spec.Template.Spec.Containers[0].Args = append(dep.Spec.Template.Spec.Containers[0].Args, args...)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: "runner-guard-config"}, Data: map[string]string{"config.yaml": config}}
	if _, err := env.Client.CoreV1().ConfigMaps(cm.Namespace).Create(s.ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().Deployments(dep.Namespace).Create(s.ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Client.AppsV1().Deployments(dep.Namespace).Delete(ctx, dep.Name, metav1.DeleteOptions{})
		_ = env.Client.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{})
	})
}
