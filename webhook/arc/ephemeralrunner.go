package arc

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// EphemeralRunner's API as ARC defines it
// (apis/actions.github.com/v1alpha1/ephemeralrunner_types.go).
const (
	Group   = "actions.github.com"
	Version = "v1alpha1"
	Kind    = "EphemeralRunner"

	// RegistrationFinalizer stays on an EphemeralRunner until ARC has removed
	// its runner from GitHub.
	RegistrationFinalizer = "ephemeralrunner.actions.github.com/runner-registration-finalizer"
	// Finalizer guards ARC's clean-up of the pod and the JIT config Secret.
	Finalizer = "ephemeralrunner.actions.github.com/finalizer"
)

// Phase is status.phase of an EphemeralRunner.
type Phase string

const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhaseOutdated  Phase = "Outdated"
)

// done mirrors ARC's EphemeralRunner.IsDone: phases in which ARC has (or is
// about to have) removed the runner from GitHub.
func (p Phase) done() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseOutdated
}

// ephemeralRunner holds the fields runner-guard reads, validated.
type ephemeralRunner struct {
	key          types.NamespacedName
	uid          types.UID
	deleting     bool
	finalizers   []string
	configURL    string
	configSecret string
	vaultType    string
	runnerID     int64
	runnerName   string
	phase        Phase
	job          Job
	// removed is removedReason, worked out with the rest so Resolve reads
	// every fact of the object in one call here.
	removed string
	// caRef is spec.githubServerTLS.certificateFrom.configMapKeyRef: a
	// ConfigMap in the EphemeralRunner's namespace and the key of a PEM
	// bundle; zero when unset.
	caRef keyRef
	// proxy is spec.proxy; nil when unset.
	proxy *proxySpec
}

// keyRef names a key of a ConfigMap or Secret in the EphemeralRunner's namespace.
type keyRef struct{ name, key string }

// proxySpec is ARC's ProxyConfig: one server per scheme and hosts reached directly.
type proxySpec struct {
	http, https proxyServer
	noProxy     []string
}

// proxyServer is ARC's ProxyServerConfig: a URL and, optionally, a Secret
// with username and password keys.
type proxyServer struct{ url, credentialSecretRef string }

// parseEphemeralRunner validates the fields runner-guard uses; anything else
// in the object is ARC's business.
func parseEphemeralRunner(u *unstructured.Unstructured) (*ephemeralRunner, error) {
	er := &ephemeralRunner{
		key:        types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()},
		uid:        u.GetUID(),
		deleting:   u.GetDeletionTimestamp() != nil,
		finalizers: u.GetFinalizers(),
	}
	invalid := func(field string, err error) error {
		return &InvalidError{EphemeralRunner: er.key, Field: field, Err: err}
	}
	var err error
	if er.configURL, err = stringField(u, "spec", "githubConfigUrl"); err != nil {
		return nil, invalid("spec.githubConfigUrl", err)
	}
	if er.configURL == "" {
		return nil, invalid("spec.githubConfigUrl", errors.New("empty"))
	}
	if er.configSecret, err = stringField(u, "spec", "githubConfigSecret"); err != nil {
		return nil, invalid("spec.githubConfigSecret", err)
	}
	if er.vaultType, err = stringField(u, "spec", "vaultConfig", "type"); err != nil {
		return nil, invalid("spec.vaultConfig.type", err)
	}
	if er.runnerID, err = intField(u, "status", "runnerId"); err != nil {
		return nil, invalid("status.runnerId", err)
	}
	if er.runnerName, err = stringField(u, "status", "runnerName"); err != nil {
		return nil, invalid("status.runnerName", err)
	}
	phase, err := stringField(u, "status", "phase")
	if err != nil {
		return nil, invalid("status.phase", err)
	}
	er.phase = Phase(phase)
	if er.job, err = parseJob(u); err != nil {
		return nil, err
	}
	if err := parseNetwork(u, er, invalid); err != nil {
		return nil, err
	}
	er.removed = er.removedReason()
	return er, nil
}

// parseNetwork reads spec.githubServerTLS and spec.proxy, as ARC's
// SecretResolver does for its own client.
func parseNetwork(u *unstructured.Unstructured, er *ephemeralRunner, invalid func(string, error) error) error {
	const tls = "spec.githubServerTLS.certificateFrom.configMapKeyRef"
	var err error
	if er.caRef.name, err = stringField(u, "spec", "githubServerTLS", "certificateFrom", "configMapKeyRef", "name"); err != nil {
		return invalid(tls+".name", err)
	}
	if er.caRef.key, err = stringField(u, "spec", "githubServerTLS", "certificateFrom", "configMapKeyRef", "key"); err != nil {
		return invalid(tls+".key", err)
	}
	if _, set, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "githubServerTLS"); set && (er.caRef.name == "" || er.caRef.key == "") {
		// ARC refuses this too ("certificateFrom not specified").
		return invalid(tls, errors.New("githubServerTLS is set but names no ConfigMap name and key"))
	}
	if _, set, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "proxy"); !set {
		return nil
	}
	p := &proxySpec{}
	for _, srv := range []struct {
		scheme string
		dst    *proxyServer
	}{{"http", &p.http}, {"https", &p.https}} {
		if srv.dst.url, err = stringField(u, "spec", "proxy", srv.scheme, "url"); err != nil {
			return invalid("spec.proxy."+srv.scheme+".url", err)
		}
		if srv.dst.credentialSecretRef, err = stringField(u, "spec", "proxy", srv.scheme, "credentialSecretRef"); err != nil {
			return invalid("spec.proxy."+srv.scheme+".credentialSecretRef", err)
		}
	}
	if p.noProxy, _, err = unstructured.NestedStringSlice(u.Object, "spec", "proxy", "noProxy"); err != nil {
		return invalid("spec.proxy.noProxy", err)
	}
	er.proxy = p
	return nil
}

// parseJob reads the listener's job fields; a malformed one is an
// InvalidError naming it, like every other field.
func parseJob(u *unstructured.Unstructured) (Job, error) {
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	var j Job
	var err error
	for _, f := range []struct {
		field string
		dst   *string
	}{
		{"jobId", &j.ID}, {"jobRepositoryName", &j.Repository},
		{"jobWorkflowRef", &j.WorkflowRef}, {"jobDisplayName", &j.DisplayName},
	} {
		if *f.dst, err = stringField(u, "status", f.field); err != nil {
			return Job{}, &InvalidError{EphemeralRunner: key, Field: "status." + f.field, Err: err}
		}
	}
	if j.RequestID, err = intField(u, "status", "jobRequestId"); err != nil {
		return Job{}, &InvalidError{EphemeralRunner: key, Field: "status.jobRequestId", Err: err}
	}
	if j.WorkflowRunID, err = intField(u, "status", "workflowRunId"); err != nil {
		return Job{}, &InvalidError{EphemeralRunner: key, Field: "status.workflowRunId", Err: err}
	}
	return j, nil
}

// removedReason is non-empty when ARC has already removed the runner from
// GitHub, saying how that is known.
func (er *ephemeralRunner) removedReason() string {
	switch {
	case er.deleting && !slices.Contains(er.finalizers, RegistrationFinalizer):
		return fmt.Sprintf("EphemeralRunner %s is being deleted and ARC has removed its runner from GitHub (finalizer %s is gone)", er.key, RegistrationFinalizer)
	case er.phase.done():
		return fmt.Sprintf("EphemeralRunner %s is in phase %s: ARC removes its runner from GitHub", er.key, er.phase)
	}
	return ""
}

// stringField reads an optional string; absent is "".
func stringField(u *unstructured.Unstructured, path ...string) (string, error) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !found || v == nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T %v", v, v)
	}
	return s, nil
}

// intField reads an optional non-negative integer; absent is 0. JSON decoding
// yields int64, or float64 for numbers written with a fraction or exponent.
func intField(u *unstructured.Unstructured, path ...string) (int64, error) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !found || v == nil {
		return 0, err
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || x < 0 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("want a non-negative integer, got %v", x)
		}
		n = int64(x)
	default:
		return 0, fmt.Errorf("want an integer, got %T %v", v, v)
	}
	if n < 0 {
		return 0, fmt.Errorf("want a non-negative integer, got %d", n)
	}
	return n, nil
}
