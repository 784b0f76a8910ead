package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook/activation"
)

// FakeGitHubIP is the ClusterIP the deployment pins for the in-cluster fake
// GitHub: the node runs no cluster DNS, so the webhook and the runners reach
// it by address.
const FakeGitHubIP = "10.96.0.50"

// FakeGitHubURL is the fake GitHub as pods see it.
const FakeGitHubURL = "http://" + FakeGitHubIP + ":8080"

// The release test/node installs, named so its objects match dist/install.yaml's.
const releaseName = "runner-guard"

// fakeGitHubToken is the token manifests/e2e-kind/github-secret.yaml holds.
const fakeGitHubToken = "e2e-token"

// chartValues are the chart's values on the node: the images imported into
// containerd, the fake GitHub by its pinned address, certificates the chart
// generates (no cert-manager), any scope (the suites register runners of many
// organisations), evictions reviewed in every namespace with Fail, and each
// replica 450 GitHub points a minute (the chart splits the budget between the
// replicas), as manifests/e2e-kind sets them up for the e2e suite run
// against the node (which turns off the listings of legacy runners' scopes
// the chart takes by default: TestNodeE2ESuiteExternal). The replicas tolerate the cordon: a rollout during a
// drain schedules its new replicas on another node, and this one is the
// only one.
func chartValues() string {
	return fmt.Sprintf(`image:
  repository: runner-guard
  tag: latest
  pullPolicy: Never
github:
  url: %s/
  allowHTTP: true
  credentials:
    existingSecret: runner-guard-github
certificates:
  mode: generate
policy:
  allowAnyScope: true
  evictionsInAllNamespaces: true
  evictionsFailurePolicy: Fail
  githubBudget:
    pointsPerMinute: 900
tolerations:
- {key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}
`, FakeGitHubURL)
}

// RenderFakeGitHub renders manifests/e2e-kind's fake GitHub and its token
// Secret for the node: the Service at its pinned ClusterIP, and the token also
// under ARC's key name (github_token), which the chart's existingSecret reads.
func RenderFakeGitHub(repoRoot string) ([]byte, error) {
	var out bytes.Buffer
	for _, f := range []string{"github-secret.yaml", "fakegithub.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "manifests", "e2e-kind", f))
		if err != nil {
			return nil, err
		}
		objs, err := decodeAll(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			switch o["kind"] {
			case "Secret":
				data, _ := o["stringData"].(map[string]any)
				if data["token"] != fakeGitHubToken {
					return nil, fmt.Errorf("%s: stringData.token is not %q", f, fakeGitHubToken)
				}
				data["github_token"] = fakeGitHubToken
			case "Service":
				o["spec"].(map[string]any)["clusterIP"] = FakeGitHubIP
			}
			if err := writeJSONDoc(&out, o); err != nil {
				return nil, err
			}
		}
	}
	return out.Bytes(), nil
}

// InstallRunnerGuard deploys the fake GitHub, then installs runner-guard with
// `helm install` from charts/runner-guard (the README's first install path),
// and waits until both replicas are ready and a replica has activated the
// webhook configuration.
func (c *Cluster) InstallRunnerGuard(ctx context.Context, repoRoot, helm string) error {
	fake, err := RenderFakeGitHub(repoRoot)
	if err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, "create", "namespace", certs.Namespace); err != nil {
		return fmt.Errorf("create namespace %s: %w: %s", certs.Namespace, err, out)
	}
	if err := c.apply(ctx, "fakegithub.yaml", fake); err != nil {
		return err
	}
	values := c.file("values.yaml")
	if err := os.WriteFile(values, []byte(chartValues()), 0o644); err != nil {
		return err
	}
	if out, err := c.Helm(ctx, helm, "install", releaseName, filepath.Join(repoRoot, "charts", "runner-guard"),
		"--namespace", certs.Namespace, "--values", values, "--wait", "--timeout", "3m"); err != nil {
		return fmt.Errorf("helm install: %w: %s\n%s", err, out, c.diagnose(certs.Namespace))
	}
	return c.rolledOut(ctx, "deployment/fakegithub", "deployment/runner-guard-webhook")
}

// Helm runs helm as the admin inside the node's network namespace, with a
// configuration of its own (no user repositories or registries are read).
func (c *Cluster) Helm(ctx context.Context, helm string, args ...string) (string, error) {
	home := c.file("helm")
	cmd := inNetnsCommand(ctx, helm, append(args, "--kubeconfig", c.Kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RenderInstallYAML renders dist/install.yaml, what a user applies, for the
// node, which has no cert-manager: cert-manager's Issuers and Certificates
// replaced by a serving certificate Secret from the certs package and the CA
// bundle written into the ValidatingWebhookConfiguration. As in
// manifests/e2e-kind, the webhook calls the fake GitHub (by its pinned
// address), any scope is allowed, and evictions are reviewed in every namespace.
func RenderInstallYAML(repoRoot string) ([]byte, error) {
	rendered, err := os.ReadFile(filepath.Join(repoRoot, "dist", "install.yaml"))
	if err != nil {
		return nil, err
	}
	bundle, err := certs.Generate(certs.Options{DNSNames: certs.DefaultDNSNames()})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	objs, err := decodeAll(rendered)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, o := range objs {
		keep, err := adjust(o, bundle.CACertPEM)
		if err != nil {
			return nil, err
		}
		if keep {
			if err := writeJSONDoc(&out, o); err != nil {
				return nil, err
			}
		}
	}
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
		"metadata": map[string]any{"name": "runner-guard-webhook-cert", "namespace": certs.Namespace},
		"data": map[string]any{
			"tls.crt": base64.StdEncoding.EncodeToString(bundle.CertPEM),
			"tls.key": base64.StdEncoding.EncodeToString(bundle.KeyPEM),
			"ca.crt":  base64.StdEncoding.EncodeToString(bundle.CACertPEM),
		},
	}
	if err := writeJSONDoc(&out, secret); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func decodeAll(multiDoc []byte) ([]map[string]any, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(multiDoc), 4096)
	var objs []map[string]any
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode rendered manifests: %w", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func writeJSONDoc(w *bytes.Buffer, o map[string]any) error {
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode %v: %w", o["kind"], err)
	}
	w.WriteString("---\n")
	w.Write(b)
	w.WriteString("\n")
	return nil
}

// adjust rewrites one object of dist/install.yaml in place; false drops it.
func adjust(o map[string]any, caPEM []byte) (bool, error) {
	kind, _ := o["kind"].(string)
	meta, _ := o["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	switch {
	case kind == "Issuer" || kind == "Certificate":
		return false, nil // cert-manager's; replaced by the Secret
	case kind == "ValidatingWebhookConfiguration":
		if ann, ok := meta["annotations"].(map[string]any); ok {
			delete(ann, "cert-manager.io/inject-ca-from")
		}
		hooks, _ := o["webhooks"].([]any)
		for _, h := range hooks {
			hook, _ := h.(map[string]any)
			cc, _ := hook["clientConfig"].(map[string]any)
			if cc == nil {
				return false, fmt.Errorf("webhook without clientConfig in %s", name)
			}
			cc["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
			if hook["name"] == "evictions.runner-guard.io" {
				sel, _ := hook["namespaceSelector"].(map[string]any)
				delete(sel, "matchLabels")
			}
		}
		return len(hooks) > 0, nil
	case kind == "ConfigMap" && name == "runner-guard-config":
		o["data"].(map[string]any)["config.yaml"] = "scopeBindings: []\n"
	case kind == "Deployment" && name == "runner-guard-webhook":
		return true, addWebhookArgs(o, "--github-url="+FakeGitHubURL+"/", "--github-allow-http")
	}
	return true, nil
}

// addWebhookArgs appends args to the webhook container's command line.
func addWebhookArgs(deploy map[string]any, args ...string) error {
	spec := deploy["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	if len(containers) == 0 {
		return errors.New("runner-guard-webhook Deployment has no container")
	}
	c := containers[0].(map[string]any)
	have, _ := c["args"].([]any)
	for _, a := range args {
		have = append(have, a)
	}
	c["args"] = have
	return nil
}

// DeployRunnerGuard applies the rendered manifests with kubectl and waits
// until both webhook replicas are ready and a replica has activated the
// webhook configuration.
func (c *Cluster) DeployRunnerGuard(ctx context.Context, manifests []byte) error {
	if err := c.apply(ctx, "runner-guard.yaml", manifests); err != nil {
		return err
	}
	return c.rolledOut(ctx, "deployment/runner-guard-webhook")
}

// apply writes manifests to the run directory as name and applies them.
func (c *Cluster) apply(ctx context.Context, name string, manifests []byte) error {
	path := c.file(name)
	if err := os.WriteFile(path, manifests, 0o644); err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, "apply", "--server-side", "-f", path); err != nil {
		return fmt.Errorf("kubectl apply -f %s: %w: %s", name, err, out)
	}
	return nil
}

// rolledOut waits for the rollouts of runner-guard's namespace, then for a
// replica to activate the webhook configuration.
func (c *Cluster) rolledOut(ctx context.Context, deployments ...string) error {
	for _, d := range deployments {
		wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		out, err := c.Kubectl(wctx, "-n", certs.Namespace, "rollout", "status", d, "--timeout=180s")
		cancel()
		if err != nil {
			return fmt.Errorf("rollout status %s: %w: %s\n%s", d, err, out, c.diagnose(certs.Namespace))
		}
	}
	return c.waitActivated(ctx)
}

// waitActivated waits until a replica has set every entry of the webhook
// configuration (shipped with failurePolicy Ignore) to its annotated policy
// (package webhook/activation), so a test that stops runner-guard next sees
// the policy users get.
func (c *Cluster) waitActivated(ctx context.Context) error {
	err := process.Poll(ctx, "webhook configuration activated", 2*time.Minute, func(ctx context.Context) error {
		vwc, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "runner-guard", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pending, err := notActivated(vwc)
		if err == nil && len(pending) > 0 {
			err = fmt.Errorf("entries not activated: %v", pending)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, c.diagnose(certs.Namespace))
	}
	return nil
}

// notActivated names the entries whose failurePolicy is not yet their annotated one.
func notActivated(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) ([]string, error) {
	wanted, err := activation.Wanted(vwc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, wh := range vwc.Webhooks {
		want, ok := wanted[activation.KindOf(wh)]
		if ok && (wh.FailurePolicy == nil || *wh.FailurePolicy != want) {
			out = append(out, wh.Name)
		}
	}
	return out, nil
}

// diagnose describes the namespace's pods and events, for a failure message.
// It has its own deadline: the caller's may be what just ran out.
func (c *Cluster) diagnose(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, _ := c.Kubectl(ctx, "-n", ns, "get", "pods", "-o", "wide")
	events, _ := c.Kubectl(ctx, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	describe, _ := c.Kubectl(ctx, "-n", ns, "describe", "pods")
	return "pods:\n" + pods + "\nevents:\n" + events + "\n" + describe
}
