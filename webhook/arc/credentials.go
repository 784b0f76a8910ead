package arc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/ghclient"
)

// The keys of ARC's githubConfigSecret
// (apis/actions.github.com/v1alpha1/appconfig/appconfig.go).
const (
	KeyGitHubToken             = "github_token"
	KeyGitHubAppID             = "github_app_id"
	KeyGitHubAppInstallationID = "github_app_installation_id"
	KeyGitHubAppPrivateKey     = "github_app_private_key"
)

// fieldConfigURL is what a BaseURL problem points at: the API base comes from
// the EphemeralRunner's githubConfigUrl, not from the Secret.
const fieldConfigURL = "spec.githubConfigUrl"

// The EphemeralRunner fields behind a client's trust and proxy.
const (
	fieldServerTLS = "spec.githubServerTLS.certificateFrom.configMapKeyRef"
	fieldProxy     = "spec.proxy"
)

// The keys of a proxy's credentialSecretRef (ARC's ProxyConfig).
const (
	KeyProxyUsername = "username"
	KeyProxyPassword = "password"
)

// KeyForField names the ARC key (or EphemeralRunner field) behind a
// ghclient.CredentialField, so errors from a ghclient.Router can point at what
// the user wrote.
func KeyForField(f ghclient.CredentialField) string {
	switch f {
	case ghclient.FieldToken:
		return KeyGitHubToken
	case ghclient.FieldAppID:
		return KeyGitHubAppID
	case ghclient.FieldInstallationID:
		return KeyGitHubAppInstallationID
	case ghclient.FieldPrivateKey:
		return KeyGitHubAppPrivateKey
	case ghclient.FieldBaseURL:
		return fieldConfigURL
	case ghclient.FieldCABundle:
		return fieldServerTLS
	case ghclient.FieldProxy:
		return fieldProxy
	}
	return string(f)
}

// credentials reads the EphemeralRunner's githubConfigSecret in its namespace
// and turns ARC's keys into ghclient.Credentials, checked by ghclient.
func (r *Resolver) credentials(ctx context.Context, er *ephemeralRunner, base string, scope ghclient.Scope) (*ghclient.Credentials, error) {
	secretKey := types.NamespacedName{Namespace: er.key.Namespace, Name: er.configSecret}
	fail := func(key string, err error) error {
		return &CredentialsError{EphemeralRunner: er.key, Secret: secretKey, Key: key, Err: err}
	}
	switch {
	case er.vaultType != "":
		// ARC then reads githubConfigSecret from the vault, which runner-guard cannot.
		return nil, fail("", fmt.Errorf("ARC reads this runner's credentials from a vault (spec.vaultConfig.type %q); runner-guard reads only Kubernetes Secrets: use static credentials for this namespace", er.vaultType))
	case er.configSecret == "":
		return nil, fail("", errors.New("spec.githubConfigSecret is empty"))
	}

	var secret corev1.Secret
	if err := r.reader.Get(ctx, secretKey, &secret); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, &secretGoneError{&CredentialsError{EphemeralRunner: er.key, Secret: secretKey, Err: err}}
		case apierrors.IsForbidden(err):
			// A namespace being deleted loses its Roles early: Resolve
			// treats the Secret as gone then.
			return nil, &secretGoneError{&CredentialsError{EphemeralRunner: er.key, Secret: secretKey,
				Err: fmt.Errorf("runner-guard may not read Secrets in namespace %q (grant get on secrets there with a Role and RoleBinding): %w", secretKey.Namespace, err)}}
		}
		return nil, fmt.Errorf("reading Secret %s of EphemeralRunner %s: %w", secretKey, er.key, err)
	}

	creds, key, err := credentialsFromSecret(&secret)
	if err != nil {
		return nil, fail(key, err)
	}
	creds.BaseURL = base
	if creds.Network, err = r.network(ctx, er); err != nil {
		var ce *CredentialsError
		if errors.As(err, &ce) {
			ce.Secret = secretKey
			return nil, ce
		}
		return nil, err
	}
	if scope.Kind == ghclient.ScopeEnterprise && creds.Token == "" {
		return nil, fail(fieldConfigURL, fmt.Errorf("%s is an enterprise URL and the Secret holds GitHub App credentials: %w", er.configURL, ghclient.ErrAppEnterpriseScope))
	}
	// ghclient is the one place credentials are checked; its checker caches
	// the verdict by the Secret's contents, so a Secret is parsed once.
	if err := r.check(creds); err != nil {
		var ce *ghclient.CredentialsError
		if errors.As(err, &ce) {
			return nil, fail(KeyForField(ce.Field), err)
		}
		return nil, fail("", err)
	}
	return creds, nil
}

// check validates creds as a client for them would be built, without
// building one (no budget) or sending a request.
func (r *Resolver) check(creds *ghclient.Credentials) error {
	return r.checker.Check(creds)
}

// CredentialsFromSecret reads a githubConfigSecret as ARC does
// (credentialsFromSecret), for a reader without its EphemeralRunner (the
// re-run controller's, after the runner is gone); an error names the key at
// fault, if one is.
func CredentialsFromSecret(s *corev1.Secret) (*ghclient.Credentials, error) {
	creds, key, err := credentialsFromSecret(s)
	if err != nil && key != "" {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return creds, err
}

// credentialsFromSecret follows ARC's rules: a token, or an App (ID, private
// key and, for ARC, an installation ID); both complete is an error. On error it
// also names the key at fault. Values are trimmed: Secrets made from files end
// in a newline.
func credentialsFromSecret(s *corev1.Secret) (*ghclient.Credentials, string, error) {
	get := func(k string) string { return strings.TrimSpace(string(s.Data[k])) }
	creds := &ghclient.Credentials{Key: s.Namespace + "/" + s.Name, Version: s.ResourceVersion}
	token, appID, install := get(KeyGitHubToken), get(KeyGitHubAppID), get(KeyGitHubAppInstallationID)
	key := s.Data[KeyGitHubAppPrivateKey]
	hasApp := appID != "" || install != "" || len(key) > 0
	completeApp := appID != "" && install != "" && len(key) > 0
	switch {
	case token != "" && completeApp:
		return nil, KeyGitHubToken, fmt.Errorf("both %s and GitHub App keys are set; set only one", KeyGitHubToken)
	case token != "":
		// ARC uses the token and ignores an incomplete App.
		creds.Token = token
		return creds, "", nil
	case !hasApp:
		return nil, "", fmt.Errorf("holds none of %s, or %s, %s and %s", KeyGitHubToken, KeyGitHubAppID, KeyGitHubAppInstallationID, KeyGitHubAppPrivateKey)
	case appID == "":
		return nil, KeyGitHubAppID, errors.New("missing: a GitHub App needs its app ID or client ID")
	case len(key) == 0:
		return nil, KeyGitHubAppPrivateKey, errors.New("missing: a GitHub App needs its PEM private key")
	}
	creds.AppID = appID
	if install != "" {
		id, err := strconv.ParseInt(install, 10, 64)
		if err != nil || id <= 0 {
			return nil, KeyGitHubAppInstallationID, fmt.Errorf("%q is not a positive integer", install)
		}
		creds.InstallationID = id
	}
	creds.PrivateKey = key
	return creds, "", nil
}

// secretGoneError: the githubConfigSecret does not exist, or may not be read
// (a namespace being deleted loses its Roles and RoleBindings, often before
// its pods). Resolve decides what that means when the namespace is being
// deleted.
type secretGoneError struct{ *CredentialsError }

func (e *secretGoneError) Unwrap() error { return e.CredentialsError }

// network reads the EphemeralRunner's spec.githubServerTLS (a PEM bundle in a
// ConfigMap key) and spec.proxy (URLs, a credentials Secret with username and
// password, noProxy), as ARC's own client does; ghclient validates them.
func (r *Resolver) network(ctx context.Context, er *ephemeralRunner) (ghclient.Network, error) {
	var n ghclient.Network
	fail := func(field string, err error) error {
		return &CredentialsError{EphemeralRunner: er.key, Key: field, Err: err}
	}
	if er.caRef.name != "" {
		var cm corev1.ConfigMap
		key := types.NamespacedName{Namespace: er.key.Namespace, Name: er.caRef.name}
		if err := r.reader.Get(ctx, key, &cm); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				return n, fail(fieldServerTLS, fmt.Errorf("reading ConfigMap %s: %w", key, err))
			}
			return n, fmt.Errorf("reading ConfigMap %s of EphemeralRunner %s: %w", key, er.key, err)
		}
		pem, ok := cm.Data[er.caRef.key]
		if !ok {
			return n, fail(fieldServerTLS, fmt.Errorf("ConfigMap %s has no key %q", key, er.caRef.key))
		}
		n.CABundle = []byte(pem)
	}
	if er.proxy == nil {
		return n, nil
	}
	p := &ghclient.Proxy{NoProxy: er.proxy.noProxy}
	for _, srv := range []struct {
		scheme string
		spec   proxyServer
		dst    *string
	}{{"http", er.proxy.http, &p.HTTP}, {"https", er.proxy.https, &p.HTTPS}} {
		if srv.spec.url == "" {
			continue
		}
		u, err := url.Parse(srv.spec.url)
		if err != nil {
			return n, fail(fieldProxy+"."+srv.scheme+".url", fmt.Errorf("%q is not a URL", ghclient.RedactURL(srv.spec.url)))
		}
		if ref := srv.spec.credentialSecretRef; ref != "" {
			var s corev1.Secret
			key := types.NamespacedName{Namespace: er.key.Namespace, Name: ref}
			if err := r.reader.Get(ctx, key, &s); err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
					return n, fail(fieldProxy+"."+srv.scheme+".credentialSecretRef", fmt.Errorf("reading Secret %s: %w", key, err))
				}
				return n, fmt.Errorf("reading Secret %s of EphemeralRunner %s: %w", key, er.key, err)
			}
			u.User = url.UserPassword(string(s.Data[KeyProxyUsername]), string(s.Data[KeyProxyPassword]))
		}
		*srv.dst = u.String()
	}
	n.Proxy = p
	return n, nil
}
