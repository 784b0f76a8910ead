package jobannotation

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// keyLabel is the HKDF info of the annotation's MAC key: the key is derived
// per purpose, never the webhook secret itself, so nothing GitHub signs with
// the secret is ever a valid annotation MAC, and back.
const keyLabel = "runner-guard.io/job annotation MAC v2"

// Secret is one GitHub webhook's secret, as configured.
type Secret struct {
	// Name identifies the secret in records, messages and metrics; "" is
	// the single --github-webhook-secret-file.
	Name string
	// Value is the current secret.
	Value []byte
	// Previous, when set, is accepted until PreviousUntil: deliveries
	// signed with it verify, and records signed under it keep verifying
	// until they are rewritten under Value.
	Previous      []byte
	PreviousUntil time.Time
}

// PreviousAccepted reports whether s's previous value is accepted at now.
func (s Secret) PreviousAccepted(now time.Time) bool {
	return len(s.Previous) > 0 && now.Before(s.PreviousUntil)
}

// derived is a secret's annotation keys.
type derived struct {
	Secret
	key, previousKey []byte
}

// Keyring holds the annotation keys of every configured webhook secret. A
// nil *Keyring has none: no annotation verifies.
type Keyring struct {
	secrets map[string]derived
	now     func() time.Time
}

// NewKeyring derives the annotation keys of secrets (names unique, values
// non-empty); now tells time for the previous values' windows.
func NewKeyring(secrets []Secret, now func() time.Time) (*Keyring, error) {
	if now == nil {
		now = time.Now
	}
	k := &Keyring{secrets: map[string]derived{}, now: now}
	for _, s := range secrets {
		if _, dup := k.secrets[s.Name]; dup {
			return nil, fmt.Errorf("secret %q is configured twice", s.Name)
		}
		if len(s.Value) == 0 {
			return nil, fmt.Errorf("secret %q is empty", s.Name)
		}
		d := derived{Secret: s}
		var err error
		if d.key, err = hkdf.Key(sha256.New, s.Value, nil, keyLabel, sha256.Size); err != nil {
			return nil, fmt.Errorf("secret %q: %w", s.Name, err)
		}
		if len(s.Previous) > 0 {
			if d.previousKey, err = hkdf.Key(sha256.New, s.Previous, nil, keyLabel, sha256.Size); err != nil {
				return nil, fmt.Errorf("secret %q: previous: %w", s.Name, err)
			}
		}
		k.secrets[s.Name] = d
	}
	return k, nil
}

// Value is the annotation's value for r on the pod with podUID, signed
// under the current value of the secret r.Secret names.
func (k *Keyring) Value(r Record, podUID string) (string, error) {
	if k == nil {
		return "", errors.New("no webhook secret to sign " + Annotation)
	}
	d, ok := k.secrets[r.Secret]
	if !ok {
		return "", fmt.Errorf("no webhook secret %q to sign %s", r.Secret, Annotation)
	}
	return value(r, podUID, d.key), nil
}

// ErrNotFound is a pod without the annotation.
var ErrNotFound = errors.New("no " + Annotation + " annotation")

// Read is the verified record on pod; the error says why there is none:
// ErrNotFound, or why the annotation does not verify.
func (k *Keyring) Read(pod metav1.Object) (Record, error) {
	v, found := pod.GetAnnotations()[Annotation]
	if !found {
		return Record{}, ErrNotFound
	}
	if k == nil {
		return Record{}, fmt.Errorf("%s cannot be verified: no webhook secret is configured", Annotation)
	}
	s, err := decode(v)
	if err != nil {
		return Record{}, err
	}
	d, ok := k.secrets[s.Secret]
	if !ok {
		return Record{}, fmt.Errorf("%s is signed under webhook secret %q, which is not configured", Annotation, s.Secret)
	}
	uid := string(pod.GetUID())
	if verifyMAC(s, uid, d.key) {
		return s.Record, nil
	}
	if d.previousKey != nil && verifyMAC(s, uid, d.previousKey) {
		if d.PreviousAccepted(k.now()) {
			r := s.Record
			r.VerifiedUntil = d.PreviousUntil
			return r, nil
		}
		return Record{}, fmt.Errorf("%s is signed under webhook secret %q's previous value, accepted until %s", Annotation, s.Secret, d.PreviousUntil.UTC().Format(time.RFC3339))
	}
	return Record{}, fmt.Errorf("%s: %w", Annotation, errMAC)
}

// JobFromPod is the job in progress a verified record on pod names; ok is
// false when it carries none, a completed one, or one that does not verify.
func (k *Keyring) JobFromPod(pod metav1.Object) (Job, bool) {
	r, err := k.Read(pod)
	if err != nil || !r.Running() {
		return Job{}, false
	}
	return r.Job, true
}

// Unverified reports why pod's annotation does not verify; "" when it
// verifies or there is none.
func (k *Keyring) Unverified(pod metav1.Object) string {
	if _, err := k.Read(pod); err != nil && !errors.Is(err, ErrNotFound) {
		return err.Error()
	}
	return ""
}

// Configured reports whether any secret is.
func (k *Keyring) Configured() bool { return k != nil && len(k.secrets) > 0 }

// Single is the keyring of one secret for every scope
// (--github-webhook-secret-file): its records name no secret.
func Single(secret []byte) (*Keyring, error) {
	return NewKeyring([]Secret{{Value: secret}}, nil)
}
