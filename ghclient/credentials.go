package ghclient

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v4"
)

// Runner names one runner on GitHub and how to reach it.
type Runner struct {
	Scope Scope
	Name  string
	// ID is the known runner ID, 0 if unknown (a hint: IDHint.ID).
	ID int64
	// IDTrusted says ID comes from a source that cannot name another runner
	// (ARC's own object). An untrusted ID is used only once GitHub's record
	// for it carries Name (a GET by ID, or a listing already held).
	IDTrusted bool
	// Creds are the runner's own credentials; nil means the default
	// (flag-configured) ones.
	Creds *Credentials
}

// Credentials come from a Secret (ARC's githubConfigSecret). A Router keeps
// one client per Fingerprint (what the credentials are, not where they were
// read), so Secrets with the same contents share a client; Key and Version
// name the source in errors.
type Credentials struct {
	Key, Version string // e.g. "ns/secret" and its resourceVersion
	// BaseURL is the API base: https://api.github.com/ or https://HOST/api/v3/
	// (see APIBaseForConfigURL).
	BaseURL string
	Token   string
	// AppID is the GitHub App's numeric ID or its client ID ("Iv1...").
	AppID string
	// InstallationID 0 means: find the installation of each runner's owner.
	InstallationID int64
	PrivateKey     []byte
	// Network is the runner's own trust and proxy (ARC's
	// spec.githubServerTLS and spec.proxy); the Router's CA bundle is
	// trusted as well.
	Network Network
}

// CredentialField names one credential setting, whether it came from Config
// or from Credentials, so callers can point at their own flag or Secret key.
type CredentialField string

const (
	FieldBaseURL        CredentialField = "BaseURL"
	FieldToken          CredentialField = "Token"
	FieldAppID          CredentialField = "AppID"
	FieldInstallationID CredentialField = "InstallationID"
	FieldPrivateKey     CredentialField = "PrivateKey"
	FieldCABundle       CredentialField = "CABundle"
	FieldProxy          CredentialField = "Proxy"
)

// CredentialsError names the field of Credentials (identified by Key) that
// cannot be used.
type CredentialsError struct {
	Key   string
	Field CredentialField
	Err   error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("invalid GitHub credentials %q: %s: %v", e.Key, e.Field, e.Err)
}
func (e *CredentialsError) Unwrap() error { return e.Err }

// fieldError is what checkAuth returns; Config and Credentials render it as
// their own error type.
type fieldError struct {
	field CredentialField
	err   error
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }
func (e *fieldError) Unwrap() error { return e.err }

// authInput is what Config and Credentials both boil down to before checkAuth.
type authInput struct {
	baseURL   string
	allowHTTP bool
	token     string
	tokenFile string
	app       bool
	appID     string // numeric ID or client ID
	install   int64
	key       []byte
}

// auth is validated credentials.
type auth struct {
	base      string // with trailing slash
	cloud     bool   // github.com or *.ghe.com, not GitHub Enterprise Server
	token     string
	tokenFile string
	app       *appAuth
	net       network
}

type appAuth struct {
	issuer  string // JWT iss: numeric app ID or client ID
	id      int64  // numeric app ID, 0 for a client ID
	install int64  // 0: discover per owner
	key     *rsa.PrivateKey
}

// checkAuth is the one place credentials are validated: a token xor an App;
// an App needs an ID and a parseable PEM RSA key; the base URL must be an
// absolute https URL (http only when allowed) without user info.
func checkAuth(in authInput) (auth, *fieldError) {
	base, cloud, ferr := checkBaseURL(in.baseURL, in.allowHTTP)
	if ferr != nil {
		return auth{}, ferr
	}
	a := auth{base: base, cloud: cloud}
	hasToken := in.token != "" || in.tokenFile != ""
	switch {
	case !hasToken && !in.app:
		return auth{}, &fieldError{FieldToken, errors.New("missing GitHub credentials: set a token or a GitHub App")}
	case hasToken && in.app:
		return auth{}, &fieldError{FieldToken, errors.New("conflicting GitHub credentials: set only one of a token and a GitHub App")}
	case in.token != "" && in.tokenFile != "":
		return auth{}, &fieldError{FieldToken, errors.New("set only one of a token and a token file")}
	case hasToken:
		if strings.ContainsAny(in.token, "\r\n") {
			return auth{}, &fieldError{FieldToken, errors.New("must be a single line")}
		}
		a.token, a.tokenFile = in.token, in.tokenFile
		return a, nil
	}
	app, ferr := checkApp(in)
	if ferr != nil {
		return auth{}, ferr
	}
	a.app = app
	return a, nil
}

func checkApp(in authInput) (*appAuth, *fieldError) {
	app := &appAuth{issuer: strings.TrimSpace(in.appID), install: in.install}
	switch {
	case app.issuer == "":
		return nil, &fieldError{FieldAppID, errors.New("empty")}
	case strings.ContainsAny(app.issuer, " \t\r\n\"\\"):
		return nil, &fieldError{FieldAppID, errors.New("must be a numeric app ID or a client ID")}
	case in.install < 0:
		return nil, &fieldError{FieldInstallationID, fmt.Errorf("must not be negative, got %d", in.install)}
	case len(in.key) == 0:
		return nil, &fieldError{FieldPrivateKey, errors.New("empty")}
	}
	if id, err := strconv.ParseInt(app.issuer, 10, 64); err == nil {
		if id <= 0 {
			return nil, &fieldError{FieldAppID, fmt.Errorf("must be positive, got %d", id)}
		}
		app.id = id
	} else if app.issuer[0] >= '0' && app.issuer[0] <= '9' {
		// Client IDs start with a letter (Iv1., Iv23...); this is a mistyped number.
		return nil, &fieldError{FieldAppID, fmt.Errorf("%q is neither a numeric app ID nor a client ID", app.issuer)}
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(in.key)
	if err != nil {
		return nil, &fieldError{FieldPrivateKey, fmt.Errorf("not a PEM-encoded RSA private key: %w", err)}
	}
	app.key = key
	return app, nil
}

// checkBaseURL normalizes an API base URL (adding the trailing slash) and
// reports whether it is GitHub's cloud (github.com or GHE.com) rather than
// GitHub Enterprise Server. Errors never repeat user info.
func checkBaseURL(raw string, allowHTTP bool) (string, bool, *fieldError) {
	if raw == "" {
		return DefaultBaseURL, true, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, &fieldError{FieldBaseURL, fmt.Errorf("%q is not a URL", RedactURL(raw))}
	}
	switch {
	case u.User != nil:
		return "", false, &fieldError{FieldBaseURL, fmt.Errorf("%q: must not carry user info (credentials belong in a token or App key)", RedactURL(raw))}
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", false, &fieldError{FieldBaseURL, fmt.Errorf("%q: want an absolute https URL such as %s or https://HOST/api/v3/", raw, DefaultBaseURL)}
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", false, &fieldError{FieldBaseURL, fmt.Errorf("%q: must not carry a query or fragment", raw)}
	case u.Scheme == "http" && !allowHTTP:
		return "", false, &fieldError{FieldBaseURL, fmt.Errorf("%q: plain http sends the token unencrypted; use https, or allow http explicitly on a trusted network", raw)}
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), isCloudAPIHost(u.Hostname()), nil
}

// isCloudAPIHost: api.github.com and api.SUBDOMAIN.ghe.com are GitHub's own
// service with its documented rate-limit headers; anything else is GHES.
func isCloudAPIHost(host string) bool {
	host = strings.ToLower(host)
	return host == "api.github.com" || strings.HasPrefix(host, "api.") && strings.HasSuffix(host, ".ghe.com")
}

// RedactURL drops user info (user:password@) from a URL for messages and
// logs; when raw does not parse, it cuts everything between "//" and the last
// "@" before the path.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil {
			return raw
		}
		u.User = nil
		return u.String()
	}
	rest, ok := strings.CutPrefix(raw, "//")
	prefix := "//"
	if !ok {
		i := strings.Index(raw, "://")
		if i < 0 {
			return raw
		}
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return prefix + rest[at+1:]
}

// APIBaseForConfigURL applies ARC's rule to a githubConfigUrl: github.com,
// www.github.com and *.ghe.com are served by https://api.HOST/; any other host
// is GitHub Enterprise Server at SCHEME://HOST/api/v3/. The path names the
// scope: /ORG, /ORG/REPO or /enterprises/ENT.
func APIBaseForConfigURL(configURL string) (string, Scope, error) {
	u, err := url.Parse(strings.TrimSpace(configURL))
	if err != nil {
		return "", Scope{}, fmt.Errorf("GitHub config URL %q is not a URL", RedactURL(configURL))
	}
	switch {
	case u.User != nil:
		return "", Scope{}, fmt.Errorf("GitHub config URL %q must not carry user info", RedactURL(configURL))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", Scope{}, fmt.Errorf("GitHub config URL %q: want https://HOST/ORG, https://HOST/ORG/REPO or https://HOST/enterprises/ENT", configURL)
	case u.RawQuery != "" || u.Fragment != "":
		return "", Scope{}, fmt.Errorf("GitHub config URL %q must not carry a query or fragment", configURL)
	}
	scope, err := scopeFromConfigPath(u.Path)
	if err != nil {
		return "", Scope{}, fmt.Errorf("GitHub config URL %q: %w", configURL, err)
	}
	host := strings.ToLower(u.Host)
	switch {
	case host == "github.com" || host == "www.github.com":
		return DefaultBaseURL, scope, nil
	case strings.HasSuffix(u.Hostname(), ".ghe.com"):
		return "https://api." + host + "/", scope, nil
	}
	return u.Scheme + "://" + host + "/api/v3/", scope, nil
}

func scopeFromConfigPath(path string) (Scope, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "":
		return Scope{}, errors.New("no organization, repository or enterprise in the path")
	case len(parts) == 1 && strings.EqualFold(parts[0], "enterprises"):
		return Scope{}, errors.New("no enterprise after /enterprises/")
	case len(parts) == 1:
		return OrgScope(parts[0])
	case len(parts) == 2 && strings.EqualFold(parts[0], "enterprises"):
		return EnterpriseScope(parts[1])
	case len(parts) == 2:
		return RepoScope(parts[0] + "/" + parts[1])
	}
	return Scope{}, fmt.Errorf("path %q has %d segments: want /ORG, /ORG/REPO or /enterprises/ENT", path, len(parts))
}
