package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// guardLabel opts a namespace into the evictions entry (dist/install.yaml's default).
const guardLabel = "runner-guard.io/guard"

// With every runner-guard replica gone, runner-guard blocks only what it
// guards: kubectl drain of the node finishes while its pods are non-runner
// pods of a namespace nobody listed (the evictions entry selects only
// labelled namespaces, as dist/install.yaml ships it), and in a guarded
// namespace a busy runner's pod delete is refused, naming the webhook, rather
// than let through silently.
func TestNodeScaledToZeroBlocksOnlyWhatItGuards(t *testing.T) {
	s := newScenario(t, "zero")
	s.kubectl("label", "namespace", s.ns, guardLabel+"=enabled")
	s.startRunners("runner-zero")
	s.startJob("runner-zero")

	apps := s.ns + "-apps"
	s.kubectl("create", "namespace", apps)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _ = cluster.Kubectl(ctx, "delete", "namespace", apps, "--wait=false")
	})
	plain := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: %s, labels: {app: plain}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: app
    image: runner-guard-fakerunner:latest
    imagePullPolicy: Never
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, apps, NodeName)
	cmd := cluster.KubectlCommand(s.ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(plain)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("create the plain pod: %v: %s", err, out)
	}

	// The test's cluster guards every namespace's evictions (manifests/e2e-kind);
	// for this test the entry selects labelled namespaces only, as shipped.
	s.patchEvictionsSelector(`[{"op":"add","path":"/webhooks/2/namespaceSelector/matchLabels","value":{"` + guardLabel + `":"enabled"}}]`)
	t.Cleanup(func() {
		s.patchEvictionsSelector(`[{"op":"remove","path":"/webhooks/2/namespaceSelector/matchLabels"}]`)
	})

	// The configuration ships with failurePolicy Ignore and a Ready replica
	// raises it to the configured Fail (the install window, webhook/activation):
	// that has happened before the replicas go.
	s.eventually("runner-guard's webhook entries raised to failurePolicy Fail", 90*time.Second, func() error {
		out, err := cluster.Kubectl(s.ctx, "get", "validatingwebhookconfiguration", "runner-guard", "-o", "jsonpath={.webhooks[*].failurePolicy}")
		if err != nil {
			return err
		}
		for _, p := range strings.Fields(out) {
			if p != "Fail" {
				return fmt.Errorf("failurePolicies %q", out)
			}
		}
		return nil
	})
	s.scaleRunnerGuardToZero()
	s.uncordonAfterTest()
	out, err := cluster.Kubectl(s.ctx, "drain", NodeName, "--pod-selector=app=plain", "--force",
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s")
	if err != nil || !strings.Contains(out, "drained") {
		t.Fatalf("drain of a node whose only selected pods are non-runner pods of an unlisted namespace, with runner-guard scaled to 0: %v\n%s", err, out)
	}

	out, err = cluster.Kubectl(s.ctx, "-n", s.ns, "delete", "pod", "runner-zero", "--wait=false")
	if err == nil {
		t.Fatalf("the busy runner's pod delete went through with no runner-guard replica: %s", out)
	}
	if !strings.Contains(out, "runner-guard.io") || !strings.Contains(out, "failed calling webhook") {
		t.Errorf("the refusal does not name runner-guard's webhook: %s", out)
	}
	if p := s.pod("runner-zero"); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("busy runner's pod disturbed: %s", s.podSummary("runner-zero"))
	}
	if !s.registered("runner-zero") {
		t.Fatal("busy runner unregistered")
	}
}

// patchEvictionsSelector JSON-patches runner-guard's webhook configuration
// after checking that entry 2 is the evictions entry.
func (s *scenario) patchEvictionsSelector(ops string) {
	s.t.Helper()
	patch := `[{"op":"test","path":"/webhooks/2/name","value":"evictions.runner-guard.io"},` + strings.TrimPrefix(ops, "[")
	s.kubectl("patch", "validatingwebhookconfiguration", "runner-guard", "--type=json", "-p", patch)
}
