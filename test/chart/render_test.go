package chart

import (
	"crypto/x509"
	"encoding/base64"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/render"
)

// TestGeneratedCertificate checks the generate mode's Secret holds a serving
// certificate for the Service (and the webhook.url host) signed by the CA the
// webhook configuration trusts.
func TestGeneratedCertificate(t *testing.T) {
	cases := map[string]struct {
		values string
		verify []string // names or IPs the certificate must be valid for
	}{
		"in-cluster": {"testdata/values/generate-app.yaml", []string{"runner-guard-webhook.runner-guard-system.svc"}},
		"url":        {"testdata/values/external-url.yaml", []string{"127.0.0.1", "runner-guard-webhook.runner-guard-system.svc"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			objs := render.MustTemplate(t, "--values", c.values)
			secret := render.Get[corev1.Secret](t, objs, "Secret", "runner-guard-webhook-cert")
			if secret.Type != corev1.SecretTypeTLS {
				t.Errorf("Secret type %q", secret.Type)
			}
			vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
			pool := x509.NewCertPool()
			for _, wh := range vwc.Webhooks {
				if string(wh.ClientConfig.CABundle) != string(secret.Data["ca.crt"]) {
					t.Fatalf("%s caBundle is not the Secret's ca.crt", wh.Name)
				}
			}
			if !pool.AppendCertsFromPEM(secret.Data["ca.crt"]) {
				t.Fatal("ca.crt holds no certificate")
			}
			cert := fixture.ParseCert(t, secret.Data["tls.crt"])
			for _, host := range c.verify {
				opts := x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
				if _, err := cert.Verify(opts); err != nil {
					t.Errorf("certificate for %s: %v (DNS %v, IPs %v)", host, err, cert.DNSNames, cert.IPAddresses)
				}
			}
			if ttl := time.Until(cert.NotAfter); ttl < 365*24*time.Hour {
				t.Errorf("certificate expires in %s", ttl)
			}
			if net.ParseIP(c.verify[0]) != nil && !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == c.verify[0] }) {
				t.Errorf("IP %s not among the certificate's IP SANs %v", c.verify[0], cert.IPAddresses)
			}
		})
	}
}

// TestURLClientConfig checks webhook.url replaces the Service in every entry
// and that no in-cluster webhook objects are rendered without a Deployment.
func TestURLClientConfig(t *testing.T) {
	objs := render.MustTemplate(t, "--values", "testdata/values/external-url.yaml")
	vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
	for _, wh := range vwc.Webhooks {
		if wh.ClientConfig.Service != nil || deref(wh.ClientConfig.URL) != "https://127.0.0.1:9443/validate-runner-pods" {
			t.Errorf("%s clientConfig %+v", wh.Name, wh.ClientConfig)
		}
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ResourceQuota"} {
		if got := objs.OfKind(kind); len(got) != 0 {
			t.Errorf("deployment.enabled=false still renders %v", got.Names())
		}
	}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret", "ConfigMap"} {
		if len(objs.OfKind(kind)) == 0 {
			t.Errorf("no %s: the external webhook needs the chart's identity, credentials and config", kind)
		}
	}
}

// TestCredentialsFromARC checks the ARC mode reads Secrets only in the listed
// namespaces, and that no mode grants Secrets cluster-wide.
func TestCredentialsFromARC(t *testing.T) {
	objs := render.MustTemplate(t, "--values", "testdata/values/arc-credentials.yaml")
	var nss []string
	for _, r := range objs.OfKind("Role") {
		if r.GetName() == "runner-guard-leader-election" || r.GetName() == "runner-guard-activation" || r.GetName() == "runner-guard-certificates" {
			continue // the disruption controller's Lease, activation's Service and the certificate Secret, in the release namespace
		}
		role := render.Get[rbacv1.Role](t, objs.InNamespace(r.GetNamespace()), "Role", r.GetName())
		nss = append(nss, role.Namespace)
		// configmaps: an EphemeralRunner's githubServerTLS bundle.
		want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get"}}}
		if !render.EqualJSON(role.Rules, want) {
			t.Errorf("Role %s/%s rules %+v", role.Namespace, role.Name, role.Rules)
		}
	}
	// Whether a runner namespace is being deleted: those Namespaces only.
	nsRole := render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-arc-namespaces")
	wantNS := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"arc-runners", "arc-runners-gpu"}, Verbs: []string{"get"}}}
	if !render.EqualJSON(nsRole.Rules, wantNS) {
		t.Errorf("ClusterRole runner-guard-arc-namespaces rules %+v, want %+v", nsRole.Rules, wantNS)
	}
	slices.Sort(nss)
	if !slices.Equal(nss, []string{"arc-runners", "arc-runners-gpu"}) {
		t.Errorf("Roles in %v, want the fromARC namespaces", nss)
	}
	for _, rb := range objs.OfKind("RoleBinding") {
		b := render.Get[rbacv1.RoleBinding](t, objs.InNamespace(rb.GetNamespace()), "RoleBinding", rb.GetName())
		if len(b.Subjects) != 1 || b.Subjects[0].Name != "runner-guard" || b.Subjects[0].Namespace != namespace || b.RoleRef.Kind != "Role" {
			t.Errorf("RoleBinding %s/%s: %+v %+v", b.Namespace, b.Name, b.Subjects, b.RoleRef)
		}
	}
	args := webhookArgs(t, objs)
	if !slices.Contains(args, "--credentials-mode=arc") {
		t.Errorf("args %q lack --credentials-mode=arc", args)
	}
	for _, vf := range matrix(t) {
		for _, cr := range render.MustTemplate(t, "--values", vf).OfKind("ClusterRole") {
			rules, _, _ := nestedSlice(cr.Object, "rules")
			for _, r := range rules {
				if strings.Contains(render.JSON(t, r), `"secrets"`) {
					t.Errorf("%s: ClusterRole %s grants secrets cluster-wide", caseName(vf), cr.GetName())
				}
			}
		}
	}
}

func webhookArgs(t *testing.T, objs render.Objects) []string {
	t.Helper()
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	return d.Spec.Template.Spec.Containers[0].Args
}

// TestAppCredentials checks App credentials reach the flags through the
// Secret's ARC key names.
func TestAppCredentials(t *testing.T) {
	objs := render.MustTemplate(t, "--values", "testdata/values/generate-app.yaml")
	secret := render.Get[corev1.Secret](t, objs, "Secret", "runner-guard-github")
	for key, want := range map[string]string{"github_app_id": "123456", "github_app_installation_id": "7890123"} {
		if got := string(secret.Data[key]); got != want {
			t.Errorf("Secret %s = %q, want %q", key, got, want)
		}
	}
	if !strings.Contains(string(secret.Data["github_app_private_key"]), "BEGIN RSA PRIVATE KEY") {
		t.Errorf("github_app_private_key = %q", secret.Data["github_app_private_key"])
	}
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "runner-guard-github" {
			env[e.Name] = e.ValueFrom.SecretKeyRef.Key
		}
	}
	for _, want := range []string{
		"--github-app-id=$(GITHUB_APP_ID)", "--github-app-installation-id=$(GITHUB_APP_INSTALLATION_ID)",
		"--github-app-private-key-file=/etc/runner-guard/github/github_app_private_key",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if env["GITHUB_APP_ID"] != "github_app_id" || env["GITHUB_APP_INSTALLATION_ID"] != "github_app_installation_id" {
		t.Errorf("App ID env from the Secret: %v", env)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--github-token-file") }) {
		t.Errorf("App credentials with a token file: %q", c.Args)
	}
}

// TestArgsAreWebhookFlags checks every flag the chart can pass exists in the
// webhook binary (its --help), so no values combination starts a binary that
// exits on an unknown flag.
func TestArgsAreWebhookFlags(t *testing.T) {
	bin := webhookBin(t)
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	for _, vf := range matrix(t) {
		objs := render.MustTemplate(t, "--values", vf)
		if len(objs.OfKind("Deployment")) == 0 {
			continue
		}
		// The webhook's and, with events on, the events Deployment's.
		for _, u := range objs.OfKind("Deployment") {
			d := render.Get[appsv1.Deployment](t, objs, "Deployment", u.GetName())
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				flag, _, _ := strings.Cut(a, "=")
				if !strings.Contains(string(help), "\n  "+flag+" ") && !strings.Contains(string(help), "\n  "+flag+"\n") {
					t.Errorf("%s: Deployment %s passes %s, which %s --help does not list", caseName(vf), d.Name, flag, bin)
				}
			}
		}
	}
}

// TestProvidedCABundle checks a provided caBundle reaches every entry verbatim.
func TestProvidedCABundle(t *testing.T) {
	objs := render.MustTemplate(t, "--values", "testdata/values/provided-ghes.yaml")
	vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
	want, _ := base64.StdEncoding.DecodeString("Q0FfQlVORExFX0ZPUl9URVNUUw==")
	for _, wh := range vwc.Webhooks {
		if string(wh.ClientConfig.CABundle) != string(want) {
			t.Errorf("%s caBundle %q, want %q", wh.Name, wh.ClientConfig.CABundle, want)
		}
	}
	if _, ok := vwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("provided certificates still ask cert-manager for CA injection")
	}
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "serving-cert" && v.Secret.SecretName != "my-webhook-tls" {
			t.Errorf("serving-cert volume uses %q", v.Secret.SecretName)
		}
	}
	if args := webhookArgs(t, objs); !slices.Contains(args, "--github-url=https://ghes.example.com/api/v3/") {
		t.Errorf("args %q lack the GHES URL", args)
	}
	if len(objs.OfKind("Certificate"))+len(objs.OfKind("Issuer")) != 0 {
		t.Errorf("provided certificates render cert-manager objects: %v", objs.Names())
	}
}

// TestDisruptionValues: each disruption value turned away from its default
// becomes the binary's flag, and the defaults pass only --hint-from-listing,
// the one disruption default the chart turns on and the binary does not
// (values.yaml: legacy runners get job budgets from the listing by default).
func TestDisruptionValues(t *testing.T) {
	const listing = "--hint-from-listing"
	cases := map[string]struct {
		set  string
		want []string
	}{
		"defaults":                   {"", []string{listing}},
		"do-not-disrupt off":         {"disruption.doNotDisrupt=false", []string{"--hint-do-not-disrupt=false", listing}},
		"safe-to-evict off":          {"disruption.safeToEvict=false", []string{"--hint-safe-to-evict=false", listing}},
		"hints from the listing off": {"disruption.hintsFromListing=false", nil},
		"drains off":                 {"disruption.drainRunners=false", []string{listing, "--drain-runners=false"}},
		"node deadlines held":        {"disruption.honorNodeDeadlines=false", []string{listing, "--honor-node-deadlines=false"}},
	}
	flags := []string{"--hint-do-not-disrupt", "--hint-safe-to-evict", "--hint-from-listing", "--drain-runners", "--honor-node-deadlines"}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			args := []string{"--values", "testdata/values/certmanager-token.yaml"}
			if c.set != "" {
				args = append(args, "--set", c.set)
			}
			var got []string
			for _, a := range webhookArgs(t, render.MustTemplate(t, args...)) {
				if slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(a, f) }) {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("disruption flags %q, want %q", got, c.want)
			}
		})
	}
}
