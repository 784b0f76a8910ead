package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// Tenancy scenarios: whoever may create pods in one namespace tries to make
// runner-guard act on a runner that is not its pod's own. In each, the victim
// is registered outside the attacker's pod (another organisation's VM runner,
// a runner of another name, a sibling pod's runner) and idle unless said
// otherwise, so a single unregister would remove it; each checks that the
// victim stays registered on the fake GitHub and that no DELETE of its ID
// reached GitHub. Every scope is the scenario's own, so GitHub's log, filtered
// by scope, holds only the scenario's requests.

// victim is a runner registered on the fake GitHub without a pod here.
type victim struct {
	scope ghclient.Scope
	name  string
	id    int64
}

// addVictim registers a runner (busy or idle) that no pod of the test runs.
func addVictim(scope ghclient.Scope, name string, busy bool) victim {
	id := env.GitHub.AddRunner(scope, name)
	env.GitHub.SetBusy(scope, name, busy)
	return victim{scope: scope, name: name, id: id}
}

// requireUntouched fails unless the victim is still registered under its ID
// and GitHub saw no DELETE of that ID (in any scope).
func (v victim) requireUntouched(t *testing.T) {
	t.Helper()
	r, ok := env.GitHub.Runner(v.scope, v.name)
	if !ok || r.ID != v.id {
		t.Errorf("victim runner %q (id %d) in %s: registered %v (id %d), want still registered", v.name, v.id, v.scope, ok, r.ID)
	}
	if dels := deletesOfID(env.GitHub.Requests(), v.id); len(dels) > 0 {
		t.Errorf("GitHub saw a DELETE of the victim's ID %d:%s", v.id, describe(dels))
	}
}

// deletesOfID are the DELETEs of runner ID id among reqs, whatever the scope.
func deletesOfID(reqs []ghfake.Request, id int64) []ghfake.Request {
	var out []ghfake.Request
	for _, r := range reqs {
		if r.Method == http.MethodDelete && strings.HasSuffix(r.Path, fmt.Sprintf("/actions/runners/%d", id)) {
			out = append(out, r)
		}
	}
	return out
}

// requestsIn are the GitHub requests under scope.
func requestsIn(scope ghclient.Scope) []ghfake.Request {
	return requestsFor(env.GitHub.Requests(), scopePath(scope))
}

// lookedUp reports the runner names GitHub's list-by-name requests asked for.
func lookedUp(reqs []ghfake.Request) []string {
	var names []string
	for _, r := range reqs {
		if r.Method == http.MethodGet && r.Query.Has("name") {
			names = append(names, r.Query.Get("name"))
		}
	}
	return names
}

// Tenancy a: a pod's env names another organisation and, in RUNNER_NAME, a
// VM runner registered there. runner-guard names the runner after the pod,
// so it asks about the pod's own name (not registered: the pod goes) and
// the VM runner is never looked up, let alone unregistered.
func TestTenancyEnvNamesAnotherRunner(t *testing.T) {
	s := newScenario(t, "tenancy-env")
	other := mustOrg("org-tenancy-env-victim")
	vm := addVictim(other, "vm-runner-7", false)

	pod := legacyRunnerPod(s.ns, "runner-attacker", other)
	for i, e := range pod.Spec.Containers[0].Env {
		if e.Name == "RUNNER_NAME" {
			pod.Spec.Containers[0].Env[i].Value = vm.name
		}
	}
	s.create(pod)

	if _, stderr, err := s.kubectl("delete", "pod", "runner-attacker", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete of a pod whose own runner is not registered: %v: %s", err, stderr)
	}
	s.requireDeleting("runner-attacker")
	vm.requireUntouched(t)
	reqs := requestsIn(other)
	names := lookedUp(reqs)
	if len(names) == 0 {
		t.Errorf("GitHub was not asked about the pod's own runner %q:%s", "runner-attacker", describe(reqs))
	}
	for _, n := range names {
		if n != "runner-attacker" {
			t.Errorf("GitHub was asked about runner %q; want only the pod's own name:%s", n, describe(reqs))
		}
	}
}

// Tenancy b: a pod no Runner controls carries another runner's ID in the
// actions-runner/id annotation. runner-guard checks the ID against GitHub's
// record first, finds another name there, and decides by the pod's own name:
// an unregistered name lets the pod go, a registered busy one refuses it, and
// the victim's ID is never deleted.
func TestTenancyCopiedRunnerID(t *testing.T) {
	s := newScenario(t, "tenancy-id")
	v := addVictim(s.scope, "runner-victim", false)
	copycat := func(name string) {
		t.Helper()
		pod := legacyRunnerPod(s.ns, name, s.scope)
		pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(v.id)}
		s.create(pod)
	}

	// The copycat's own runner is not registered: the pod goes.
	copycat("runner-copycat")
	if _, stderr, err := s.kubectl("delete", "pod", "runner-copycat", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete of a pod with a copied runner ID: %v: %s", err, stderr)
	}
	s.requireDeleting("runner-copycat")
	v.requireUntouched(t)
	if n := s.count(http.MethodDelete); n != 0 {
		t.Errorf("GitHub saw %d DELETEs, want none:%s", n, describe(s.github()))
	}
	if names := lookedUp(s.github()); len(names) != 1 || names[0] != "runner-copycat" {
		t.Errorf("runners looked up by name: %q, want only the pod's own %q:%s", names, "runner-copycat", describe(s.github()))
	}

	// The copycat's own runner is registered and busy: refused as its own
	// runner, with the one DELETE aimed at its own ID.
	own := addVictim(s.scope, "runner-copycat-busy", true)
	copycat(own.name)
	_, stderr, err := s.kubectl("delete", "pod", own.name, "--wait=false")
	if err == nil || !strings.Contains(stderr, "runner busy") || !strings.Contains(stderr, `"`+own.name+`"`) {
		t.Errorf("kubectl delete of a busy runner's pod with a copied ID: err %v, stderr %q; want runner busy naming %q", err, stderr, own.name)
	}
	s.requireAlive(own.name)
	v.requireUntouched(t)
	if dels := deletesOfID(s.github(), own.id); len(dels) != 1 || dels[0].Status != http.StatusUnprocessableEntity {
		t.Errorf("DELETEs of the pod's own runner %d:%s; want exactly one, answered 422", own.id, describe(dels))
	}
	if n := s.count(http.MethodDelete); n != 1 {
		t.Errorf("GitHub saw %d DELETEs, want only the one of the pod's own runner:%s", n, describe(s.github()))
	}

	// The copycat also carries its Runner's owner reference, as a pod made
	// in place of ARC's would: the ID is still checked, and only the pod's
	// own (idle) runner is removed.
	if !legacyRunnersServed(t) {
		return
	}
	arcOwn := addVictim(s.scope, "runner-copycat-arc", false)
	pod := legacyRunnerPod(s.ns, arcOwn.name, s.scope)
	pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(v.id)}
	s.create(ownedBy(pod, s.legacyRunner(arcOwn.name, s.scope)))
	if _, stderr, err := s.kubectl("delete", "pod", arcOwn.name, "--wait=false"); err != nil {
		t.Fatalf("kubectl delete of a Runner's pod with a copied runner ID: %v: %s", err, stderr)
	}
	s.requireDeleting(arcOwn.name)
	v.requireUntouched(t)
	if _, ok := env.GitHub.Runner(s.scope, arcOwn.name); ok {
		t.Errorf("the pod's own runner %s is still registered", arcOwn.name)
	}
	if dels := deletesOfID(s.github(), v.id); len(dels) != 0 {
		t.Errorf("GitHub saw a DELETE of the victim's ID:%s", describe(dels))
	}
}

// Tenancy c: a pod borrows the controller reference (name and UID) of a
// sibling's ARC object, an EphemeralRunner or a legacy Runner, in its own
// namespace. ARC names a runner pod after its object, so runner-guard
// refuses to take the object's runner for this pod's: the delete is allowed
// with reason runner-owner-mismatch (an admission warning and a Warning
// Event RunnerOwnerMismatch), GitHub is asked nothing, and the sibling's
// runner and object stay.
func TestTenancyBorrowedController(t *testing.T) {
	// deleteBorrower deletes the borrowing pod and checks the decision.
	deleteBorrower := func(t *testing.T, s *scenario, name string) {
		t.Helper()
		_, stderr, err := s.kubectl("delete", "pod", name, "--wait=false")
		if err != nil {
			t.Fatalf("kubectl delete of a pod with a borrowed controller: %v: %s", err, stderr)
		}
		if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "is not the runner it claims") {
			t.Errorf("kubectl stderr %q: want the admission warning that the pod is not the runner it claims", stderr)
		}
		if ev := s.waitForEvent(name, "RunnerOwnerMismatch"); !strings.HasPrefix(ev, "Warning") || !strings.Contains(ev, "[reason: runner-owner-mismatch]") {
			t.Errorf("event %q, want a Warning naming reason runner-owner-mismatch", ev)
		}
		s.requireDeleting(name)
	}

	t.Run("EphemeralRunner", func(t *testing.T) {
		s := newScaleSet(t, "tenancy-owner-er")
		sibling := s.runner("runner-sibling", "https://github.com/"+s.scope.Name, s.scope, false, nil)
		pod := fixture.MakeScaleSetRunnerPod(s.ns, "runner-borrower").Owner(metav1.OwnerReference{
			APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: fixture.EphemeralRunnerKind,
			Name: sibling.name, UID: sibling.uid, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}).Obj()
		for k, v := range arcScopeLabels(s.scope) {
			pod.Labels[k] = v
		}
		s.create(pod)

		deleteBorrower(t, s.scenario, "runner-borrower")
		if !sibling.registered() {
			t.Errorf("sibling runner %s was unregistered", sibling.name)
		}
		if dels := deletesOfID(env.GitHub.Requests(), sibling.id); len(dels) > 0 {
			t.Errorf("GitHub saw a DELETE of the sibling's ID:%s", describe(dels))
		}
		if er := s.ephemeralRunner(sibling.name); er == nil || er.GetDeletionTimestamp() != nil || er.GetUID() != sibling.uid {
			t.Errorf("sibling's EphemeralRunner %s is gone or being deleted, want it in place", sibling.name)
		}
		s.requireAlive(sibling.name)
		if reqs := requestsIn(s.scope); len(reqs) != 0 {
			t.Errorf("GitHub requests for %s:%s\nwant none", s.scope, describe(reqs))
		}
	})

	t.Run("legacy Runner", func(t *testing.T) {
		s := newScenario(t, "tenancy-owner-legacy")
		if !legacyRunnersServed(t) {
			t.Skipf("the cluster serves no %s", legacyRunners.GroupResource())
		}
		sibling := s.runnerPod("runner-sibling", false, true)
		ref := metav1.GetControllerOf(sibling)
		if ref == nil {
			t.Fatal("the sibling pod has no controlling Runner")
		}
		// The borrower copies the reference and the ID annotation, which a pod
		// its Runner controls would be trusted with.
		pod := legacyRunnerPod(s.ns, "runner-borrower", s.scope)
		pod.OwnerReferences = []metav1.OwnerReference{*ref}
		pod.Annotations = map[string]string{"actions-runner/id": sibling.Annotations["actions-runner/id"]}
		s.create(pod)

		deleteBorrower(t, s, "runner-borrower")
		r, ok := env.GitHub.Runner(s.scope, "runner-sibling")
		if !ok {
			t.Error("sibling runner was unregistered")
		} else if dels := deletesOfID(env.GitHub.Requests(), r.ID); len(dels) > 0 {
			t.Errorf("GitHub saw a DELETE of the sibling's ID:%s", describe(dels))
		}
		dyn, err := dynamic.NewForConfig(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		u, err := dyn.Resource(legacyRunners).Namespace(s.ns).Get(s.ctx, ref.Name, metav1.GetOptions{})
		if err != nil || u.GetUID() != ref.UID || u.GetDeletionTimestamp() != nil {
			t.Errorf("sibling's Runner %s: %v; want it in place", ref.Name, err)
		}
		s.requireAlive("runner-sibling")
		if reqs := s.github(); len(reqs) != 0 {
			t.Errorf("GitHub requests for %s:%s\nwant none", s.scope, describe(reqs))
		}
	})
}

// Tenancy d: scope bindings. The tenant's namespace is bound to the tenant's
// organisation, and a catch-all entry binds every other namespace to any
// scope. A tenant pod naming another organisation (by env, or through a
// Runner of its own making that also vouches for a runner ID) is let go
// with reason scope-not-bound, an admission warning and a Warning Event
// RunnerScopeNotBound, and GitHub is asked nothing: the busy runner of that
// name there would have refused a DELETE. The tenant's own organisation is
// still guarded, and the catch-all keeps another namespace guarded in the
// organisation the tenant may not name.
func TestTenancyScopeBindings(t *testing.T) {
	if !env.Local() {
		t.Skip("existing cluster: the webhook's --config cannot be changed from here")
	}
	s := newScenario(t, "tenancy-bind")
	neighbour := newScenario(t, "tenancy-bind-neighbour")
	other := mustOrg("org-tenancy-bind-other")
	config := fmt.Sprintf(`scopeBindings:
- name: tenant
  namespaces: [%q]
  scopes: ["org:%s"]
- name: everyone-else
  namespaces: ["*"]
  scopes: ["org:*", "repo:*/*", "enterprise:*"]
`, s.ns, s.scope.Name)
	file := filepath.Join(t.TempDir(), "runner-guard.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	restartWebhook(t, "--config="+file)

	// notBound deletes a tenant pod naming the other organisation.
	notBound := func(name string) {
		t.Helper()
		_, stderr, err := s.kubectl("delete", "pod", name, "--wait=false")
		if err != nil {
			t.Fatalf("kubectl delete of %s, whose scope is not bound: %v: %s", name, err, stderr)
		}
		if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, `scope binding "tenant"`) {
			t.Errorf("kubectl stderr %q: want an admission warning naming the tenant's binding", stderr)
		}
		if ev := s.waitForEvent(name, "RunnerScopeNotBound"); !strings.HasPrefix(ev, "Warning") || !strings.Contains(ev, "[reason: scope-not-bound]") {
			t.Errorf("event %q, want a Warning naming reason scope-not-bound", ev)
		}
		s.requireDeleting(name)
	}

	// By env: RUNNER_ORG names the other organisation.
	byEnv := addVictim(other, "runner-foreign", true)
	s.create(legacyRunnerPod(s.ns, byEnv.name, other))
	notBound(byEnv.name)

	// By a Runner the tenant made, naming the other organisation, on a pod
	// it controls with the victim's ID (an ID such a pod is trusted with).
	if legacyRunnersServed(t) {
		byRunner := addVictim(other, "runner-foreign-arc", true)
		pod := legacyRunnerPod(s.ns, byRunner.name, s.scope)
		pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(byRunner.id)}
		s.create(ownedBy(pod, s.legacyRunner(byRunner.name, other)))
		notBound(byRunner.name)
		byRunner.requireUntouched(t)
	}
	byEnv.requireUntouched(t)
	if reqs := requestsIn(other); len(reqs) != 0 {
		t.Errorf("GitHub requests for %s from the tenant's pods:%s\nwant none", other, describe(reqs))
	}

	// The tenant's own organisation is guarded.
	s.runnerPod("runner-own", true, true)
	_, stderr, err := s.kubectl("delete", "pod", "runner-own", "--wait=false")
	if err == nil || !strings.Contains(stderr, "runner busy") {
		t.Errorf("delete of the tenant's own busy runner's pod: err %v, stderr %q; want runner busy", err, stderr)
	}
	s.requireAlive("runner-own")
	if n := s.count(http.MethodDelete); n != 1 {
		t.Errorf("GitHub saw %d DELETEs in the tenant's organisation, want the one unregister attempt:%s", n, describe(s.github()))
	}

	// Another namespace falls to the catch-all: the other organisation is
	// guarded there.
	theirs := addVictim(other, "runner-neighbour", true)
	neighbour.create(legacyRunnerPod(neighbour.ns, theirs.name, other))
	_, stderr, err = neighbour.kubectl("delete", "pod", theirs.name, "--wait=false")
	if err == nil || !strings.Contains(stderr, "runner busy") {
		t.Errorf("delete of a busy runner's pod in %s (catch-all binding): err %v, stderr %q; want runner busy", neighbour.ns, err, stderr)
	}
	neighbour.requireAlive(theirs.name)
	if dels := deletesOfID(env.GitHub.Requests(), theirs.id); len(dels) != 1 {
		t.Errorf("DELETEs of %s's runner:%s; want the one unregister attempt", neighbour.ns, describe(dels))
	}
}

// Tenancy e: forged dry runs. Anything that reaches the webhook's port can
// POST an AdmissionReview; 200 DELETE reviews with dryRun=true for one live,
// idle runner pod (its real name and UID), posted straight to the URL and
// CA the API server uses, cost at most 2 GitHub requests (read-only
// look-ups remembered per runner for readOnlyMemoryTTL), none a DELETE, and
// the runner stays registered.
func TestTenancyForgedDryRuns(t *testing.T) {
	if !env.Local() {
		t.Skip("existing cluster: the webhook's port is not reachable from here")
	}
	s := newScenario(t, "tenancy-dryrun")
	pod := s.runnerPod("runner-idle", false, true)

	vwc, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var url string
	var caBundle []byte
	for _, w := range vwc.Webhooks {
		if w.Name == "legacy-runner-pods.runner-guard.io" && w.ClientConfig.URL != nil {
			url, caBundle = *w.ClientConfig.URL, w.ClientConfig.CABundle
		}
	}
	if url == "" {
		t.Fatalf("ValidatingWebhookConfiguration runner-guard has no URL for legacy-runner-pods.runner-guard.io")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		t.Fatal("the webhook configuration's caBundle holds no certificate")
	}
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}
	defer c.CloseIdleConnections()

	const reviews = 200
	for i := range reviews {
		body, err := process.DeleteReviewJSON(process.Review{Pod: pod, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := process.Send(s.ctx, c, url, body)
		if err != nil {
			t.Fatalf("review %d: %v", i+1, err)
		}
		if !resp.Allowed {
			t.Fatalf("review %d of a dry-run delete of an idle runner's pod: denied (%v), want allowed", i+1, resp.Result)
		}
	}

	reqs := s.github()
	if len(reqs) > 2 {
		t.Errorf("%d forged dry-run reviews cost %d GitHub requests, want at most 2; the first:%s", reviews, len(reqs), describe(reqs[:min(len(reqs), 5)]))
	}
	if n := s.count(http.MethodDelete); n != 0 {
		t.Errorf("forged dry-run reviews sent %d DELETEs to GitHub, want none", n)
	}
	if !s.registered("runner-idle") {
		t.Error("forged dry-run reviews unregistered the runner")
	}
	s.requireAlive("runner-idle")
	if ev := s.events("runner-idle"); len(ev) != 0 {
		t.Errorf("dry runs recorded Events (side effects): %q", ev)
	}
}
