package framework

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// The webhook's identity in the cluster, as in manifests/base.
const (
	webhookNamespace      = "runner-guard-system"
	webhookServiceAccount = "runner-guard"
	githubToken           = "ghp_e2e-token"
)

// WebhookUser is the user the local harness's webhook processes (and their
// drain) authenticate as: the token of webhookServiceAccount.
const WebhookUser = "system:serviceaccount:" + webhookNamespace + ":" + webhookServiceAccount

// Options configure an Env.
type Options struct {
	// Assets holds etcd, kube-apiserver, kube-controller-manager and kubectl.
	Assets string
	// WebhookBin is the runner-guard binary.
	WebhookBin string
	// Kustomize renders manifests/base and manifests/local.
	Kustomize string
	// RepoRoot is the repository root (manifests/ is read from there).
	RepoRoot string
	// Dir keeps data and logs; a temporary directory when empty.
	Dir string
	// WebhookArgs are extra flags for the webhook (e.g. --on-error=allow).
	WebhookArgs []string
	// ControlOverHTTP drives the in-process fake GitHub through its /_fake/
	// API, the way runs against a kind cluster do (E2E_GITHUB_CONTROL=http).
	ControlOverHTTP bool
	// ClientCertAuth turns on mutual TLS between the API server and the
	// webhook: the webhook runs with --client-ca-file, and kube-apiserver's
	// --admission-control-config-file presents a certificate that CA signed
	// when it calls the webhook (see clientcert.go). Start's registration
	// probe goes through the API server, so Start fails unless mutual TLS works.
	ClientCertAuth bool
	// Controllers is kube-controller-manager's --controllers; nil: the
	// harness's default, which leaves out the disruption controller (the
	// scenarios write budget statuses themselves).
	Controllers []string
	// ExtraControllers are kube-controller-manager controllers run besides
	// Controllers (ControlPlaneOptions.ExtraControllers).
	ExtraControllers []string
	// Replicas is how many webhook processes run, as the chart's Deployment
	// runs them (replicaCount): each with its own ports and POD_NAME
	// runner-guard-<i>, leader-elected, behind a round-robin proxy on the
	// address the API server calls (and on --events-bind-address's). 0 or 1:
	// one process, on that address itself.
	Replicas int
	Logf     func(format string, args ...any)
}

// Env is a running control plane with runner-guard registered in it.
type Env struct {
	*ControlPlane
	// GitHub controls the fake GitHub the webhook talks to.
	GitHub GitHub
	// GitHubURL is the fake's base URL (in-process fake only).
	GitHubURL string

	fake *ghfake.Fake // nil when the fake runs in the cluster

	opts        Options
	githubSrv   *http.Server
	controlSrv  *http.Server
	githubAddr  string
	replicas    []*webhookReplica
	webhookPort int         // the address the API server calls
	proxy       *roundRobin // on webhookPort, in front of several replicas
	eventsProxy *roundRobin // on --events-bind-address, likewise
	// replicaOverride is StartReplicas's count (0: Options.Replicas).
	replicaOverride int
	certDir         string
	kubeconfig      string          // the webhook's own (ServiceAccount) kubeconfig
	clientAuth      *clientCertAuth // nil unless Options.ClientCertAuth
	mu              sync.Mutex
}

// FromEnvironment fills Options from the variables `make e2e` sets.
func FromEnvironment() (Options, error) {
	root, err := process.RepoRoot()
	if err != nil {
		return Options{}, err
	}
	o := Options{
		Assets:          os.Getenv("KUBEBUILDER_ASSETS"),
		WebhookBin:      os.Getenv("RUNNER_GUARD_BIN"),
		Kustomize:       os.Getenv("KUSTOMIZE"),
		RepoRoot:        root,
		ControlOverHTTP: os.Getenv("E2E_GITHUB_CONTROL") == "http",
	}
	if o.WebhookBin == "" {
		o.WebhookBin = filepath.Join(root, "bin", "webhook")
	}
	if o.Kustomize == "" {
		o.Kustomize = filepath.Join(root, "bin", "kustomize")
	}
	var missing []string
	if o.Assets == "" {
		missing = append(missing, "KUBEBUILDER_ASSETS (control-plane binaries; `make k8s`)")
	}
	for _, f := range []string{o.WebhookBin, o.Kustomize} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f+" (`make build kustomize`)")
		}
	}
	if len(missing) > 0 {
		return o, fmt.Errorf("e2e prerequisites missing: %s; run `make e2e`", strings.Join(missing, ", "))
	}
	return o, nil
}

// Start brings up the whole environment. On error everything started is stopped.
func Start(ctx context.Context, o Options) (env *Env, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "runner-guard-e2e-"); err != nil {
			return nil, err
		}
	}
	fake := ghfake.New()
	e := &Env{opts: o, GitHub: fake, fake: fake}
	defer func() {
		if err != nil {
			e.Stop()
			err = fmt.Errorf("%w (logs in %s)", err, o.Dir)
		}
	}()
	ports := &process.Ports{}
	var apiserverArgs []string
	if o.ClientCertAuth {
		// The API server's admission kubeconfig names the webhook by its
		// host:port, so the port is chosen before the API server starts.
		if e.webhookPort, err = ports.Free(); err != nil {
			return e, err
		}
		if e.clientAuth, err = writeClientCertAuth(o.Dir, e.webhookAddr()); err != nil {
			return e, err
		}
		apiserverArgs = e.clientAuth.apiserverArgs()
	}
	cp := ControlPlaneOptions{Dir: o.Dir, Assets: o.Assets, Logf: o.Logf, APIServerArgs: apiserverArgs, Controllers: o.Controllers, ExtraControllers: o.ExtraControllers}
	if e.ControlPlane, err = startControlPlane(ctx, cp, ports); err != nil {
		return e, err
	}
	e.fake.SetToken(githubToken)
	if err = e.StartGitHub(); err != nil {
		return e, err
	}
	if o.ControlOverHTTP {
		// Its own listener: the scenarios stop the GitHub API, never the controls.
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return e, lerr
		}
		e.controlSrv = &http.Server{Handler: e.fake.ControlHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = e.controlSrv.Serve(l) }()
		e.GitHub = &RemoteGitHub{BaseURL: "http://" + l.Addr().String(), Fail: func(err error) { panic(fmt.Sprintf("fake GitHub control: %v", err)) }}
	}
	if err = e.installClusterObjects(ctx); err != nil {
		return e, err
	}
	if err = e.writeWebhookCerts(); err != nil {
		return e, err
	}
	if e.webhookPort == 0 {
		if e.webhookPort, err = e.ports.Free(); err != nil {
			return e, err
		}
	}
	if err = e.StartWebhook(ctx, o.WebhookArgs...); err != nil {
		return e, err
	}
	if err = e.register(ctx); err != nil {
		return e, err
	}
	return e, nil
}

// StartGitHub serves the fake GitHub on loopback, on the same address as before
// when it is restarted.
func (e *Env) StartGitHub() error {
	if e.fake == nil {
		return errors.New("the fake GitHub runs in the cluster; it cannot be restarted from here")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	addr := e.githubAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fake GitHub: %w", err)
	}
	e.githubAddr = l.Addr().String()
	e.GitHubURL = "http://" + e.githubAddr + "/"
	e.githubSrv = &http.Server{Handler: e.fake, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.githubSrv.Serve(l) }()
	return nil
}

// StopGitHub closes the fake GitHub: requests then get "connection refused".
func (e *Env) StopGitHub() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.githubSrv != nil {
		_ = e.githubSrv.Close()
		e.githubSrv = nil
	}
}

// installIdentity applies the Namespace, ServiceAccount and RBAC of
// manifests/base, so the webhook runs with exactly the permissions users grant.
func (e *Env) installIdentity(ctx context.Context) error {
	rendered, err := e.kustomize(ctx, "manifests/base")
	if err != nil {
		return err
	}
	docs, err := selectKinds(rendered, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	if err != nil {
		return err
	}
	if _, stderr, err := e.KubectlStdin(ctx, docs, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply runner-guard RBAC: %w: %s", err, stderr)
	}
	exp := int64(24 * 3600)
	tok, err := e.Client.CoreV1().ServiceAccounts(webhookNamespace).CreateToken(ctx, webhookServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for the webhook's ServiceAccount: %w", err)
	}
	e.kubeconfig = filepath.Join(e.Dir, "webhook.kubeconfig")
	return e.WriteKubeconfig(e.kubeconfig, WebhookUser, tok.Status.Token)
}

func (e *Env) writeWebhookCerts() error {
	b, err := certs.Generate(certs.Options{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	e.certDir = filepath.Join(e.Dir, "webhook-certs")
	if err := b.WriteDir(e.certDir); err != nil {
		return err
	}
	if e.clientAuth != nil {
		return e.clientAuth.writeCA(e.certDir)
	}
	return nil
}

// WebhookCA is the CA that signed the webhook's serving certificate.
func (e *Env) WebhookCA() ([]byte, error) { return os.ReadFile(filepath.Join(e.certDir, "ca.crt")) }

// StartWebhook runs the real binary and waits for /readyz.
func (e *Env) StartWebhook(ctx context.Context, extraArgs ...string) error {
	return e.StartWebhookWith(ctx, WebhookProcess{}, extraArgs...)
}

// StartWebhookWith is StartWebhook with environment variables for the
// binary and a command to run it under (see WebhookProcess). It runs every
// replica (Options.Replicas) and waits until each is ready.
func (e *Env) StartWebhookWith(ctx context.Context, proc WebhookProcess, extraArgs ...string) error {
	if !e.Local() {
		return errors.New("the webhook runs in the cluster; it cannot be started from here")
	}
	tokenFile := filepath.Join(e.Dir, "github-token")
	if err := os.WriteFile(tokenFile, []byte(githubToken+"\n"), 0o600); err != nil {
		return err
	}
	n, proxied := e.replicaCount()
	args, events := extraArgs, ""
	if proxied {
		events, args = withoutFlag(extraArgs, eventsBindFlag)
	}
	started, err := e.startReplicaProcesses(n, proxied, proc, tokenFile, events != "", args)
	e.replicas = started
	if err != nil {
		return errors.Join(err, e.stopReplicas())
	}
	if len(extraArgs) > 0 {
		e.opts.Logf("%d runner-guard replica(s) starting behind 127.0.0.1:%d with %s", n, e.webhookPort, strings.Join(extraArgs, " "))
	} else {
		e.opts.Logf("%d runner-guard replica(s) starting behind 127.0.0.1:%d", n, e.webhookPort)
	}
	for _, r := range e.replicas {
		err := process.WaitReady(ctx, "runner-guard webhook "+r.name, 30*time.Second, r.child, func(ctx context.Context) error {
			return HTTPGetOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", r.healthPort))
		})
		if err != nil {
			return errors.Join(err, e.stopReplicas())
		}
	}
	if proxied {
		if err := e.serveReplicas(events); err != nil {
			return errors.Join(err, e.stopReplicas())
		}
	}
	return nil
}

// startReplicaProcesses starts n webhook processes without waiting for
// them; proxied, each on a webhook port of its own (and an events port when
// withEvents), else the one on the registered address.
func (e *Env) startReplicaProcesses(n int, proxied bool, proc WebhookProcess, tokenFile string, withEvents bool, extraArgs []string) ([]*webhookReplica, error) {
	var started []*webhookReplica
	for i := range n {
		r := &webhookReplica{name: fmt.Sprintf("runner-guard-%d", i), port: e.webhookPort}
		ports := []*int{&r.healthPort, &r.metricsPort}
		if proxied {
			ports = append(ports, &r.port)
		}
		if withEvents {
			ports = append(ports, &r.eventsPort)
		}
		for _, p := range ports {
			free, err := e.ports.Free()
			if err != nil {
				return started, err
			}
			*p = free
		}
		args := e.webhookArgs(r, tokenFile, extraArgs)
		environ := proc.Env
		// Keep one log per start so a restart never hides the earlier run's log.
		logName := fmt.Sprintf("webhook-%d", time.Now().UnixNano())
		if proxied {
			// Each replica names itself in the budgets' reservations by its pod.
			environ = append(slices.Clone(proc.Env), "POD_NAME="+r.name)
			logName = fmt.Sprintf("webhook-%s-%d", r.name, time.Now().UnixNano())
		}
		bin := e.opts.WebhookBin
		if len(proc.Wrap) > 0 {
			bin, args = proc.Wrap[0], append(append(slices.Clone(proc.Wrap[1:]), bin), args...)
		}
		child, err := process.StartLogged(e.Dir, logName, process.Command(bin, args, environ))
		if err != nil {
			return started, fmt.Errorf("replica %s: %w", r.name, err)
		}
		r.child = child
		started = append(started, r)
	}
	return started, nil
}

// webhookArgs are replica r's flags: the harness's, then extraArgs (a later
// flag wins), then r's own events address when it has one.
func (e *Env) webhookArgs(r *webhookReplica, tokenFile string, extraArgs []string) []string {
	args := []string{
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", r.port),
		"--cert-dir=" + e.certDir,
		"--github-url=" + e.GitHubURL, "--github-allow-http",
		"--github-token-file=" + tokenFile,
		"--kubeconfig=" + e.kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", r.metricsPort), "--metrics-secure=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", r.healthPort),
		"--zap-log-level=debug",
	}
	if e.clientAuth != nil {
		args = append(args, "--client-ca-file="+e.clientAuth.caFile(e.certDir))
	}
	args = append(args, extraArgs...)
	if r.eventsPort != 0 {
		args = append(args, fmt.Sprintf("%s=127.0.0.1:%d", eventsBindFlag, r.eventsPort))
	}
	return args
}

// RestartWebhook stops the webhook and starts it again with other flags.
func (e *Env) RestartWebhook(ctx context.Context, extraArgs ...string) error {
	return e.RestartWebhookWith(ctx, WebhookProcess{}, extraArgs...)
}

// RestartWebhookWith is RestartWebhook with StartWebhookWith's process settings.
func (e *Env) RestartWebhookWith(ctx context.Context, proc WebhookProcess, extraArgs ...string) error {
	if err := e.StopWebhook(); err != nil {
		return err
	}
	return e.StartWebhookWith(ctx, proc, extraArgs...)
}

// StopWebhook stops every local webhook process (and the proxy in front of
// them); StartWebhook starts them again.
func (e *Env) StopWebhook() error {
	if !e.Local() {
		return errors.New("the webhook runs in the cluster; it cannot be stopped from here")
	}
	return e.stopReplicas()
}

// firstReplica is the first webhook process, whose exit ends a wait early;
// nil when none runs.
func (e *Env) firstReplica() *process.Child {
	if len(e.replicas) == 0 {
		return nil
	}
	return e.replicas[0].child
}

// Local reports whether this Env runs its own control plane, webhook and fake
// GitHub (false for an existing cluster reached with Connect).
func (e *Env) Local() bool { return e.fake != nil }

// Replicas is how many webhook processes run now (at least 1).
func (e *Env) Replicas() int {
	return max(1, len(e.replicas))
}

// ClientAs is an admin client that impersonates user (in groups, and
// system:masters so that anything is authorised): admission webhooks see
// user as the requester.
func (e *Env) ClientAs(user string, groups ...string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(e.ControlPlane.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:masters"}, groups...)}
	return kubernetes.NewForConfig(cfg)
}

// register applies manifests/local with this run's port and CA, then waits
// until the API server calls the webhook.
func (e *Env) register(ctx context.Context) error {
	rendered, err := e.kustomize(ctx, "manifests/local")
	if err != nil {
		return err
	}
	ca, err := e.WebhookCA()
	if err != nil {
		return err
	}
	placeholder := base64.StdEncoding.EncodeToString([]byte("CA_BUNDLE_PLACEHOLDER"))
	if !bytes.Contains(rendered, []byte(placeholder)) || !bytes.Contains(rendered, []byte("127.0.0.1:9443")) {
		return errors.New("manifests/local: rendered output lacks the caBundle placeholder or the 127.0.0.1:9443 url")
	}
	rendered = bytes.ReplaceAll(rendered, []byte(placeholder), []byte(base64.StdEncoding.EncodeToString(ca)))
	rendered = bytes.ReplaceAll(rendered, []byte("127.0.0.1:9443"), []byte(fmt.Sprintf("127.0.0.1:%d", e.webhookPort)))
	if err := os.WriteFile(filepath.Join(e.Dir, "webhook-configuration.yaml"), rendered, 0o644); err != nil {
		return err
	}
	if _, stderr, err := e.KubectlStdin(ctx, rendered, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply ValidatingWebhookConfiguration: %w: %s", err, stderr)
	}
	return e.waitForWebhook(ctx)
}

// waitForWebhook dry-runs the delete of a runner pod without a scope until the
// webhook's denial shows the API server has picked up the configuration.
func (e *Env) waitForWebhook(ctx context.Context) error {
	const ns = "runner-guard-probe"
	if err := e.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{"actions-runner": ""}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "probe"}}},
	}
	if _, err := e.CreateRunningPod(ctx, probe); err != nil {
		return err
	}
	return process.WaitReady(ctx, "ValidatingWebhookConfiguration in effect", 30*time.Second, e.firstReplica(), func(ctx context.Context) error {
		err := e.Client.CoreV1().Pods(ns).Delete(ctx, "probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "cannot tell where") {
			return nil
		}
		return fmt.Errorf("dry-run delete of the probe pod was not denied by runner-guard: %v", err)
	})
}

// CreateNamespace creates ns and waits for its default ServiceAccount.
func (e *Env) CreateNamespace(ctx context.Context, ns string) error {
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return process.WaitReady(ctx, "default ServiceAccount in "+ns, 30*time.Second, nil, func(ctx context.Context) error {
		_, err := e.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// CreateRunningPod plays scheduler and kubelet: it binds the pod to a Node and
// reports every container running.
func (e *Env) CreateRunningPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	if err := e.EnsureNode(ctx, NodeName); err != nil {
		return nil, err
	}
	pod = pod.DeepCopy()
	pod.ResourceVersion, pod.UID, pod.Status = "", "", corev1.PodStatus{}
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = NodeName
	}
	created, err := e.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return e.MarkRunning(ctx, created)
}

// MarkRunning reports every container of the pod running, as a kubelet would.
func (e *Env) MarkRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	pod.Status = fixture.RunningStatus(pod)
	pod.Status.HostIP, pod.Status.PodIP = "127.0.0.1", "127.0.0.1"
	updated, err := e.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("mark pod %s/%s running: %w", pod.Namespace, pod.Name, err)
	}
	return updated, nil
}

// NodeName is the Node the harness binds pods to.
const NodeName = "e2e-node-1"

// EnsureNode creates a Ready Node object (there is no kubelet behind it).
func (e *Env) EnsureNode(ctx context.Context, name string) error {
	_, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	created, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	// On a real cluster the node controllers update a new Node at once
	// (pod CIDR, taints): report Ready on the latest version.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := e.Client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		latest.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		_, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		return err
	})
}

// FinishTermination plays the kubelet for a pod already admitted for deletion:
// the final delete with grace period 0.
func (e *Env) FinishTermination(ctx context.Context, ns, name string) error {
	zero := int64(0)
	err := e.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Kubectl runs the cluster's kubectl as the admin.
func (e *Env) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return e.KubectlStdin(ctx, nil, args...)
}

// KubectlStdin runs kubectl with stdin.
func (e *Env) KubectlStdin(ctx context.Context, stdin []byte, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, e.KubectlPath(), append([]string{"--kubeconfig=" + e.ControlPlane.Kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func (e *Env) kustomize(ctx context.Context, dir string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.opts.Kustomize, "build", filepath.Join(e.opts.RepoRoot, dir))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, errb.String())
	}
	return out, nil
}

// Stop tears everything down. Logs stay in Dir.
func (e *Env) Stop() {
	_ = e.stopReplicas()
	e.StopGitHub()
	if e.controlSrv != nil {
		_ = e.controlSrv.Close()
	}
	if e.ControlPlane != nil {
		e.ControlPlane.Stop()
	}
}

// selectKinds keeps the YAML documents of the given kinds.
func selectKinds(multiDoc []byte, kinds ...string) ([]byte, error) {
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(multiDoc), 4096)
	var out bytes.Buffer
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if kind, _ := obj["kind"].(string); want[kind] {
			j, err := json.Marshal(obj)
			if err != nil {
				return nil, err
			}
			out.Write(j)
			out.WriteString("\n")
		}
	}
	return out.Bytes(), nil
}
