package arc_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// readKinds records the kinds of the objects a fake client was asked for.
type readKinds struct {
	mu    sync.Mutex
	kinds []string
}

func (r *readKinds) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		kind := "?"
		switch o := obj.(type) {
		case *corev1.Secret:
			kind = "Secret"
		case *corev1.ConfigMap:
			kind = "ConfigMap"
		case *corev1.Namespace:
			kind = "Namespace"
		case *unstructured.Unstructured:
			kind = o.GetKind()
		}
		r.mu.Lock()
		r.kinds = append(r.kinds, kind)
		r.mu.Unlock()
		return c.Get(ctx, key, obj, opts...)
	}}
}

func (r *readKinds) read(kind string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// TestResolveIdentityWithoutCredentials pins what --events-only relies on:
// without CredentialsFromARC (what it builds, whatever credentialsMode
// says) Resolve names a pod's runner, its scope and ID, and checks that ARC's
// object controls the pod, from that object alone. It reads no Secret,
// ConfigMap or Namespace, so the events Deployment's ServiceAccount is
// granted none. With CredentialsFromARC the same pod's resolution reads its
// githubConfigSecret (which the webhook, not the endpoint, needs).
func TestResolveIdentityWithoutCredentials(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "set-x1").ConfigURL("https://ghes.example.com/acme").ConfigSecret("arc-creds").
		RunnerID(42).RunnerName("set-x1").GitHubServerTLS("corp-ca", "ca.crt").Proxy("http://proxy:3128", "proxy-login")
	secret := fixture.ARCSecret(ns, "arc-creds", map[string]string{arc.KeyGitHubToken: "ghp_x"})
	legacy := legacyRunner("legacy-1", "uid-legacy", "acme")
	legacyOwner := metav1.OwnerReference{APIVersion: arc.LegacyGroup + "/" + arc.LegacyVersion, Kind: arc.LegacyKind, Name: "legacy-1", UID: "uid-legacy", Controller: ptr.To(true)}

	t.Run("scale-set runner", func(t *testing.T) {
		reads := &readKinds{}
		c := newFakeClient(reads.funcs(), er.Obj(), secret)
		run, err := arc.NewResolver(arc.Options{Reader: c}).Resolve(context.Background(), scaleSetPod(er))
		if err != nil || run == nil {
			t.Fatalf("Resolve = %+v, %v", run, err)
		}
		if run.Name != "set-x1" || run.Scope != fixture.Org("acme") || run.ID != 42 || !run.IDTrusted || run.Kind != arc.Kind || run.Creds != nil {
			t.Errorf("runner %+v; want set-x1 of org acme, ID 42, no credentials", run)
		}
		for _, kind := range []string{"Secret", "ConfigMap", "Namespace"} {
			if reads.read(kind) {
				t.Errorf("Resolve read a %s (reads %v): the events endpoint may read none", kind, reads.kinds)
			}
		}
	})
	t.Run("legacy runner", func(t *testing.T) {
		reads := &readKinds{}
		c := newFakeClient(reads.funcs(), legacy)
		run, err := arc.NewResolver(arc.Options{Reader: c}).Resolve(context.Background(), fixture.MakeLegacyRunnerPod(ns, "legacy-1").Org("other-org").Owner(legacyOwner).Obj())
		if err != nil || run == nil || run.Scope != fixture.Org("acme") || run.Name != "legacy-1" {
			t.Fatalf("Resolve = %+v, %v; want legacy-1 of org acme (the Runner's, not the pod's env)", run, err)
		}
		if reads.read("Secret") || reads.read("Namespace") {
			t.Errorf("Resolve read %v", reads.kinds)
		}
	})
	t.Run("a pod its EphemeralRunner does not control", func(t *testing.T) {
		other := fixture.MakeEphemeralRunner(ns, "set-x1").ConfigURL("https://github.com/acme").UID("another-uid")
		pod := scaleSetPod(er) // references er's UID
		reads := &readKinds{}
		_, err := arc.NewResolver(arc.Options{Reader: newFakeClient(reads.funcs(), other.Obj(), secret)}).Resolve(context.Background(), pod)
		var notOwner *arc.NotOwnerError
		if !errors.As(err, &notOwner) {
			t.Fatalf("Resolve error %v, want a NotOwnerError", err)
		}
		if reads.read("Secret") {
			t.Errorf("Resolve read %v", reads.kinds)
		}
	})
	t.Run("credentials mode arc reads the Secret", func(t *testing.T) {
		reads := &readKinds{}
		plain := fixture.MakeEphemeralRunner(ns, "set-x2").ConfigURL("https://github.com/acme").ConfigSecret("arc-creds").RunnerID(7)
		c := newFakeClient(reads.funcs(), plain.Obj(), secret)
		run, err := arc.NewResolver(arc.Options{Reader: c, CredentialsFromARC: true}).Resolve(context.Background(), scaleSetPod(plain))
		if err != nil || run.Creds == nil || !reads.read("Secret") {
			t.Fatalf("Resolve = %+v, %v, reads %v; want the runner's credentials from its Secret", run, err, reads.kinds)
		}
		if run.Scope != fixture.Org("acme") || run.Name != "set-x2" {
			t.Errorf("runner %+v: the identity differs with credentials", run)
		}
	})
}
