package activation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	admissionregistrationclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// FieldManager names runner-guard's patches in the configuration's
// managedFields.
const FieldManager = "runner-guard-activation"

// DefaultRecheck is how often a replica looks again without an event: the
// served certificate and the server's start are not watched.
const DefaultRecheck = 5 * time.Second

// Options configure an Activator.
type Options struct {
	// Name of the ValidatingWebhookConfiguration to activate.
	Name string
	// Client reads, watches and patches it (RBAC: get, list, watch, patch
	// with resourceNames [Name]).
	Client admissionregistrationclient.ValidatingWebhookConfigurationsGetter
	// Served returns the chain presented at a clientConfig's address, leaf
	// first (DialServed).
	Served func(context.Context, admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error)
	// Recheck is how often to look again without an event (DefaultRecheck).
	Recheck time.Duration
	Log     logr.Logger
	// Now is the clock certificates are verified at (time.Now).
	Now func() time.Time
	// Timeout compares the entries' timeoutSeconds with --webhook-timeout.
	Timeout TimeoutCheck
}

// Activator runs on every replica and keeps the configuration's entries at
// their wanted failurePolicy once their Service (or URL) answers with a
// certificate their caBundle verifies.
type Activator struct {
	// EveryReplica: every replica may activate, and the patches are
	// idempotent and tested against the resourceVersion they were made from.
	EveryReplica
	opts Options
}

var (
	_ manager.Runnable               = &Activator{}
	_ manager.LeaderElectionRunnable = &Activator{}
)

// New checks opts and returns an Activator.
func New(opts Options) (*Activator, error) {
	switch {
	case opts.Name == "":
		return nil, errors.New("activation: no ValidatingWebhookConfiguration name")
	case opts.Client == nil:
		return nil, errors.New("activation: no client")
	case opts.Served == nil:
		return nil, errors.New("activation: no served-certificate source")
	}
	return &Activator{opts: opts, EveryReplica: NewEveryReplica(opts.Recheck, DefaultRecheck, opts.Now)}, nil
}

// Start follows the configuration (a field selector on its name, so RBAC
// can name it) and reconciles on each change and every Recheck until ctx
// ends.
func (a *Activator) Start(ctx context.Context) error {
	observed := make(chan *admissionregistrationv1.ValidatingWebhookConfiguration, 1)
	go a.follow(ctx, observed)
	ticker := time.NewTicker(a.Recheck())
	defer ticker.Stop()
	var (
		current     *admissionregistrationv1.ValidatingWebhookConfiguration
		seen        bool
		lastWaiting string
		lastShort   string
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case current = <-observed:
			seen = true
		case <-ticker.C:
		}
		switch {
		case !seen:
		case current == nil:
			a.logWaiting(&lastWaiting, "ValidatingWebhookConfiguration "+a.opts.Name+" does not exist")
		default:
			lastShort = a.opts.Timeout.apply(current, lastShort, a.opts.Log.Info)
			waiting, err := a.reconcile(ctx, current)
			if err != nil {
				a.opts.Log.Error(err, "activating the webhook configuration", "name", a.opts.Name)
			}
			a.logWaiting(&lastWaiting, waiting)
		}
	}
}

// follow lists and watches the one configuration, sending each version it
// observes (nil: there is none) to out, which holds only the newest.
func (a *Activator) follow(ctx context.Context, out chan *admissionregistrationv1.ValidatingWebhookConfiguration) {
	vwcs := a.opts.Client.ValidatingWebhookConfigurations()
	sel := fields.OneTermEqualSelector("metadata.name", a.opts.Name).String()
	send := func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		select {
		case <-out: // superseded
		default:
		}
		out <- v
	}
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.Recheck()):
			return true
		}
	}
	for ctx.Err() == nil {
		list, err := vwcs.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			a.opts.Log.Error(err, "listing the webhook configuration", "name", a.opts.Name)
			if !pause() {
				return
			}
			continue
		}
		var first *admissionregistrationv1.ValidatingWebhookConfiguration
		if len(list.Items) > 0 {
			first = &list.Items[0]
		}
		send(first)
		w, err := vwcs.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			a.opts.Log.Error(err, "watching the webhook configuration", "name", a.opts.Name)
			if !pause() {
				return
			}
			continue
		}
		a.drain(ctx, w, send)
		w.Stop()
	}
}

// drain sends each version a watch delivers until it ends or fails.
func (a *Activator) drain(ctx context.Context, w watch.Interface, send func(*admissionregistrationv1.ValidatingWebhookConfiguration)) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if v, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
					send(v)
				}
			case watch.Deleted:
				send(nil)
			case watch.Error:
				return // relist
			}
		}
	}
}

// logWaiting logs why the configuration is not activated yet, once per reason.
func (a *Activator) logWaiting(last *string, waiting string) {
	if waiting == *last {
		return
	}
	*last = waiting
	if waiting != "" {
		a.opts.Log.Info("webhook configuration not activated yet: failed calls are ignored until it is", "name", a.opts.Name, "waiting", waiting)
	}
}

// reconcile makes one plan for vwc and patches it. It returns why entries
// wait, "" when none does.
func (a *Activator) reconcile(ctx context.Context, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) (string, error) {
	plan, err := PlanFor(vwc, func(cc admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
		return a.opts.Served(ctx, cc)
	}, a.Now())
	if err != nil {
		return "", err
	}
	var waiting []string
	for _, w := range plan.Waiting {
		waiting = append(waiting, w.Name+": "+w.Reason)
	}
	if len(plan.Changes) == 0 {
		return strings.Join(waiting, "; "), nil
	}
	patch, err := plan.Patch()
	if err != nil {
		return "", err
	}
	if _, err := a.opts.Client.ValidatingWebhookConfigurations().Patch(ctx, vwc.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		// Another replica or an apply changed it first: the watch brings
		// the new version and the next plan.
		return strings.Join(waiting, "; "), fmt.Errorf("patch ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
	}
	for _, c := range plan.Changes {
		a.opts.Log.Info("webhook entry activated", "name", vwc.Name, "entry", c.Name, "kind", c.Kind, "from", c.From, "failurePolicy", c.To)
	}
	return strings.Join(waiting, "; "), nil
}

// DialServed completes a TLS handshake with the address the API server
// dials for cc (the Service, so a replica the Service routes to, or the
// URL) and returns the chain presented there. A Service with no Ready
// endpoint yet, a server not listening or a certificate not loaded all read
// as an error: the API server could not be answered either.
func DialServed(ctx context.Context, cc admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
	addr, err := Address(cc)
	if err != nil {
		return nil, err
	}
	return dialChain(ctx, addr)
}

// DialViaClusterIP is DialServed that dials a Service's ClusterIP, read from
// the API, instead of resolving its DNS name: what the API server's default
// service resolver dials, and no cluster DNS needed. The certificate is still
// verified for SERVICE.NAMESPACE.svc (RBAC: get on that Service).
func DialViaClusterIP(services corev1client.ServicesGetter) func(context.Context, admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
	return func(ctx context.Context, cc admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error) {
		addr, err := Address(cc)
		if err != nil {
			return nil, err
		}
		if ref := cc.Service; ref != nil {
			svc, err := services.Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("read webhook Service %s/%s: %w", ref.Namespace, ref.Name, err)
			}
			ip := svc.Spec.ClusterIP
			if ip == "" || ip == corev1.ClusterIPNone {
				return nil, fmt.Errorf("webhook Service %s/%s has no ClusterIP", ref.Namespace, ref.Name)
			}
			_, port, _ := net.SplitHostPort(addr)
			addr = net.JoinHostPort(ip, port)
		}
		return dialChain(ctx, addr)
	}
}

// dialChain completes a TLS handshake with addr and returns the chain the
// server presents.
func dialChain(ctx context.Context, addr string) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	cfg := &tls.Config{
		// The chain is checked against the configuration's caBundle by
		// Verify, not here; a server requiring client certificates
		// still presents its own before refusing us.
		InsecureSkipVerify: true, //nolint:gosec // only reads the peer's chain
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = slices.Clone(cs.PeerCertificates)
			return nil
		},
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if conn != nil {
		_ = conn.Close()
	}
	if len(chain) > 0 {
		return chain, nil
	}
	if err == nil {
		err = errors.New("the server presented no certificate")
	}
	return nil, fmt.Errorf("webhook at %s: %w", addr, err)
}
