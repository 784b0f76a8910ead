package rotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runner-guard/runner-guard/webhook/activation"
)

// FieldManager names the caBundle patches in the configuration's managedFields.
const FieldManager = "runner-guard-certificates"

// DefaultRecheck bounds how long a replica goes without looking, events apart.
const DefaultRecheck = time.Minute

// errLostRace marks a write another replica (or an apply) made stale first:
// the watch brings the new version and the next plan.
var errLostRace = errors.New("another writer changed it first")

// Options configure a Rotator.
type Options struct {
	// Namespace and SecretName: where the CA and serving certificate live
	// (RBAC: create secrets; get, list, watch, update that one).
	Namespace, SecretName string
	// ConfigurationName is the ValidatingWebhookConfiguration whose entries
	// get the caBundle (RBAC: get, list, watch, patch that one). It owns
	// the Secret, so deleting it (helm uninstall) deletes the Secret.
	ConfigurationName string
	Client            kubernetes.Interface
	Policy            Policy
	// Recheck is how often to look again without an event (DefaultRecheck).
	Recheck time.Duration
	Log     logr.Logger
	Now     func() time.Time
}

// Rotator runs on every replica: it keeps the Secret's certificates current,
// the configuration's caBundle equal to the Secret's bundle, and serves the
// Secret's certificate (GetCertificate).
type Rotator struct {
	// EveryReplica: every replica must serve, and the writes test the
	// resourceVersion they were planned from.
	activation.EveryReplica
	opts    Options
	serving atomic.Pointer[tls.Certificate]
	// served is the PEM of the certificate being served, to load only a change.
	served atomic.Pointer[[]byte]
	// live is the caBundle last observed in the configuration and since
	// when: a new CA signs only once the API server has had it that long
	// (only Start's goroutine uses it).
	live Live
}

var (
	_ manager.Runnable               = &Rotator{}
	_ manager.LeaderElectionRunnable = &Rotator{}
)

// New checks opts and returns a Rotator.
func New(opts Options) (*Rotator, error) {
	switch {
	case opts.Namespace == "" || opts.SecretName == "":
		return nil, errors.New("certificate rotation: no Secret namespace or name")
	case opts.ConfigurationName == "":
		return nil, errors.New("certificate rotation: no ValidatingWebhookConfiguration name")
	case opts.Client == nil:
		return nil, errors.New("certificate rotation: no client")
	}
	if err := opts.Policy.Check(); err != nil {
		return nil, fmt.Errorf("certificate rotation: %w", err)
	}
	return &Rotator{opts: opts, EveryReplica: activation.NewEveryReplica(opts.Recheck, DefaultRecheck, opts.Now)}, nil
}

// GetCertificate serves the Secret's certificate (tls.Config.GetCertificate).
// Until the Secret holds one, the handshake fails: the API server could not
// verify anything yet, and the configuration stays at Ignore.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet (Secret " + r.opts.Namespace + "/" + r.opts.SecretName + ")")
}

// Start follows the Secret and the configuration and reconciles on each
// change, when a certificate is due, and every Recheck, until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	secrets := r.inform(ctx, namedListWatch(r.opts.Client.CoreV1().Secrets(r.opts.Namespace), r.opts.SecretName),
		&corev1.Secret{}, poke)
	vwcs := r.inform(ctx, namedListWatch(r.opts.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations(), r.opts.ConfigurationName),
		&admissionregistrationv1.ValidatingWebhookConfiguration{}, poke)
	if !cache.WaitForCacheSync(ctx.Done(), secrets.HasSynced, vwcs.HasSynced) {
		return nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastWaiting string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
		case <-timer.C:
		}
		next, waiting, err := r.reconcile(ctx, secrets.GetStore(), vwcs.GetStore())
		switch {
		case errors.Is(err, errLostRace):
			r.opts.Log.V(1).Info("certificate rotation: retrying", "reason", err.Error())
		case err != nil:
			r.opts.Log.Error(err, "certificate rotation", "secret", r.opts.Namespace+"/"+r.opts.SecretName)
		}
		if waiting != lastWaiting && waiting != "" {
			r.opts.Log.Info("certificate rotation waiting", "waiting", waiting)
		}
		lastWaiting = waiting
		wait := r.Recheck()
		if d := next.Sub(r.Now()); !next.IsZero() && d < wait {
			wait = max(d, 100*time.Millisecond)
		}
		if err != nil {
			wait = min(wait, 5*time.Second)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// listerWatcher is a typed client's List and Watch, e.g. SecretInterface's.
type listerWatcher[L runtime.Object] interface {
	List(ctx context.Context, o metav1.ListOptions) (L, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// namedListWatch lists and watches only the object called name, by a
// metadata.name field selector, so RBAC with resourceNames allows both.
func namedListWatch[L runtime.Object](api listerWatcher[L], name string) *cache.ListWatch {
	byName := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return api.List(ctx, byName(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return api.Watch(ctx, byName(o))
		},
	}
}

// inform runs an informer on lw that pokes on every change.
func (r *Rotator) inform(ctx context.Context, lw *cache.ListWatch, obj runtime.Object, poke func()) cache.SharedInformer {
	// As client-go's generated informers do: a client that cannot stream
	// lists (the fake clientset) gets a plain list and watch.
	inf := cache.NewSharedInformer(cache.ToListWatcherWithWatchListSemantics(lw, r.opts.Client), obj, 0)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	go inf.RunWithContext(ctx)
	return inf
}

// reconcile plans the Secret, writes it if needed, serves its certificate
// and injects its bundle. It returns when to look again, and what it waits on.
func (r *Rotator) reconcile(ctx context.Context, secrets, vwcs cache.Store) (time.Time, string, error) {
	vwc := storeGet[*admissionregistrationv1.ValidatingWebhookConfiguration](vwcs, r.opts.ConfigurationName)
	if vwc == nil {
		return time.Time{}, "ValidatingWebhookConfiguration " + r.opts.ConfigurationName + " does not exist", nil
	}
	var names []string
	for _, wh := range vwc.Webhooks {
		if activation.KindOf(wh) == "" {
			continue
		}
		n, err := activation.ServerName(wh.ClientConfig)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("entry %s: %w", wh.Name, err)
		}
		names = append(names, n)
	}
	secret := storeGet[*corev1.Secret](secrets, r.opts.Namespace+"/"+r.opts.SecretName)
	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	if b := LiveBundle(vwc); !bytes.Equal(b, r.live.Bundle) || r.live.Since.IsZero() {
		r.live = Live{Bundle: b, Since: r.Now()}
	}
	plan, err := PlanFor(data, Split(names), r.live, r.opts.Policy, r.Now())
	if err != nil {
		return time.Time{}, "", err
	}
	if plan.Changed() {
		if secret, err = r.write(ctx, secret, vwc, plan.Data); err != nil {
			return time.Time{}, "", err
		}
		r.opts.Log.Info("certificates renewed", "secret", r.opts.Namespace+"/"+r.opts.SecretName, "reasons", plan.Reasons)
		data = secret.Data
	}
	if err := r.serve(data); err != nil {
		return time.Time{}, "", err
	}
	if err := r.inject(ctx, vwc, data[KeyBundle]); err != nil {
		return time.Time{}, "", err
	}
	next, _ := Due(data, r.live, r.opts.Policy)
	return next, "", nil
}

// storeGet returns the object stored under key, or the zero T.
func storeGet[T any](s cache.Store, key string) T {
	var zero T
	obj, ok, err := s.GetByKey(key)
	if err != nil || !ok {
		return zero
	}
	t, _ := obj.(T)
	return t
}

// LiveBundle is the caBundle every entry runner-guard owns has, nil when they
// differ or none has one: a new CA is trusted only once all trust it.
func LiveBundle(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) []byte {
	var out []byte
	for _, wh := range vwc.Webhooks {
		cab := wh.ClientConfig.CABundle
		switch {
		case activation.KindOf(wh) == "":
			continue
		case len(cab) == 0, out != nil && !bytes.Equal(out, cab):
			return nil
		}
		out = cab
	}
	return out
}

// write creates or updates the Secret (owned by the configuration, so it goes
// with it), testing the resourceVersion it was planned from.
func (r *Rotator) write(ctx context.Context, old *corev1.Secret, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, data map[string][]byte) (*corev1.Secret, error) {
	secrets := r.opts.Client.CoreV1().Secrets(r.opts.Namespace)
	var (
		written *corev1.Secret
		err     error
		verb    string
		// lostRace tells the error of a write another writer made stale.
		lostRace func(error) bool
	)
	if old == nil {
		verb, lostRace = "create", apierrors.IsAlreadyExists
		written, err = secrets.Create(ctx, r.newSecret(vwc, data), metav1.CreateOptions{FieldManager: FieldManager})
	} else {
		verb, lostRace = "update", apierrors.IsConflict
		s := old.DeepCopy()
		s.Data = data
		written, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager})
	}
	switch {
	case lostRace(err):
		return nil, fmt.Errorf("%s Secret %s/%s: %w: %w", verb, r.opts.Namespace, r.opts.SecretName, errLostRace, err)
	case err != nil:
		return nil, fmt.Errorf("%s Secret %s/%s: %w", verb, r.opts.Namespace, r.opts.SecretName, err)
	}
	return written, nil
}

// newSecret is the Secret holding data, owned by the configuration.
func (r *Rotator) newSecret(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.opts.SecretName, Namespace: r.opts.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "runner-guard"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "admissionregistration.k8s.io/v1",
				Kind: "ValidatingWebhookConfiguration", Name: vwc.Name, UID: vwc.UID}},
		},
		Type: corev1.SecretTypeTLS,
		Data: data,
	}
}

// serve loads the Secret's certificate when it changed.
func (r *Rotator) serve(data map[string][]byte) error {
	if p := r.served.Load(); p != nil && bytes.Equal(*p, data[KeyCert]) {
		return nil
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("certificate Secret %s/%s: %w", r.opts.Namespace, r.opts.SecretName, err)
	}
	crt := bytes.Clone(data[KeyCert])
	r.serving.Store(&pair)
	r.served.Store(&crt)
	return nil
}

// inject sets every runner-guard entry's caBundle to bundle, with a JSON
// patch that tests the resourceVersion and each entry's name.
func (r *Rotator) inject(ctx context.Context, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) error {
	patch, err := InjectPatch(vwc, bundle)
	if err != nil || patch == nil {
		return err
	}
	_, err = r.opts.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, vwc.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		// The patch's test of the resourceVersion failed.
		return fmt.Errorf("inject the caBundle into ValidatingWebhookConfiguration %s: %w: %w", vwc.Name, errLostRace, err)
	}
	if err != nil {
		return fmt.Errorf("inject the caBundle into ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
	}
	return nil
}

// InjectPatch is the JSON patch setting bundle as the caBundle of each entry
// runner-guard owns that lacks it; nil when none does.
func InjectPatch(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{{Op: "test", Path: "/metadata/resourceVersion", Value: vwc.ResourceVersion}}
	for i, wh := range vwc.Webhooks {
		if activation.KindOf(wh) == "" || bytes.Equal(wh.ClientConfig.CABundle, bundle) {
			continue
		}
		ops = append(ops,
			op{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: wh.Name},
			op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: bundle})
	}
	if len(ops) == 1 {
		return nil, nil
	}
	return json.Marshal(ops)
}
