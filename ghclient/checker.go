package ghclient

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
)

// checkedTTL is how long a verdict on credentials is kept; the Fingerprint
// covers their contents, so a changed Secret is checked anew at once.
const checkedTTL = 10 * time.Minute

// CredentialsChecker validates Credentials by the rules a Router builds
// clients by, remembering the verdict per Fingerprint (an LRU of
// DefaultMaxClients). It builds no client and no budget and sends nothing:
// a tenant rewriting its Secret in a loop costs a bounded cache, not a
// budget per version. It is safe for concurrent use.
type CredentialsChecker struct {
	allowHTTP bool
	verdicts  *cache.LRUExpireCache // Fingerprint -> error (nil: valid)
}

// NewCredentialsChecker returns a checker; allowHTTP permits plain http://
// base URLs, as RouterConfig.AllowHTTP.
func NewCredentialsChecker(allowHTTP bool) *CredentialsChecker {
	return &CredentialsChecker{allowHTTP: allowHTTP, verdicts: cache.NewLRUExpireCache(DefaultMaxClients)}
}

// Check returns a *CredentialsError naming the field at fault, or nil.
func (k *CredentialsChecker) Check(creds *Credentials) error {
	if creds.Key == "" {
		return &CredentialsError{Field: "Key", Err: errors.New("empty: credentials need a key to name them by")}
	}
	fp := creds.Fingerprint()
	if v, ok := k.verdicts.Get(fp); ok {
		err, _ := v.(error)
		return err
	}
	var err error
	if ferr := checkCredentials(creds, k.allowHTTP); ferr != nil {
		err = &CredentialsError{Key: creds.Key, Field: ferr.field, Err: ferr.err}
	}
	k.verdicts.Add(fp, err, checkedTTL)
	return err
}

// checkCredentials is every check building a client for creds makes before
// its first request.
func checkCredentials(creds *Credentials, allowHTTP bool) *fieldError {
	a, ferr := checkAuth(credentialsAuthInput(creds, allowHTTP))
	if ferr != nil {
		return ferr
	}
	if _, ferr = checkNetwork([][]byte{creds.Network.CABundle}, creds.Network.Proxy); ferr != nil {
		return ferr
	}
	if a.app != nil {
		if _, err := appsTransport(nil, a.app); err != nil {
			var fe *fieldError
			if errors.As(err, &fe) {
				return fe
			}
			return &fieldError{FieldPrivateKey, err}
		}
	}
	return nil
}
