package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/test/render"
)

const githubToken = "ghp_chart-e2e-token"

// installEnv is a control plane with the chart installed in URL mode and the
// webhook binary running outside it with the chart's identity and certificate.
type installEnv struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	env     *framework.Env // the harness's pod helpers on this control plane
	fake    *ghfake.Fake
	fakeURL string
	port    int // the webhook's port, in webhook.url
	// front plays the Service at webhook.url's port, forwarding to the
	// running webhook process, so a new one can take over first (rollWebhook).
	front *framework.ServiceProxy
	// http2 starts the webhook with --enable-http2 (rollWebhook's phase).
	http2 bool
	// windows numbers startWindow's loops, naming their pods.
	windows int
	webhook *exec.Cmd
	waitErr chan error
	starts  int // webhook starts, numbering their logs
	// net is how the webhook reaches GitHub in scenarioChartNetwork: flags
	// and environment from the chart's render, and a command to run it under.
	net webhookNetwork
	// helmBin is the helm that installs and upgrades (default Helm 4, bin/helm).
	helmBin string
	// selfManaged runs the webhook with certificates.mode selfManaged's flag
	// instead of the generated certificate's files.
	selfManaged bool
}

// TestHelmInstallOnControlPlane installs the chart with generated certificates
// and webhook.url on a real API server, runs the webhook binary with the
// ServiceAccount, RBAC, certificate, credentials and config the chart created,
// and checks the delete scenarios, an upgrade that keeps the CA, the
// matchConditions during an outage, and that uninstall unblocks deletes.
func TestHelmInstallOnControlPlane(t *testing.T) {
	e := startInstallEnv(t)

	e.installRejectsBadValues()
	t.Run("every matrix render is valid on the API server", e.dryRunMatrix)
	// Deletes and evictions go on in a guarded namespace from before the
	// install to after the upgrade's rollout: none may fail.
	window := e.startWindow()
	notes := e.deploy("install")
	if !strings.Contains(notes, "--dry-run=server") || !strings.Contains(notes, "kubectl delete validatingwebhookconfiguration runner-guard") {
		t.Errorf("helm install NOTES do not show the dry-run check and the uninstall order:\n%s", notes)
	}
	if !strings.Contains(notes, "every entry is failurePolicy Ignore") || !strings.Contains(notes, "--webhook-configuration-name=runner-guard") {
		t.Errorf("helm install NOTES do not say the entries start at Ignore, or that an outside webhook needs --webhook-configuration-name:\n%s", notes)
	}
	if !strings.Contains(notes, "1 scope binding(s) (policy.scopeBindings)") {
		t.Errorf("helm install NOTES do not count the scope bindings:\n%s", notes)
	}
	t.Run("NOTES say what the NetworkPolicy admits", e.notesNetworkPolicy)
	caBefore, certBefore := e.caBundle(), e.servingCert()
	// Installed, no webhook serving: every entry is Ignore, and deletes
	// and evictions go on.
	e.requireFailurePolicies(admissionregistrationv1.Ignore)
	window.passes(2)
	e.startWebhook()
	// Serving a certificate the caBundle verifies: the webhook sets the
	// annotated policy (Fail), and from then on a runner pod is guarded.
	e.waitActivated()
	window.passes(2)
	e.waitForWebhook()

	t.Run("busy runner refused", e.scenarioBusy)
	t.Run("idle runner unregistered", e.scenarioIdle)
	t.Run("unknown runner allowed", e.scenarioUnknown)
	t.Run("busy runner eviction refused", e.scenarioEviction)

	// An upgrade that changes the policy keeps the generated CA: the API
	// server's caBundle and the served certificate stay valid. With Helm 4
	// it is a server-side apply after the activation took failurePolicy
	// over: it succeeds with no flag, and the entries stay Fail (the chart
	// renders the live policy), so there is no unguarded moment.
	e.deploy("upgrade", "policy.busyRetryAfter=20s")
	e.requireActivated()
	window.passes(2)
	window.stop()
	// A rollout: a new webhook takes over, then the old one stops. Over
	// HTTP/1.1 (the default) a review in flight on a keep-alive connection
	// the stopping webhook closes fails (EOF), so this runs with
	// --enable-http2, whose GOAWAY lets the API server retry on the new one.
	e.http2 = true
	e.stopWebhook()
	e.startWebhook()
	e.waitActivated()
	rollout := e.startWindow()
	rollout.passes(2)
	e.rollWebhook()
	e.waitActivated()
	rollout.passes(2)
	rollout.stop()
	e.http2 = false
	if after := e.caBundle(); after != caBefore {
		t.Fatal("helm upgrade replaced the CA in the webhook configuration")
	}
	if after := e.servingCert(); after != certBefore {
		t.Fatal("helm upgrade replaced the serving certificate Secret")
	}
	t.Run("busy runner refused after upgrade", e.scenarioBusy)

	t.Run("runner of an unbound scope let go without GitHub", e.scenarioUnboundScope)

	t.Run("GHES behind a private CA and a proxy, from the chart's values", e.scenarioChartNetwork)

	// The configuration is active again after the last upgrade's restart.
	e.waitActivated()
	t.Run("outage spares pods that are not running", e.scenarioOutage)

	// Guarded namespaces: the webhook's grants become a Role in each and the
	// binary watches runner pods there only; the scenarios pass with that.
	e.guardNamespace(guardedNamespace)
	t.Run("guarded namespace: busy runner refused", e.scenarioGuardedBusy)
	t.Run("guarded namespace: busy runner eviction refused", e.scenarioGuardedEviction)
	t.Run("guarded namespace: idle runner unregistered", e.scenarioGuardedIdle)

	e.helm("uninstall", releaseName, "--namespace", namespace, "--wait", "--timeout", "2m")
	t.Run("uninstall unblocks deletes", e.scenarioUninstalled)
}

func startInstallEnv(t *testing.T) *installEnv {
	t.Helper()
	assets := fixture.KubebuilderAssets(t)
	webhookBin(t)
	render.HelmBin(t)

	dir, err := os.MkdirTemp("", "runner-guard-chart-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	e := &installEnv{t: t, ctx: ctx, dir: dir}
	cp, err := framework.StartControlPlane(ctx, dir, assets, t.Logf)
	if err != nil {
		cancel()
		t.Fatalf("control plane: %v (logs in %s)", err, dir)
	}
	e.env = &framework.Env{ControlPlane: cp}
	t.Cleanup(func() {
		e.stopWebhook()
		cp.Stop()
		cancel()
		if t.Failed() || os.Getenv("E2E_KEEP_LOGS") != "" {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})

	e.fake = ghfake.New()
	e.fake.SetToken(githubToken)
	srv := httptest.NewServer(e.fake)
	t.Cleanup(srv.Close)
	e.fakeURL = srv.URL + "/"
	if e.port, err = process.FreePort(); err != nil {
		t.Fatal(err)
	}
	if e.front, err = framework.NewServiceProxy(fmt.Sprintf("127.0.0.1:%d", e.port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.front.Close)
	return e
}

func (e *installEnv) webhookURL() string { return fmt.Sprintf("https://127.0.0.1:%d", e.port) }

// releaseArgs are helm's arguments to install or upgrade (verb) the release
// in URL mode, at the webhook's address.
func (e *installEnv) releaseArgs(verb string) []string {
	args := []string{verb, releaseName, render.ChartDir(e.t), "--namespace", namespace}
	if verb == "install" {
		args = append(args, "--create-namespace")
	}
	return append(args, "--values", "testdata/values/external-url.yaml", "--set", "webhook.url="+e.webhookURL())
}

// deploy installs or upgrades (verb) the release with the fake GitHub's
// token and waits for it; each of set is a --set value. It returns helm's
// output (the NOTES).
func (e *installEnv) deploy(verb string, set ...string) string {
	e.t.Helper()
	args := append(e.releaseArgs(verb), "--wait", "--timeout", "2m", "--set", "github.credentials.token="+githubToken)
	for _, v := range set {
		args = append(args, "--set", v)
	}
	return e.helm(args...)
}

// helm runs helm against the control plane as its admin.
func (e *installEnv) helm(args ...string) string {
	e.t.Helper()
	out, err := e.helmErr(args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *installEnv) helmErr(args ...string) (string, error) {
	e.t.Helper()
	bin := e.helmBin
	if bin == "" {
		bin = render.HelmBin(e.t)
	}
	out, err := render.HelmWith(e.t, bin, append(args, "--kubeconfig", e.env.Kubeconfig)...)
	return string(out), err
}

// installRejectsBadValues: values the chart refuses fail helm install itself,
// naming the value, and leave nothing behind.
func (e *installEnv) installRejectsBadValues() {
	e.t.Helper()
	_, err := e.helmErr(append(e.releaseArgs("install"), "--set", "policy.githubTimeout=9s")...)
	if err == nil || !strings.Contains(err.Error(), "policy.githubTimeout") {
		e.t.Fatalf("helm install with githubTimeout 9s: %v, want an error naming policy.githubTimeout", err)
	}
	_, err = e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, "runner-guard", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		e.t.Fatalf("a refused install left the webhook configuration: %v", err)
	}
	// Without a scope binding (and without policy.allowAnyScope) nothing is installed.
	_, err = e.helmErr(append(e.releaseArgs("install"), "--set", "policy.scopeBindings=null")...)
	if err == nil || !strings.Contains(err.Error(), "policy.scopeBindings") || !strings.Contains(err.Error(), "policy.allowAnyScope") {
		e.t.Fatalf("helm install without a scope binding: %v, want an error naming policy.scopeBindings and policy.allowAnyScope", err)
	}
	if _, err := e.env.Client.CoreV1().ConfigMaps(namespace).Get(e.ctx, "runner-guard-config", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		e.t.Fatalf("an install refused for its missing binding left the config: %v", err)
	}
}

// notesNetworkPolicy renders the NOTES of an in-cluster install: with no
// webhookSources they say the webhook port is open to all sources and point
// at the value; with sources they say only those are admitted.
func (e *installEnv) notesNetworkPolicy(t *testing.T) {
	notes := func(args ...string) string {
		out, err := e.helmErr(append([]string{"install", "rg-notes", render.ChartDir(t), "--namespace", "chart-notes", "--dry-run=client",
			"--values", "testdata/values/generate-app.yaml"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := notes("--set", "networkPolicy.webhookSources=null"); !strings.Contains(out, "admits ALL sources") ||
		!strings.Contains(out, "networkPolicy.webhookSources") || !strings.Contains(out, "webhook.clientCAConfigMap") {
		t.Errorf("NOTES without webhookSources do not warn of an open webhook port:\n%s", out)
	}
	if out := notes("--set", "networkPolicy.webhookSources=null"); !strings.Contains(out, "an eviction review carries no pod UID") {
		t.Errorf("NOTES without webhookSources do not name the risk of forged eviction reviews:\n%s", out)
	}
	if out := notes(); strings.Contains(out, "an eviction review carries no pod UID") {
		t.Errorf("NOTES with webhookSources still name the forged-review risk:\n%s", out)
	}
	if out := notes(); !strings.Contains(out, "admits only networkPolicy.webhookSources") {
		t.Errorf("NOTES with webhookSources:\n%s", out)
	}
	if out := notes("--set", "policy.scopeBindings=null", "--set", "policy.allowAnyScope=true"); !strings.Contains(out, "may name any GitHub scope (policy.allowAnyScope)") {
		t.Errorf("NOTES with allowAnyScope do not say every scope is open:\n%s", out)
	}
	// Which namespaces' evictions are guarded, and how to opt one in.
	if out := notes(); !strings.Contains(out, "Evictions (drains, autoscalers) are guarded in: namespaces labelled runner-guard.io/guard=enabled") ||
		!strings.Contains(out, "kubectl label namespace RUNNER_NAMESPACE runner-guard.io/guard=enabled") {
		t.Errorf("NOTES do not say evictions are guarded in labelled namespaces only, or how to label one:\n%s", out)
	}
	if out := notes("--set", "policy.evictionsInAllNamespaces=true"); !strings.Contains(out, "guarded in: all but kube-system, chart-notes (failurePolicy Ignore") {
		t.Errorf("NOTES with evictionsInAllNamespaces:\n%s", out)
	}
	if out := notes("--set", "replicaCount=1"); !strings.Contains(out, "PodDisruptionBudget: none with replicaCount 1") {
		t.Errorf("NOTES with one replica do not say there is no PodDisruptionBudget:\n%s", out)
	}
}

// dryRunMatrix applies each matrix case's render with a server-side dry run,
// so the API server validates every field the chart writes (CEL of the
// matchConditions, the preStop sleep action, the restricted Pod Security
// profile). cert-manager and Prometheus Operator objects (ServiceMonitor,
// PrometheusRule) are left out: their CRDs are not installed here (manifests'
// own test covers cert-manager's; test/chart's monitoring tests read the
// PrometheusRule).
func (e *installEnv) dryRunMatrix(t *testing.T) {
	ns := "chart-dryrun"
	if err := e.env.CreateNamespace(e.ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Runner namespaces the matrix grants Roles in, and the restricted profile
	// the kustomize Namespace enforces.
	for _, n := range []string{"arc-runners", "arc-runners-gpu", "ci-runners"} {
		if err := e.env.CreateNamespace(e.ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		t.Fatal(err)
	}
	for _, vf := range matrix(t) {
		out, err := render.Helm(t, "template", "rg-dryrun", render.ChartDir(t), "--namespace", ns, "--values", vf)
		if err != nil {
			t.Fatal(err)
		}
		objs := render.MustParse(t, out)
		var docs []string
		for _, o := range objs {
			if strings.HasSuffix(o.GetAPIVersion(), "cert-manager.io/v1") || strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") {
				continue
			}
			docs = append(docs, render.JSON(t, o.Object))
		}
		stdout, stderr, err := e.env.KubectlStdin(e.ctx, []byte(strings.Join(docs, "\n")), "apply", "--server-side", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Errorf("%s: server-side dry run: %v\n%s", caseName(vf), err, stderr)
			continue
		}
		if strings.Contains(stderr, "Warning") {
			t.Errorf("%s: the API server warned:\n%s", caseName(vf), stderr)
		}
		if n := strings.Count(stdout, "(server dry run)"); n != len(docs) {
			t.Errorf("%s: %d objects applied, want %d:\n%s", caseName(vf), n, len(docs), stdout)
		}
	}
}

// caBundle is the (single) caBundle of the installed webhook configuration.
func (e *installEnv) caBundle() string {
	e.t.Helper()
	vwc, err := e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ca := string(vwc.Webhooks[0].ClientConfig.CABundle)
	for _, wh := range vwc.Webhooks {
		if string(wh.ClientConfig.CABundle) != ca || ca == "" {
			e.t.Fatalf("%s caBundle differs or is empty", wh.Name)
		}
		if u := deref(wh.ClientConfig.URL); u != e.webhookURL()+"/validate-runner-pods" {
			e.t.Fatalf("%s url %q", wh.Name, u)
		}
	}
	return ca
}

// servingCert is the generated certificate Secret's tls.crt.
func (e *installEnv) servingCert() string {
	e.t.Helper()
	s, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, "runner-guard-webhook-cert", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(s.Data["tls.crt"])
}

// startWebhook runs bin/webhook the way the chart's Deployment would: its
// ServiceAccount's token, the serving certificate and GitHub Secret the chart
// wrote, and the chart's --config file.
func (e *installEnv) startWebhook() {
	e.t.Helper()
	files := filepath.Join(e.dir, "chart-files")
	certDir := filepath.Join(files, "certs")
	certArg := "--cert-dir=" + certDir
	if e.selfManaged {
		// The chart's Deployment args: the webhook makes and serves its own.
		certArg = "--self-managed-cert-secret=runner-guard-webhook-cert"
	} else {
		e.writeSecret("runner-guard-webhook-cert", certDir, "tls.crt", "tls.key")
	}
	e.writeSecret("runner-guard-github", files, "github_token")
	cm, err := e.env.Client.CoreV1().ConfigMaps(namespace).Get(e.ctx, "runner-guard-config", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	configFile := filepath.Join(files, "config.yaml")
	if err := os.WriteFile(configFile, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		e.t.Fatal(err)
	}
	kubeconfig := e.serviceAccountKubeconfig()

	ports, err := process.FreePorts(3)
	if err != nil {
		e.t.Fatal(err)
	}
	bin := webhookBin(e.t)
	args := []string{
		// Behind e.front, as a pod behind the chart's Service; it activates
		// the chart's webhook configuration as the Deployment's pods do.
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(ports[2]),
		"--webhook-configuration-name=" + releaseName,
		certArg, "--kubeconfig=" + kubeconfig,
		"--github-url=" + e.fakeURL, "--github-token-file=" + filepath.Join(files, "github_token"),
		"--config=" + configFile,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
	}
	// The fake GitHub speaks plain HTTP; a binary that refuses that wants the flag.
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); strings.Contains(string(help), "--github-allow-http") {
		args = append(args, "--github-allow-http")
	}
	args = append(args, e.net.args...)
	if e.http2 {
		args = append(args, "--enable-http2")
	}
	e.starts++
	logFile, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("webhook-%d.log", e.starts)))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(e.net.wrap) > 0 {
		bin, args = e.net.wrap[0], append(append(slices.Clone(e.net.wrap[1:]), bin), args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(append(os.Environ(), "POD_NAMESPACE="+namespace), e.net.env...)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	// This process's own channel: rollWebhook replaces e.waitErr before
	// the process it replaces exits.
	waitErr := make(chan error, 1)
	e.webhook, e.waitErr = cmd, waitErr
	go func() { waitErr <- cmd.Wait(); logFile.Close() }()
	e.eventually("webhook ready", 60*time.Second, func() error {
		select {
		case err := <-e.waitErr:
			e.waitErr <- err
			return fmt.Errorf("webhook exited: %v (see %s/webhook-%d.log)", err, e.dir, e.starts)
		default:
		}
		return process.Ready(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	})
	// Ready: the Service sends it new connections.
	e.front.SetBackend(fmt.Sprintf("127.0.0.1:%d", ports[2]))
}

func (e *installEnv) stopWebhook() {
	e.stopProcess(e.webhook, e.waitErr)
	e.webhook = nil
}

// stopProcess interrupts a webhook process and waits for it to exit.
func (e *installEnv) stopProcess(cmd *exec.Cmd, waitErr chan error) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	var err error
	select {
	case err = <-waitErr:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		err = <-waitErr
	}
	// Stopped on purpose: the exit status is only worth a log line.
	e.t.Logf("webhook stopped: %v", err)
}

// writeSecret copies keys of a Secret the chart created into files in dir.
func (e *installEnv) writeSecret(name, dir string, keys ...string) {
	e.t.Helper()
	s, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("Secret %s the chart should have created: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			e.t.Fatalf("Secret %s has no %s", name, k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), s.Data[k], 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
}

// serviceAccountKubeconfig authenticates as the chart's ServiceAccount, so the
// webhook has exactly the chart's RBAC.
func (e *installEnv) serviceAccountKubeconfig() string {
	e.t.Helper()
	exp := int64(3600)
	tok, err := e.env.Client.CoreV1().ServiceAccounts(namespace).CreateToken(e.ctx, "runner-guard",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("token of the chart's ServiceAccount: %v", err)
	}
	path := filepath.Join(e.dir, "webhook.kubeconfig")
	if err := e.env.WriteKubeconfig(path, "system:serviceaccount:"+namespace+":runner-guard", tok.Status.Token); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// waitForWebhook waits until the webhook guards a new namespace's runner pods.
func (e *installEnv) waitForWebhook() {
	e.t.Helper()
	scope, ns := e.scenario("probe")
	e.waitGuarded("webhook configuration in effect", ns, scope)
}

// waitGuarded registers a busy runner with a pod called probe in ns and
// retries a dry-run delete of that pod until the API server calls the
// webhook and it refuses.
func (e *installEnv) waitGuarded(what, ns string, scope ghclient.Scope) {
	e.t.Helper()
	e.runnerPod(ns, scope, "probe", true)
	e.eventually(what, 60*time.Second, func() error {
		err := e.env.Client.CoreV1().Pods(ns).Delete(e.ctx, "probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "runner busy") {
			return nil
		}
		return fmt.Errorf("dry-run delete of a busy runner's pod: %v", err)
	})
}

// scenario makes a namespace and a GitHub organization of that name (the
// fake answers 404 for an organization it does not hold, as GitHub does).
func (e *installEnv) scenario(name string) (ghclient.Scope, string) {
	e.t.Helper()
	scope, err := ghclient.OrgScope("org-" + name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fake.AddScope(scope)
	ns := "chart-" + name
	if err := e.env.CreateNamespace(e.ctx, ns); err != nil {
		e.t.Fatal(err)
	}
	return scope, ns
}

// runnerPod registers a runner (busy or idle) and creates its running legacy
// runner pod with the runner ID annotation.
func (e *installEnv) runnerPod(ns string, scope ghclient.Scope, name string, busy bool) *corev1.Pod {
	e.t.Helper()
	id := e.fake.AddRunner(scope, name)
	e.fake.SetBusy(scope, name, busy)
	pod := legacyRunnerPod(ns, name, scope.Name)
	pod.Annotations = map[string]string{"actions-runner/id": strconv.FormatInt(id, 10)}
	created, err := e.env.CreateRunningPod(e.ctx, pod)
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

func legacyRunnerPod(ns, name, org string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"actions-runner": ""}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "runner", Image: "actions-runner:e2e",
			Env: []corev1.EnvVar{{Name: "RUNNER_NAME", Value: name}, {Name: "RUNNER_ORG", Value: org}},
		}}},
	}
}

func (e *installEnv) kubectl(args ...string) (string, error) {
	stdout, stderr, err := e.env.Kubectl(e.ctx, args...)
	if err != nil {
		return stdout + stderr, fmt.Errorf("kubectl %v: %w: %s", args, err, stderr)
	}
	return stdout, nil
}

func (e *installEnv) deletes(scope ghclient.Scope) int {
	n := 0
	for _, r := range e.fake.Requests() {
		if r.Method == http.MethodDelete && strings.Contains(r.Path, "/orgs/"+scope.Name+"/") {
			n++
		}
	}
	return n
}

func (e *installEnv) requireAlive(ns, name string) {
	e.t.Helper()
	p, err := e.env.Client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		e.t.Errorf("pod %s/%s: %v (deleting: %v), want it kept", ns, name, err, p != nil && p.DeletionTimestamp != nil)
	}
}

func (e *installEnv) scenarioBusy(t *testing.T) {
	scope, ns := e.scenario("busy-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10))
	e.runnerPod(ns, scope, "runner-busy", true)
	out, err := e.kubectl("-n", ns, "delete", "pod", "runner-busy", "--wait=false")
	if err == nil || !strings.Contains(out, "runner busy") {
		t.Errorf("delete of a busy runner's pod: %v, output %q; want refused with runner busy", err, out)
	}
	e.requireAlive(ns, "runner-busy")
	if _, ok := e.fake.Runner(scope, "runner-busy"); !ok {
		t.Error("the busy runner was unregistered")
	}
	if n := e.deletes(scope); n < 1 {
		t.Errorf("GitHub saw %d DELETEs, want the unregister attempt", n)
	}
}

func (e *installEnv) scenarioIdle(t *testing.T) {
	scope, ns := e.scenario("idle")
	e.runnerPod(ns, scope, "runner-idle", false)
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-idle", "--wait=false"); err != nil {
		t.Fatalf("delete of an idle runner's pod: %v %s", err, out)
	}
	if _, ok := e.fake.Runner(scope, "runner-idle"); ok {
		t.Error("the idle runner is still registered")
	}
	if n := e.deletes(scope); n != 1 {
		t.Errorf("GitHub saw %d DELETEs, want 1", n)
	}
}

func (e *installEnv) scenarioUnknown(t *testing.T) {
	scope, ns := e.scenario("unknown")
	if _, err := e.env.CreateRunningPod(e.ctx, legacyRunnerPod(ns, "runner-ghost", scope.Name)); err != nil {
		t.Fatal(err)
	}
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-ghost", "--wait=false"); err != nil {
		t.Fatalf("delete of a runner pod GitHub does not know: %v %s", err, out)
	}
	if n := e.deletes(scope); n != 0 {
		t.Errorf("GitHub saw %d DELETEs for an unknown runner, want 0", n)
	}
}

func (e *installEnv) scenarioEviction(t *testing.T) {
	scope, ns := e.scenario("evict")
	// Without policy.guardedNamespaces only labelled namespaces' evictions
	// are reviewed.
	e.optIn(ns)
	e.runnerPod(ns, scope, "runner-busy", true)
	err := e.evict(ns, "runner-busy", nil)
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("eviction of a busy runner's pod: %v, want 429 (drains retry)", err)
	}
	if delay, ok := apierrors.SuggestsClientDelay(err); !ok || delay <= 0 {
		t.Errorf("eviction refused without retryAfterSeconds: %v", err)
	}
	e.requireAlive(ns, "runner-busy")
}

// scenarioOutage stops the webhook: with failurePolicy Fail a running runner
// pod's delete is refused, but the matchConditions keep a pending runner pod's
// delete off the webhook, so it goes through. At the defaults the evictions
// entry is Fail too (a busy legacy runner has no job budget without listings
// or deliveries): an idle runner's eviction in a labelled namespace is
// refused, while one in a namespace nobody named never waits on runner-guard.
func (e *installEnv) scenarioOutage(t *testing.T) {
	scope, ns := e.scenario("outage")
	e.runnerPod(ns, scope, "runner-running", false)
	pending := legacyRunnerPod(ns, "runner-pending", scope.Name)
	if _, err := e.env.Client.CoreV1().Pods(ns).Create(e.ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	optedScope, opted := e.scenario("outage-labelled")
	e.optIn(opted)
	e.runnerPod(opted, optedScope, "runner-running", false)
	e.stopWebhook()
	// The API server cannot reach the webhook to tell an idle runner from a
	// busy one: under Fail it refuses both.
	if err := e.dryRunEvict(opted, "runner-running"); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("eviction of an idle runner's pod in a labelled namespace with the webhook down: %v; want failed calling webhook (evictions Fail at the defaults)", err)
	}
	if err := e.dryRunEvict(ns, "runner-running"); err != nil {
		t.Errorf("eviction in an unlabelled namespace with the webhook down: %v; want it off the webhook's path", err)
	}
	out, err := e.kubectl("-n", ns, "delete", "pod", "runner-running", "--wait=false")
	if err == nil || !strings.Contains(out, "failed calling webhook") {
		t.Errorf("delete of a running runner pod with the webhook down: %v %q; want failed calling webhook", err, out)
	}
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-pending", "--wait=false"); err != nil {
		t.Errorf("delete of a pending runner pod with the webhook down: %v %s; want it spared by matchConditions", err, out)
	}
}

// optIn labels a namespace so the evictions entry covers it.
func (e *installEnv) optIn(ns string) {
	e.t.Helper()
	if _, err := e.kubectl("label", "namespace", ns, "runner-guard.io/guard=enabled", "--overwrite"); err != nil {
		e.t.Fatal(err)
	}
}

// dryRunEvict posts one server-side dry-run eviction, without client retries.
func (e *installEnv) dryRunEvict(ns, name string) error {
	return e.evict(ns, name, &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
}

// evict posts one eviction: client-go would otherwise retry a 429 after its
// Retry-After, up to ten times, as drains do.
func (e *installEnv) evict(ns, name string, opts *metav1.DeleteOptions) error {
	body, err := json.Marshal(&policyv1.Eviction{
		TypeMeta:      metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta:    metav1.ObjectMeta{Name: name, Namespace: ns},
		DeleteOptions: opts,
	})
	if err != nil {
		return err
	}
	return e.env.Client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(name).
		SubResource("eviction").MaxRetries(0).SetHeader("Content-Type", "application/json").
		Body(body).Do(e.ctx).Error()
}

// scenarioUninstalled: after helm uninstall no webhook configuration is left,
// so a busy runner's pod can be deleted again with the webhook down.
func (e *installEnv) scenarioUninstalled(t *testing.T) {
	_, err := e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, "runner-guard", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("webhook configuration after uninstall: %v, want not found", err)
	}
	for _, get := range []func() error{
		func() error {
			_, err := e.env.Client.RbacV1().ClusterRoles().Get(e.ctx, "runner-guard", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.env.Client.CoreV1().ServiceAccounts(namespace).Get(e.ctx, "runner-guard", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("chart object after uninstall: %v, want not found", err)
		}
	}
	scope, ns := e.scenario("after-uninstall")
	e.runnerPod(ns, scope, "runner-busy", true)
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-busy", "--wait=false"); err != nil {
		t.Errorf("delete after uninstall: %v %s; want nothing blocking", err, out)
	}
}

// scenarioUnboundScope: a runner pod in a bound namespace whose runner names
// an organization outside the binding (chart-* may name org-* only) is let go
// without any GitHub request, with a warning naming scopeBindings.
func (e *installEnv) scenarioUnboundScope(t *testing.T) {
	ns := "chart-unbound"
	if err := e.env.CreateNamespace(e.ctx, ns); err != nil {
		t.Fatal(err)
	}
	scope, err := ghclient.OrgScope("stranger")
	if err != nil {
		t.Fatal(err)
	}
	e.runnerPod(ns, scope, "runner-stranger", true)
	out, err := e.kubectl("-n", ns, "delete", "pod", "runner-stranger", "--wait=false")
	if err != nil {
		t.Fatalf("delete of a runner pod of an unbound scope: %v %s; want it let go", err, out)
	}
	if n := e.requests(scope); n != 0 {
		t.Errorf("GitHub saw %d requests for the unbound organization, want 0", n)
	}
	if _, ok := e.fake.Runner(scope, "runner-stranger"); !ok {
		t.Error("the runner of an unbound scope was unregistered")
	}
}

// requests counts GitHub requests about one organization.
func (e *installEnv) requests(scope ghclient.Scope) int {
	n := 0
	for _, r := range e.fake.Requests() {
		if strings.Contains(r.Path, "/orgs/"+scope.Name+"/") {
			n++
		}
	}
	return n
}

// guardedNamespace is the namespace the last phase guards alone; the
// external-url values bind it (chart-*) to its organization (org-guarded).
const guardedNamespace = "chart-guarded"

// guardNamespace upgrades the release to guard ns only, checks the webhook's
// grants moved from the ClusterRole to a Role there, and restarts the webhook
// with the new config (runnerNamespaces), as the Deployment's rollout would.
func (e *installEnv) guardNamespace(ns string) {
	e.t.Helper()
	if err := e.env.CreateNamespace(e.ctx, ns); err != nil {
		e.t.Fatal(err)
	}
	e.deploy("upgrade", "policy.guardedNamespaces={"+ns+"}")
	if _, err := e.env.Client.RbacV1().ClusterRoles().Get(e.ctx, "runner-guard", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		e.t.Fatalf("ClusterRole runner-guard with guarded namespaces: %v, want not found", err)
	}
	if _, err := e.env.Client.RbacV1().Roles(ns).Get(e.ctx, "runner-guard", metav1.GetOptions{}); err != nil {
		e.t.Fatalf("Role runner-guard in the guarded namespace: %v", err)
	}
	e.stopWebhook()
	e.startWebhook()
	e.waitGuarded("webhook guarding "+ns, ns, e.guardedScope())
}

func (e *installEnv) guardedScope() ghclient.Scope {
	e.t.Helper()
	scope, err := ghclient.OrgScope("org-guarded")
	if err != nil {
		e.t.Fatal(err)
	}
	return scope
}

func (e *installEnv) scenarioGuardedBusy(t *testing.T) {
	scope := e.guardedScope()
	e.runnerPod(guardedNamespace, scope, "runner-busy", true)
	out, err := e.kubectl("-n", guardedNamespace, "delete", "pod", "runner-busy", "--wait=false")
	if err == nil || !strings.Contains(out, "runner busy") {
		t.Errorf("delete of a busy runner's pod: %v, output %q; want refused with runner busy", err, out)
	}
	e.requireAlive(guardedNamespace, "runner-busy")
}

// scenarioGuardedEviction: the eviction is decided from the live pod, read
// with the Role alone.
func (e *installEnv) scenarioGuardedEviction(t *testing.T) {
	err := e.evict(guardedNamespace, "runner-busy", nil)
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("eviction of a busy runner's pod: %v, want 429 (drains retry)", err)
	}
	e.requireAlive(guardedNamespace, "runner-busy")
}

func (e *installEnv) scenarioGuardedIdle(t *testing.T) {
	scope := e.guardedScope()
	e.runnerPod(guardedNamespace, scope, "runner-idle", false)
	if out, err := e.kubectl("-n", guardedNamespace, "delete", "pod", "runner-idle", "--wait=false"); err != nil {
		t.Fatalf("delete of an idle runner's pod: %v %s", err, out)
	}
	if _, ok := e.fake.Runner(scope, "runner-idle"); ok {
		t.Error("the idle runner is still registered")
	}
}

func (e *installEnv) eventually(what string, timeout time.Duration, check func() error) {
	e.t.Helper()
	process.Eventually(e.t, e.ctx, what+" (logs in "+e.dir+")", timeout, check)
}
