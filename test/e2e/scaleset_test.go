package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// The scenarios here play ARC's scale-set mode (gha-runner-scale-set): each
// runner pod is controlled by an EphemeralRunner (the CRD in
// testdata/crds, installed by the harness) whose status the test sets through
// the status subresource, as ARC's controller does.

const (
	// keepFinalizer is the test's own: it keeps an EphemeralRunner readable
	// while it is being deleted, whatever happens to ARC's finalizers (there
	// is no ARC controller to run them).
	keepFinalizer = "e2e.runner-guard.io/keep"
	// e2eGitHubToken is the one token the fake GitHub accepts (the harness's).
	e2eGitHubToken = "ghp_e2e-token"
	// webhookSA is the webhook's ServiceAccount, as in manifests/base.
	webhookSANamespace, webhookSAName = "runner-guard-system", "runner-guard"
)

// scaleSet is a scenario with a dynamic client for EphemeralRunners.
type scaleSet struct {
	*scenario
	dyn dynamic.Interface
	// node, when set, is the Node runner pods are bound to.
	node string
}

// newScaleSet starts a scale-set scenario. It needs the local harness: the
// CRD, restarts of the webhook and the in-process fake's Apps and styles.
func newScaleSet(t *testing.T, name string) *scaleSet {
	t.Helper()
	if !env.Local() {
		t.Skip("scale-set scenarios need the local harness (the EphemeralRunner CRD, webhook restarts, the in-process fake GitHub)")
	}
	s := &scaleSet{scenario: newScenario(t, name)}
	var err error
	if s.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	return s
}

// newOrgScaleSet is newScaleSet whose runners are registered in the
// organization org-<name>, with that organization's github.com config URL.
func newOrgScaleSet(t *testing.T, name string) (s *scaleSet, scope ghclient.Scope, url string) {
	t.Helper()
	s = newScaleSet(t, name)
	scope = mustScope(ghclient.OrgScope("org-" + name))
	return s, scope, "https://github.com/" + scope.Name
}

// sub is the scenario seen from subtest t (same namespace and clients).
func (s *scaleSet) sub(t *testing.T) *scaleSet {
	sc := *s.scenario
	sc.t = t
	return &scaleSet{scenario: &sc, dyn: s.dyn, node: s.node}
}

// fakeGitHub is the in-process fake, for what the GitHub interface lacks.
func fakeGitHub(t *testing.T) *ghfake.Fake {
	t.Helper()
	f, ok := env.GitHub.(*ghfake.Fake)
	if !ok {
		t.Skip("needs the in-process fake GitHub (not E2E_GITHUB_CONTROL=http)")
	}
	return f
}

// mustScope panics on an invalid scope: the tests name only valid ones.
func mustScope(s ghclient.Scope, err error) ghclient.Scope {
	if err != nil {
		panic(err)
	}
	return s
}

// arcLabelValue is ARC's trimLabelValue: longer than 63 characters, the first
// 58 and "-trim"; otherwise trimmed of -_. at both ends.
func arcLabelValue(v string) string {
	if len(v) > 63 {
		return v[:58] + "-trim"
	}
	return strings.Trim(v, "-_.")
}

// arcScopeLabels are the scope labels ARC's applyGitHubURLLabels puts on the pod.
func arcScopeLabels(scope ghclient.Scope) map[string]string {
	switch scope.Kind {
	case ghclient.ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		return map[string]string{"actions.github.com/organization": arcLabelValue(owner), "actions.github.com/repository": arcLabelValue(repo)}
	case ghclient.ScopeEnterprise:
		return map[string]string{"actions.github.com/enterprise": arcLabelValue(scope.Name)}
	}
	return map[string]string{"actions.github.com/organization": arcLabelValue(scope.Name)}
}

// scaleSetRunner is one runner as ARC leaves it once registered.
type scaleSetRunner struct {
	name  string
	scope ghclient.Scope
	id    int64
	uid   types.UID
}

// registered reports whether the fake GitHub still has the runner.
func (r scaleSetRunner) registered() bool {
	_, ok := env.GitHub.Runner(r.scope, r.name)
	return ok
}

// runner registers a runner on the fake GitHub (busy or idle), creates its
// EphemeralRunner for configURL with status.runnerId/runnerName/phase set
// through the status subresource, and its running pod, controlled by it and
// labelled as ARC would. edit, when set, changes the EphemeralRunner first.
func (s *scaleSet) runner(name, configURL string, scope ghclient.Scope, busy bool, edit func(*fixture.EphemeralRunnerWrapper)) scaleSetRunner {
	s.t.Helper()
	id := env.GitHub.AddRunner(scope, name)
	env.GitHub.SetBusy(scope, name, busy)
	w := fixture.MakeEphemeralRunner(s.ns, name).ConfigURL(configURL).RunnerID(id).RunnerName(name)
	if edit != nil {
		edit(w)
	}
	want := w.Obj()
	want.SetUID("")
	want.SetFinalizers(append(want.GetFinalizers(), keepFinalizer))
	created, err := framework.CreateEphemeralRunner(s.ctx, s.dyn, want)
	if created != nil {
		s.t.Cleanup(func() { s.release(name) })
	}
	if err != nil {
		s.t.Fatal(err)
	}
	owner := &fixture.EphemeralRunnerWrapper{Unstructured: *created}
	pod := fixture.MakeScaleSetRunnerPod(s.ns, name).OwnedByEphemeralRunner(owner).Obj()
	for k, v := range arcScopeLabels(scope) {
		pod.Labels[k] = v
	}
	pod.Spec.NodeName = s.node
	s.create(pod)
	s.settleHints(name)
	return scaleSetRunner{name: name, scope: scope, id: id, uid: created.GetUID()}
}

// newScaleSetOnNode is newScaleSet with runner pods bound to the Node
// e2e-node-NAME, made here and uncordoned when the test ends.
func newScaleSetOnNode(t *testing.T, name string) *scaleSet {
	t.Helper()
	s := newScaleSet(t, name)
	s.node = "e2e-node-" + name
	if err := env.EnsureNode(s.ctx, s.node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.Kubectl(s.ctx, "uncordon", s.node) })
	return s
}

// waitReleased waits until each runner's pod deletion was admitted and the
// runner is gone from GitHub.
func (s *scaleSet) waitReleased(what string, within time.Duration, runners ...scaleSetRunner) {
	s.t.Helper()
	s.eventually(what, within, func() error {
		for _, r := range runners {
			if err := s.deletionAdmitted(r.name); err != nil {
				return err
			}
			if r.registered() {
				return fmt.Errorf("runner %s still registered", r.name)
			}
		}
		return nil
	})
}

// release drops every finalizer so the EphemeralRunner can go once deleted.
func (s *scaleSet) release(name string) {
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.t.Logf("release EphemeralRunner %s: %v", name, err)
	}
}

// ephemeralRunner fetches an EphemeralRunner; nil when it is gone.
func (s *scaleSet) ephemeralRunner(name string) *unstructured.Unstructured {
	s.t.Helper()
	u, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return u
}

// retired reports whether the EphemeralRunner was deleted (gone, or held by
// finalizers with a deletionTimestamp).
func (s *scaleSet) retired(name string) bool {
	u := s.ephemeralRunner(name)
	return u == nil || u.GetDeletionTimestamp() != nil
}

// waitRetired waits until runner-guard deleted the EphemeralRunner: its
// Retirer does, right after the admission call that unregistered the runner.
func (s *scaleSet) waitRetired(name string) {
	s.t.Helper()
	s.eventually("EphemeralRunner "+name+" retired after runner-guard unregistered its runner", 10*time.Second, func() error {
		if !s.retired(name) {
			return fmt.Errorf("EphemeralRunner %s/%s is still there", s.ns, name)
		}
		return nil
	})
}

// deleteEphemeralRunner deletes it as ARC's EphemeralRunnerSet does; its
// finalizers keep it, being deleted.
func (s *scaleSet) deleteEphemeralRunner(name string) {
	s.t.Helper()
	bg := metav1.DeletePropagationBackground
	if err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		s.t.Fatal(err)
	}
}

// setFinalizers replaces the EphemeralRunner's finalizers (the test's own kept).
func (s *scaleSet) setFinalizers(name string, fins ...string) {
	s.t.Helper()
	u := s.ephemeralRunner(name)
	u.SetFinalizers(append(fins, keepFinalizer))
	if _, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Update(s.ctx, u, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// setPhase sets status.phase through the status subresource.
func (s *scaleSet) setPhase(name, phase string) {
	s.t.Helper()
	u := s.ephemeralRunner(name)
	if err := unstructured.SetNestedField(u.Object, phase, "status", "phase"); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).UpdateStatus(s.ctx, u, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// deletePod deletes the pod as a controller would, returning the GitHub
// requests the decision made for scope and the API error.
// settleHints waits until the hint controller has annotated a new runner
// pod (its deletion cost), when it runs. A delete racing that patch is
// admitted twice: the API server re-runs validating admission when its
// graceful-deletion update meets a conflict, and tests that count GitHub
// requests would count the second decision's look-up. Without the
// controller nothing is patched, and the wait ends at its bound.
func (s *scaleSet) settleHints(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if p := s.pod(name); p == nil || p.Annotations[disruption.AnnotationOwned] != "" {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *scaleSet) deletePod(name string, scope ghclient.Scope) ([]ghfake.Request, error) {
	s.t.Helper()
	before := len(env.GitHub.Requests())
	err := env.Client.CoreV1().Pods(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{})
	return requestsFor(env.GitHub.Requests()[before:], scopePath(scope)), err
}

func requestsFor(reqs []ghfake.Request, pathContains string) []ghfake.Request {
	var out []ghfake.Request
	for _, r := range reqs {
		if strings.Contains(r.Path, pathContains) {
			out = append(out, r)
		}
	}
	return out
}

func describe(reqs []ghfake.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "\n  %s %s -> %d", r.Method, r.Path, r.Status)
	}
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

// requireOneRequest fails unless reqs is exactly one DELETE of the runner's
// ID under apiPrefix ("" for github.com's layout, "/api/v3" for GHES)
// answered with status.
func requireOneRequest(t *testing.T, what string, reqs []ghfake.Request, apiPrefix string, r scaleSetRunner, status int) {
	t.Helper()
	want := fmt.Sprintf("%s%sactions/runners/%d", apiPrefix, scopePath(r.scope), r.id)
	if len(reqs) != 1 || reqs[0].Method != "DELETE" || reqs[0].Path != want || reqs[0].Status != status {
		t.Errorf("%s: GitHub requests:%s\nwant exactly one: DELETE %s -> %d", what, describe(reqs), want, status)
	}
}

// restartWebhook restarts the webhook with args and restores its default
// flags when the test ends.
func restartWebhook(t *testing.T, args ...string) {
	t.Helper()
	restartWebhookWith(t, framework.WebhookProcess{}, args...)
}

// allowSecrets lets the webhook get Secrets in the scenario's namespace, as
// the manifests grant it per runner namespace in ARC credentials mode.
func (s *scaleSet) allowSecrets() {
	s.t.Helper()
	s.role("runner-guard-arc-credentials", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
}

// secret creates an ARC githubConfigSecret with data.
func (s *scaleSet) secret(name string, data map[string]string) {
	s.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}, StringData: data}
	if _, err := env.Client.CoreV1().Secrets(s.ns).Create(s.ctx, sec, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// addApp registers GitHub App appID on the fake with a new RSA key and
// returns the key's PEM, for runner-guard's credentials.
func addApp(t *testing.T, fake *ghfake.Fake, appID int64) (keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fake.AddApp(appID, &key.PublicKey)
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// arcCredentialsScaleSet is a scale set on a fake GitHub of its own whose
// runners are asked about with their githubConfigSecrets (the webhook may
// get Secrets in its namespace), with GitHub App appID registered there; it
// returns the App's key PEM.
func arcCredentialsScaleSet(t *testing.T, name string, appID int64) (*ghfake.Fake, *scaleSet, []byte) {
	t.Helper()
	fake := fakeGitHub(t)
	s := newScaleSet(t, name)
	s.allowSecrets()
	return fake, s, addApp(t, fake, appID)
}

// appSecretData is an ARC githubConfigSecret's data for App appID's
// installation, with privateKey as the key's PEM.
func appSecretData(appID, installation int64, privateKey string) map[string]string {
	return map[string]string{
		"github_app_id":              strconv.FormatInt(appID, 10),
		"github_app_installation_id": strconv.FormatInt(installation, 10),
		"github_app_private_key":     privateKey,
	}
}

// credential is the token a request carried.
func credential(r ghfake.Request) string {
	_, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return tok
}

// Scope from the EphemeralRunner, not from ARC's labels: a repository name
// longer than a label (ARC cuts it to 58 + "-trim") and `.github` (ARC's label
// says "github") are asked about where they are registered. A busy runner's
// pod is refused and an idle one's unregistered, each in exactly one request
// (the runner ID comes from status.runnerId), and the idle runner's
// EphemeralRunner is retired so ARC starts a fresh runner.
func TestScaleSetScopeFromEphemeralRunner(t *testing.T) {
	s := newScaleSet(t, "ss-scope")
	repo70 := "org-ss-scope/" + strings.Repeat("r", 70)
	cases := map[string]struct {
		prefix string // pod and EphemeralRunner names
		scope  ghclient.Scope
	}{
		"repository name of 70 characters": {prefix: "long", scope: mustScope(ghclient.RepoScope(repo70))},
		".github repository":               {prefix: "dotgithub", scope: mustScope(ghclient.RepoScope("org-ss-scope/.github"))},
		"organisation":                     {prefix: "org", scope: mustScope(ghclient.OrgScope("org-ss-scope"))},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := s.sub(t)
			url := "https://github.com/" + c.scope.Name
			busy := s.runner(c.prefix+"-busy", url, c.scope, true, nil)
			idle := s.runner(c.prefix+"-idle", url, c.scope, false, nil)

			reqs, err := s.deletePod(busy.name, c.scope)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") || !strings.Contains(err.Error(), c.scope.Name) {
				t.Errorf("delete of the busy runner's pod: %v; want Forbidden, runner busy, naming %s", err, c.scope)
			}
			requireOneRequest(t, "busy runner", reqs, "", busy, 422)
			s.requireAlive(busy.name)
			if s.retired(busy.name) {
				t.Errorf("EphemeralRunner %s of the busy runner was deleted", busy.name)
			}

			reqs, err = s.deletePod(idle.name, c.scope)
			if err != nil {
				t.Fatalf("delete of the idle runner's pod: %v", err)
			}
			requireOneRequest(t, "idle runner", reqs, "", idle, 204)
			if idle.registered() {
				t.Errorf("runner %s still registered in %s", idle.name, c.scope)
			}
			s.waitRetired(idle.name)
			ev := s.waitForEvent(idle.name, "RunnerUnregistered")
			if !strings.Contains(ev, fmt.Sprintf("EphemeralRunner %s/%s is retired", s.ns, idle.name)) {
				t.Errorf("event %q does not say the EphemeralRunner is retired", ev)
			}
			s.requireDeleting(idle.name)
		})
	}
}

// What ARC's EphemeralRunner says about its own clean-up: once ARC has removed
// the runner (being deleted and the registration finalizer gone, or a finished
// phase), its pod goes without a GitHub request; while the registration
// finalizer is still there, the pod is guarded as any other. The runners are
// busy on the fake GitHub, so a request would refuse.
func TestScaleSetARCRemoval(t *testing.T) {
	s := newScaleSet(t, "ss-removal")
	cases := map[string]struct {
		name     string
		arc      func(s *scaleSet, name string) // what ARC has done to the EphemeralRunner
		allowed  bool
		requests int
	}{
		"removed by ARC: being deleted, registration finalizer gone": {
			name: "removed",
			arc: func(s *scaleSet, n string) {
				s.deleteEphemeralRunner(n)
				s.setFinalizers(n, fixture.EphemeralRunnerFinalizer)
			},
			allowed: true, requests: 0,
		},
		"being deleted, registration finalizer present (job still running)": {
			name:    "finalizing",
			arc:     func(s *scaleSet, n string) { s.deleteEphemeralRunner(n) },
			allowed: false, requests: 1,
		},
		"phase Succeeded": {
			name:    "succeeded",
			arc:     func(s *scaleSet, n string) { s.setPhase(n, "Succeeded") },
			allowed: true, requests: 0,
		},
		"phase Running (control)": {
			name:    "running",
			arc:     func(*scaleSet, string) {},
			allowed: false, requests: 1,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := s.sub(t)
			// An organization per case: the requests counted are this
			// case's, not those of the garbage collector retrying another
			// case's delete (any replica may answer it, each with its own
			// memory of the runner being busy).
			scope := mustScope(ghclient.OrgScope("org-ss-removal-" + c.name))
			r := s.runner(c.name, "https://github.com/"+scope.Name, scope, true, nil)
			c.arc(s, r.name)
			reqs, err := s.deletePod(r.name, scope)
			if c.allowed {
				if err != nil {
					t.Fatalf("delete: %v; want allowed (ARC already removed the runner)", err)
				}
				s.requireDeleting(r.name)
			} else {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
					t.Errorf("delete: %v; want Forbidden, runner busy", err)
				}
				s.requireAlive(r.name)
			}
			if len(reqs) != c.requests {
				t.Errorf("GitHub requests:%s\nwant %d", describe(reqs), c.requests)
			}
			if !r.registered() {
				t.Errorf("runner %s unregistered by runner-guard", r.name)
			}
			// Only a runner runner-guard unregistered is retired.
			er := s.ephemeralRunner(r.name)
			if er == nil {
				t.Fatalf("EphemeralRunner %s is gone", r.name)
			}
			if got, want := er.GetDeletionTimestamp() != nil, c.name == "removed" || c.name == "finalizing"; got != want {
				t.Errorf("EphemeralRunner %s being deleted: %v, want %v", r.name, got, want)
			}
		})
	}
}

// A GitHub Enterprise Server config URL (http://HOST/ORG): the fake serves
// only GHES's layout under /api/v3. With static credentials, --github-url
// names the GHES API; in ARC credentials mode the API base comes from the
// EphemeralRunner's githubConfigUrl (any host but github.com and *.ghe.com:
// HOST/api/v3/) while --github-url still names the fake's root.
func TestScaleSetGHESConfigURL(t *testing.T) {
	fake := fakeGitHub(t)
	s := newScaleSet(t, "ss-ghes")
	s.allowSecrets()
	s.secret("ghes-token", map[string]string{"github_token": e2eGitHubToken})
	fake.SetStyle(ghfake.StyleGHES)
	t.Cleanup(func() { fake.SetStyle(ghfake.StyleAny) })
	cases := map[string]struct {
		prefix string
		args   []string
	}{
		"static credentials, --github-url of the GHES API": {prefix: "static", args: []string{"--github-url=" + env.GitHubURL + "api/v3/"}},
		"ARC credentials, API base from githubConfigUrl":   {prefix: "arc", args: []string{"--credentials-mode=arc"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := s.sub(t)
			restartWebhook(t, c.args...)
			scope := mustScope(ghclient.OrgScope("org-ghes-" + c.prefix))
			url := env.GitHubURL + scope.Name
			edit := func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("ghes-token") }
			busy := s.runner(c.prefix+"-busy", url, scope, true, edit)
			idle := s.runner(c.prefix+"-idle", url, scope, false, edit)

			reqs, err := s.deletePod(busy.name, scope)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
				t.Errorf("delete of the busy runner's pod: %v; want Forbidden, runner busy", err)
			}
			requireOneRequest(t, "busy runner", reqs, "/api/v3", busy, 422)
			s.requireAlive(busy.name)

			reqs, err = s.deletePod(idle.name, scope)
			if err != nil {
				t.Fatalf("delete of the idle runner's pod: %v", err)
			}
			requireOneRequest(t, "idle runner", reqs, "/api/v3", idle, 204)
			if idle.registered() {
				t.Errorf("runner %s still registered", idle.name)
			}
			s.waitRetired(idle.name)
			s.requireDeleting(idle.name)
		})
	}
}

// ARC credentials mode: each runner is asked about with its EphemeralRunner's
// githubConfigSecret, a token for one organisation and a GitHub App for
// another; a missing Secret and a malformed key are refused, naming the Secret
// and the key, without asking GitHub. The config URLs name the fake's host
// (http://127.0.0.1:PORT/ORG), so the API base is HOST/api/v3/ by ARC's rule.
func TestScaleSetARCCredentials(t *testing.T) {
	const appID = 9101
	fake, s, keyPEM := arcCredentialsScaleSet(t, "ss-arccreds", appID)
	install := fake.AddInstallation(appID, "org-arccreds-app")
	s.secret("arc-token", map[string]string{"github_token": e2eGitHubToken})
	s.secret("arc-app", appSecretData(appID, install, string(keyPEM)))
	s.secret("arc-badkey", appSecretData(appID, install, "-----BEGIN RSA PRIVATE KEY-----\nbm90IGEga2V5\n-----END RSA PRIVATE KEY-----\n"))
	restartWebhook(t, "--credentials-mode=arc")

	t.Run("token and App for two organisations", func(t *testing.T) {
		s := s.sub(t)
		cases := map[string]struct {
			prefix, secret string
			scope          ghclient.Scope
			// token tells the credential each request must carry.
			token func(string) bool
		}{
			"github_token": {prefix: "token", secret: "arc-token", scope: mustScope(ghclient.OrgScope("org-arccreds-token")),
				token: func(tok string) bool { return tok == e2eGitHubToken }},
			"GitHub App": {prefix: "app", secret: "arc-app", scope: mustScope(ghclient.OrgScope("org-arccreds-app")),
				token: func(tok string) bool { return strings.HasPrefix(tok, "ghs_") }},
		}
		for name, c := range cases {
			edit := func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret(c.secret) }
			url := env.GitHubURL + c.scope.Name
			busy := s.runner(c.prefix+"-busy", url, c.scope, true, edit)
			idle := s.runner(c.prefix+"-idle", url, c.scope, false, edit)
			reqs, err := s.deletePod(busy.name, c.scope)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
				t.Errorf("%s: delete of the busy runner's pod: %v; want Forbidden, runner busy", name, err)
			}
			requireOneRequest(t, name+", busy runner", reqs, "/api/v3", busy, 422)
			reqs2, err := s.deletePod(idle.name, c.scope)
			if err != nil {
				t.Fatalf("%s: delete of the idle runner's pod: %v", name, err)
			}
			requireOneRequest(t, name+", idle runner", reqs2, "/api/v3", idle, 204)
			for _, r := range append(reqs, reqs2...) {
				if !c.token(credential(r)) {
					t.Errorf("%s: %s %s carried credential %.8s..., not the Secret's", name, r.Method, r.Path, credential(r))
				}
			}
			if idle.registered() || !busy.registered() {
				t.Errorf("%s: registered idle %v busy %v, want false true", name, idle.registered(), busy.registered())
			}
			s.requireDeleting(idle.name)
		}
		exchanges := requestsFor(env.GitHub.Requests(), fmt.Sprintf("/app/installations/%d/access_tokens", install))
		if len(exchanges) == 0 {
			t.Errorf("no installation token was requested for installation %d", install)
		}
	})

	t.Run("missing Secret and malformed key", func(t *testing.T) {
		s := s.sub(t)
		cases := map[string]struct {
			name, secret string
			want         []string
		}{
			"missing Secret": {name: "missing", secret: "arc-absent",
				want: []string{"Secret " + s.ns + "/arc-absent", "not found", "credentials-unusable"}},
			"malformed key": {name: "badkey", secret: "arc-badkey",
				want: []string{"Secret " + s.ns + "/arc-badkey", "key github_app_private_key", "credentials-unusable"}},
		}
		for name, c := range cases {
			scope := mustScope(ghclient.OrgScope("org-arccreds-" + c.name))
			r := s.runner(c.name, env.GitHubURL+scope.Name, scope, false, func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret(c.secret) })
			reqs, err := s.deletePod(r.name, scope)
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: delete: %v; want Forbidden", name, err)
			} else {
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: message %q does not contain %q", name, err.Error(), w)
					}
				}
			}
			if len(reqs) != 0 {
				t.Errorf("%s: GitHub requests:%s\nwant none", name, describe(reqs))
			}
			s.requireAlive(r.name)
			if !r.registered() {
				t.Errorf("%s: runner unregistered", name)
			}
		}
		ev := s.waitForEvent("missing", "GitHubCredentialsUnusable")
		if !strings.Contains(ev, "arc-absent") {
			t.Errorf("event %q does not name the Secret", ev)
		}
	})
}

// One GitHub App installed on two organisations, flags without an
// installation ID: each replica finds each organisation's installation with
// the App's JWT once, and unregisters each runner with that installation's token.
func TestScaleSetAppInstallationDiscovery(t *testing.T) {
	fake := fakeGitHub(t)
	s := newScaleSet(t, "ss-appdisc")
	const appID = 9102
	keyPEM := addApp(t, fake, appID)
	orgs := map[string]int64{}
	for _, o := range []string{"org-appdisc-a", "org-appdisc-b"} {
		orgs[o] = fake.AddInstallation(appID, o)
	}
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty --github-token-file clears the harness's token: App only.
	restartWebhook(t, "--github-token-file=", fmt.Sprintf("--github-app-id=%d", appID), "--github-app-private-key-file="+keyFile)

	tokens := map[string]string{} // org -> installation token used
	for org, install := range orgs {
		scope := mustScope(ghclient.OrgScope(org))
		url := "https://github.com/" + org
		before := len(env.GitHub.Requests())
		var runners []scaleSetRunner
		for i, busy := range []bool{false, false, true} {
			runners = append(runners, s.runner(fmt.Sprintf("%s-%d", org, i), url, scope, busy, nil))
		}
		for _, r := range runners[:2] {
			reqs, err := s.deletePod(r.name, scope)
			if err != nil {
				t.Fatalf("%s: delete of idle %s: %v", org, r.name, err)
			}
			// The installation look-up is under /orgs/ORG/ too.
			reqs = slices.DeleteFunc(reqs, func(q ghfake.Request) bool { return strings.HasSuffix(q.Path, "/installation") })
			requireOneRequest(t, org+" idle", reqs, "", r, 204)
			for _, q := range reqs {
				tok := credential(q)
				if !strings.HasPrefix(tok, "ghs_") {
					t.Errorf("%s: %s %s carried %.8s..., want an installation token", org, q.Method, q.Path, tok)
				}
				if prev, ok := tokens[org]; ok && prev != tok {
					t.Logf("%s: installation token changed between requests", org)
				}
				tokens[org] = tok
			}
			s.requireDeleting(r.name)
		}
		busy := runners[2]
		_, err := s.deletePod(busy.name, scope)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
			t.Errorf("%s: delete of the busy runner's pod: %v; want Forbidden, runner busy", org, err)
		}
		s.requireAlive(busy.name)

		all := env.GitHub.Requests()[before:]
		// Each replica finds the installation once and keeps it.
		lookups := requestsFor(all, "/orgs/"+org+"/installation")
		if len(lookups) < 1 || len(lookups) > len(env.ReplicaAddrs()) || slices.ContainsFunc(lookups, func(q ghfake.Request) bool { return q.Status != 200 }) {
			t.Errorf("%s: installation look-ups:%s\nwant one per replica at most, answered 200 (then cached)", org, describe(lookups))
		}
		if ex := requestsFor(all, fmt.Sprintf("/app/installations/%d/access_tokens", install)); len(ex) == 0 {
			t.Errorf("%s: no token requested for installation %d", org, install)
		}
	}
	if tokens["org-appdisc-a"] == "" || tokens["org-appdisc-a"] == tokens["org-appdisc-b"] {
		t.Errorf("installation tokens per organisation: %v; want two different tokens", tokens)
	}
}
