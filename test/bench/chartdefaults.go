package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

// The chart-defaults run: its namespaces (one scope each) and sizes.
const (
	// chartRelease names the release so that the chart's configuration is
	// runner-guard, the one name manifests/base's RBAC lets the webhook patch.
	chartRelease        = "runner-guard"
	guardDownNamespace  = "bench-guard-down"
	costNamespace       = "bench-github-cost"
	guardDownEach       = 10   // busy and idle runners of each kind
	costLegacyRunners   = 1000 // legacy runners registered in one organization
	costWindow          = time.Minute
	installationPerHour = 5000 // GitHub's primary limit for an App installation
)

// legacyRunnerResource is ARC's legacy (summerwind) Runner.
func legacyRunnerResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "actions.summerwind.dev", Version: "v1alpha1", Resource: "runners"}
}

// chartInstall is what the bench takes from the chart rendered at its
// defaults: the webhook configuration, the webhook's flags and --config
// file, and its replicas.
type chartInstall struct {
	configuration *admissionregistrationv1.ValidatingWebhookConfiguration
	args          []string
	config        string
	replicas      int
}

// renderChart renders charts/runner-guard at its defaults: only the values
// the chart requires (credentials, and a scope binding per namespace) are set.
func renderChart(ctx context.Context, helm, root string, bindings map[string]string) ([]byte, error) {
	args := []string{"template", chartRelease, filepath.Join(root, "charts", "runner-guard"), "--namespace", "runner-guard-system",
		"--set", "github.credentials.existingSecret=github"}
	namespaces := make([]string, 0, len(bindings))
	for ns := range bindings {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for i, ns := range namespaces {
		args = append(args, "--set", fmt.Sprintf("policy.scopeBindings[%d].namespaces={%s}", i, ns),
			"--set", fmt.Sprintf("policy.scopeBindings[%d].scopes={%s}", i, bindings[ns]))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// parseChartInstall picks the webhook's configuration, Deployment and
// --config file out of a render.
func parseChartInstall(rendered []byte) (*chartInstall, error) {
	var (
		in      chartInstall
		configs = map[string]string{}
		deploys []appsv1.Deployment
	)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("the render: %w", err)
		}
		u := unstructured.Unstructured{Object: obj}
		switch u.GetKind() {
		case "ValidatingWebhookConfiguration":
			in.configuration = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, in.configuration); err != nil {
				return nil, fmt.Errorf("the render's ValidatingWebhookConfiguration: %w", err)
			}
		case "ConfigMap":
			if c, ok, _ := unstructured.NestedString(obj, "data", "config.yaml"); ok {
				configs[u.GetName()] = c
			}
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &d); err != nil {
				return nil, fmt.Errorf("the render's Deployment %s: %w", u.GetName(), err)
			}
			deploys = append(deploys, d)
		}
	}
	if in.configuration == nil {
		return nil, errors.New("the render has no ValidatingWebhookConfiguration")
	}
	for _, d := range deploys {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !slices.Contains(c.Args, "--webhook-configuration-name="+in.configuration.Name) {
				continue // the events Deployment, when on
			}
			in.args, in.replicas = c.Args, 1
			if d.Spec.Replicas != nil {
				in.replicas = int(*d.Spec.Replicas)
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil && configs[v.ConfigMap.Name] != "" {
					in.config = configs[v.ConfigMap.Name]
				}
			}
		}
	}
	if in.args == nil || in.config == "" {
		return nil, errors.New("the render has no webhook Deployment naming the configuration, or no --config file for it")
	}
	return &in, nil
}

// harnessFlags are the flags the harness sets itself for a process on this
// machine (address, serving certificate, GitHub's URL and token, kubeconfig,
// metrics and probes); the chart's values for them name things in a cluster.
func harnessFlags() []string {
	return []string{
		"--self-managed-cert-secret", "--self-managed-cert-validity", "--self-managed-ca-validity", "--cert-dir",
		"--github-token-file", "--github-app-id", "--github-app-installation-id", "--github-app-private-key-file",
		"--github-url", "--github-allow-http", "--github-ca-bundle", "--credentials-mode",
		"--metrics-bind-address", "--metrics-secure", "--health-probe-bind-address", "--webhook-port", "--client-ca-file", "--config",
	}
}

// localArgs are the chart's flags for the webhook as the harness runs it:
// those the harness sets itself dropped, --config pointing at configFile.
func localArgs(chartArgs []string, configFile string) []string {
	out := []string{"--config=" + configFile}
	for _, a := range chartArgs {
		name, _, _ := strings.Cut(a, "=")
		if !slices.Contains(harnessFlags(), name) {
			out = append(out, a)
		}
	}
	return out
}

// chartDefaultsRun runs the webhook as the chart renders it at its defaults
// (its configuration, flags, --config and replicas) on a real API server:
// the GitHub requests the leader's listings cost with 1,000 legacy runners
// in one organization, then every replica stopped (runner-guard scaled to
// 0) and busy and idle runners of both kinds evicted.
func (e *env) chartDefaultsRun() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts, err := harnessOptions()
	if err != nil {
		return err
	}
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(opts.RepoRoot, "bin", "helm")
	}
	rendered, err := renderChart(ctx, helm, opts.RepoRoot, map[string]string{
		guardDownNamespace: "org:" + guardDownNamespace, costNamespace: "org:" + costNamespace})
	if err != nil {
		return err
	}
	chart, err := parseChartInstall(rendered)
	if err != nil {
		return err
	}
	configFile := filepath.Join(e.dir, "chart-config.yaml")
	if err := os.WriteFile(configFile, []byte(chart.config), 0o600); err != nil {
		return err
	}
	opts.WebhookArgs = localArgs(chart.args, configFile)
	opts.Controllers = append(framework.DefaultControllers(), "disruption-controller")
	progress("chart defaults: %d replicas with %s", chart.replicas, strings.Join(opts.WebhookArgs, " "))
	h, stop, err := startHarness(ctx, opts, 1)
	if err != nil {
		return err
	}
	defer stop()
	d := &disruptionBench{harness: h}
	policies, err := d.installChartConfiguration(ctx, chart.configuration)
	if err != nil {
		return err
	}
	if err := d.scale(ctx, chart.replicas); err != nil {
		return err
	}
	if err := d.waitForPolicies(ctx, chart.configuration.Name, policies); err != nil {
		return err
	}
	if err := d.githubCost(ctx, e, chart); err != nil {
		return fmt.Errorf("GitHub requests at the chart's defaults: %w", err)
	}
	if err := d.guardDown(ctx, e, chart, policies); err != nil {
		return fmt.Errorf("runner-guard scaled to 0: %w", err)
	}
	return nil
}

// installChartConfiguration puts the chart's ValidatingWebhookConfiguration
// in place of the harness's, pointed at the harness's address (the chart's
// Service path kept) with the harness's CA, and returns the failurePolicy
// each entry is to take once a replica answers (the chart's annotations).
func (d *disruptionBench) installChartConfiguration(ctx context.Context, chart *admissionregistrationv1.ValidatingWebhookConfiguration) (map[string]admissionregistrationv1.FailurePolicyType, error) {
	vwcs := d.fenv.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	current, err := vwcs.Get(ctx, chart.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the harness's configuration %s: %w", chart.Name, err)
	}
	if len(current.Webhooks) == 0 || current.Webhooks[0].ClientConfig.URL == nil {
		return nil, fmt.Errorf("the harness's configuration %s has no URL to take the address from", chart.Name)
	}
	addr, err := url.Parse(*current.Webhooks[0].ClientConfig.URL)
	if err != nil {
		return nil, err
	}
	want := chart.DeepCopy()
	policies := map[string]admissionregistrationv1.FailurePolicyType{}
	for i := range want.Webhooks {
		wh := &want.Webhooks[i]
		path := "/"
		if wh.ClientConfig.Service != nil && wh.ClientConfig.Service.Path != nil {
			path = *wh.ClientConfig.Service.Path
		}
		u := (&url.URL{Scheme: "https", Host: addr.Host, Path: path}).String()
		wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: current.Webhooks[0].ClientConfig.CABundle}
		policies[wh.Name] = entryPolicy(want.Annotations, wh)
	}
	if err := vwcs.Delete(ctx, chart.Name, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	if _, err := vwcs.Create(ctx, want, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return policies, nil
}

// entryPolicy is the failurePolicy the chart's annotations give an entry
// (deletes or evictions), else the one it is installed with.
func entryPolicy(annotations map[string]string, wh *admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.FailurePolicyType {
	key := "runner-guard.io/deletes-failure-policy"
	for _, r := range wh.Rules {
		if slices.Contains(r.Resources, "pods/eviction") {
			key = "runner-guard.io/evictions-failure-policy"
		}
	}
	if p, ok := annotations[key]; ok {
		return admissionregistrationv1.FailurePolicyType(p)
	}
	if wh.FailurePolicy != nil {
		return *wh.FailurePolicy
	}
	return admissionregistrationv1.Fail
}

// waitForPolicies waits until a replica has set every entry to the policy
// its annotation names (--webhook-configuration-name).
func (d *disruptionBench) waitForPolicies(ctx context.Context, name string, want map[string]admissionregistrationv1.FailurePolicyType) error {
	deadline := time.Now().Add(time.Minute)
	for {
		vwc, err := d.fenv.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var wrong []string
		for _, wh := range vwc.Webhooks {
			if wh.FailurePolicy == nil || *wh.FailurePolicy != want[wh.Name] {
				wrong = append(wrong, fmt.Sprintf("%s at %v, want %s", wh.Name, ptrValue(wh.FailurePolicy), want[wh.Name]))
			}
		}
		if len(wrong) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a minute on, no replica activated the chart's configuration: %s", strings.Join(wrong, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptrValue[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// legacyRunner creates a legacy runner of scope, registered (busy as told),
// its Runner and its running pod on the harness's node.
func (d *disruptionBench) legacyRunner(ctx context.Context, ns, name string, scope ghclient.Scope, busy bool) error {
	id := d.fenv.GitHub.AddRunner(scope, name)
	if busy {
		d.fenv.GitHub.SetBusy(scope, name, true)
	}
	want := fixture.MakeLegacyRunner(ns, name).Org(scope.Name).Obj()
	want.SetUID("")
	created, err := d.dyn.Resource(legacyRunnerResource()).Namespace(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("legacy Runner %s/%s: %w", ns, name, err)
	}
	pod := fixture.MakeLegacyRunnerPod(ns, name).Org(scope.Name).OwnedByLegacyRunner(&fixture.LegacyRunnerWrapper{Unstructured: *created}).RunnerID(id).Obj()
	pod.Spec.NodeName = framework.NodeName
	_, err = d.fenv.CreateRunningPod(ctx, pod)
	return err
}

// githubCost: costLegacyRunners legacy runners of one organization, their
// pods running, the chart's replicas at its defaults; the requests for that
// scope over costWindow once the leader's listings run.
func (d *disruptionBench) githubCost(ctx context.Context, e *env, chart *chartInstall) error {
	ns, scope := costNamespace, org(costNamespace)
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	created := time.Now()
	if err := forEach(costLegacyRunners, 8, func(i int) error {
		return d.legacyRunner(ctx, ns, fmt.Sprintf("cost-%04d", i), scope, i%2 == 0)
	}); err != nil {
		return err
	}
	progress("chart defaults: %d legacy runners and their pods created in %s", costLegacyRunners, time.Since(created).Round(time.Second))
	// Steady state: past the first listing (or past two listing periods
	// when the chart's flags take none).
	settled := time.Now().Add(2 * ghclient.ListingTTL)
	for time.Now().Before(settled) && len(scopeRequests(d.fenv.GitHub.Requests(), scope.Name, time.Time{}, time.Now())) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	from := time.Now()
	time.Sleep(costWindow) // the window measured, not a wait for a condition
	reqs := scopeRequests(d.fenv.GitHub.Requests(), scope.Name, from, from.Add(costWindow))
	total, counted := len(reqs), 0
	for _, r := range reqs {
		if r.Status != 304 {
			counted++
		}
	}
	perMinute := float64(counted) * float64(time.Minute) / float64(costWindow)
	budget := float64(installationPerHour) / 60
	listing := slices.Contains(chart.args, "--hint-from-listing")
	progress("chart defaults: %d legacy runners in one organization: %d GitHub requests for it in %s, %d of them counted (not 304); listing for hints %v",
		costLegacyRunners, total, costWindow, counted, listing)
	e.record("github_requests_per_scope_minute_for_default_budgets", perMinute, "requests", fmt.Sprintf("<= %.0f (5,000/h)", budget), perMinute <= budget,
		fmt.Sprintf("%d legacy runners in one org, the chart's defaults (--hint-from-listing %v, %d replicas): %d requests a minute, %d counted against the primary limit (304s are not)",
			costLegacyRunners, listing, chart.replicas, total, counted))
	return nil
}

// scopeRequests are the requests naming the organization name answered
// within [from, to) (any time when from is zero).
func scopeRequests(reqs []ghfake.Request, name string, from, to time.Time) []ghfake.Request {
	var out []ghfake.Request
	for _, r := range reqs {
		if r.Scope == nil || r.Scope.Kind != ghclient.ScopeOrg || !strings.EqualFold(r.Scope.Name, name) {
			continue
		}
		if !from.IsZero() && (r.Time.Before(from) || !r.Time.Before(to)) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// guardDown: busy and idle runners of both kinds in a namespace the
// evictions entry covers, the leader's job budgets made; then every replica
// stopped, further jobs started, and each runner's pod evicted through the
// API server.
func (d *disruptionBench) guardDown(ctx context.Context, e *env, chart *chartInstall, policies map[string]admissionregistrationv1.FailurePolicyType) error {
	ns, scope := guardDownNamespace, org(guardDownNamespace)
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	if err := d.labelForEvictions(ctx, ns, chart.configuration); err != nil {
		return err
	}
	var busy, idle, startedLater []string
	for i := range guardDownEach {
		for _, busyNow := range []bool{true, false} {
			legacy, set := fmt.Sprintf("legacy-idle-%02d", i), fmt.Sprintf("set-idle-%02d", i)
			if busyNow {
				legacy, set = fmt.Sprintf("legacy-busy-%02d", i), fmt.Sprintf("set-busy-%02d", i)
			}
			if err := d.legacyRunner(ctx, ns, legacy, scope, busyNow); err != nil {
				return err
			}
			if err := d.runner(ctx, ns, set, framework.NodeName, scope); err != nil {
				return err
			}
			if busyNow {
				if err := d.setStatus(ctx, ns, set, jobFields(7000+i)); err != nil {
					return err
				}
				busy = append(busy, legacy, set)
			} else {
				idle = append(idle, legacy, set)
			}
		}
	}
	// The runners whose jobs start during the outage.
	for i := range 2 {
		legacy, set := fmt.Sprintf("legacy-later-%02d", i), fmt.Sprintf("set-later-%02d", i)
		if err := d.legacyRunner(ctx, ns, legacy, scope, false); err != nil {
			return err
		}
		if err := d.runner(ctx, ns, set, framework.NodeName, scope); err != nil {
			return err
		}
		startedLater = append(startedLater, legacy, set)
	}
	listing := slices.Contains(chart.args, "--hint-from-listing")
	budgeted, err := d.waitForJobBudgets(ctx, ns, busy, listing)
	if err != nil {
		return err
	}
	if err := d.scaleToZero(ctx); err != nil {
		return err
	}
	for i, name := range startedLater {
		if strings.HasPrefix(name, "legacy-") {
			d.fenv.GitHub.SetBusy(scope, name, true)
		} else if err := d.setStatus(ctx, ns, name, jobFields(7100+i)); err != nil {
			return err
		}
	}
	busy = append(busy, startedLater...)
	evict := func(name string) error {
		return d.fenv.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	outcomes := map[string]int{}
	busyAdmitted := 0
	for _, name := range busy {
		err := evict(name)
		if err == nil {
			busyAdmitted++
		}
		outcomes["busy "+evictionOutcome(err)]++
	}
	idleRefused := 0
	for _, name := range idle {
		err := evict(name)
		if err != nil {
			idleRefused++
		}
		outcomes["idle "+evictionOutcome(err)]++
	}
	evictions := policies[evictionsEntry(chart.configuration)]
	progress("chart defaults, runner-guard scaled to 0 (evictions entry %s; %d of %d busy runners held by a job budget before): %v", evictions, budgeted, len(busy)-len(startedLater), outcomes)
	e.record("busy_evictions_admitted_guard_down_chart_defaults", float64(busyAdmitted), "evictions", "0", busyAdmitted == 0,
		fmt.Sprintf("%d busy runners (legacy and scale-set, %d of them started during the outage), the chart at its defaults (evictions %s), every replica stopped", len(busy), len(startedLater), evictions))
	e.record("idle_evictions_refused_guard_down_chart_defaults", float64(idleRefused), "evictions", "(reported)", true,
		fmt.Sprintf("of %d idle runners: with failurePolicy %s and no replica the API server cannot ask runner-guard, so it refuses every eviction in the covered namespace", len(idle), evictions))
	return nil
}

// evictionOutcome names how the API server answered an eviction.
func evictionOutcome(err error) string {
	switch {
	case err == nil:
		return "admitted"
	case apierrors.IsTooManyRequests(err):
		return "refused by a budget (429)"
	case strings.Contains(err.Error(), "failed calling webhook"):
		return "refused: failed calling webhook"
	default:
		return "refused: " + err.Error()
	}
}

// evictionsEntry is the name of the configuration's evictions entry.
func evictionsEntry(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) string {
	for _, wh := range vwc.Webhooks {
		for _, r := range wh.Rules {
			if slices.Contains(r.Resources, "pods/eviction") {
				return wh.Name
			}
		}
	}
	return ""
}

// labelForEvictions gives ns the labels the evictions entry's
// namespaceSelector asks for (runner-guard.io/guard=enabled at the defaults).
func (d *disruptionBench) labelForEvictions(ctx context.Context, ns string, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	for _, wh := range vwc.Webhooks {
		if wh.Name != evictionsEntry(vwc) || wh.NamespaceSelector == nil || len(wh.NamespaceSelector.MatchLabels) == 0 {
			continue
		}
		patch, err := jsonMergeLabels(wh.NamespaceSelector.MatchLabels)
		if err != nil {
			return err
		}
		if _, err := d.fenv.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func jsonMergeLabels(labels map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}

// waitForJobBudgets waits until the leader made a job budget for each busy
// runner it can know of: a scale-set runner's job is on its EphemeralRunner;
// a legacy runner's only in the listing (withListing). It returns how many
// busy runners a budget holds.
func (d *disruptionBench) waitForJobBudgets(ctx context.Context, ns string, busy []string, withListing bool) (int, error) {
	want := 0
	for _, name := range busy {
		if withListing || !strings.HasPrefix(name, "legacy-") {
			want++
		}
	}
	deadline := time.Now().Add(4 * ghclient.ListingTTL)
	for {
		held, err := d.budgeted(ctx, ns, busy)
		if err != nil {
			return 0, err
		}
		if held >= want {
			return held, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d busy runners held by a job budget %s on", held, want, 4*ghclient.ListingTTL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// budgeted counts the pods among names a job budget selects.
func (d *disruptionBench) budgeted(ctx context.Context, ns string, names []string) (int, error) {
	pods, err := d.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	pdbs, err := d.fenv.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	held := map[string]bool{}
	for i := range pdbs.Items {
		if webhook.IsJobBudget(&pdbs.Items[i]) {
			held[pdbs.Items[i].Labels[webhook.LabelJobBudget]] = true
		}
	}
	n := 0
	for _, p := range pods.Items {
		if slices.Contains(names, p.Name) && held[string(p.UID)] {
			n++
		}
	}
	return n, nil
}
