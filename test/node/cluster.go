package node

import (
	"bytes"
	"context"
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

	"github.com/runner-guard/runner-guard/certs"
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
	// ControlPlane is etcd, kube-apiserver and kube-controller-manager,
	// started by test/e2e/framework inside the node's network namespace. Its
	// Kubeconfig is the admin's (group system:masters), with a server address
	// only reachable inside that namespace: use Kubectl, or Config, whose
	// dialer enters it.
	*framework.ControlPlane

	opts         Options
	controlPlane framework.ControlPlaneOptions
	ca           *certs.CA        // the control plane's, also the kubelet's client CA and signer
	components   []*process.Child // the node's, in start order
	sock         string           // containerd's socket
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
	c = &Cluster{opts: opts, sock: filepath.Join(RunDir, "containerd.sock")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	return c, process.RunSteps(ctx, opts.Logf, c.startSteps()...)
}

// startSteps bring the node up, each on what the ones before it started:
// the control plane in the network namespace, the kubelet on containerd
// with the images imported, kube-proxy once the Node is Ready.
func (c *Cluster) startSteps() []process.Step {
	return []process.Step{
		{Name: "network namespace", Run: createNetns},
		{Name: "certificates", Run: c.writeCertificates},
		{Name: "control plane", Run: c.startControlPlane},
		{Name: "kube-scheduler", Run: c.startScheduler},
		{Name: "containerd", Run: c.startContainerd},
		{Name: "images", Run: c.importImages},
		{Name: "kubelet", Run: c.startKubelet},
		{Name: "kube-proxy", Run: c.startKubeProxy},
	}
}

// Stop ends the components in reverse order, then removes every trace of
// the node (see Cleanup). Logs stay in Dir.
func (c *Cluster) Stop() {
	process.StopAll(c.components, 10*time.Second, c.opts.Logf)
	if c.ControlPlane != nil {
		c.ControlPlane.Stop()
	}
	if err := Cleanup(c.opts.Logf); err != nil {
		c.opts.Logf("cleanup: %v", err)
	}
}

// Logs lists the components' log files.
func (c *Cluster) Logs() []string {
	var out []string
	if c.ControlPlane != nil {
		out = c.ControlPlane.Logs()
	}
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

func (c *Cluster) node(bin string) string { return filepath.Join(c.opts.NodeAssets, bin) }
func (c *Cluster) file(name string) string {
	return filepath.Join(c.opts.Dir, name)
}

// users of the static token file besides the admin, and their groups. Each
// component gets the identity the bootstrap RBAC policy of a real cluster
// grants to it.
var users = []framework.TokenUser{
	{Name: framework.ControllerManagerUser},
	{Name: "system:kube-scheduler"},
	{Name: "system:kube-proxy"},
	{Name: "system:node:" + NodeName, Groups: []string{"system:nodes"}},
}

// writeCertificates makes the cluster's CA and the client certificate the API
// server shows the kubelet (logs, exec, port-forward). The webhook's
// certificate comes from the certs package too, as a user would make it.
func (c *Cluster) writeCertificates(context.Context) error {
	var err error
	if c.ca, err = certs.NewCA(certs.CAOptions{CommonName: "runner-guard-node-ca"}); err != nil {
		return err
	}
	kubeletClient, err := c.ca.IssueClient(certs.ClientOptions{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}})
	if err != nil {
		return err
	}
	return kubeletClient.WriteDir(c.file("pki/apiserver-kubelet-client"))
}

// startControlPlane runs the e2e suite's control plane in the node's
// namespace on the node's address, with what a kubelet needs on top: Node
// authorization, the API server's kubelet client certificate, and every
// controller (the node lifecycle controller lifts the not-ready taint the
// kubelet registers with) issuing service-account tokens and node CIDRs.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	o := framework.ControlPlaneOptions{
		Dir: c.opts.Dir, Assets: c.opts.K8sAssets, Logf: c.opts.Logf,
		Address: NodeIP, BindAddress: "0.0.0.0",
		EtcdPort: 2379, EtcdPeerPort: 2380, APIServerPort: apiserverPort,
		Command: func(bin string, args []string) *exec.Cmd {
			return inNetnsCommand(context.Background(), bin, args...)
		},
		Dial:          DialContext,
		CA:            c.ca,
		AdminUser:     "runner-guard-node-admin",
		Users:         users,
		Authorization: "Node,RBAC",
		Controllers:   []string{"*"},
	}
	kubeletClient := c.file("pki/apiserver-kubelet-client")
	o.APIServerArgs = []string{
		"--kubelet-client-certificate=" + filepath.Join(kubeletClient, certs.CertFile),
		"--kubelet-client-key=" + filepath.Join(kubeletClient, certs.KeyFile),
		"--kubelet-certificate-authority=" + o.CAFile(),
		"--kubelet-preferred-address-types=InternalIP",
		"--enable-admission-plugins=NodeRestriction",
	}
	o.ControllerManagerArgs = []string{
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + o.ServiceAccountKeyFile(),
		"--root-ca-file=" + o.CAFile(),
		"--allocate-node-cidrs=true", "--cluster-cidr=" + clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range=" + framework.ServiceCIDR,
	}
	c.controlPlane = o
	var err error
	c.ControlPlane, err = framework.StartControlPlaneWith(ctx, o)
	return err
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc := c.controlPlane.KubeconfigFile("system:kube-scheduler")
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
	serving, err := c.ca.Issue(certs.Options{DNSNames: []string{NodeName}, IPs: []net.IP{net.ParseIP(NodeIP)}})
	if err != nil {
		return err
	}
	certDir := c.file("pki/kubelet")
	if err := serving.WriteDir(certDir); err != nil {
		return err
	}
	if err := createCgroupRoot(); err != nil {
		return err
	}
	conf := fmt.Sprintf(kubeletConfig, c.controlPlane.CAFile(), filepath.Join(certDir, certs.CertFile), filepath.Join(certDir, certs.KeyFile),
		CgroupRoot, "unix://"+c.sock, PodCIDR)
	if err := os.WriteFile(c.file("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	return c.runKubelet(ctx, "kubelet")
}

// runKubelet starts the kubelet with the configuration startKubelet wrote,
// its output in logName.log, and waits until the Node is Ready.
func (c *Cluster) runKubelet(ctx context.Context, logName string) error {
	p, err := c.start(logName, c.node("kubelet"),
		"--config="+c.file("kubelet.yaml"),
		"--kubeconfig="+c.controlPlane.KubeconfigFile("system:node:"+NodeName),
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
	conf := fmt.Sprintf(kubeProxyConfig, c.controlPlane.KubeconfigFile("system:kube-proxy"), clusterCIDR, NodeName)
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
	return inNetnsCommand(ctx, c.KubectlPath(), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
}
