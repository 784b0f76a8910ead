package activation

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/certs"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// testCerts is a CA, a serving certificate it signed for the in-cluster
// Service and 127.0.0.1, and an unrelated CA.
type testCerts struct {
	caPEM, otherCAPEM []byte
	served            []*x509.Certificate
}

func newTestCerts(t *testing.T) testCerts {
	t.Helper()
	clock := func() time.Time { return now.Add(-time.Hour) }
	b, err := certs.Generate(certs.Options{DNSNames: certs.DefaultDNSNames(), IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Generate(certs.Options{DNSNames: certs.DefaultDNSNames(), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM) // parses the leaf too
	if err != nil {
		t.Fatal(err)
	}
	return testCerts{caPEM: b.CACertPEM, otherCAPEM: other.CACertPEM, served: []*x509.Certificate{pair.Leaf}}
}

func serviceConfig(ca []byte) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{CABundle: ca,
		Service: &admissionregistrationv1.ServiceReference{Name: certs.ServiceName, Namespace: certs.Namespace, Path: ptr.To("/validate-runner-pods")}}
}

func deleteEntry(name string, cc admissionregistrationv1.WebhookClientConfig, p admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{Name: name, ClientConfig: cc, FailurePolicy: ptr.To(p),
		Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}
}

func evictionEntry(cc admissionregistrationv1.WebhookClientConfig, p admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{Name: "evictions.runner-guard.io", ClientConfig: cc, FailurePolicy: ptr.To(p),
		Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}}}}}
}

func config(annotations map[string]string, entries ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-guard", ResourceVersion: "42", Annotations: annotations},
		Webhooks:   entries,
	}
}

var bothFail = map[string]string{AnnotationDeletes: "Fail", AnnotationEvictions: "Fail"}

const (
	fail   = admissionregistrationv1.Fail
	ignore = admissionregistrationv1.Ignore
)

func TestPlanFor(t *testing.T) {
	c := newTestCerts(t)
	ok := serviceConfig([]byte(c.caPEM))
	url := admissionregistrationv1.WebhookClientConfig{CABundle: c.caPEM, URL: ptr.To("https://127.0.0.1:9443/validate-runner-pods")}
	// change is a Change's index, name and target.
	type change struct {
		index int
		name  string
		to    admissionregistrationv1.FailurePolicyType
	}
	cases := map[string]struct {
		vwc     *admissionregistrationv1.ValidatingWebhookConfiguration
		served  []*x509.Certificate
		changes []change
		waiting map[string]string // entry -> part of the reason
	}{
		"fresh install, verified: every entry raised to its annotation": {
			vwc: config(map[string]string{AnnotationDeletes: "Fail", AnnotationEvictions: "Fail"},
				deleteEntry("legacy", ok, ignore), deleteEntry("ephemeral", ok, ignore), evictionEntry(ok, ignore)),
			served:  c.served,
			changes: []change{{0, "legacy", fail}, {1, "ephemeral", fail}, {2, "evictions.runner-guard.io", fail}},
		},
		"per kind: evictions wanted Ignore stay Ignore": {
			vwc:     config(map[string]string{AnnotationDeletes: "Fail", AnnotationEvictions: "Ignore"}, deleteEntry("legacy", ok, ignore), evictionEntry(ok, ignore)),
			served:  c.served,
			changes: []change{{0, "legacy", fail}},
		},
		"already active: nothing to do": {
			vwc:    config(bothFail, deleteEntry("legacy", ok, fail), evictionEntry(ok, fail)),
			served: c.served,
		},
		"caBundle not injected yet (cert-manager): waits": {
			vwc:     config(bothFail, deleteEntry("legacy", serviceConfig(nil), ignore)),
			served:  c.served,
			waiting: map[string]string{"legacy": "caBundle is empty"},
		},
		"caBundle of another CA: waits": {
			vwc:     config(bothFail, deleteEntry("legacy", serviceConfig(c.otherCAPEM), ignore)),
			served:  c.served,
			waiting: map[string]string{"legacy": "does not verify"},
		},
		"not serving yet: waits": {
			vwc:     config(bothFail, deleteEntry("legacy", ok, ignore)),
			waiting: map[string]string{"legacy": "connection refused"},
		},
		"certificate not for the Service's name: waits": {
			vwc: config(bothFail, deleteEntry("legacy", admissionregistrationv1.WebhookClientConfig{CABundle: c.caPEM,
				Service: &admissionregistrationv1.ServiceReference{Name: "other", Namespace: "elsewhere"}}, ignore)),
			served:  c.served,
			waiting: map[string]string{"legacy": "other.elsewhere.svc"},
		},
		"URL with an IP the certificate names": {
			vwc:     config(bothFail, deleteEntry("legacy", url, ignore)),
			served:  c.served,
			changes: []change{{0, "legacy", fail}},
		},
		"URL with an IP the certificate does not name: waits": {
			vwc: config(bothFail, deleteEntry("legacy", admissionregistrationv1.WebhookClientConfig{CABundle: c.caPEM,
				URL: ptr.To("https://10.0.0.1:9443/validate-runner-pods")}, ignore)),
			served:  c.served,
			waiting: map[string]string{"legacy": "10.0.0.1"},
		},
		"lowering to a wanted Ignore needs no proof": {
			vwc:     config(map[string]string{AnnotationDeletes: "Ignore"}, deleteEntry("legacy", serviceConfig(nil), fail)),
			changes: []change{{0, "legacy", ignore}},
		},
		"no annotation: the entry is left as it is": {
			vwc:    config(map[string]string{AnnotationDeletes: "Fail"}, deleteEntry("legacy", ok, fail), evictionEntry(ok, ignore)),
			served: c.served,
		},
		"an entry runner-guard does not own is left alone": {
			vwc: config(bothFail, admissionregistrationv1.ValidatingWebhook{Name: "other", ClientConfig: ok, FailurePolicy: ptr.To(ignore),
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, Resources: []string{"pods"}}}}}),
			served: c.served,
		},
		"an entry with no failurePolicy has the API's default, Fail": {
			vwc: config(map[string]string{AnnotationDeletes: "Ignore"}, func() admissionregistrationv1.ValidatingWebhook {
				wh := deleteEntry("legacy", ok, fail)
				wh.FailurePolicy = nil
				return wh
			}()),
			changes: []change{{0, "legacy", ignore}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := PlanFor(tc.vwc, servedChain(tc.served), now)
			if err != nil {
				t.Fatal(err)
			}
			var got []change
			for _, c := range p.Changes {
				got = append(got, change{c.Index, c.Name, c.To})
			}
			if !reflect.DeepEqual(got, tc.changes) {
				t.Errorf("changes %+v, want %+v", got, tc.changes)
			}
			if len(p.Waiting) != len(tc.waiting) {
				t.Errorf("waiting %+v, want %v", p.Waiting, tc.waiting)
			}
			for _, w := range p.Waiting {
				if want, ok := tc.waiting[w.Name]; !ok || !strings.Contains(w.Reason, want) {
					t.Errorf("%s waits because %q, want a reason with %q", w.Name, w.Reason, want)
				}
			}
			if p.Done() != (len(tc.changes) == 0 && len(tc.waiting) == 0) {
				t.Errorf("Done() = %v", p.Done())
			}
		})
	}
}

func TestPlanForExpiredCertificateWaits(t *testing.T) {
	c := newTestCerts(t)
	vwc := config(bothFail, deleteEntry("legacy", serviceConfig(c.caPEM), ignore))
	p, err := PlanFor(vwc, servedChain(c.served), now.Add(2*certs.DefaultValidity))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 0 || len(p.Waiting) != 1 || !strings.Contains(p.Waiting[0].Reason, "expired") {
		t.Errorf("plan with an expired certificate: %+v, want the entry waiting on expiry", p)
	}
}

// servedChain is a Served presenting chain at every address, or refusing
// connections when chain is nil.
func servedChain(chain []*x509.Certificate) Served {
	return func(admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
		if chain == nil {
			return nil, errors.New("dial: connection refused")
		}
		return chain, nil
	}
}

func TestAddress(t *testing.T) {
	for name, tc := range map[string]struct {
		cc   admissionregistrationv1.WebhookClientConfig
		want string
	}{
		"service, default port": {admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "rg", Namespace: "ns"}}, "rg.ns.svc:443"},
		"service port":          {admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "rg", Namespace: "ns", Port: ptr.To(int32(8443))}}, "rg.ns.svc:8443"},
		"url with port":         {admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/validate")}, "127.0.0.1:9443"},
		"url without port":      {admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://guard.example/validate")}, "guard.example:443"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Address(tc.cc)
			if err != nil || got != tc.want {
				t.Errorf("Address = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := Address(admissionregistrationv1.WebhookClientConfig{}); err == nil {
		t.Error("Address of an empty clientConfig: no error")
	}
}

func TestWantedRefusesAPolicyNamingTheAnnotation(t *testing.T) {
	for name, value := range map[string]string{"lower case": "fail", "empty": "", "other": "Deny"} {
		t.Run(name, func(t *testing.T) {
			_, err := Wanted(config(map[string]string{AnnotationEvictions: value}))
			if err == nil || !strings.Contains(err.Error(), AnnotationEvictions) {
				t.Errorf("Wanted with %q: %v, want an error naming %s", value, err, AnnotationEvictions)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	rule := func(ops []admissionregistrationv1.OperationType, groups, resources []string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{Rules: []admissionregistrationv1.RuleWithOperations{{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: groups, Resources: resources}}}}
	}
	del := []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	create := []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	for name, tc := range map[string]struct {
		wh   admissionregistrationv1.ValidatingWebhook
		want Kind
	}{
		"DELETE pods":                    {rule(del, []string{""}, []string{"pods"}), Deletes},
		"any operation on pods":          {rule(all, []string{"*"}, []string{"pods"}), Deletes},
		"CREATE pods/eviction":           {rule(create, []string{""}, []string{"pods/eviction"}), Evictions},
		"CREATE pods":                    {rule(create, []string{""}, []string{"pods"}), ""},
		"DELETE of another group's pods": {rule(del, []string{"metrics.k8s.io"}, []string{"pods"}), ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := KindOf(tc.wh); got != tc.want {
				t.Errorf("KindOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPatchTestsTheObservedVersion(t *testing.T) {
	p := Plan{ResourceVersion: "42", Changes: []Change{{Index: 2, Name: "evictions.runner-guard.io", To: fail}}}
	b, err := p.Patch()
	if err != nil {
		t.Fatal(err)
	}
	var ops []map[string]any
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
		{"op": "test", "path": "/webhooks/2/name", "value": "evictions.runner-guard.io"},
		{"op": "add", "path": "/webhooks/2/failurePolicy", "value": "Fail"},
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("patch %s, want %v", b, want)
	}
	if _, err := (Plan{ResourceVersion: "42"}).Patch(); err == nil {
		t.Error("a patch of no change was made")
	}
	if _, err := (Plan{Changes: p.Changes}).Patch(); err == nil {
		t.Error("a patch without a resourceVersion to test was made")
	}
}
