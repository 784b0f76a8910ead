package arc

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/ghclient"
)

var (
	_ error = &UnavailableError{}
	_ error = &InvalidError{}
	_ error = &CredentialsError{}
)

// UnavailableReason says why an EphemeralRunner could not be read. The caller
// falls back to the pod's labels and can report each reason once.
type UnavailableReason string

const (
	// UnavailableNoKind: the API server does not serve EphemeralRunners of
	// actions.github.com/v1alpha1 (ARC's CRD is not installed or has another version).
	UnavailableNoKind UnavailableReason = "NoKind"
	// UnavailableForbidden: runner-guard may not get ephemeralrunners.actions.github.com.
	UnavailableForbidden UnavailableReason = "Forbidden"
	// UnavailableNotFound: the pod's owner does not exist (any more), or a
	// different object now has its name.
	UnavailableNotFound UnavailableReason = "NotFound"
)

// UnavailableError: the pod is owned by an EphemeralRunner that cannot be read.
type UnavailableError struct {
	EphemeralRunner types.NamespacedName
	Reason          UnavailableReason
	Err             error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("cannot read EphemeralRunner %s (%s): %v", e.EphemeralRunner, e.Reason, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// InvalidError: the EphemeralRunner holds a value runner-guard cannot use.
type InvalidError struct {
	EphemeralRunner types.NamespacedName
	// Field is the JSON path of the value, e.g. "spec.githubConfigUrl".
	Field string
	Err   error
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("EphemeralRunner %s: %s: %v", e.EphemeralRunner, e.Field, e.Err)
}

func (e *InvalidError) Unwrap() error { return e.Err }

// CredentialsError: in ARC credentials mode, the EphemeralRunner's
// githubConfigSecret is missing, unreadable or malformed.
type CredentialsError struct {
	EphemeralRunner types.NamespacedName
	Secret          types.NamespacedName
	// Key is the ARC key at fault (KeyGitHubToken, ...), "spec.githubConfigUrl"
	// when the URL does not fit the credentials, or "" for the Secret as a whole.
	Key string
	// Err may wrap a *ghclient.CredentialsError or ghclient.ErrAppEnterpriseScope.
	Err error
}

func (e *CredentialsError) Error() string {
	// ghclient's error repeats the Secret and names its own field; its cause is enough here.
	cause := e.Err
	var ce *ghclient.CredentialsError
	if errors.As(e.Err, &ce) && ce.Err != nil {
		cause = ce.Err
	}
	if e.Key == "" {
		return fmt.Sprintf("GitHub credentials of EphemeralRunner %s: Secret %s: %v", e.EphemeralRunner, e.Secret, cause)
	}
	return fmt.Sprintf("GitHub credentials of EphemeralRunner %s: Secret %s, key %s: %v", e.EphemeralRunner, e.Secret, e.Key, cause)
}

func (e *CredentialsError) Unwrap() error { return e.Err }
