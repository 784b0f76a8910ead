package chart

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/runner-guard/runner-guard/test/render"
)

// selfManagedValues is a values file in the default certificates mode.
const selfManagedValues = "testdata/values/guarded-namespaces.yaml"

// TestTemplateTwiceSameWebhookConfiguration: in the default mode two renders
// (helm template, as Argo CD and Flux render) give the same webhook
// configuration and the same objects, so a GitOps sync changes nothing. The
// generate mode does not (a new CA each render): that is why it is not the
// default, and the values say so.
func TestTemplateTwiceSameWebhookConfiguration(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		same bool
	}{
		"default (selfManaged)": {args: []string{"--values", "testdata/values/certmanager-token.yaml", "--set", "certificates.mode=selfManaged"}, same: true},
		"certManager":           {args: []string{"--values", "testdata/values/certmanager-token.yaml"}, same: true},
		"generate":              {args: []string{"--values", "testdata/values/generate-app.yaml"}, same: false},
	} {
		t.Run(name, func(t *testing.T) {
			first, err := render.Template(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			second, err := render.Template(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			vwc := func(out []byte) string {
				return render.JSON(t, render.MustParse(t, out).Find("ValidatingWebhookConfiguration", "runner-guard").Object)
			}
			if got := vwc(first) == vwc(second); got != tc.same {
				t.Errorf("two renders give the same webhook configuration: %v, want %v", got, tc.same)
			}
			if tc.same && string(first) != string(second) {
				t.Error("two renders differ")
			}
		})
	}
}

// TestSelfManagedCertificates: the default mode renders no certificate, no
// caBundle and no certificate volume; the webhook gets the Secret's name and
// only the grants it needs on that one Secret.
func TestSelfManagedCertificates(t *testing.T) {
	objs := render.MustTemplate(t, "--values", selfManagedValues)
	if s := objs.Find("Secret", "runner-guard-webhook-cert"); s != nil {
		t.Error("the chart renders the certificate Secret: runner-guard creates it")
	}
	if len(objs.Where(func(o *unstructured.Unstructured) bool { return o.GetAPIVersion() == "cert-manager.io/v1" })) > 0 {
		t.Error("cert-manager objects in selfManaged mode")
	}
	vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
	for _, wh := range vwc.Webhooks {
		if len(wh.ClientConfig.CABundle) > 0 {
			t.Errorf("%s: caBundle rendered; runner-guard injects it", wh.Name)
		}
		if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("%s: failurePolicy %v, want Ignore until a replica answers", wh.Name, wh.FailurePolicy)
		}
	}
	if _, ok := vwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("cert-manager's injection annotation in selfManaged mode")
	}
	args := webhookArgs(t, objs)
	if !slices.Contains(args, "--self-managed-cert-secret=runner-guard-webhook-cert") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cert-dir") }) {
		t.Errorf("args %v: want --self-managed-cert-secret and no --cert-dir", args)
	}
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "runner-guard-webhook-cert" {
			t.Errorf("volume %s mounts the certificate Secret: it is served from memory", v.Name)
		}
	}
	role := render.Get[rbacv1.Role](t, objs, "Role", "runner-guard-certificates")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"runner-guard-webhook-cert"}, Verbs: []string{"get", "list", "watch", "update"}},
	}
	if !render.EqualJSON(role.Rules, want) {
		t.Errorf("Role runner-guard-certificates rules %s, want %s", render.JSON(t, role.Rules), render.JSON(t, want))
	}
	b := render.Get[rbacv1.RoleBinding](t, objs, "RoleBinding", "runner-guard-certificates")
	render.CheckBinding(t, "RoleBinding runner-guard-certificates", b.RoleRef, b.Subjects, "Role", "runner-guard-certificates")

	// Lifetimes other than the binary's defaults become flags.
	objs = render.MustTemplate(t, "--values", selfManagedValues, "--set", "certificates.selfManaged.validity=720h", "--set", "certificates.selfManaged.caValidity=8760h")
	args = webhookArgs(t, objs)
	for _, a := range []string{"--self-managed-cert-validity=720h", "--self-managed-ca-validity=8760h"} {
		if !slices.Contains(args, a) {
			t.Errorf("args %v lack %s", args, a)
		}
	}
	// Other modes keep the certificate files and get no Secret grants.
	objs = render.MustTemplate(t, "--values", "testdata/values/certmanager-token.yaml")
	if objs.Find("Role", "runner-guard-certificates") != nil {
		t.Error("Role runner-guard-certificates in certManager mode")
	}
}
