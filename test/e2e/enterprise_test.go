package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// Enterprise networks: a GitHub Enterprise Server behind a private CA, a real
// forward proxy (Debian's tinyproxy) between runner-guard and GitHub, many
// scale sets sharing a few Secrets' contents, and a namespace deleted after
// its credentials Secret.

// ghesHost names the fake GitHub Enterprise Server in the proxy scenarios
// (.test is reserved: it resolves nowhere but in the test's hosts file).
const ghesHost = "ghes.e2e.test"

// privateGHES serves the harness's fake GitHub over TLS with a certificate
// from a CA of its own, for dnsNames and 127.0.0.1, and writes that CA to a
// file for --github-ca-bundle.
func privateGHES(t *testing.T, dnsNames ...string) (*framework.TLSServer, string) {
	t.Helper()
	srv, err := framework.StartTLSServer(fakeGitHub(t), dnsNames...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ca := filepath.Join(t.TempDir(), "ghes-ca.pem")
	if err := os.WriteFile(ca, srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

// restartWebhookWith is restartWebhook with environment variables and a
// command to run the binary under.
func restartWebhookWith(t *testing.T, proc framework.WebhookProcess, args ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.RestartWebhook(ctx); err != nil {
			t.Errorf("restore the webhook's default flags: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.RestartWebhookWith(ctx, proc, args...); err != nil {
		t.Fatal(err)
	}
}

// allowConfigMaps lets the webhook get ConfigMaps in the scenario's
// namespace (githubServerTLS), as the chart grants per runner namespace.
func (s *scaleSet) allowConfigMaps() {
	s.t.Helper()
	s.role("runner-guard-arc-configmaps", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
}

// role grants the webhook's ServiceAccount rule in the scenario's namespace.
func (s *scaleSet) role(name string, rule rbacv1.PolicyRule) {
	s.t.Helper()
	if _, err := env.Client.RbacV1().Roles(s.ns).Create(s.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().RoleBindings(s.ns).Create(s.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: webhookSAName, Namespace: webhookSANamespace}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// allowNamespaceRead lets the webhook get the scenario's Namespace, as the
// chart grants for each fromARC namespace.
func (s *scaleSet) allowNamespaceRead() {
	s.t.Helper()
	name := "runner-guard-e2e-ns-" + s.ns
	if _, err := env.Client.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{s.ns}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(s.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: webhookSAName, Namespace: webhookSANamespace}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = env.Client.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func (s *scaleSet) configMap(name string, data map[string]string) {
	s.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}, Data: data}
	if _, err := env.Client.CoreV1().ConfigMaps(s.ns).Create(s.ctx, cm, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// requireTLSRefusal fails unless err is runner-guard's refusal because the
// GitHub server's certificate is not trusted.
func requireTLSRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("%s: %v; want a refusal because the certificate is signed by an unknown authority", what, err)
	}
}

// A GitHub Enterprise Server whose certificate a private CA signed: without
// the CA every call fails (the pod is refused, GitHub hears nothing, the
// runner stays registered); trusted through --github-ca-bundle (static
// credentials) or the EphemeralRunner's githubServerTLS (ARC credentials),
// every call works.
func TestGHESPrivateCA(t *testing.T) {
	s := newScaleSet(t, "ghes-ca")
	srv, caFile := privateGHES(t)
	s.allowSecrets()
	s.allowConfigMaps()
	s.secret("ghes-token", map[string]string{"github_token": e2eGitHubToken})
	s.configMap("ghes-ca", map[string]string{"ca.crt": string(srv.CAPEM)})
	api := srv.URL + "/api/v3/"

	t.Run("static credentials and --github-ca-bundle", func(t *testing.T) {
		s := s.sub(t)
		scope := mustScope(ghclient.OrgScope("org-ghes-ca-static"))
		url := srv.URL + "/" + scope.Name
		restartWebhook(t, "--github-url="+api)
		untrusted := s.runner("static-untrusted", url, scope, false, nil)
		before := srv.Accepted()
		reqs, err := s.deletePod(untrusted.name, scope)
		requireTLSRefusal(t, "delete without the CA", err)
		if len(reqs) != 0 || !untrusted.registered() {
			t.Errorf("without the CA GitHub heard:%s; registered %t, want nothing and registered", describe(reqs), untrusted.registered())
		}
		if srv.Accepted() == before {
			t.Error("the webhook never reached the server: the refusal proves nothing about TLS")
		}
		s.requireAlive(untrusted.name)

		restartWebhook(t, "--github-url="+api, "--github-ca-bundle="+caFile)
		reqs, err = s.deletePod(untrusted.name, scope)
		if err != nil {
			t.Fatalf("delete with --github-ca-bundle: %v", err)
		}
		requireOneRequest(t, "with the CA", reqs, "/api/v3", untrusted, 204)
		s.requireDeleting(untrusted.name)
	})

	t.Run("ARC credentials and githubServerTLS", func(t *testing.T) {
		s := s.sub(t)
		scope := mustScope(ghclient.OrgScope("org-ghes-ca-arc"))
		url := srv.URL + "/" + scope.Name
		restartWebhook(t, "--credentials-mode=arc")
		untrusted := s.runner("arc-untrusted", url, scope, false, func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("ghes-token") })
		trusted := s.runner("arc-trusted", url, scope, false, func(w *fixture.EphemeralRunnerWrapper) {
			w.ConfigSecret("ghes-token").GitHubServerTLS("ghes-ca", "ca.crt")
		})
		busy := s.runner("arc-trusted-busy", url, scope, true, func(w *fixture.EphemeralRunnerWrapper) {
			w.ConfigSecret("ghes-token").GitHubServerTLS("ghes-ca", "ca.crt")
		})

		reqs, err := s.deletePod(untrusted.name, scope)
		requireTLSRefusal(t, "delete without githubServerTLS", err)
		if len(reqs) != 0 || !untrusted.registered() {
			t.Errorf("without githubServerTLS GitHub heard:%s", describe(reqs))
		}
		s.requireAlive(untrusted.name)

		reqs, err = s.deletePod(trusted.name, scope)
		if err != nil {
			t.Fatalf("delete with githubServerTLS: %v", err)
		}
		requireOneRequest(t, "with githubServerTLS", reqs, "/api/v3", trusted, 204)
		s.requireDeleting(trusted.name)

		reqs, err = s.deletePod(busy.name, scope)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
			t.Errorf("delete of the busy runner's pod: %v; want Forbidden, runner busy", err)
		}
		if len(reqs) == 0 {
			t.Error("the busy runner was refused without asking GitHub")
		}
		s.requireAlive(busy.name)
	})
}

// proxied prepares the proxy scenarios: a mount namespace whose hosts file
// names ghesHost (Go never proxies loopback addresses), the fake GitHub at
// ghesHost over TLS, and tinyproxy in that namespace with basic auth.
func proxied(t *testing.T) ([]string, *framework.TLSServer, string, *framework.Tinyproxy) {
	t.Helper()
	wrap, skip, err := framework.ProxyNetwork(t.TempDir(), ghesHost)
	if skip != "" {
		t.Skip("the proxy scenarios: " + skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, caFile := privateGHES(t, ghesHost)
	_, port, _ := net.SplitHostPort(srv.Addr)
	p, _ := strconv.Atoi(port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp, err := framework.StartTinyproxy(ctx, framework.TinyproxyOptions{Dir: t.TempDir(), Wrap: wrap, ConnectPorts: []int{p}, User: "rg", Password: "proxy-secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Stop() })
	return wrap, srv, caFile, tp
}

// requireAllThroughProxy fails unless the proxy logged CONNECTs to the
// server only, and exactly as many as the server accepted connections since
// the counts were taken: then every request rode a tunnel the proxy opened.
func requireAllThroughProxy(t *testing.T, tp *framework.Tinyproxy, srv *framework.TLSServer, connectsBefore int, acceptedBefore int64) {
	t.Helper()
	connects, err := tp.Connects()
	if err != nil {
		t.Fatal(err)
	}
	connects = connects[connectsBefore:]
	accepted := srv.Accepted() - acceptedBefore
	want := strings.TrimPrefix(srv.URL, "https://")
	if len(connects) == 0 || int64(len(connects)) != accepted || slices.ContainsFunc(connects, func(c string) bool { return c != want }) {
		t.Errorf("tinyproxy CONNECTs %v, server accepted %d connections; want only CONNECT %s, one per accepted connection", connects, accepted, want)
	}
}

// Every GitHub request passes through a real forward proxy (tinyproxy, with
// basic auth) when HTTPS_PROXY names it, and none when NO_PROXY names the
// host; in ARC credentials mode an EphemeralRunner's spec.proxy, its
// credentialSecretRef and noProxy decide the same for its runner.
func TestProxy(t *testing.T) {
	wrap, srv, caFile, tp := proxied(t)
	s := newScaleSet(t, "proxy")
	s.allowSecrets()
	s.allowConfigMaps()
	s.secret("ghes-token", map[string]string{"github_token": e2eGitHubToken})
	s.secret("proxy-creds", map[string]string{"username": "rg", "password": "proxy-secret"})
	s.configMap("ghes-ca", map[string]string{"ca.crt": string(srv.CAPEM)})
	proxyWithAuth := strings.Replace(tp.URL, "http://", "http://rg:proxy-secret@", 1)
	api := srv.URL + "/api/v3/"

	cases := map[string]struct {
		env       []string
		args      []string
		edit      func(*fixture.EphemeralRunnerWrapper)
		wantProxy bool
	}{
		"HTTPS_PROXY": {
			env:  []string{"HTTPS_PROXY=" + proxyWithAuth, "NO_PROXY="},
			args: []string{"--github-url=" + api, "--github-ca-bundle=" + caFile}, wantProxy: true,
		},
		"HTTPS_PROXY and NO_PROXY naming the host": {
			env:  []string{"HTTPS_PROXY=" + proxyWithAuth, "NO_PROXY=other.e2e.test," + ghesHost},
			args: []string{"--github-url=" + api, "--github-ca-bundle=" + caFile},
		},
		"spec.proxy with credentialSecretRef": {
			env:  []string{"HTTPS_PROXY=", "NO_PROXY="},
			args: []string{"--credentials-mode=arc"},
			edit: func(w *fixture.EphemeralRunnerWrapper) {
				w.ConfigSecret("ghes-token").GitHubServerTLS("ghes-ca", "ca.crt").Proxy(tp.URL, "proxy-creds")
			},
			wantProxy: true,
		},
		"spec.proxy with noProxy naming the host": {
			env:  []string{"HTTPS_PROXY=", "NO_PROXY="},
			args: []string{"--credentials-mode=arc"},
			edit: func(w *fixture.EphemeralRunnerWrapper) {
				w.ConfigSecret("ghes-token").GitHubServerTLS("ghes-ca", "ca.crt").Proxy(tp.URL, "proxy-creds", "."+strings.SplitN(ghesHost, ".", 2)[1])
			},
		},
	}
	i := 0
	for name, c := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			s := s.sub(t)
			restartWebhookWith(t, framework.WebhookProcess{Env: c.env, Wrap: wrap}, c.args...)
			scope := mustScope(ghclient.OrgScope(fmt.Sprintf("org-proxy-%d", i)))
			url := srv.URL + "/" + scope.Name
			edit := c.edit
			if edit == nil {
				edit = func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("ghes-token") }
			}
			idle := s.runner(fmt.Sprintf("proxy-%d-idle", i), url, scope, false, edit)
			busy := s.runner(fmt.Sprintf("proxy-%d-busy", i), url, scope, true, edit)
			connects, err := tp.Connects()
			if err != nil {
				t.Fatal(err)
			}
			accepted := srv.Accepted()

			reqs, err := s.deletePod(busy.name, scope)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
				t.Errorf("delete of the busy runner's pod: %v; want Forbidden, runner busy", err)
			}
			s.requireAlive(busy.name)
			reqs2, err := s.deletePod(idle.name, scope)
			if err != nil {
				t.Fatalf("delete of the idle runner's pod: %v", err)
			}
			requireOneRequest(t, "idle runner", reqs2, "/api/v3", idle, 204)
			s.requireDeleting(idle.name)
			if len(reqs) == 0 {
				t.Fatal("GitHub heard nothing about the busy runner")
			}

			if c.wantProxy {
				requireAllThroughProxy(t, tp, srv, len(connects), accepted)
				return
			}
			after, err := tp.Connects()
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(connects) || srv.Accepted() == accepted {
				t.Errorf("with the host in NO_PROXY: tinyproxy logged CONNECTs %v, server accepted %d new connections; want none through the proxy, some direct",
					after[len(connects):], srv.Accepted()-accepted)
			}
		})
	}

	// The proxy wants basic auth: without the credentialSecretRef it refuses
	// the tunnel, so the pod is refused and the runner stays registered.
	t.Run("spec.proxy without its credentialSecretRef", func(t *testing.T) {
		s := s.sub(t)
		restartWebhookWith(t, framework.WebhookProcess{Env: []string{"HTTPS_PROXY=", "NO_PROXY="}, Wrap: wrap}, "--credentials-mode=arc")
		scope := mustScope(ghclient.OrgScope("org-proxy-noauth"))
		idle := s.runner("proxy-noauth-idle", srv.URL+"/"+scope.Name, scope, false, func(w *fixture.EphemeralRunnerWrapper) {
			w.ConfigSecret("ghes-token").GitHubServerTLS("ghes-ca", "ca.crt").Proxy(tp.URL, "")
		})
		accepted := srv.Accepted()
		_, err := s.deletePod(idle.name, scope)
		if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("delete through the proxy without credentials: %v; want refused, Proxy Authentication Required", err)
		}
		if !idle.registered() || srv.Accepted() != accepted {
			t.Errorf("registered %t, server accepted %d connections; want the runner registered and nothing reaching GitHub", idle.registered(), srv.Accepted()-accepted)
		}
		s.requireAlive(idle.name)
	})
}

// 200 scale sets, each with its own githubConfigSecret, whose Secrets hold
// only three contents (an App installed on two organisations, and a token):
// each runner-guard replica holds three GitHub clients at most and mints one
// installation token per installation, however many Secrets name them.
func TestManyScaleSetsFewCredentials(t *testing.T) {
	const appID = 9301
	fake, s, keyPEM := arcCredentialsScaleSet(t, "many-sets", appID)
	orgA, orgB, orgC := "org-many-a", "org-many-b", "org-many-c"
	installA, installB := fake.AddInstallation(appID, orgA), fake.AddInstallation(appID, orgB)
	contents := []struct {
		org  string
		data map[string]string
	}{
		{orgA, appSecretData(appID, installA, string(keyPEM))},
		{orgB, appSecretData(appID, installB, string(keyPEM))},
		{orgC, map[string]string{"github_token": e2eGitHubToken}},
	}
	restartWebhook(t, "--credentials-mode=arc")
	const sets = 200
	before := len(env.GitHub.Requests())
	var runners []scaleSetRunner
	for i := range sets {
		c := contents[i%len(contents)]
		secret := fmt.Sprintf("scale-set-%03d-github", i)
		s.secret(secret, c.data)
		scope := mustScope(ghclient.OrgScope(c.org))
		// The fake's host: by ARC's rule its API base is HOST/api/v3/.
		runners = append(runners, s.runner(fmt.Sprintf("set-%03d-runner", i), env.GitHubURL+c.org, scope, false,
			func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret(secret) }))
	}
	for _, r := range runners {
		if _, err := s.deletePod(r.name, r.scope); err != nil {
			t.Fatalf("delete of idle %s: %v", r.name, err)
		}
		if r.registered() {
			t.Fatalf("runner %s still registered", r.name)
		}
	}
	reqs := env.GitHub.Requests()[before:]
	mints := map[string]int{}
	for _, q := range reqs {
		if q.Method == "POST" && strings.HasSuffix(q.Path, "/access_tokens") {
			mints[q.Path]++
		}
	}
	// Each replica holds its own clients and tokens: one per installation
	// per replica at most, and every installation minted by some replica.
	replicas := len(env.ReplicaAddrs())
	for _, install := range []int64{installA, installB} {
		path := fmt.Sprintf("/api/v3/app/installations/%d/access_tokens", install)
		if n := mints[path]; n < 1 || n > replicas {
			t.Errorf("installation %d: %d tokens minted (all mints %v); want one per replica that used it, 1 to %d", install, n, mints, replicas)
		}
	}
	if len(mints) != 2 {
		t.Errorf("installation tokens minted: %v; want only installations %d and %d", mints, installA, installB)
	}
	samples, err := env.ReplicaMetrics(s.ctx, "runner_guard_github_clients")
	if err != nil {
		t.Fatal(err)
	}
	clients := 0.0
	for _, m := range samples {
		if !m.Found || m.Value > 3 {
			t.Errorf("replica %s: runner_guard_github_clients = %v (present %v) after %d scale sets; want at most 3 (one per distinct Secret contents)", m.Replica, m.Value, m.Found, sets)
		}
		clients += m.Value
	}
	if clients < 3 {
		t.Errorf("runner_guard_github_clients sums to %v over the replicas; want each of the 3 Secret contents held by one at least", clients)
	}
	t.Logf("%d scale sets, %d GitHub requests, %d clients, mints %v", sets, len(reqs), int(clients), mints)
}

// A namespace deleted after its githubConfigSecret (a GitOps prune): the
// namespace finishes deleting. With the flags' credentials runner-guard asks
// GitHub as for any runner: idle runners' pods go at once, the busy one's
// once its job ends. Without static credentials nothing can ask GitHub: idle
// runners' pods go unguarded (namespace-deleting; their registrations stay
// on GitHub, offline), and the busy one, whose job ARC's listener recorded,
// stays until the job ends and its runner exits. The namespace controller
// deletes pods in one DELETE collection that kube-apiserver works through in
// name order and stops at the first refusal, so an idle pod named after the
// busy one waits for that job too.
func TestNamespaceDeletionAfterItsSecret(t *testing.T) {
	cases := map[string]struct {
		args   []string
		static bool
	}{
		// The flags' --github-url is the runners' API base, or runner-guard
		// would refuse to ask another GitHub about them.
		"static credentials":    {args: []string{"--credentials-mode=arc", "--github-url=" + env.GitHubURL + "api/v3/"}, static: true},
		"no static credentials": {args: []string{"--credentials-mode=arc", "--github-token-file="}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			prefix := "nsdel-static"
			if !c.static {
				prefix = "nsdel-none"
			}
			s := newScaleSet(t, prefix)
			s.allowSecrets()
			s.allowNamespaceRead()
			s.secret("arc-creds", map[string]string{"github_token": e2eGitHubToken})
			restartWebhook(t, c.args...)
			scope := mustScope(ghclient.OrgScope("org-" + prefix))
			url := env.GitHubURL + scope.Name
			creds := func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("arc-creds") }
			first := s.runner(prefix+"-a-idle", url, scope, false, creds)
			busy := s.runner(prefix+"-m-busy", url, scope, true, func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("arc-creds").JobID("job-7") })
			last := s.runner(prefix+"-z-idle", url, scope, false, creds)
			before := len(env.GitHub.Requests())

			// The GitOps prune: the Secret goes first, then the namespace.
			if err := env.Client.CoreV1().Secrets(s.ns).Delete(s.ctx, "arc-creds", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// The namespace controller deletes the pods; play the kubelet
			// for each one admitted.
			gone := func(r scaleSetRunner) func() error {
				return func() error {
					if err := s.deletionAdmitted(r.name); err != nil {
						return err
					}
					return env.FinishTermination(s.ctx, s.ns, r.name)
				}
			}
			s.eventually("the first idle runner's pod admitted for deletion", 90*time.Second, gone(first))
			s.requireAlive(busy.name)
			if c.static == first.registered() {
				t.Errorf("idle runner %s registered: %t; want %t (static credentials unregister it; without them nothing asks GitHub)", first.name, first.registered(), !c.static)
			}
			if s.deletionAdmitted(last.name) != nil {
				t.Logf("pod %s waits behind the busy runner's pod in the namespace controller's DELETE collection", last.name)
			}

			// The job ends and the ephemeral runner exits; the listener's
			// job fields stay on the EphemeralRunner, so only the runner's
			// exit lets its pod go.
			env.GitHub.SetBusy(scope, busy.name, false)
			p := s.pod(busy.name)
			p.Status = fixture.MakeScaleSetRunnerPod(s.ns, busy.name).RunnerTerminated().Obj().Status
			if _, err := env.Client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.eventually("the busy runner's pod admitted once its job ended", 120*time.Second, gone(busy))
			s.eventually("the last idle runner's pod admitted", 120*time.Second, gone(last))
			if !c.static {
				if reqs := requestsFor(env.GitHub.Requests()[before:], scopePath(scope)); len(reqs) != 0 {
					t.Errorf("without static credentials GitHub heard:%s; want nothing", describe(reqs))
				}
			}
			// ARC drops its finalizers once the pods are gone.
			for _, r := range []scaleSetRunner{first, busy, last} {
				s.release(r.name)
			}
			s.eventually("namespace gone", 120*time.Second, func() error {
				_, err := env.Client.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("namespace still there: %v", err)
			})
		})
	}
}
