package node

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// Options says where the binaries are and where the run keeps its files.
type Options struct {
	// K8sAssets has etcd, kube-apiserver, kube-controller-manager and kubectl
	// (hack/build-k8s.sh).
	K8sAssets string
	// NodeAssets has kubelet, kube-scheduler, kube-proxy, containerd, ctr,
	// containerd-shim-runc-v2 and cni/ (hack/build-node.sh).
	NodeAssets string
	// Dir receives configuration, certificates and every component's log.
	Dir string
	// Images are docker-archive tarballs imported into containerd before the
	// kubelet starts; the first must hold PauseImage.
	Images []string
	Logf   func(string, ...any)
}

// PauseImage is the sandbox image containerd is told to use; the tests build
// it (test/node/cmd/pause) because no registry is reachable.
const PauseImage = "docker.io/library/runner-guard-pause:latest"

// Cluster is the running node and its control plane.
type Cluster struct {
	opts Options
	// Kubeconfig is the admin kubeconfig (group system:masters). Its server
	// address is only reachable inside the node's network namespace: use
	// Kubectl, or Config whose dialer enters the namespace.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface

	pki        *pki
	tokens     map[string]string // user -> token
	components []*process.Child  // in start order
	sock       string            // containerd's socket
}

// Start brings the whole node up. On error everything started is stopped and
// cleaned up before it returns.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := Cleanup(opts.Logf); err != nil {
		return nil, fmt.Errorf("leftovers of an earlier run: %w", err)
	}
	c = &Cluster{opts: opts, tokens: map[string]string{}, sock: filepath.Join(RunDir, "containerd.sock")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"network namespace", createNetns},
		{"certificates", c.writeCredentials},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.f(ctx); err != nil {
			return c, fmt.Errorf("%s: %w", s.name, err)
		}
		opts.Logf("%s up in %s", s.name, time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// Stop ends the components in reverse order, then removes every trace of
// the node (see Cleanup). Logs stay in Dir.
func (c *Cluster) Stop() {
	for i := len(c.components) - 1; i >= 0; i-- {
		if err := c.components[i].Stop(10 * time.Second); err != nil {
			c.opts.Logf("%v", err)
		}
	}
	if err := Cleanup(c.opts.Logf); err != nil {
		c.opts.Logf("cleanup: %v", err)
	}
}

// Logs lists the components' log files.
func (c *Cluster) Logs() []string {
	var out []string
	for _, p := range c.components {
		out = append(out, p.LogPath)
	}
	return out
}

func (c *Cluster) start(name, bin string, args ...string) (*process.Child, error) {
	return c.startEnv(name, nil, bin, args...)
}

// startEnv starts bin in the node's network namespace (host mount
// namespace); env is added to the harness's environment.
func (c *Cluster) startEnv(name string, env []string, bin string, args ...string) (*process.Child, error) {
	cmd := inNetnsCommand(context.Background(), bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p, err := process.StartLogged(c.opts.Dir, name, cmd)
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, p)
	return p, nil
}

func (c *Cluster) k8s(bin string) string  { return filepath.Join(c.opts.K8sAssets, bin) }
func (c *Cluster) node(bin string) string { return filepath.Join(c.opts.NodeAssets, bin) }
func (c *Cluster) file(name string) string {
	return filepath.Join(c.opts.Dir, name)
}

// users of the static token file and their groups. Each component gets the
// identity the bootstrap RBAC policy of a real cluster grants to it.
var users = []struct{ name, groups string }{
	{"runner-guard-node-admin", "system:masters"},
	{"system:kube-controller-manager", ""},
	{"system:kube-scheduler", ""},
	{"system:kube-proxy", ""},
	{"system:node:" + NodeName, "system:nodes"},
}

func (c *Cluster) writeCredentials(context.Context) error {
	var err error
	if c.pki, err = newPKI(c.file("pki")); err != nil {
		return err
	}
	var lines []string
	for _, u := range users {
		tok := randomToken()
		c.tokens[u.name] = tok
		lines = append(lines, fmt.Sprintf("%s,%s,%s,%q", tok, u.name, u.name, u.groups))
		if err := c.writeKubeconfig(kubeconfigName(u.name), u.name); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.file(kubeconfigName(users[0].name))
	if err := os.WriteFile(c.file("pki/tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            fmt.Sprintf("https://%s:%d", NodeIP, apiserverPort),
		BearerToken:     c.tokens[users[0].name],
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		Dial:            DialContext,
		QPS:             50, Burst: 100,
	}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	return err
}

func kubeconfigName(user string) string {
	return strings.NewReplacer(":", "-").Replace(user) + ".kubeconfig"
}

func (c *Cluster) writeKubeconfig(name, user string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://%s:%d
    certificate-authority-data: %s
users:
- name: %q
  user:
    token: %s
contexts:
- name: node
  context: {cluster: node, user: %q, namespace: default}
current-context: node
`, NodeIP, apiserverPort, base64.StdEncoding.EncodeToString(c.pki.caPEM), user, c.tokens[user], user)
	return os.WriteFile(c.file(name), []byte(cfg), 0o600)
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	const url = "http://127.0.0.1:2379"
	p, err := c.start("etcd", c.k8s("etcd"),
		"--data-dir="+c.file("etcd"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync=true")
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: DialContext}}
	return process.WaitReady(ctx, "etcd", 60*time.Second, p, func(ctx context.Context) error {
		return framework.HTTPGetOK(ctx, client, url+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	crt, key, err := c.pki.issue("apiserver", "kube-apiserver", nil,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP), net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	// The API server's identity towards the kubelet (logs, exec, port-forward).
	kcrt, kkey, err := c.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	saKey := c.file("pki/sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}
	p, err := c.start("kube-apiserver", c.k8s("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--advertise-address="+NodeIP,
		fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--tls-cert-file="+crt, "--tls-private-key-file="+key,
		"--client-ca-file="+c.pki.caFile,
		"--kubelet-client-certificate="+kcrt, "--kubelet-client-key="+kkey,
		"--kubelet-certificate-authority="+c.pki.caFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--token-auth-file="+c.file("pki/tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--allow-privileged=true",
		"--cert-dir="+c.file("pki"))
	if err != nil {
		return err
	}
	return process.WaitReady(ctx, "kube-apiserver", 120*time.Second, p, func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	})
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	kc := c.file(kubeconfigName("system:kube-controller-manager"))
	p, err := c.start("kube-controller-manager", c.k8s("kube-controller-manager"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.file("pki/sa.key"),
		"--root-ca-file="+c.pki.caFile,
		"--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+ServiceCIDR,
		// All controllers, as a cluster runs them: the node lifecycle
		// controller lifts the not-ready taint the kubelet registers with.
		"--controllers=*")
	if err != nil {
		return err
	}
	return process.WaitReady(ctx, "kube-controller-manager (default ServiceAccount)", 90*time.Second, p, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc := c.file(kubeconfigName("system:kube-scheduler"))
	p, err := c.start("kube-scheduler", c.node("kube-scheduler"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259")
	if err != nil {
		return err
	}
	// Ready once it serves its health endpoint; it needs no more to schedule.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: DialContext, TLSClientConfig: insecureLocalTLS()}}
	return process.WaitReady(ctx, "kube-scheduler", 60*time.Second, p, func(ctx context.Context) error {
		return framework.HTTPGetOK(ctx, client, "https://127.0.0.1:10259/healthz")
	})
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	cniConf := filepath.Join(RunDir, "cni", "net.d")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-runner-guard-node.conflist"), []byte(cniConfig), 0o644); err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc not found (hack/build-node.sh installs it): %w", err)
	}
	conf := fmt.Sprintf(containerdConfig, StateDir, RunDir, c.sock, PauseImage, runc,
		filepath.Join(c.opts.NodeAssets, "cni"), cniConf)
	if err := os.WriteFile(c.file("containerd.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	// containerd finds its shim on PATH.
	path := "PATH=" + c.opts.NodeAssets + string(os.PathListSeparator) + os.Getenv("PATH")
	p, err := c.startEnv("containerd", []string{path}, c.node("containerd"), "--config", c.file("containerd.toml"))
	if err != nil {
		return err
	}
	return process.WaitReady(ctx, "containerd", 60*time.Second, p, func(ctx context.Context) error {
		return c.ctr(ctx, "version")
	})
}

func (c *Cluster) ctr(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.node("ctr"), append([]string{"--address", c.sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// importImages loads the image tarballs as `ctr images import` does for a
// cluster without a registry.
func (c *Cluster) importImages(ctx context.Context) error {
	for _, img := range c.opts.Images {
		if err := c.ctr(ctx, "images", "import", img); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	crt, key, err := c.pki.issue("kubelet", "system:node:"+NodeName, []string{"system:nodes"}, []string{NodeName}, []net.IP{net.ParseIP(NodeIP)}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	if err := createCgroupRoot(); err != nil {
		return err
	}
	conf := fmt.Sprintf(kubeletConfig, c.pki.caFile, crt, key, CgroupRoot, "unix://"+c.sock, PodCIDR)
	if err := os.WriteFile(c.file("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := c.start("kubelet", c.node("kubelet"),
		"--config="+c.file("kubelet.yaml"),
		"--kubeconfig="+c.file(kubeconfigName("system:node:"+NodeName)),
		"--root-dir="+filepath.Join(StateDir, "kubelet"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP,
		"--v=2")
	if err != nil {
		return err
	}
	return process.WaitReady(ctx, "kubelet (Node Ready)", 120*time.Second, p, func(ctx context.Context) error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready: %v", NodeName, n.Status.Conditions)
	})
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	conf := fmt.Sprintf(kubeProxyConfig, c.file(kubeconfigName("system:kube-proxy")), clusterCIDR, NodeName)
	if err := os.WriteFile(c.file("kube-proxy.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := c.start("kube-proxy", c.node("kube-proxy"), "--config="+c.file("kube-proxy.yaml"), "--v=2")
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: DialContext}}
	return process.WaitReady(ctx, "kube-proxy", 60*time.Second, p, func(ctx context.Context) error {
		return framework.HTTPGetOK(ctx, client, "http://127.0.0.1:10256/healthz")
	})
}

// Kubectl runs the cluster's kubectl as the admin inside the node's network
// namespace.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := c.KubectlCommand(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// KubectlCommand is the command Kubectl runs, for callers that stream it.
func (c *Cluster) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return inNetnsCommand(ctx, c.k8s("kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
}

// KubectlPath is the cluster's kubectl binary.
func (c *Cluster) KubectlPath() string { return c.k8s("kubectl") }
