// Package karpenter runs a real Karpenter (its KWOK cloud provider), KWOK and
// kube-scheduler against the e2e control plane (test/e2e/framework: etcd,
// kube-apiserver, kube-controller-manager, the fake GitHub and the real
// runner-guard webhook), so the scenarios see what Karpenter decides and does
// to runner pods: which node it chooses, the karpenter.sh/disrupted taint,
// its evictions and their answers.
//
// Karpenter binds its metrics and health ports on all interfaces and has no
// flag for it, so Karpenter, KWOK and kube-scheduler run in a network
// namespace of the run's own (netns.go), where a proxy on 127.0.0.1:6443
// forwards to the API server on the host's loopback. hack/build-karpenter.sh
// builds the binaries, CRDs and KWOK stages Start reads.
package karpenter

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// Addresses inside the namespace: every one is the namespace's own loopback.
const (
	apiProxyAddr       = "127.0.0.1:6443"
	karpenterMetrics   = 8080
	karpenterHealth    = 8081
	schedulerPort      = 10259
	kwokServerAddr     = "127.0.0.1:10247"
	componentNamespace = "kube-system"
)

// Options configure a Cluster.
type Options struct {
	// Env starts the e2e environment the components join.
	Env framework.Options
	// Assets holds karpenter, kwok, kube-scheduler, crds/ and stages/
	// (hack/build-karpenter.sh prints it).
	Assets string
	// InstanceTypes are the KWOK provider's instance types; DefaultInstanceTypes when empty.
	InstanceTypes []InstanceType
	Logf          func(format string, args ...any)
}

// InstanceType is one entry of the KWOK provider's instance-types file.
type InstanceType struct {
	Name             string            `json:"name"`
	Offerings        []Offering        `json:"offerings"`
	Architecture     string            `json:"architecture"`
	OperatingSystems []string          `json:"operatingSystems"`
	Resources        map[string]string `json:"resources"`
}

// Offering is where and at what price an instance type is sold, as the
// provider's own instance_types.json spells it.
type Offering struct {
	Price        float64       `json:"Price"`
	Available    bool          `json:"Available"`
	Requirements []Requirement `json:"Requirements"`
}

// Requirement is a node selector requirement of an offering.
type Requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

// OnDemandIn is an available on-demand offering in zone at price.
func OnDemandIn(zone string, price float64) Offering {
	return Offering{Price: price, Available: true, Requirements: []Requirement{
		{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{"on-demand"}},
		{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{zone}},
	}}
}

// DefaultInstanceTypes is one on-demand type of 4 CPUs in one zone, so which
// instance Karpenter launches, and so how many pods a node holds, is fixed:
// its allocatable CPU (3900m: the provider reserves 100m) holds a FillerCPU
// pod and two RunnerCPU pods, or four RunnerCPU pods, never two FillerCPU pods.
func DefaultInstanceTypes() []InstanceType {
	return []InstanceType{{
		Name:             "rg.xlarge",
		Offerings:        []Offering{OnDemandIn("test-zone-a", 0.2)},
		Architecture:     "amd64",
		OperatingSystems: []string{"linux"},
		Resources:        map[string]string{"cpu": "4", "memory": "16Gi", "pods": "32"},
	}}
}

// Cluster is the e2e environment with Karpenter, KWOK and kube-scheduler.
type Cluster struct {
	*framework.Env
	// Dynamic reaches NodePools, NodeClaims and EphemeralRunners.
	Dynamic dynamic.Interface

	opts  Options
	ns    *netns
	proxy *proxy
	nodes *nodeLifecycle
	procs []*process.Child // in start order
	http  *http.Client     // dials inside the namespace
	// nsenter runs the components inside ns.
	nsenter string
}

// Start brings up the e2e environment, then kube-scheduler, KWOK and
// Karpenter in a network namespace, and creates the KWOKNodeClass "default".
// On error everything started is stopped.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if len(o.InstanceTypes) == 0 {
		o.InstanceTypes = DefaultInstanceTypes()
	}
	for _, f := range []string{"karpenter", "kwok", "kube-scheduler", "crds", "stages"} {
		if _, err := os.Stat(filepath.Join(o.Assets, f)); err != nil {
			return nil, fmt.Errorf("karpenter assets: %w (run hack/build-karpenter.sh)", err)
		}
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("nsenter (util-linux): %w", err)
	}
	c = &Cluster{opts: o, nsenter: nsenter}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.Env, err = framework.Start(ctx, o.Env); err != nil {
		return c, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return c, err
	}
	if c.ns, err = newNetns(); err != nil {
		return c, err
	}
	c.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: c.ns.dial,
		// kube-scheduler's self-signed serving certificate, on the namespace's loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health probe on a private loopback
	}}
	u, err := url.Parse(c.URL)
	if err != nil {
		return c, fmt.Errorf("API server URL %q: %w", c.URL, err)
	}
	if c.proxy, err = startProxy(c.ns, apiProxyAddr, u.Host); err != nil {
		return c, err
	}
	return c, process.RunSteps(ctx, o.Logf,
		process.Step{Name: "Karpenter CRDs", Run: c.installCRDs},
		process.Step{Name: "node lifecycle", Run: func(ctx context.Context) (err error) {
			c.nodes, err = startNodeLifecycle(ctx, c.Client, o.Logf)
			return err
		}},
		process.Step{Name: "kube-scheduler", Run: c.startScheduler},
		process.Step{Name: "kwok", Run: c.startKWOK},
		process.Step{Name: "karpenter", Run: c.startKarpenter},
		process.Step{Name: "KWOKNodeClass", Run: c.createNodeClass},
	)
}

// Stop ends Karpenter, KWOK and kube-scheduler, the proxy and the namespace,
// then the e2e environment. Logs stay in Dir.
func (c *Cluster) Stop() {
	process.StopAll(c.procs, 15*time.Second, c.opts.Logf)
	c.nodes.close()
	if c.proxy != nil {
		c.proxy.close()
	}
	if c.ns != nil {
		c.ns.close()
	}
	if c.Env != nil {
		c.Env.Stop()
	}
}

// Logs lists the log files of Karpenter, KWOK and kube-scheduler.
func (c *Cluster) Logs() []string {
	var out []string
	for _, p := range c.procs {
		out = append(out, p.LogPath)
	}
	return out
}

func (c *Cluster) installCRDs(ctx context.Context) error {
	dir := filepath.Join(c.opts.Assets, "crds")
	if _, stderr, err := c.Kubectl(ctx, "apply", "--server-side", "-f", dir); err != nil {
		return fmt.Errorf("apply %s: %w: %s", dir, err, stderr)
	}
	if _, stderr, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir); err != nil {
		return fmt.Errorf("CRDs of %s not established: %w: %s", dir, err, stderr)
	}
	return nil
}

// componentKubeconfig gives the component a ServiceAccount of its own bound
// to cluster-admin (the point here is what Karpenter decides, not its RBAC)
// and writes a kubeconfig that reaches the API server through the proxy.
func (c *Cluster) componentKubeconfig(ctx context.Context, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: componentNamespace}}
	if _, err := c.Client.CoreV1().ServiceAccounts(componentNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ServiceAccount %s: %w", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-guard-test-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: componentNamespace}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ClusterRoleBinding for %s: %w", name, err)
	}
	exp := int64(24 * 3600)
	tok, err := c.Client.CoreV1().ServiceAccounts(componentNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["netns"] = &clientcmdapi.Cluster{Server: "https://" + apiProxyAddr, CertificateAuthorityData: c.CACert}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["netns"] = &clientcmdapi.Context{Cluster: "netns", AuthInfo: name}
	cfg.CurrentContext = "netns"
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// startInNetns runs bin in the namespace (nsenter execs it, so signals reach
// it directly) and waits until ready succeeds.
func (c *Cluster) startInNetns(ctx context.Context, name, bin string, args, env []string, ready func(context.Context) error) error {
	p, err := process.StartLogged(c.Dir, name, process.Command(c.nsenter, append([]string{"--net=" + c.ns.path, "--", bin}, args...), env))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return process.WaitReady(ctx, name, 90*time.Second, p, ready)
}

func (c *Cluster) get(url string) func(context.Context) error {
	return func(ctx context.Context) error { return framework.HTTPGetOK(ctx, c.http, url) }
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc, err := c.componentKubeconfig(ctx, "kube-scheduler")
	if err != nil {
		return err
	}
	return c.startInNetns(ctx, "kube-scheduler", filepath.Join(c.opts.Assets, "kube-scheduler"), []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedulerPort),
	}, nil, c.get(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort)))
}

// startKWOK runs KWOK for the nodes the KWOK provider makes (annotated
// kwok.x-k8s.io/node=fake) with the stage files in Assets/stages and no
// Stage CRD.
func (c *Cluster) startKWOK(ctx context.Context) error {
	kc, err := c.componentKubeconfig(ctx, "kwok")
	if err != nil {
		return err
	}
	stages, err := filepath.Glob(filepath.Join(c.opts.Assets, "stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no KWOK stages in %s (run hack/build-karpenter.sh): %v", filepath.Join(c.opts.Assets, "stages"), err)
	}
	args := []string{
		"--kubeconfig=" + kc,
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--server-address=" + kwokServerAddr,
		"--node-ip=10.0.0.1", "--cidr=10.0.0.1/24",
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	return c.startInNetns(ctx, "kwok", filepath.Join(c.opts.Assets, "kwok"), args, nil,
		c.get("http://"+kwokServerAddr+"/healthz"))
}

func (c *Cluster) startKarpenter(ctx context.Context) error {
	kc, err := c.componentKubeconfig(ctx, "karpenter")
	if err != nil {
		return err
	}
	types, err := json.MarshalIndent(c.opts.InstanceTypes, "", "  ")
	if err != nil {
		return err
	}
	typesFile := filepath.Join(c.Dir, "instance-types.json")
	if err := os.WriteFile(typesFile, types, 0o644); err != nil {
		return err
	}
	return c.startInNetns(ctx, "karpenter", filepath.Join(c.opts.Assets, "karpenter"), nil, []string{
		"KUBECONFIG=" + kc,
		"DISABLE_LEADER_ELECTION=true",
		fmt.Sprintf("METRICS_PORT=%d", karpenterMetrics),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", karpenterHealth),
		"INSTANCE_TYPES_FILE_PATH=" + typesFile,
		"LOG_LEVEL=debug",
	}, c.get(fmt.Sprintf("http://127.0.0.1:%d/readyz", karpenterHealth)))
}

// KarpenterMetrics is Karpenter's /metrics, in Prometheus text format.
func (c *Cluster) KarpenterMetrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", karpenterMetrics), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("karpenter metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("karpenter metrics: %s", resp.Status)
	}
	return string(b), nil
}

// proxy forwards TCP connections accepted inside the namespace to an
// address on the host's loopback (the API server).
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startProxy(ns *netns, listen, target string) (*proxy, error) {
	l, err := ns.listen(listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listener %s in the namespace: %w", listen, err)
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(in)
	}
}

// track adds or removes c from the open connections; adding fails once the
// proxy is closed.
func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		return true
	}
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) forward(in net.Conn) {
	defer p.wg.Done()
	defer in.Close()
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	if !p.track(in, true) {
		return
	}
	defer p.track(in, false)
	if !p.track(out, true) {
		return
	}
	defer p.track(out, false)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
}

// close stops accepting and ends every forwarded connection.
func (p *proxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// errNotYet is what a wait's check returns while the condition does not hold.
var errNotYet = errors.New("not yet")
