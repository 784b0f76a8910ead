package framework

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/runner-guard/runner-guard/certs"
)

// webhookPath is the path of every webhook URL in manifests/local.
const webhookPath = "/validate-runner-pods"

// clientCACertFile is the name of the client CA in the webhook's --cert-dir
// (--client-ca-file must be inside it).
const clientCACertFile = "client-ca.crt"

// clientCertAuth is the API server's side of Options.ClientCertAuth: a client
// CA, the client certificate it signed, and the admission configuration that
// makes kube-apiserver present that certificate to the webhook.
type clientCertAuth struct {
	dir             string // tls.crt, tls.key, ca.crt of the client certificate
	caPEM           []byte
	certPEM         []byte
	keyPEM          []byte
	admissionConfig string // --admission-control-config-file
}

// writeClientCertAuth creates a client CA and a client certificate under
// dir/apiserver-webhook-client, a kubeconfig whose only user is named
// webhookHostPort (the host:port of the webhook's URL, which is how the API
// server picks the credentials for a URL webhook), and an AdmissionConfiguration
// that hands that kubeconfig to the ValidatingAdmissionWebhook plugin.
//
// The kubeconfig has no "*" user and no current context: the API server would
// fall back to those for any other host, so the certificate is presented only
// because the name matches.
func writeClientCertAuth(dir, webhookHostPort string) (*clientCertAuth, error) {
	ca, err := certs.NewCA(certs.CAOptions{CommonName: "e2e-apiserver-client-ca"})
	if err != nil {
		return nil, err
	}
	b, err := ca.IssueClient(certs.ClientOptions{CommonName: "kube-apiserver"})
	if err != nil {
		return nil, err
	}
	a := &clientCertAuth{dir: filepath.Join(dir, "apiserver-webhook-client"), caPEM: b.CACertPEM, certPEM: b.CertPEM, keyPEM: b.KeyPEM}
	if err := b.WriteDir(a.dir); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(a.dir, "webhook-admission.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos[webhookHostPort] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(a.dir, certs.CertFile),
		ClientKey:         filepath.Join(a.dir, certs.KeyFile),
	}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return nil, err
	}
	a.admissionConfig = filepath.Join(a.dir, "admission-configuration.yaml")
	admission := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %q
`, kubeconfig)
	if err := os.WriteFile(a.admissionConfig, []byte(admission), 0o644); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *clientCertAuth) apiserverArgs() []string {
	return []string{"--admission-control-config-file=" + a.admissionConfig}
}

// writeCA puts the client CA into the webhook's certificate directory.
func (a *clientCertAuth) writeCA(certDir string) error {
	return os.WriteFile(a.caFile(certDir), a.caPEM, 0o644)
}

func (a *clientCertAuth) caFile(certDir string) string {
	return filepath.Join(certDir, clientCACertFile)
}

// webhookAddr is the host:port the webhook serves on.
func (e *Env) webhookAddr() string { return fmt.Sprintf("127.0.0.1:%d", e.webhookPort) }

// WebhookAddr is the host:port the webhook serves on (local Env only).
func (e *Env) WebhookAddr() string { return e.webhookAddr() }

// WebhookURL is the URL the API server posts AdmissionReviews to (local Env only).
func (e *Env) WebhookURL() string { return "https://" + e.webhookAddr() + webhookPath }

// APIServerClientCertificate is the certificate the API server presents to
// the webhook; an error unless the Env was started with Options.ClientCertAuth.
func (e *Env) APIServerClientCertificate() (tls.Certificate, error) {
	if e.clientAuth == nil {
		return tls.Certificate{}, errors.New("the environment was started without Options.ClientCertAuth")
	}
	return tls.X509KeyPair(e.clientAuth.certPEM, e.clientAuth.keyPEM)
}
