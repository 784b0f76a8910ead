// Package framework runs runner-guard's e2e environment on this machine: etcd,
// kube-apiserver and kube-controller-manager built from their Go modules, the
// fake GitHub, the real webhook binary, and the ValidatingWebhookConfiguration
// rendered from manifests/local. Everything binds 127.0.0.1 and is torn down
// by Stop; logs of every component stay in the run directory. Processes are
// started and waited for with test/process (Child, WaitReady, Eventually),
// which test/node and test/karpenter share. test/node starts its control
// plane here too (StartControlPlaneWith), inside its node's network namespace.
package framework

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/process"
)

// ServiceCIDR is the Service address range of every control plane the
// harness starts; KubernetesServiceIP, its first address, is the
// "kubernetes" Service's, and a SAN of the API server's certificate.
const (
	ServiceCIDR         = "10.96.0.0/24"
	KubernetesServiceIP = "10.96.0.1"
)

// ControllerManagerUser is the identity kube-controller-manager runs as.
const ControllerManagerUser = "system:kube-controller-manager"

// TokenUser is a user of kube-apiserver's static token file.
type TokenUser struct {
	Name   string
	Groups []string
}

// ControlPlaneOptions say where and how StartControlPlaneWith runs etcd,
// kube-apiserver and kube-controller-manager. Every field but Dir and Assets
// defaults to the e2e suite's control plane: on loopback, free ports, RBAC,
// only the controllers a cluster without a kubelet needs. test/node sets them
// for the control plane its kubelet joins inside a network namespace.
type ControlPlaneOptions struct {
	// Dir holds data, certificates, kubeconfigs and logs.
	Dir string
	// Assets has etcd, kube-apiserver, kube-controller-manager and kubectl.
	Assets string
	Logf   func(string, ...any)

	// Address is where kube-apiserver is advertised and reached; default
	// 127.0.0.1.
	Address string
	// BindAddress is what kube-apiserver listens on; default Address.
	BindAddress string
	// EtcdPort, EtcdPeerPort and APIServerPort are fixed ports, 0 a free
	// loopback port: inside a network namespace of its own a component can
	// take any port, and the host's free ports say nothing about it.
	EtcdPort, EtcdPeerPort, APIServerPort int
	// Command makes each component's command; default process.Command.
	Command func(bin string, args []string) *exec.Cmd
	// Dial is the dialer of the harness's own clients (etcd's health check,
	// Config); nil dials as net does.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// CA signs kube-apiserver's serving certificate and is its client CA
	// (written to CAFile); default a new CA.
	CA *certs.CA
	// AdminUser is the system:masters user of Config and Kubeconfig; default
	// "e2e-admin".
	AdminUser string
	// Users are the token users besides the admin, each with a kubeconfig
	// (KubeconfigFile). ControllerManagerUser must be one of them. Default:
	// ControllerManagerUser in system:masters, since without
	// --use-service-account-credentials its controllers act as it.
	Users []TokenUser
	// Authorization is kube-apiserver's --authorization-mode; default "RBAC".
	Authorization string
	// APIServerArgs are added to kube-apiserver's flags.
	APIServerArgs []string
	// Controllers is kube-controller-manager's --controllers. Default: service
	// accounts, namespaces (synced often: the e2e suite deletes one per test),
	// ReplicaSets and the garbage collector; no node lifecycle or pod GC,
	// since there is no kubelet and the tests play its part.
	Controllers []string
	// ExtraControllers are added to Controllers (e.g. disruption-controller,
	// which computes PodDisruptionBudgets' status).
	ExtraControllers []string
	// ControllerManagerArgs are added to kube-controller-manager's flags.
	ControllerManagerArgs []string
}

// DefaultControllers is kube-controller-manager's --controllers by default.
func DefaultControllers() []string {
	return []string{"serviceaccount-controller", "namespace-controller", "replicaset-controller", "garbage-collector-controller"}
}

// certDir is where the API server's certificates, service-account key and
// token file go (also its --cert-dir).
func (o ControlPlaneOptions) certDir() string { return filepath.Join(o.Dir, "apiserver-certs") }

// CAFile is the CA certificate: kube-apiserver's client CA, and the signer of
// its serving certificate.
func (o ControlPlaneOptions) CAFile() string { return filepath.Join(o.certDir(), certs.CACertFile) }

// ServiceAccountKeyFile is the RSA key kube-apiserver signs and checks
// service-account tokens with (kube-controller-manager's
// --service-account-private-key-file, when it issues them).
func (o ControlPlaneOptions) ServiceAccountKeyFile() string {
	return filepath.Join(o.certDir(), "sa.key")
}

// KubeconfigFile is the kubeconfig written for a token user.
func (o ControlPlaneOptions) KubeconfigFile(user string) string {
	return filepath.Join(o.Dir, strings.ReplaceAll(user, ":", "-")+".kubeconfig")
}

func (o ControlPlaneOptions) withDefaults() ControlPlaneOptions {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	if o.BindAddress == "" {
		o.BindAddress = o.Address
	}
	if o.Command == nil {
		o.Command = func(bin string, args []string) *exec.Cmd { return process.Command(bin, args, nil) }
	}
	if o.AdminUser == "" {
		o.AdminUser = "e2e-admin"
	}
	if o.Users == nil {
		o.Users = []TokenUser{{Name: ControllerManagerUser, Groups: []string{"system:masters"}}}
	}
	if o.Authorization == "" {
		o.Authorization = "RBAC"
	}
	if o.Controllers == nil {
		o.Controllers = DefaultControllers()
		o.ControllerManagerArgs = append([]string{"--concurrent-namespace-syncs=2", "--namespace-sync-period=10s"}, o.ControllerManagerArgs...)
	}
	o.Controllers = append(slices.Clone(o.Controllers), o.ExtraControllers...)
	return o
}

// ControlPlane is etcd, kube-apiserver and kube-controller-manager.
type ControlPlane struct {
	// Dir holds data, certificates, kubeconfigs and logs.
	Dir string
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string
	// Config is the admin REST config.
	Config *rest.Config
	Client kubernetes.Interface
	// Assets is the directory with etcd, kube-apiserver, kube-controller-manager and kubectl.
	Assets string
	URL    string
	CACert []byte

	opts                 ControlPlaneOptions
	etcd, apiserver, kcm *process.Child
	tokens               map[string]string // user -> token
	ports                *process.Ports
	kubectl              string // overrides Assets/kubectl for an existing cluster
}

// KubectlPath is the path of the kubectl matching the API server.
func (c *ControlPlane) KubectlPath() string {
	if c.kubectl != "" {
		return c.kubectl
	}
	return filepath.Join(c.Assets, "kubectl")
}

// StartControlPlane starts the e2e suite's control plane (ControlPlaneOptions'
// defaults) in dir.
func StartControlPlane(ctx context.Context, dir, assets string, logf func(string, ...any)) (*ControlPlane, error) {
	return StartControlPlaneWith(ctx, ControlPlaneOptions{Dir: dir, Assets: assets, Logf: logf})
}

// StartControlPlaneWith starts the three components and waits until etcd is
// healthy, the API server ready and the controller manager has created the
// default ServiceAccount. On error everything started is stopped.
func StartControlPlaneWith(ctx context.Context, opts ControlPlaneOptions) (*ControlPlane, error) {
	return startControlPlane(ctx, opts, &process.Ports{})
}

// startControlPlane is StartControlPlaneWith with the port allocator: ports a
// caller took before, e.g. the webhook's, are never given out again.
func startControlPlane(ctx context.Context, opts ControlPlaneOptions, ports *process.Ports) (*ControlPlane, error) {
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.Assets, bin)); err != nil {
			return nil, fmt.Errorf("control-plane binary missing: %w (run `make k8s`, or set KUBEBUILDER_ASSETS)", err)
		}
	}
	opts = opts.withDefaults()
	c := &ControlPlane{Dir: opts.Dir, Assets: opts.Assets, opts: opts, tokens: map[string]string{}, ports: ports}
	for _, start := range []func(context.Context) error{c.startEtcd, c.startAPIServer, c.startControllerManager} {
		if err := start(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// port is fixed, or else a free one.
func (c *ControlPlane) port(fixed int) (int, error) {
	if fixed != 0 {
		return fixed, nil
	}
	return c.ports.Free()
}

func (c *ControlPlane) start(name string, args ...string) (*process.Child, error) {
	return process.StartLogged(c.Dir, name, c.opts.Command(filepath.Join(c.Assets, name), args))
}

func (c *ControlPlane) startEtcd(ctx context.Context) error {
	clientPort, err := c.port(c.opts.EtcdPort)
	if err != nil {
		return err
	}
	peerPort, err := c.port(c.opts.EtcdPeerPort)
	if err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.etcd, err = c.start("etcd",
		"--data-dir="+filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true")
	if err != nil {
		return err
	}
	c.URL = clientURL // temporarily: etcd's URL for the API server
	c.opts.Logf("etcd starting on %s", clientURL)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: c.opts.Dial}}
	return process.WaitReady(ctx, "etcd", 60*time.Second, c.etcd, func(ctx context.Context) error {
		return HTTPGetOK(ctx, client, clientURL+"/health")
	})
}

// writeCredentials writes the API server's serving certificate (signed by
// opts.CA, which becomes its client CA), the service-account key, and the
// static token file with a kubeconfig for each of its users.
func (c *ControlPlane) writeCredentials() (tokenFile string, err error) {
	ca := c.opts.CA
	if ca == nil {
		if ca, err = certs.NewCA(certs.CAOptions{CommonName: "e2e-kube-ca"}); err != nil {
			return "", err
		}
	}
	// The names a client inside a cluster uses, and every address it may dial.
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(KubernetesServiceIP)}
	if ip := net.ParseIP(c.opts.Address); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	serving, err := ca.Issue(certs.Options{
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:      ips,
	})
	if err != nil {
		return "", err
	}
	if err := serving.WriteDir(c.opts.certDir()); err != nil {
		return "", err
	}
	c.CACert = serving.CACertPEM
	if err := writeRSAKey(c.opts.ServiceAccountKeyFile()); err != nil {
		return "", err
	}
	users := append([]TokenUser{{Name: c.opts.AdminUser, Groups: []string{"system:masters"}}}, c.opts.Users...)
	var lines []string
	for _, u := range users {
		tok := randomToken()
		c.tokens[u.Name] = tok
		lines = append(lines, fmt.Sprintf("%s,%s,%s,%q", tok, u.Name, u.Name, strings.Join(u.Groups, ",")))
		if err := c.WriteKubeconfig(c.opts.KubeconfigFile(u.Name), u.Name, tok); err != nil {
			return "", err
		}
	}
	if _, ok := c.tokens[ControllerManagerUser]; !ok {
		return "", fmt.Errorf("ControlPlaneOptions.Users has no %s for kube-controller-manager", ControllerManagerUser)
	}
	tokenFile = filepath.Join(c.opts.certDir(), "tokens.csv")
	return tokenFile, os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (c *ControlPlane) startAPIServer(ctx context.Context) error {
	etcdURL := c.URL
	port, err := c.port(c.opts.APIServerPort)
	if err != nil {
		return err
	}
	c.URL = fmt.Sprintf("https://%s", net.JoinHostPort(c.opts.Address, strconv.Itoa(port)))
	tokenFile, err := c.writeCredentials()
	if err != nil {
		return err
	}
	certDir, saKey := c.opts.certDir(), c.opts.ServiceAccountKeyFile()
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + c.opts.BindAddress, "--advertise-address=" + c.opts.Address,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + filepath.Join(certDir, certs.CertFile),
		"--tls-private-key-file=" + filepath.Join(certDir, certs.KeyFile),
		"--client-ca-file=" + c.opts.CAFile(),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=" + c.opts.Authorization,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--allow-privileged=true",
		"--cert-dir=" + certDir,
	}
	if ip := net.ParseIP(c.opts.Address); ip != nil && ip.IsLoopback() {
		// The kubernetes Service's endpoints may not be a loopback address.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	c.apiserver, err = c.start("kube-apiserver", append(args, c.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	c.opts.Logf("kube-apiserver starting on %s", c.URL)
	c.Kubeconfig = c.opts.KubeconfigFile(c.opts.AdminUser)
	c.Config = c.RESTConfig(c.tokens[c.opts.AdminUser])
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	return process.WaitReady(ctx, "kube-apiserver", 120*time.Second, c.apiserver, func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	})
}

func (c *ControlPlane) startControllerManager(ctx context.Context) error {
	kubeconfig := c.opts.KubeconfigFile(ControllerManagerUser)
	var err error
	c.kcm, err = c.start("kube-controller-manager", append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + strings.Join(c.opts.Controllers, ","),
	}, c.opts.ControllerManagerArgs...)...)
	if err != nil {
		return err
	}
	c.opts.Logf("kube-controller-manager starting")
	return process.WaitReady(ctx, "kube-controller-manager (default ServiceAccount)", 90*time.Second, c.kcm, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// RESTConfig is a config for the API server authenticating with a bearer token.
func (c *ControlPlane) RESTConfig(token string) *rest.Config {
	if c.tokens == nil { // an existing cluster: keep its address and CA, drop its credentials
		cfg := rest.AnonymousClientConfig(c.Config)
		cfg.BearerToken = token
		return cfg
	}
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		Dial:            c.opts.Dial,
		QPS:             100, Burst: 200,
	}
}

// WriteKubeconfig writes a kubeconfig for user with token.
func (c *ControlPlane) WriteKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.CACert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// Stop ends the components in reverse order.
func (c *ControlPlane) Stop() {
	process.StopAll([]*process.Child{c.etcd, c.apiserver, c.kcm}, 10*time.Second, c.opts.Logf)
}

// Logs lists the log files of the components.
func (c *ControlPlane) Logs() []string {
	var logs []string
	for _, p := range []*process.Child{c.etcd, c.apiserver, c.kcm} {
		if p != nil {
			logs = append(logs, p.LogPath)
		}
	}
	return logs
}

// HTTPGetOK fails unless GET url answers 200; readiness probes of the
// components test/e2e and test/node start.
func HTTPGetOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
