// Command demo is runner-guard's two-minute tour (`make demo`): it starts a real
// kube-apiserver, etcd and kube-controller-manager, a fake GitHub with one busy
// and one idle runner, and the webhook; deletes both runner pods with kubectl;
// and says what happened. DEMO_KEEP=1 leaves everything running.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

const ns = "ci-runners"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts, err := framework.FromEnvironment()
	if err != nil {
		return err
	}
	keep := os.Getenv("DEMO_KEEP") != ""
	if keep {
		if opts.Dir, err = os.MkdirTemp("", "runner-guard-demo-"); err != nil {
			return err
		}
	}
	opts.Logf = func(format string, args ...any) { step(format, args...) }
	// As the quick start does: the demo's runner namespace may name only its organization.
	cfgDir, err := os.MkdirTemp("", "runner-guard-demo-config-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cfgDir)
	cfgFile := filepath.Join(cfgDir, "config.yaml")
	binding := "scopeBindings:\n- name: demo\n  namespaces: [" + ns + "]\n  scopes: [\"org:acme\"]\n"
	if err := os.WriteFile(cfgFile, []byte(binding), 0o600); err != nil {
		return err
	}
	opts.WebhookArgs = append(opts.WebhookArgs, "--config="+cfgFile)

	say("runner-guard demo: a real kube-apiserver, a fake GitHub, and the webhook in between.")
	start := time.Now()
	env, err := framework.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if !keep {
			step("tearing everything down")
			env.Stop()
			os.RemoveAll(env.Dir)
		}
	}()
	step("control plane and webhook ready in %s", time.Since(start).Round(100*time.Millisecond))

	org, _ := ghclient.OrgScope("acme")
	busyID := env.GitHub.AddRunner(org, "runner-busy")
	env.GitHub.SetBusy(org, "runner-busy", true)
	idleID := env.GitHub.AddRunner(org, "runner-idle")
	say("\nGitHub (fake): organization acme has two self-hosted runners:")
	fmt.Printf("    runner-busy  (id %d)  busy: running a job\n", busyID)
	fmt.Printf("    runner-idle  (id %d)  idle\n", idleID)

	if err := env.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	for name, id := range map[string]int64{"runner-busy": busyID, "runner-idle": idleID} {
		if _, err := env.CreateRunningPod(ctx, runnerPod(name, id)); err != nil {
			return err
		}
	}
	say("\nKubernetes: namespace %s has a running pod for each runner (ARC legacy mode labels and env).", ns)
	env.GitHub.ResetLog()

	say("\n$ kubectl delete pod runner-busy -n %s", ns)
	_, stderr, err := env.Kubectl(ctx, "-n", ns, "delete", "pod", "runner-busy", "--wait=false")
	fmt.Print(indent(stderr))
	busyKept := err != nil
	if busyKept {
		say("  -> refused: GitHub said the runner is busy (422), so the pod stays and the job keeps running.")
	} else {
		say("  -> UNEXPECTED: the delete went through")
	}

	say("\n$ kubectl delete pod runner-idle -n %s", ns)
	stdout, stderr, err := env.Kubectl(ctx, "-n", ns, "delete", "pod", "runner-idle", "--wait=false")
	fmt.Print(indent(stdout + stderr))
	if err != nil {
		return fmt.Errorf("idle runner's pod was not deleted: %w", err)
	}
	// No kubelet here: finish the graceful deletion the way a kubelet would.
	if err := env.FinishTermination(ctx, ns, "runner-idle"); err != nil {
		return err
	}
	_, stillRegistered := env.GitHub.Runner(org, "runner-idle")
	if !stillRegistered {
		say("  -> deleted: runner-guard unregistered the runner on GitHub first (204), so it can never get a job.")
	}

	say("\nWhat GitHub saw during the two deletes:")
	for _, r := range env.GitHub.Requests() {
		fmt.Printf("    %-6s %s -> %d\n", r.Method, r.Path, r.Status)
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	_, busyRegistered := env.GitHub.Runner(org, "runner-busy")
	say("\nResult: pods left in %s: %s; runner-busy registered: %v; runner-idle registered: %v.",
		ns, strings.Join(names, ", "), busyRegistered, stillRegistered)
	if !busyKept || stillRegistered || !busyRegistered {
		return fmt.Errorf("the demo did not go as expected; logs in %s", env.Dir)
	}

	if keep {
		say("\nDEMO_KEEP=1: everything keeps running. Try it:")
		fmt.Printf("    export KUBECONFIG=%s\n", env.ControlPlane.Kubeconfig)
		fmt.Printf("    %s -n %s delete pod runner-busy\n", env.KubectlPath(), ns)
		fmt.Printf("    logs: %s\n", env.Dir)
		say("Press Ctrl-C to stop.")
		<-ctx.Done()
		env.Stop()
	}
	return nil
}

func runnerPod(name string, id int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      map[string]string{"actions-runner": "", "runner-deployment-name": "demo"},
			Annotations: map[string]string{"actions-runner/id": fmt.Sprint(id)},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "runner", Image: "actions-runner:demo",
			Env: []corev1.EnvVar{{Name: "RUNNER_ORG", Value: "acme"}},
		}}},
	}
}

func say(format string, args ...any)  { fmt.Printf(format+"\n", args...) }
func step(format string, args ...any) { fmt.Printf("  · "+format+"\n", args...) }

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
