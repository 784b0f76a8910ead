// Package framework runs runner-guard's e2e environment on this machine: etcd,
// kube-apiserver and kube-controller-manager built from their Go modules, the
// fake GitHub, the real webhook binary, and the ValidatingWebhookConfiguration
// rendered from manifests/local. Everything binds 127.0.0.1 and is torn down
// by Stop; logs of every component stay in the run directory. Processes are
// started and waited for with test/process (Child, WaitReady, Eventually),
// which test/node and test/karpenter share.
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
	"path/filepath"
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

// AdminToken authenticates the harness's admin (group system:masters).
const adminUser = "e2e-admin"

// ControlPlane is etcd, kube-apiserver and kube-controller-manager on loopback.
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

// StartControlPlane starts the three components and waits until the API server
// is healthy and the controller manager has created the default ServiceAccount.
func StartControlPlane(ctx context.Context, dir, assets string, logf func(string, ...any)) (*ControlPlane, error) {
	return startControlPlane(ctx, dir, assets, logf, &process.Ports{}, nil)
}

// startControlPlane is StartControlPlane with the port allocator (ports a
// caller took before, e.g. the webhook's, are never given out again) and extra
// kube-apiserver flags.
func startControlPlane(ctx context.Context, dir, assets string, logf func(string, ...any), ports *process.Ports, apiserverArgs []string) (*ControlPlane, error) {
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("control-plane binary missing: %w (run `make k8s`, or set KUBEBUILDER_ASSETS)", err)
		}
	}
	c := &ControlPlane{Dir: dir, Assets: assets, tokens: map[string]string{}, ports: ports}
	if err := c.startEtcd(ctx, logf); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.startAPIServer(ctx, logf, apiserverArgs); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.startControllerManager(ctx, logf); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *ControlPlane) startEtcd(ctx context.Context, logf func(string, ...any)) error {
	clientPort, err := c.ports.Free()
	if err != nil {
		return err
	}
	peerPort, err := c.ports.Free()
	if err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.etcd, err = process.StartLogged(c.Dir, "etcd", process.Command(filepath.Join(c.Assets, "etcd"), []string{
		"--data-dir=" + filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync=true",
	}, nil))
	if err != nil {
		return err
	}
	c.URL = clientURL // temporarily: etcd's URL for the API server
	logf("etcd starting on %s", clientURL)
	return process.WaitReady(ctx, "etcd", 30*time.Second, c.etcd, func(ctx context.Context) error {
		return HTTPGetOK(ctx, http.DefaultClient, clientURL+"/health")
	})
}

func (c *ControlPlane) startAPIServer(ctx context.Context, logf func(string, ...any), extraArgs []string) error {
	etcdURL := c.URL
	port, err := c.ports.Free()
	if err != nil {
		return err
	}
	certDir := filepath.Join(c.Dir, "apiserver-certs")
	ca, err := certs.NewCA(certs.CAOptions{CommonName: "e2e-kube-ca"})
	if err != nil {
		return err
	}
	serving, err := ca.Issue(certs.Options{DNSNames: []string{"localhost", "kubernetes", "kubernetes.default.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	if err := serving.WriteDir(certDir); err != nil {
		return err
	}
	c.CACert = serving.CACertPEM
	saKey := filepath.Join(certDir, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}
	// Static tokens: the admin, the controller manager (both system:masters).
	var lines []string
	for _, u := range []string{adminUser, "system:kube-controller-manager"} {
		tok := randomToken()
		c.tokens[u] = tok
		lines = append(lines, fmt.Sprintf("%s,%s,%s,\"system:masters\"", tok, u, u))
	}
	tokenFile := filepath.Join(certDir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	c.apiserver, err = process.StartLogged(c.Dir, "kube-apiserver", process.Command(filepath.Join(c.Assets, "kube-apiserver"), append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + filepath.Join(certDir, "tls.crt"),
		"--tls-private-key-file=" + filepath.Join(certDir, "tls.key"),
		"--client-ca-file=" + filepath.Join(certDir, "ca.crt"),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--cert-dir=" + certDir,
	}, extraArgs...), nil))
	if err != nil {
		return err
	}
	logf("kube-apiserver starting on %s", c.URL)
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := c.WriteKubeconfig(c.Kubeconfig, adminUser, c.tokens[adminUser]); err != nil {
		return err
	}
	c.Config = c.RESTConfig(c.tokens[adminUser])
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	return process.WaitReady(ctx, "kube-apiserver", 90*time.Second, c.apiserver, func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	})
}

func (c *ControlPlane) startControllerManager(ctx context.Context, logf func(string, ...any)) error {
	kubeconfig := filepath.Join(c.Dir, "kcm.kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, "system:kube-controller-manager", c.tokens["system:kube-controller-manager"]); err != nil {
		return err
	}
	var err error
	c.kcm, err = process.StartLogged(c.Dir, "kube-controller-manager", process.Command(filepath.Join(c.Assets, "kube-controller-manager"), []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		// No node lifecycle, no pod GC: there is no kubelet, and the tests play its part.
		"--controllers=serviceaccount-controller,namespace-controller,replicaset-controller,garbage-collector-controller",
		"--concurrent-namespace-syncs=2",
		"--namespace-sync-period=10s",
	}, nil))
	if err != nil {
		return err
	}
	logf("kube-controller-manager starting")
	return process.WaitReady(ctx, "kube-controller-manager (default ServiceAccount)", 60*time.Second, c.kcm, func(ctx context.Context) error {
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
	for _, p := range []*process.Child{c.kcm, c.apiserver, c.etcd} {
		_ = p.Stop(10 * time.Second)
	}
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
