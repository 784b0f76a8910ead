package arc_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// rsaPEM returns a fresh PKCS#1 PEM key, as GitHub hands out for Apps.
func rsaPEM(t *testing.T) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

func TestResolveARCCredentials(t *testing.T) {
	key := rsaPEM(t)
	app := map[string]string{
		arc.KeyGitHubAppID:             "123",
		arc.KeyGitHubAppInstallationID: "456",
		arc.KeyGitHubAppPrivateKey:     key,
	}
	token := map[string]string{arc.KeyGitHubToken: "ghp_x"}
	tokenOnDotCom := ghclient.Credentials{BaseURL: "https://api.github.com/", Token: "ghp_x"}
	cases := map[string]struct {
		configURL string
		data      map[string]string
		want      ghclient.Credentials // Key and Version are checked separately
	}{
		"token on github.com": {
			configURL: "https://github.com/acme",
			data:      token,
			want:      tokenOnDotCom,
		},
		"token from a file, with a newline": {
			configURL: "https://github.com/acme/app",
			data:      map[string]string{arc.KeyGitHubToken: "ghp_x\n"},
			want:      tokenOnDotCom,
		},
		"token for an enterprise": {
			configURL: "https://github.com/enterprises/big",
			data:      token,
			want:      tokenOnDotCom,
		},
		"token and an incomplete App: ARC uses the token": {
			configURL: "https://github.com/acme",
			data:      map[string]string{arc.KeyGitHubToken: "ghp_x", arc.KeyGitHubAppID: "123"},
			want:      tokenOnDotCom,
		},
		"App on GHES": {
			configURL: "https://ghes.example.com/acme/app",
			data:      app,
			want:      ghclient.Credentials{BaseURL: "https://ghes.example.com/api/v3/", AppID: "123", InstallationID: 456, PrivateKey: []byte(key)},
		},
		"App on GHE.com with a client ID": {
			configURL: "https://acme.ghe.com/acme",
			data:      map[string]string{arc.KeyGitHubAppID: "Iv1.abc", arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: key},
			want:      ghclient.Credentials{BaseURL: "https://api.acme.ghe.com/", AppID: "Iv1.abc", InstallationID: 456, PrivateKey: []byte(key)},
		},
		"App without an installation ID: found per owner": {
			configURL: "https://github.com/acme",
			data:      map[string]string{arc.KeyGitHubAppID: "123", arc.KeyGitHubAppPrivateKey: key},
			want:      ghclient.Credentials{BaseURL: "https://api.github.com/", AppID: "123", PrivateKey: []byte(key)},
		},
		"plain-http GHES: the caller's Router decides": {
			configURL: "http://ghes.internal/acme",
			data:      token,
			want:      ghclient.Credentials{BaseURL: "http://ghes.internal/api/v3/", Token: "ghp_x"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			er := fixture.MakeEphemeralRunner(ns, "a").ConfigURL(tc.configURL).ConfigSecret("arc-creds")
			c := newFakeClient(nil, er.Obj(), fixture.ARCSecret(ns, "arc-creds", tc.data))
			var stored corev1.Secret
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "arc-creds"}, &stored); err != nil {
				t.Fatal(err)
			}
			run, err := arc.NewResolver(arc.Options{Reader: c, CredentialsFromARC: true}).Resolve(context.Background(), scaleSetPod(er))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			got := run.Creds
			if got == nil {
				t.Fatal("Creds = nil in ARC credentials mode")
			}
			if got.Key != ns+"/arc-creds" || got.Version != stored.ResourceVersion || got.Version == "" {
				t.Errorf("Key, Version = %q, %q; want %q, %q", got.Key, got.Version, ns+"/arc-creds", stored.ResourceVersion)
			}
			if got.BaseURL != tc.want.BaseURL || got.Token != tc.want.Token || got.AppID != tc.want.AppID ||
				got.InstallationID != tc.want.InstallationID || string(got.PrivateKey) != string(tc.want.PrivateKey) {
				t.Errorf("Creds = %+v, want %+v", redact(got), redact(&tc.want))
			}
			if _, err := newRouter(t).ClientFor(got); err != nil {
				t.Errorf("ghclient rejects the credentials Resolve returned: %v", err)
			}
		})
	}
}

func TestResolveARCCredentialsErrors(t *testing.T) {
	key := rsaPEM(t)
	secretForbidden := &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, k.Name, errors.New("RBAC: no"))
		}
		return c.Get(ctx, k, obj, opts...)
	}}
	cases := map[string]struct {
		er      *fixture.EphemeralRunnerWrapper
		data    map[string]string // nil: no Secret
		funcs   *interceptor.Funcs
		wantKey string
		wantIn  []string
		wantIs  error
		ghErr   bool // wraps a *ghclient.CredentialsError
	}{
		"missing Secret": {
			wantIn: []string{"runners/arc-creds", "not found", "EphemeralRunner runners/a"},
		},
		"Secret not readable": {
			data: map[string]string{arc.KeyGitHubToken: "x"}, funcs: secretForbidden,
			wantIn: []string{"runners/arc-creds", "Role"},
		},
		"empty Secret": {
			data:   map[string]string{"other": "x"},
			wantIn: []string{arc.KeyGitHubToken, arc.KeyGitHubAppPrivateKey},
		},
		"no githubConfigSecret": {
			er: fixture.MakeEphemeralRunner(ns, "a").ConfigSecret(""), wantIn: []string{"spec.githubConfigSecret is empty"},
		},
		"credentials in a vault": {
			er:     fixture.MakeEphemeralRunner(ns, "a").ConfigSecret("arc-creds").Field("azure_key_vault", "spec", "vaultConfig", "type"),
			data:   map[string]string{arc.KeyGitHubToken: "x"},
			wantIn: []string{"vault", "azure_key_vault"},
		},
		"malformed private key": {
			data:    map[string]string{arc.KeyGitHubAppID: "123", arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: "not a key"},
			wantKey: arc.KeyGitHubAppPrivateKey, wantIn: []string{"PEM"}, ghErr: true,
		},
		"malformed installation ID": {
			data:    map[string]string{arc.KeyGitHubAppID: "123", arc.KeyGitHubAppInstallationID: "four", arc.KeyGitHubAppPrivateKey: key},
			wantKey: arc.KeyGitHubAppInstallationID, wantIn: []string{`"four"`},
		},
		"malformed app ID": {
			data:    map[string]string{arc.KeyGitHubAppID: "12x", arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: key},
			wantKey: arc.KeyGitHubAppID, ghErr: true,
		},
		"App without an ID": {
			data:    map[string]string{arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: key},
			wantKey: arc.KeyGitHubAppID,
		},
		"App without a key": {
			data:    map[string]string{arc.KeyGitHubAppID: "123", arc.KeyGitHubAppInstallationID: "456"},
			wantKey: arc.KeyGitHubAppPrivateKey,
		},
		"token on two lines": {
			data:    map[string]string{arc.KeyGitHubToken: "ghp_a\nghp_b"},
			wantKey: arc.KeyGitHubToken, ghErr: true,
		},
		"token and a complete App": {
			data:    map[string]string{arc.KeyGitHubToken: "x", arc.KeyGitHubAppID: "123", arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: key},
			wantKey: arc.KeyGitHubToken, wantIn: []string{"only one"},
		},
		"enterprise URL with App credentials": {
			er:      fixture.MakeEphemeralRunner(ns, "a").ConfigURL("https://github.com/enterprises/big").ConfigSecret("arc-creds"),
			data:    map[string]string{arc.KeyGitHubAppID: "123", arc.KeyGitHubAppInstallationID: "456", arc.KeyGitHubAppPrivateKey: key},
			wantKey: "spec.githubConfigUrl", wantIn: []string{"https://github.com/enterprises/big", "GitHub Apps cannot manage enterprise runners"},
			wantIs: ghclient.ErrAppEnterpriseScope,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			er := tc.er
			if er == nil {
				er = fixture.MakeEphemeralRunner(ns, "a").ConfigSecret("arc-creds")
			}
			objs := []client.Object{er.Obj()}
			if tc.data != nil {
				objs = append(objs, fixture.ARCSecret(ns, "arc-creds", tc.data))
			}
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(tc.funcs, objs...), CredentialsFromARC: true})
			run, err := r.Resolve(context.Background(), scaleSetPod(er))
			var ce *arc.CredentialsError
			if !errors.As(err, &ce) {
				t.Fatalf("Resolve = %+v, %v; want a *CredentialsError", run, err)
			}
			if ce.Key != tc.wantKey {
				t.Errorf("Key = %q, want %q (%v)", ce.Key, tc.wantKey, err)
			}
			// The runner stays ARC's, without credentials: the caller must not
			// take its scope from the pod's labels.
			if run == nil || run.Creds != nil || run.Scope.Name == "" || run.Name != "a" {
				t.Errorf("Resolve runner = %+v; want ARC's runner (scope from githubConfigUrl) without credentials", run)
			}
			msg := err.Error()
			for _, s := range append([]string{"runners/a", tc.wantKey}, tc.wantIn...) {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			if strings.Contains(msg, key[40:80]) {
				t.Errorf("error leaks the private key: %q", msg)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v is not %v", err, tc.wantIs)
			}
			var ge *ghclient.CredentialsError
			if tc.ghErr != errors.As(err, &ge) {
				t.Errorf("wraps a *ghclient.CredentialsError: %v, want %v (%v)", !tc.ghErr, tc.ghErr, err)
			}
		})
	}
}

// A Secret fixed after a bad version is read again: failures are not cached.
func TestResolveARCCredentialsSecretFixed(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a").ConfigSecret("arc-creds")
	secret := fixture.ARCSecret(ns, "arc-creds", map[string]string{arc.KeyGitHubToken: "a\nb"})
	c := newFakeClient(nil, er.Obj(), secret)
	r := arc.NewResolver(arc.Options{Reader: c, CredentialsFromARC: true})
	if _, err := r.Resolve(context.Background(), scaleSetPod(er)); err == nil {
		t.Fatal("Resolve accepted a two-line token")
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	before := secret.ResourceVersion
	secret.Data[arc.KeyGitHubToken] = []byte("ghp_fixed")
	if err := c.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	run, err := r.Resolve(context.Background(), scaleSetPod(er))
	if err != nil {
		t.Fatalf("Resolve after the fix: %v", err)
	}
	if run.Creds.Token != "ghp_fixed" || run.Creds.Version == before {
		t.Errorf("Creds = %+v, want the fixed token at a new version (old %s)", redact(run.Creds), before)
	}
}

// ARC tearing a scale set down may delete the Secret before the EphemeralRunners:
// a removed runner needs no credentials, so their absence is no error.
func TestResolveARCCredentialsNotNeededWhenRemoved(t *testing.T) {
	cases := map[string]*fixture.EphemeralRunnerWrapper{
		"registration finalizer gone": fixture.MakeEphemeralRunner(ns, "a").ConfigSecret("gone").Deleting().Registered(false),
		"phase Succeeded":             fixture.MakeEphemeralRunner(ns, "a").ConfigSecret("gone").Phase("Succeeded"),
	}
	for name, er := range cases {
		t.Run(name, func(t *testing.T) {
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, er.Obj()), CredentialsFromARC: true})
			run, err := r.Resolve(context.Background(), scaleSetPod(er))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if run.Removed == "" || run.Creds != nil {
				t.Errorf("Removed = %q, Creds = %v; want removed without credentials", run.Removed, run.Creds)
			}
		})
	}
}

func TestKeyForField(t *testing.T) {
	cases := map[ghclient.CredentialField]string{
		ghclient.FieldToken:          arc.KeyGitHubToken,
		ghclient.FieldAppID:          arc.KeyGitHubAppID,
		ghclient.FieldInstallationID: arc.KeyGitHubAppInstallationID,
		ghclient.FieldPrivateKey:     arc.KeyGitHubAppPrivateKey,
		ghclient.FieldBaseURL:        "spec.githubConfigUrl",
		ghclient.FieldCABundle:       "spec.githubServerTLS.certificateFrom.configMapKeyRef",
		ghclient.FieldProxy:          "spec.proxy",
	}
	for f, want := range cases {
		if got := arc.KeyForField(f); got != want {
			t.Errorf("KeyForField(%s) = %q, want %q", f, got, want)
		}
	}
}

func newRouter(t *testing.T) *ghclient.Router {
	t.Helper()
	r, err := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// redact keeps private keys out of test output.
func redact(c *ghclient.Credentials) ghclient.Credentials {
	out := *c
	if len(out.PrivateKey) > 0 {
		out.PrivateKey = []byte("<key>")
	}
	return out
}
