package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// In-cluster fake GitHub of manifests/e2e-kind.
const (
	fakeGitHubNamespace = "runner-guard-system"
	fakeGitHubService   = "fakegithub"
	fakeGitHubPort      = "http"
)

// Connect uses an existing cluster (KUBECONFIG) where `make e2e-kind` installed
// runner-guard and the fake GitHub; the fake is driven through the API
// server's service proxy. kubectl is $KUBECTL or the one on PATH.
func Connect(ctx context.Context, fail func(error)) (*Env, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	path := loading.GetDefaultFilename()
	if env := os.Getenv("KUBECONFIG"); env != "" {
		path = filepath.SplitList(env)[0]
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("KUBECONFIG: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			return nil, fmt.Errorf("kubectl not found: set KUBECTL or put kubectl on PATH")
		}
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "runner-guard-e2e-external-")
	if err != nil {
		return nil, err
	}
	remote := &RemoteGitHub{
		BaseURL: fmt.Sprintf("%s/api/v1/namespaces/%s/services/%s:%s:%s/proxy",
			cfg.Host, fakeGitHubNamespace, "http", fakeGitHubService, fakeGitHubPort),
		Client: httpClient,
		Fail:   fail,
	}
	cp := &ControlPlane{Dir: dir, Kubeconfig: path, Config: cfg, Client: client, URL: cfg.Host, kubectl: kubectl}
	e := &Env{ControlPlane: cp, GitHub: remote, opts: Options{Logf: func(string, ...any) {}}}
	if _, err := client.CoreV1().Services(fakeGitHubNamespace).Get(ctx, fakeGitHubService, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("fake GitHub Service %s/%s (installed by make e2e-kind): %w", fakeGitHubNamespace, fakeGitHubService, err)
	}
	return e, nil
}
