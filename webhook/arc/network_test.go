package arc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func TestResolveNetwork(t *testing.T) {
	ca, err := certs.NewCA(certs.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caPEM := string(ca.CertPEM())
	token := fixture.ARCSecret(ns, "creds", map[string]string{arc.KeyGitHubToken: "ghp_x"})
	proxyCreds := fixture.ARCSecret(ns, "proxy-creds", map[string]string{arc.KeyProxyUsername: "u", arc.KeyProxyPassword: "p@ss"})
	base := func() *fixture.EphemeralRunnerWrapper {
		return fixture.MakeEphemeralRunner(ns, "a").ConfigURL("https://ghes.example.com/acme").ConfigSecret("creds")
	}
	cases := map[string]struct {
		er      *fixture.EphemeralRunnerWrapper
		objs    []client.Object
		want    ghclient.Network
		wantKey string // a CredentialsError's key; "" for success
	}{
		"neither": {er: base()},
		"a CA bundle from a ConfigMap": {
			er:   base().GitHubServerTLS("ghes-ca", "ca.crt"),
			objs: []client.Object{configMap("ghes-ca", map[string]string{"ca.crt": caPEM})},
			want: ghclient.Network{CABundle: []byte(caPEM)},
		},
		"a proxy with credentials and noProxy": {
			er:   base().Proxy("http://proxy.corp:3128", "proxy-creds", "internal.corp", ".svc"),
			objs: []client.Object{proxyCreds},
			want: ghclient.Network{Proxy: &ghclient.Proxy{HTTPS: "http://u:p%40ss@proxy.corp:3128", NoProxy: []string{"internal.corp", ".svc"}}},
		},
		"a proxy without credentials": {
			er:   base().Proxy("http://proxy.corp:3128", ""),
			want: ghclient.Network{Proxy: &ghclient.Proxy{HTTPS: "http://proxy.corp:3128"}},
		},
		"the ConfigMap is missing": {
			er:      base().GitHubServerTLS("ghes-ca", "ca.crt"),
			wantKey: "spec.githubServerTLS.certificateFrom.configMapKeyRef",
		},
		"the ConfigMap lacks the key": {
			er:      base().GitHubServerTLS("ghes-ca", "ca.crt"),
			objs:    []client.Object{configMap("ghes-ca", map[string]string{"other": caPEM})},
			wantKey: "spec.githubServerTLS.certificateFrom.configMapKeyRef",
		},
		"the bundle holds no certificate": {
			er:      base().GitHubServerTLS("ghes-ca", "ca.crt"),
			objs:    []client.Object{configMap("ghes-ca", map[string]string{"ca.crt": "not PEM"})},
			wantKey: "spec.githubServerTLS.certificateFrom.configMapKeyRef",
		},
		"the proxy's Secret is missing": {
			er:      base().Proxy("http://proxy.corp:3128", "proxy-creds"),
			wantKey: "spec.proxy.https.credentialSecretRef",
		},
		"a proxy URL ghclient refuses": {
			er:      base().Proxy("ftp://proxy.corp", ""),
			wantKey: "spec.proxy",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := append([]client.Object{tc.er.Obj(), token}, tc.objs...)
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, objs...), CredentialsFromARC: true})
			run, err := r.Resolve(context.Background(), scaleSetPod(tc.er))
			if tc.wantKey != "" {
				var ce *arc.CredentialsError
				if !errors.As(err, &ce) || ce.Key != tc.wantKey {
					t.Fatalf("err = %v, want a CredentialsError for %s", err, tc.wantKey)
				}
				if strings.Contains(err.Error(), "p@ss") {
					t.Errorf("error repeats the proxy password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			got := run.Creds.Network
			if string(got.CABundle) != string(tc.want.CABundle) {
				t.Errorf("CABundle = %q, want %q", got.CABundle, tc.want.CABundle)
			}
			switch {
			case (got.Proxy == nil) != (tc.want.Proxy == nil):
				t.Errorf("Proxy = %+v, want %+v", got.Proxy, tc.want.Proxy)
			case got.Proxy != nil && (got.Proxy.HTTPS != tc.want.Proxy.HTTPS || got.Proxy.HTTP != "" ||
				strings.Join(got.Proxy.NoProxy, ",") != strings.Join(tc.want.Proxy.NoProxy, ",")):
				t.Errorf("Proxy = %+v, want %+v", got.Proxy, tc.want.Proxy)
			}
		})
	}
}

func deletingNamespace(name string) *corev1.Namespace {
	now := metav1.NewTime(time.Now())
	return &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating},
	}
}

// A namespace being deleted whose githubConfigSecret went first never keeps
// an idle runner's pod forever (docs/DESIGN.md, "A namespace being deleted").
func TestResolveSecretGoneInDeletingNamespace(t *testing.T) {
	idle := fixture.MakeEphemeralRunner(ns, "idle").ConfigSecret("gone")
	busy := fixture.MakeEphemeralRunner(ns, "busy").ConfigSecret("gone").JobID("job-1")
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	cases := map[string]struct {
		er         *fixture.EphemeralRunnerWrapper
		namespace  *corev1.Namespace
		static     bool
		forbidden  bool   // the Secret may not be read: the namespace's Role went first
		wantErr    string // a CredentialsError containing this; "" for none
		wantGone   bool   // CredentialsGone set: the flags' credentials ask
		wantDelete bool   // NamespaceDeleting set: the pod goes
	}{
		"namespace alive: the Secret is required":           {er: idle, namespace: live, wantErr: "not found"},
		"namespace unreadable: the Secret is required":      {er: idle, wantErr: "not found"},
		"deleting, static credentials: they ask":            {er: idle, namespace: deletingNamespace(ns), static: true, wantGone: true},
		"deleting, static credentials, busy: they ask":      {er: busy, namespace: deletingNamespace(ns), static: true, wantGone: true},
		"deleting, no static credentials, no job: pod goes": {er: idle, namespace: deletingNamespace(ns), wantDelete: true},
		"deleting, no static credentials, a job: refused":   {er: busy, namespace: deletingNamespace(ns), wantErr: "the pod stays until the job ends"},
		"deleting, the Role is gone: as if the Secret were": {er: idle, namespace: deletingNamespace(ns), forbidden: true, wantDelete: true},
		"alive, the Role is missing: refused":               {er: idle, namespace: live, forbidden: true, wantErr: "may not read Secrets"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{tc.er.Obj()}
			if tc.namespace != nil {
				objs = append(objs, tc.namespace)
			}
			var funcs *interceptor.Funcs
			if tc.forbidden {
				funcs = &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); ok {
						return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, errors.New("RBAC"))
					}
					return c.Get(ctx, key, obj, opts...)
				}}
			}
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(funcs, objs...), CredentialsFromARC: true, StaticCredentials: tc.static})
			run, err := r.Resolve(context.Background(), scaleSetPod(tc.er))
			if tc.wantErr != "" {
				var ce *arc.CredentialsError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want a CredentialsError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if run.Creds != nil || run.Removed != "" {
				t.Errorf("Creds = %v, Removed = %q; want neither", run.Creds, run.Removed)
			}
			if (run.CredentialsGone != "") != tc.wantGone || (run.NamespaceDeleting != "") != tc.wantDelete {
				t.Errorf("CredentialsGone = %q, NamespaceDeleting = %q; want set %t, %t", run.CredentialsGone, run.NamespaceDeleting, tc.wantGone, tc.wantDelete)
			}
		})
	}
}

// A namespace being deleted whose Roles (or ARC's object) went before its
// pods follows the same ladder as a missing Secret: static credentials ask
// GitHub from the pod's labels; without, the pod goes (docs/DESIGN.md, "A
// namespace being deleted").
func TestResolveObjectGoneInDeletingNamespace(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "idle").ConfigSecret("creds")
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	erForbidden := &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == arc.Kind {
			return apierrors.NewForbidden(schema.GroupResource{Group: arc.Group, Resource: "ephemeralrunners"}, key.Name, errors.New("RBAC"))
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	cases := map[string]struct {
		namespace  *corev1.Namespace
		funcs      *interceptor.Funcs
		keepER     bool
		static     bool
		wantDelete bool // NamespaceDeleting set; else the UnavailableError stands (fall back to the pod)
	}{
		"deleting, Role gone, no static credentials: pod goes":        {namespace: deletingNamespace(ns), funcs: erForbidden, keepER: true, wantDelete: true},
		"deleting, EphemeralRunner gone, no static credentials: goes": {namespace: deletingNamespace(ns), wantDelete: true},
		"deleting, Role gone, static credentials: they ask":           {namespace: deletingNamespace(ns), funcs: erForbidden, keepER: true, static: true},
		"alive, Role missing: unavailable as before":                  {namespace: live, funcs: erForbidden, keepER: true},
		"alive, EphemeralRunner gone: unavailable as before":          {namespace: live},
		"namespace unreadable: counts as alive":                       {funcs: erForbidden, keepER: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.keepER {
				objs = append(objs, er.Obj())
			}
			if tc.namespace != nil {
				objs = append(objs, tc.namespace)
			}
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(tc.funcs, objs...), CredentialsFromARC: true, StaticCredentials: tc.static})
			run, err := r.Resolve(context.Background(), scaleSetPod(er))
			if !tc.wantDelete {
				var un *arc.UnavailableError
				if !errors.As(err, &un) || run != nil {
					t.Fatalf("Resolve = %+v, %v; want an UnavailableError", run, err)
				}
				return
			}
			if err != nil || run == nil || run.NamespaceDeleting == "" || run.Creds != nil {
				t.Fatalf("Resolve = %+v, %v; want a runner whose NamespaceDeleting says why the pod goes", run, err)
			}
			if !strings.Contains(run.NamespaceDeleting, "being deleted") || run.EphemeralRunner.Name != "idle" {
				t.Errorf("NamespaceDeleting = %q for %s", run.NamespaceDeleting, run.EphemeralRunner)
			}
		})
	}
}
