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
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/webhook/activation"
)

// FakeGitHubIP is the ClusterIP the deployment pins for the in-cluster fake
// GitHub: the node runs no cluster DNS, so the webhook and the runners reach
// it by address.
const FakeGitHubIP = "10.96.0.50"

// FakeGitHubURL is the fake GitHub as pods see it.
const FakeGitHubURL = "http://" + FakeGitHubIP + ":8080"

// RenderRunnerGuard renders what a user applies without cert-manager: the
// e2e-kind overlay (manifests/default plus the fake GitHub and its token
// Secret) with cert-manager's Issuer and Certificate replaced by a serving
// certificate Secret from the certs package and the CA bundle written into
// the ValidatingWebhookConfiguration, and the fake GitHub addressed by its
// pinned ClusterIP instead of its DNS name.
func RenderRunnerGuard(ctx context.Context, repoRoot, kustomize string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, kustomize, "build", filepath.Join(repoRoot, "manifests", "e2e-kind"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build manifests/e2e-kind: %w: %s", err, stderr.String())
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

// adjust rewrites one rendered object in place; false drops it.
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
			cc, _ := h.(map[string]any)["clientConfig"].(map[string]any)
			if cc == nil {
				return false, fmt.Errorf("webhook without clientConfig in %s", name)
			}
			cc["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
		}
		return len(hooks) > 0, nil
	case kind == "Service" && name == "fakegithub":
		o["spec"].(map[string]any)["clusterIP"] = FakeGitHubIP
	case kind == "Deployment" && name == "runner-guard-webhook":
		return true, rewriteGitHubURL(o)
	}
	return true, nil
}

// rewriteGitHubURL points the webhook's --github-url at the fake's address.
func rewriteGitHubURL(deploy map[string]any) error {
	spec := deploy["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		args, _ := c.(map[string]any)["args"].([]any)
		for i, a := range args {
			if s, _ := a.(string); strings.HasPrefix(s, "--github-url=") {
				args[i] = "--github-url=" + FakeGitHubURL + "/"
				return nil
			}
		}
	}
	return errors.New("runner-guard-webhook Deployment has no --github-url argument to point at the fake")
}

// DeployRunnerGuard applies the rendered manifests with kubectl and waits for
// the fake GitHub and both webhook replicas to be rolled out.
func (c *Cluster) DeployRunnerGuard(ctx context.Context, manifests []byte) error {
	path := filepath.Join(c.opts.Dir, "runner-guard.yaml")
	if err := os.WriteFile(path, manifests, 0o644); err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, "apply", "--server-side", "-f", path); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	for _, d := range []string{"deployment/fakegithub", "deployment/runner-guard-webhook"} {
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
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var out bytes.Buffer
		cmd := c.KubectlCommand(ctx, "get", "validatingwebhookconfiguration", "runner-guard", "-o", "json")
		cmd.Stdout = &out
		err := cmd.Run()
		var pending []string
		if err == nil {
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			if err = json.Unmarshal(out.Bytes(), &vwc); err == nil {
				pending, err = notActivated(&vwc)
			}
		}
		if err == nil && len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook configuration not activated: %v %v\n%s", pending, err, c.diagnose(certs.Namespace))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
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
