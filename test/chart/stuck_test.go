package chart

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runner-guard/runner-guard/test/render"
)

// The tests of this file keep runner-guard from ever being the reason a
// cluster is stuck: no namespace nobody named waits on it, its own pods can
// always be drained, and it collects garbage before the OOM killer strikes.

// TestFailurePolicyPerEntry checks policy.failurePolicy sets every entry and
// policy.deletesFailurePolicy / policy.evictionsFailurePolicy override it
// per kind, and that the evictions entry covers only the namespaces the user
// named (guardedNamespaces or the opt-in label) unless
// evictionsInAllNamespaces, where it defaults to Ignore. Job budgets,
// listings and deliveries leave the evictions entry at Fail: a job that
// starts while no replica is ready has no budget, so Ignore would admit its
// eviction. values.yaml's promise that no job is lost while runner-guard is
// down.
func TestFailurePolicyPerEntry(t *testing.T) {
	const (
		fail   = admissionregistrationv1.Fail
		ignore = admissionregistrationv1.Ignore
	)
	events := []string{"--set", "events.enabled=true", "--set", "events.secret=not-a-real-secret"}
	cases := []struct {
		name       string
		args       []string
		deletes    admissionregistrationv1.FailurePolicyType
		evictions  admissionregistrationv1.FailurePolicyType
		unlabelled bool // the evictions entry covers a namespace without the label
	}{
		{"defaults: evictions Fail, listings and budgets on", nil, fail, fail, false},
		{"budgets and deliveries: evictions Fail", events, fail, fail, false},
		{"no listings: evictions Fail", []string{"--set", "disruption.hintsFromListing=false"}, fail, fail, false},
		{"listings without budgets", []string{"--set", "disruption.budgets=false"}, fail, fail, false},
		{"deliveries without budgets", append([]string{"--set", "disruption.budgets=false"}, events...), fail, fail, false},
		{"failurePolicy sets both", []string{"--set", "policy.failurePolicy=Ignore"}, ignore, ignore, false},
		{"deletes override", []string{"--set", "policy.deletesFailurePolicy=Ignore", "--set", "disruption.budgets=false"}, ignore, fail, false},
		{"evictions override", []string{"--set", "policy.evictionsFailurePolicy=Ignore"}, fail, ignore, false},
		{"evictions override with deliveries", append([]string{"--set", "policy.evictionsFailurePolicy=Ignore"}, events...), fail, ignore, false},
		{"overrides win over failurePolicy", []string{"--set", "policy.failurePolicy=Ignore",
			"--set", "policy.deletesFailurePolicy=Fail", "--set", "policy.evictionsFailurePolicy=Fail"}, fail, fail, false},
		{"evictions everywhere default to Ignore", []string{"--set", "policy.evictionsInAllNamespaces=true"}, fail, ignore, true},
		{"evictions everywhere with an explicit Fail", []string{"--set", "policy.evictionsInAllNamespaces=true",
			"--set", "policy.evictionsFailurePolicy=Fail"}, fail, fail, true},
		{"custom runner pods", []string{"--set", "policy.runnerPods[0].name=custom",
			"--set", "policy.runnerPods[0].selector.matchLabels.runner=yes", "--set", "policy.runnerPods[0].container=runner",
			"--set", "policy.runnerPods[0].scopeEnv.organization=ORG", "--set", "policy.deletesFailurePolicy=Ignore"}, ignore, fail, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vwc := renderWebhooks(t, c.args...)
			for _, wh := range vwc.Webhooks {
				eviction := wh.Rules[0].Resources[0] == "pods/eviction"
				want := c.deletes
				if eviction {
					want = c.evictions
				}
				if got := render.ActivatedPolicy(t, vwc, wh); got != want {
					t.Errorf("%s failurePolicy once activated %s, want %s", wh.Name, got, want)
				}
				sel := mustNamespaceSelector(t, wh)
				other := labels.Set{"kubernetes.io/metadata.name": "team-web"}
				wantOther := !eviction || c.unlabelled
				if got := sel.Matches(other); got != wantOther {
					t.Errorf("%s covers the unlabelled namespace team-web: %v, want %v", wh.Name, got, wantOther)
				}
				if !sel.Matches(labels.Merge(other, guardLabel)) {
					t.Errorf("%s skips a namespace labelled %v", wh.Name, guardLabel)
				}
				for _, ns := range []string{"kube-system", namespace} {
					if sel.Matches(labels.Merge(labels.Set{"kubernetes.io/metadata.name": ns}, guardLabel)) {
						t.Errorf("%s covers %s, labelled or not", wh.Name, ns)
					}
				}
			}
		})
	}

	// Listed namespaces need no label, and nothing else is covered.
	vwc := renderWebhooks(t, "--set", "policy.guardedNamespaces={ci}")
	for _, wh := range vwc.Webhooks {
		sel := mustNamespaceSelector(t, wh)
		if !sel.Matches(labels.Set{"kubernetes.io/metadata.name": "ci"}) ||
			sel.Matches(labels.Merge(labels.Set{"kubernetes.io/metadata.name": "team-web"}, guardLabel)) {
			t.Errorf("%s namespaceSelector %s, want only the guarded namespace ci", wh.Name, sel)
		}
		// Listed namespaces change nothing of the policy: Fail, since a job
		// that starts while no replica is ready has no job budget.
		want := admissionregistrationv1.Fail
		if got := render.ActivatedPolicy(t, vwc, wh); got != want {
			t.Errorf("%s failurePolicy once activated %s, want %s", wh.Name, got, want)
		}
	}
}

func renderWebhooks(t *testing.T, args ...string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	objs := render.MustTemplate(t, append(slices.Clone(valid), args...)...)
	return render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
}

func mustNamespaceSelector(t *testing.T, wh admissionregistrationv1.ValidatingWebhook) labels.Selector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatalf("%s: %v", wh.Name, err)
	}
	return sel
}

// TestGoMemLimit checks GOMEMLIMIT is 90 % of resources.limits.memory in whole
// MiB (rounded down), goMemLimit when set, and absent without a limit.
func TestGoMemLimit(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // "" for no GOMEMLIMIT
	}{
		{"default 256Mi", nil, "230MiB"},
		{"1Gi", []string{"--set", "resources.limits.memory=1Gi"}, "921MiB"},
		{"decimal 512M", []string{"--set", "resources.limits.memory=512M"}, "439MiB"},
		{"plain bytes", []string{"--set", "resources.limits.memory=268435456"}, "230MiB"},
		{"explicit", []string{"--set", "goMemLimit=200MiB"}, "200MiB"},
		{"explicit off", []string{"--set", "goMemLimit=off"}, "off"},
		{"no limit", []string{"--set", "resources.limits=null"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render.MustTemplate(t, append(slices.Clone(valid), c.args...)...)
			d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
			ctr := d.Spec.Template.Spec.Containers[0]
			got, found := "", false
			for _, e := range ctr.Env {
				if e.Name == "GOMEMLIMIT" {
					got, found = e.Value, true
					if e.ValueFrom != nil {
						t.Errorf("GOMEMLIMIT from %+v, want a literal (a resourceFieldRef is the whole limit)", e.ValueFrom)
					}
				}
			}
			if got != c.want || found != (c.want != "") {
				t.Errorf("GOMEMLIMIT %q (set %v), want %q", got, found, c.want)
			}
			if lim := ctr.Resources.Limits.Memory(); strings.HasSuffix(got, "MiB") && !lim.IsZero() && !slices.Contains(c.args, "goMemLimit=200MiB") {
				mib := lim.Value() * 9 / 10 >> 20
				if got != strconv.FormatInt(mib, 10)+"MiB" {
					t.Errorf("GOMEMLIMIT %s is not 90 %% of %s (%dMiB)", got, lim, mib)
				}
			}
		})
	}
}

// TestDisruptionBudget checks every rendered PodDisruptionBudget allows at
// least one of runner-guard's pods to be evicted, and that one replica gets
// none by default.
func TestDisruptionBudget(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		replicas int
		want     *intstr.IntOrString // minAvailable, or maxUnavailable when max
		max      bool
	}{
		{"one replica: no budget", []string{"--set", "replicaCount=1"}, 1, nil, false},
		{"two replicas", nil, 2, ptr(intstr.FromInt32(1)), false},
		{"three replicas", []string{"--set", "replicaCount=3"}, 3, ptr(intstr.FromInt32(1)), false},
		{"three replicas, two kept", []string{"--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=2"}, 3, ptr(intstr.FromInt32(2)), false},
		{"percentage", []string{"--set", "replicaCount=3", "--set-string", "podDisruptionBudget.minAvailable=50%"}, 3, ptr(intstr.FromString("50%")), false},
		{"maxUnavailable", []string{"--set", "podDisruptionBudget.maxUnavailable=1"}, 2, ptr(intstr.FromInt32(1)), true},
		{"one replica, maxUnavailable", []string{"--set", "replicaCount=1", "--set", "podDisruptionBudget.maxUnavailable=1"}, 1, ptr(intstr.FromInt32(1)), true},
		{"one replica, minAvailable 0", []string{"--set", "replicaCount=1", "--set", "podDisruptionBudget.minAvailable=0"}, 1, ptr(intstr.FromInt32(0)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render.MustTemplate(t, append(slices.Clone(valid), c.args...)...)
			pdbs := objs.OfKind("PodDisruptionBudget")
			if c.want == nil {
				if len(pdbs) != 0 {
					t.Fatalf("PodDisruptionBudget rendered for %d replica(s): it would block its node's drain", c.replicas)
				}
				return
			}
			pdb := render.Get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "runner-guard-webhook")
			got := pdb.Spec.MinAvailable
			other := pdb.Spec.MaxUnavailable
			if c.max {
				got, other = other, got
			}
			if got == nil || *got != *c.want || other != nil {
				t.Fatalf("PodDisruptionBudget spec %+v, want %v (max %v)", pdb.Spec, c.want, c.max)
			}
			// The disruption controller rounds percentages up.
			n, err := intstr.GetScaledValueFromIntOrPercent(got, c.replicas, true)
			if err != nil {
				t.Fatal(err)
			}
			allowed := c.replicas - n
			if c.max {
				allowed = n
			}
			if allowed < 1 {
				t.Errorf("PodDisruptionBudget allows %d disruption(s) of %d replica(s)", allowed, c.replicas)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestEvictionsPolicyNotes checks NOTES say what the evictions entry does
// while no replica answers, and why: at the defaults (listings and budgets
// on) Fail refuses every eviction in the guarded namespaces, an idle
// runner's too, because a job that starts during the outage has no budget;
// with Ignore, evictions go through and only budgets made before the outage
// hold busy runners (a legacy runner's none without listings or
// deliveries).
func TestEvictionsPolicyNotes(t *testing.T) {
	notes := func(set ...string) string {
		args := []string{"install", "rg", render.ChartDir(t), "--namespace", "rg", "--dry-run=client"}
		args = append(append(args, valid...), set...)
		out, err := render.Helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "Evictions (drains, autoscalers) are guarded in:") {
				return l
			}
		}
		t.Fatalf("NOTES do not say where evictions are guarded:\n%s", out)
		return ""
	}
	cases := []struct {
		name    string
		set     []string
		want    []string
		notWant []string
	}{
		{"defaults", nil, []string{"(failurePolicy Fail: while no replica answers, every eviction there is refused, an idle runner's too (the API server cannot call the webhook to tell them apart), so drains there wait until a replica is back",
			"; not Ignore, since a job that starts while no replica is ready has no job budget"}, []string{"go through"}},
		{"deliveries", []string{"--set", "events.enabled=true", "--set", "events.secret=s"},
			[]string{"(failurePolicy Fail: while no replica answers, every eviction there is refused", "no job budget"}, []string{"go through"}},
		{"every namespace", []string{"--set", "policy.evictionsInAllNamespaces=true"},
			[]string{"(failurePolicy Ignore: while no replica answers, evictions go through unchecked, and a busy runner's pod is held only by a job budget made before the outage; a job that starts during the outage can die on a drain)"}, nil},
		{"every namespace without listings", []string{"--set", "policy.evictionsInAllNamespaces=true", "--set", "disruption.hintsFromListing=false"},
			[]string{"held only by a job budget made before the outage (a busy legacy runner has none without disruption.hintsFromListing or events.enabled)"}, nil},
		{"budgets off", []string{"--set", "disruption.budgets=false"},
			[]string{"(failurePolicy Fail: while no replica answers, every eviction there is refused, an idle runner's too (the API server cannot call the webhook to tell them apart), so drains there wait until a replica is back)"}, []string{"job budget"}},
		{"explicit Fail", []string{"--set", "policy.evictionsFailurePolicy=Fail"},
			[]string{"so drains there wait until a replica is back)"}, []string{"job budget"}},
		{"explicit Ignore, budgets off", []string{"--set", "policy.evictionsFailurePolicy=Ignore", "--set", "disruption.budgets=false"},
			[]string{"(failurePolicy Ignore: while no replica answers, evictions go through and a busy runner's job can die on a drain)"}, []string{"job budget"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := notes(c.set...)
			for _, w := range c.want {
				if !strings.Contains(l, w) {
					t.Errorf("NOTES lack %q:\n%s", w, l)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(l, w) {
					t.Errorf("NOTES say %q:\n%s", w, l)
				}
			}
		})
	}
}
