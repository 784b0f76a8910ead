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
	_ error = &NotOwnerError{}
)

// NotOwnerError: the pod's controller reference names an ARC object the pod
// does not match (another name or another UID). ARC names a
// pod after its object and references that object's UID, so such a pod is not
// that object's runner: the reference was copied or is stale.
type NotOwnerError struct {
	// Kind and Object name what the pod claims.
	Kind   string
	Object types.NamespacedName
	Why    string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("pod claims %s %s as its controller, but %s", e.Kind, e.Object, e.Why)
}

// UnavailableReason says why an EphemeralRunner could not be read. The caller
// falls back to the pod's labels and can report each reason once.
type UnavailableReason string

const (
	// UnavailableNoKind: the API server does not serve EphemeralRunners of
	// actions.github.com/v1alpha1 (ARC's CRD is not installed or has another version).
	UnavailableNoKind UnavailableReason = "NoKind"
	// UnavailableForbidden: runner-guard may not get ephemeralrunners.actions.github.com.
	UnavailableForbidden UnavailableReason = "Forbidden"
	// UnavailableNotFound: the object the pod references is gone (ARC's
	// finalizers normally keep it until the pod is gone; someone removed
	// them). The pod is guarded from its own facts rather than let go.
	UnavailableNotFound UnavailableReason = "NotFound"
)

// UnavailableError: the pod is owned by an ARC object (an EphemeralRunner or a
// legacy Runner) that cannot be read.
type UnavailableError struct {
	// Kind is the object's kind; EphemeralRunner names it.
	Kind            string
	EphemeralRunner types.NamespacedName
	Reason          UnavailableReason
	Err             error
}

func (e *UnavailableError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = Kind
	}
	return fmt.Sprintf("cannot read %s %s (%s): %v", kind, e.EphemeralRunner, e.Reason, e.Err)
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
