package activation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/test/process"
)

// TestActivatorRaisesOnceServingAndRestoresAfterAnApply runs an Activator
// against a fake API: nothing is raised while the replica serves no
// certificate, every entry is raised once it does, and an apply that resets
// an entry to Ignore is undone.
func TestActivatorRaisesOnceServingAndRestoresAfterAnApply(t *testing.T) {
	c := newTestCerts(t)
	vwc := config(bothFail, deleteEntry("legacy", serviceConfig(c.caPEM), ignore), evictionEntry(serviceConfig(c.caPEM), ignore))
	client := fake.NewClientset(vwc)
	var serving atomic.Bool
	checked := make(chan struct{}, 16)
	a, err := New(Options{
		Name: "runner-guard", Client: client.AdmissionregistrationV1(), Recheck: 10 * time.Millisecond, Log: logr.Discard(),
		Now: func() time.Time { return now },
		Served: func(context.Context, admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
			select {
			case checked <- struct{}{}:
			default:
			}
			if !serving.Load() {
				return nil, errors.New("not listening")
			}
			return c.served, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	policies := func() []admissionregistrationv1.FailurePolicyType {
		got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "runner-guard", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []admissionregistrationv1.FailurePolicyType
		for _, wh := range got.Webhooks {
			out = append(out, *wh.FailurePolicy)
		}
		return out
	}
	// Two checks while not serving: the first could precede the informer's sync.
	<-checked
	<-checked
	for _, p := range policies() {
		if p != ignore {
			t.Fatalf("failurePolicy %s before the replica serves, want Ignore", p)
		}
	}
	serving.Store(true)
	process.Eventually(t, ctx, "every entry Fail", 10*time.Second, func() error { return wantAll(policies(), fail) })

	// kubectl apply of the shipped file again sets Ignore back.
	live, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Webhooks[1].FailurePolicy = ptr.To(ignore)
	live.ResourceVersion = "43"
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	process.Eventually(t, ctx, "the reset entry Fail again", 10*time.Second, func() error { return wantAll(policies(), fail) })
}

// wantAll is nil when every policy of ps, and at least one, is want.
func wantAll(ps []admissionregistrationv1.FailurePolicyType, want admissionregistrationv1.FailurePolicyType) error {
	for _, p := range ps {
		if p != want {
			return fmt.Errorf("failure policies %v, want all %s", ps, want)
		}
	}
	if len(ps) == 0 {
		return errors.New("no webhook entries")
	}
	return nil
}

// DialServed reads the chain a server presents, also when the server requires
// client certificates (--client-ca-file) and refuses a client without one.
func TestDialServedReadsThePresentedChain(t *testing.T) {
	for name, serverTLS := range map[string]*tls.Config{
		"no client certificates":       nil,
		"client certificates required": {ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			srv.TLS = serverTLS
			srv.StartTLS()
			t.Cleanup(srv.Close)
			chain, err := DialServed(context.Background(), urlConfig(srv.Listener.Addr().String()))
			if err != nil {
				t.Fatal(err)
			}
			if len(chain) == 0 || !chain[0].Equal(srv.Certificate()) {
				t.Errorf("chain %v, want the server's certificate", chain)
			}
		})
	}
}

func TestDialServedNotListening(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	if _, err := DialServed(context.Background(), urlConfig(addr)); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("DialServed of a closed server: %v, want an error naming %s", err, addr)
	}
}

func TestNewNamesWhatIsMissing(t *testing.T) {
	served := func(context.Context, admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
		return nil, nil
	}
	client := fake.NewClientset().AdmissionregistrationV1()
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"no name":   {Options{Client: client, Served: served}, "name"},
		"no client": {Options{Name: "x", Served: served}, "client"},
		"no served": {Options{Name: "x", Client: client}, "served"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error about the %s", err, tc.want)
			}
		})
	}
}

func urlConfig(addr string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/validate-runner-pods")}
}

// DialViaClusterIP dials the Service's ClusterIP read from the API (here the
// loopback address of a TLS server) and the Service port of the clientConfig.
func TestDialViaClusterIP(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-guard-webhook", Namespace: "runner-guard-system"},
		Spec:       corev1.ServiceSpec{ClusterIP: host},
	}).CoreV1()
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Name: "runner-guard-webhook", Namespace: "runner-guard-system", Port: ptr.To(int32(p))}}
	chain, err := DialViaClusterIP(client)(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) == 0 || !chain[0].Equal(srv.Certificate()) {
		t.Errorf("chain %v, want the server's certificate", chain)
	}
	cc.Service.Name = "missing"
	if _, err := DialViaClusterIP(client)(context.Background(), cc); err == nil || !strings.Contains(err.Error(), "runner-guard-system/missing") {
		t.Errorf("a missing Service: %v, want an error naming it", err)
	}
}
