package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/test/render"
)

const (
	eventsName = "runner-guard-events"
	eventsVF   = "testdata/values/events.yaml"
)

// eventsDeployment is the events Deployment of a render and its container.
func eventsDeployment(t *testing.T, objs render.Objects) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", eventsName)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("events Deployment has %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

func hasFlag(args []string, flag string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
}

// TestEventsDeployment: with events on, the endpoint runs in a Deployment of
// its own (--events-only) that needs neither the serving certificate nor
// GitHub credentials, and the webhook no longer serves it but still
// verifies the annotations it writes.
func TestEventsDeployment(t *testing.T) {
	objs := render.MustTemplate(t, "--values", eventsVF)
	d, c := eventsDeployment(t, objs)
	for _, want := range []string{"--events-only", "--events-bind-address=:8082",
		"--github-webhook-secret-file=/etc/runner-guard/events/webhook-secret", "--config=/etc/runner-guard/config/config.yaml",
		"--health-probe-bind-address=:8081", "--metrics-bind-address=:8443"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("events args %q lack %s", c.Args, want)
		}
	}
	for _, flag := range []string{"--cert-dir", "--self-managed-cert-secret", "--github-token-file", "--github-app-id",
		"--github-app-private-key-file", "--credentials-mode", "--webhook-configuration-name", "--rerun-lost-jobs"} {
		if hasFlag(c.Args, flag) {
			t.Errorf("events args %q pass %s: the endpoint serves no admission and asks GitHub nothing", c.Args, flag)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
		if m.MountPath != "/tmp" && !m.ReadOnly {
			t.Errorf("mount %s at %s is writable", m.Name, m.MountPath)
		}
	}
	for _, name := range []string{"serving-cert", "github"} {
		if _, ok := mounts[name]; ok {
			t.Errorf("the events pods mount %s", name)
		}
	}
	if mounts["events-secret"] != "/etc/runner-guard/events" || mounts["config"] != "/etc/runner-guard/config" {
		t.Errorf("events mounts %v, want the webhook secret and the config", mounts)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName != "runner-guard-events" {
			t.Errorf("events volume %s mounts Secret %s", v.Name, v.Secret.SecretName)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("events env %s reads Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != eventsName {
		t.Errorf("events serviceAccountName %q, want %s", d.Spec.Template.Spec.ServiceAccountName, eventsName)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("events replicas %v, want events.replicaCount's default 2", d.Spec.Replicas)
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("96Mi")) != 0 {
		t.Errorf("events memory limit %s, want 96Mi", got.String())
	}
	if env := envOf(d); env["GOMEMLIMIT"] != "86MiB" {
		t.Errorf("events GOMEMLIMIT %q, want 86MiB (90 %% of 96Mi)", env["GOMEMLIMIT"])
	}
	var ports []string
	for _, p := range c.Ports {
		ports = append(ports, p.Name)
	}
	if want := []string{"events", "metrics", "health"}; !slices.Equal(ports, want) {
		t.Errorf("events ports %v, want %v", ports, want)
	}

	wd := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	wc := wd.Spec.Template.Spec.Containers[0]
	if !render.EqualJSON(c.SecurityContext, wc.SecurityContext) || !render.EqualJSON(d.Spec.Template.Spec.SecurityContext, wd.Spec.Template.Spec.SecurityContext) {
		t.Errorf("events securityContext %s / %s, want the webhook's %s / %s", render.JSON(t, d.Spec.Template.Spec.SecurityContext), render.JSON(t, c.SecurityContext),
			render.JSON(t, wd.Spec.Template.Spec.SecurityContext), render.JSON(t, wc.SecurityContext))
	}
	if hasFlag(wc.Args, "--events-bind-address") || hasFlag(wc.Args, "--events-only") {
		t.Errorf("webhook args %q still serve the events endpoint", wc.Args)
	}
	if !slices.Contains(wc.Args, "--github-webhook-secret-file=/etc/runner-guard/events/webhook-secret") {
		t.Errorf("webhook args %q lack the secret that verifies job annotations", wc.Args)
	}
	for _, p := range wc.Ports {
		if p.Name == "events" || int(p.ContainerPort) == 8082 {
			t.Errorf("webhook container exposes %s:%d", p.Name, p.ContainerPort)
		}
	}
	if !slices.ContainsFunc(wc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "events-secret" }) {
		t.Error("the webhook pods no longer mount the webhook secret")
	}
}

// TestEventsSelectsOnlyEventsPods: the events Service, PodDisruptionBudget
// and NetworkPolicy select the events pods and not the webhook's; the
// webhook's Deployment, Service, PodDisruptionBudget and NetworkPolicy not
// the events pods.
func TestEventsSelectsOnlyEventsPods(t *testing.T) {
	objs := render.MustTemplate(t, "--values", eventsVF)
	ed, _ := eventsDeployment(t, objs)
	wd := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	events, webhookPods := labels.Set(ed.Spec.Template.Labels), labels.Set(wd.Spec.Template.Labels)
	check := func(what string, sel labels.Selector, own, other labels.Set) {
		t.Helper()
		if !sel.Matches(own) {
			t.Errorf("%s (%s) does not select its own pods %v", what, sel, own)
		}
		if sel.Matches(other) {
			t.Errorf("%s (%s) selects the other Deployment's pods %v", what, sel, other)
		}
	}
	asSelector := func(ls *metav1.LabelSelector) labels.Selector {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		return sel
	}
	check("events Deployment", asSelector(ed.Spec.Selector), events, webhookPods)
	check("webhook Deployment", asSelector(wd.Spec.Selector), webhookPods, events)
	svc := render.Get[corev1.Service](t, objs, "Service", eventsName)
	check("events Service", labels.SelectorFromSet(svc.Spec.Selector), events, webhookPods)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "events" {
		t.Errorf("events Service ports %s, want the events port only", render.JSON(t, svc.Spec.Ports))
	}
	wsvc := render.Get[corev1.Service](t, objs, "Service", "runner-guard-webhook")
	check("webhook Service", labels.SelectorFromSet(wsvc.Spec.Selector), webhookPods, events)
	pdb := render.Get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", eventsName)
	check("events PodDisruptionBudget", asSelector(pdb.Spec.Selector), events, webhookPods)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("events PodDisruptionBudget %s, want minAvailable 1", render.JSON(t, pdb.Spec))
	}
	wpdb := render.Get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "runner-guard-webhook")
	check("webhook PodDisruptionBudget", asSelector(wpdb.Spec.Selector), webhookPods, events)
	np := render.Get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", eventsName)
	check("events NetworkPolicy", asSelector(&np.Spec.PodSelector), events, webhookPods)
	wnp := render.Get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "runner-guard-webhook")
	check("webhook NetworkPolicy", asSelector(&wnp.Spec.PodSelector), webhookPods, events)

	// One replica: no budget (it would block its node's drain forever).
	one := render.MustTemplate(t, "--values", eventsVF, "--set", "events.replicaCount=1")
	if one.Find("PodDisruptionBudget", eventsName) != nil {
		t.Error("events.replicaCount=1 renders a PodDisruptionBudget that keeps the only events pod")
	}
}

// bindingsOfSA are the rules granted to the ServiceAccount name of the
// release namespace, by every (Cluster)RoleBinding of the render, with the
// namespace they hold in ("" cluster-wide).
func bindingsOfSA(t *testing.T, objs render.Objects, name string) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	grants := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == name && s.Namespace == namespace
		})
	}
	for _, u := range objs.OfKind("ClusterRoleBinding") {
		b := render.Get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", u.GetName())
		if grants(b.Subjects) {
			r := render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", b.RoleRef.Name)
			out[""] = append(out[""], r.Rules...)
		}
	}
	for _, u := range objs.OfKind("RoleBinding") {
		b := render.Get[rbacv1.RoleBinding](t, objs.InNamespace(u.GetNamespace()), "RoleBinding", u.GetName())
		if !grants(b.Subjects) {
			continue
		}
		if b.RoleRef.Kind == "ClusterRole" {
			out[b.Namespace] = append(out[b.Namespace], render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", b.RoleRef.Name).Rules...)
		} else {
			out[b.Namespace] = append(out[b.Namespace], render.Get[rbacv1.Role](t, objs.InNamespace(b.Namespace), "Role", b.RoleRef.Name).Rules...)
		}
	}
	return out
}

// TestEventsRBAC: the events ServiceAccount's only write is patching pods
// (creating TokenReviews and SubjectAccessReviews, which store nothing,
// authorizes metrics scrapers); it reads pods and ARC's runners, never
// Secrets, and only where runner-guard guards pods.
func TestEventsRBAC(t *testing.T) {
	readOnly := []string{"get", "list", "watch"}
	reviews := []string{"tokenreviews", "subjectaccessreviews"}
	for name, c := range map[string]struct {
		args []string
		nss  []string // where the grants hold; "" cluster-wide
	}{
		"every namespace guarded": {[]string{"--values", eventsVF}, []string{""}},
		"guarded namespaces": {[]string{"--values", eventsVF, "--values", "testdata/values/guarded-namespaces.yaml",
			"--set", "events.enabled=true", "--set", "events.secret=x"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render.MustTemplate(t, c.args...)
			if c.nss == nil {
				c.nss = readPolicy(t, "testdata/values/guarded-namespaces.yaml").Policy.GuardedNamespaces
			}
			if objs.Find("ServiceAccount", eventsName) == nil {
				t.Fatalf("no ServiceAccount %s", eventsName)
			}
			grants := bindingsOfSA(t, objs, eventsName)
			for _, ns := range c.nss {
				var pods, ers bool
				for _, r := range grants[ns] {
					if slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"pods"}) {
						pods = slices.Equal(r.Verbs, []string{"get", "list", "watch", "patch"})
					}
					if slices.Equal(r.APIGroups, []string{"actions.github.com"}) && slices.Contains(r.Resources, "ephemeralrunners") && slices.Contains(r.Verbs, "get") {
						ers = true
					}
				}
				if !pods || !ers {
					t.Errorf("namespace %q: grants %s lack get/list/watch/patch on pods or get on ephemeralrunners", ns, render.JSON(t, grants[ns]))
				}
			}
			for ns, rules := range grants {
				if ns != "" && !slices.Contains(c.nss, ns) {
					t.Errorf("events grants in namespace %q, not a guarded one", ns)
				}
				for _, r := range rules {
					text := render.JSON(t, r)
					if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") || slices.Contains(r.APIGroups, "*") {
						t.Errorf("namespace %q: events grant %s", ns, text)
					}
					if len(r.NonResourceURLs) > 0 {
						t.Errorf("events grant %s", text)
					}
					for _, v := range r.Verbs {
						switch {
						case slices.Contains(readOnly, v):
						case v == "patch" && slices.Equal(r.Resources, []string{"pods"}) && slices.Equal(r.APIGroups, []string{""}):
						case v == "create" && ns == "" && len(r.Resources) == 1 && slices.Contains(reviews, r.Resources[0]):
						default:
							t.Errorf("namespace %q: the events ServiceAccount may %s %v: its only write is patching pods", ns, v, r.Resources)
						}
					}
					if ns == "" && len(c.nss) > 0 && c.nss[0] != "" && (slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "ephemeralrunners")) {
						t.Errorf("events grant %s cluster-wide with guarded namespaces", text)
					}
				}
			}
			// The webhook's ServiceAccount keeps its own grants, and the
			// events one is bound to nothing of the webhook's.
			for _, u := range append(objs.OfKind("RoleBinding"), objs.OfKind("ClusterRoleBinding")...) {
				if strings.HasPrefix(u.GetName(), eventsName) {
					continue
				}
				if strings.Contains(render.JSON(t, u.Object["subjects"]), `"`+eventsName+`"`) {
					t.Errorf("%s %s binds the events ServiceAccount", u.GetKind(), u.GetName())
				}
			}
		})
	}
}

// TestEventsNetworkPolicy: the events port admits only events.networkPolicy.from
// (by default the ingress-nginx namespace), no rule admits every pod or
// address, and the webhook's policy no longer opens the events port.
func TestEventsNetworkPolicy(t *testing.T) {
	ingressNginx := `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ingress-nginx"}}}]`
	for name, c := range map[string]struct {
		args []string
		from string
	}{
		"default: the ingress controller's namespace": {nil, ingressNginx},
		"a load balancer's ranges": {[]string{"--set", "events.networkPolicy.from[0].ipBlock.cidr=192.30.252.0/22", "--set", "events.networkPolicy.from[1].ipBlock.cidr=10.0.16.0/20"},
			`[{"ipBlock":{"cidr":"192.30.252.0/22"}},{"ipBlock":{"cidr":"10.0.16.0/20"}}]`},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render.MustTemplate(t, append([]string{"--values", eventsVF}, c.args...)...)
			np := render.Get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", eventsName)
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Fatalf("events NetworkPolicy %s, want Ingress only", render.JSON(t, np.Spec))
			}
			checkPortRules(t, np, "events", 8082, c.from)
			for i, rule := range np.Spec.Ingress {
				if len(rule.From) == 0 {
					t.Errorf("rule %d admits every source: %s", i, render.JSON(t, rule))
				}
				for _, peer := range rule.From {
					// Empty selectors (or none) select every pod of the
					// namespace, or of every namespace.
					everyPod := peer.IPBlock == nil && emptySelector(peer.PodSelector) && emptySelector(peer.NamespaceSelector)
					everyAddress := peer.IPBlock != nil && (peer.IPBlock.CIDR == "0.0.0.0/0" || peer.IPBlock.CIDR == "::/0")
					if everyPod || everyAddress {
						t.Errorf("rule %d peer %s admits every pod or address", i, render.JSON(t, peer))
					}
				}
			}
			wnp := render.Get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "runner-guard-webhook")
			for _, rule := range wnp.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port.IntValue() == 8082 {
						t.Errorf("the webhook's NetworkPolicy still opens the events port: %s", render.JSON(t, rule))
					}
				}
			}
		})
	}
}

// TestEventsSecrets: events.secrets[] mounts each Secret in a directory of
// its entry's name and passes both Deployments the mapping file, in the
// format --github-webhook-secrets reads.
func TestEventsSecrets(t *testing.T) {
	objs := render.MustTemplate(t, "--values", eventsVF, "--set", "events.secret=",
		"--set", "events.secrets[0].name=org-a", "--set", "events.secrets[0].existingSecret=org-a-webhook",
		"--set", "events.secrets[0].scopes={org:org-a}",
		"--set", "events.secrets[0].previousKey=previous", "--set-string", "events.secrets[0].previousUntil=2027-01-01T00:00:00Z",
		"--set", "events.secrets[1].name=apps", "--set", "events.secrets[1].existingSecret=apps-webhook", "--set", "events.secrets[1].key=hmac",
		"--set", "events.secrets[1].scopes={repo:other/app-*,enterprise:big}")
	cm := render.Get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-webhook-secrets")
	var file events.SecretsFile
	if err := yaml.UnmarshalStrict([]byte(cm.Data["webhook-secrets.yaml"]), &file); err != nil {
		t.Fatalf("webhook-secrets.yaml: %v\n%s", err, cm.Data["webhook-secrets.yaml"])
	}
	want := []events.SecretsEntry{
		{Name: "org-a", SecretFile: "/etc/runner-guard/webhook-secrets/org-a/secret", Scopes: []string{"org:org-a"},
			PreviousSecretFile: "/etc/runner-guard/webhook-secrets/org-a/previous", PreviousUntil: "2027-01-01T00:00:00Z"},
		{Name: "apps", SecretFile: "/etc/runner-guard/webhook-secrets/apps/secret", Scopes: []string{"repo:other/app-*", "enterprise:big"}},
	}
	if !render.EqualJSON(file.Secrets, want) {
		t.Errorf("webhook-secrets.yaml %s\nwant %s", render.JSON(t, file.Secrets), render.JSON(t, want))
	}
	if objs.Find("Secret", "runner-guard-events") != nil {
		t.Error("events.secrets still renders the single-secret Secret")
	}
	for _, name := range []string{"runner-guard-webhook", eventsName} {
		d := render.Get[appsv1.Deployment](t, objs, "Deployment", name)
		c := d.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--github-webhook-secrets=/etc/runner-guard/webhook-secrets.yaml") || hasFlag(c.Args, "--github-webhook-secret-file") {
			t.Errorf("%s args %q, want --github-webhook-secrets and no --github-webhook-secret-file", name, c.Args)
		}
		if d.Spec.Template.Annotations["checksum/webhook-secrets"] == "" {
			t.Errorf("%s: no checksum/webhook-secrets annotation (the mapping is a subPath mount, never updated in place)", name)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m
		}
		if m := mounts["webhook-secrets"]; m.MountPath != "/etc/runner-guard/webhook-secrets.yaml" || m.SubPath != "webhook-secrets.yaml" || !m.ReadOnly {
			t.Errorf("%s mapping mount %+v", name, m)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range d.Spec.Template.Spec.Volumes {
			volumes[v.Name] = v
		}
		for i, w := range []struct {
			dir, secret string
			items       []corev1.KeyToPath
		}{
			{"org-a", "org-a-webhook", []corev1.KeyToPath{{Key: "webhook-secret", Path: "secret"}, {Key: "previous", Path: "previous"}}},
			{"apps", "apps-webhook", []corev1.KeyToPath{{Key: "hmac", Path: "secret"}}},
		} {
			vol := "webhook-secret-" + string(rune('0'+i))
			if m := mounts[vol]; m.MountPath != "/etc/runner-guard/webhook-secrets/"+w.dir || !m.ReadOnly {
				t.Errorf("%s mount %s %+v", name, vol, m)
			}
			v := volumes[vol]
			if v.Secret == nil || v.Secret.SecretName != w.secret || !render.EqualJSON(v.Secret.Items, w.items) {
				t.Errorf("%s volume %s %s, want Secret %s items %s", name, vol, render.JSON(t, v.VolumeSource), w.secret, render.JSON(t, w.items))
			}
		}
	}
}

func emptySelector(s *metav1.LabelSelector) bool {
	return s == nil || len(s.MatchLabels)+len(s.MatchExpressions) == 0
}
