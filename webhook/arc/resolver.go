package arc

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/ghclient"
)

// ErrRetireDisabled: Retire was called on a Resolver without a Writer.
var ErrRetireDisabled = errors.New("retiring EphemeralRunners is disabled")

// Options configure a Resolver.
type Options struct {
	// Reader reads EphemeralRunners and Secrets. Use an API reader
	// (mgr.GetAPIReader()), not a cache: a decision needs the current
	// finalizers, and caching every Secret would need cluster-wide list/watch.
	Reader client.Reader
	// Writer deletes EphemeralRunners in Retire; nil disables retiring.
	Writer client.Writer
	// CredentialsFromARC reads spec.githubConfigSecret in the pod's namespace
	// with ARC's keys and sets Runner.Creds.
	CredentialsFromARC bool
}

// Resolver reads a scale-set runner pod's EphemeralRunner and, in ARC
// credentials mode, its githubConfigSecret. It is safe for concurrent use.
type Resolver struct {
	reader   client.Reader
	writer   client.Writer
	arcCreds bool
	// checker validates ARC credentials with ghclient's own rules and caches
	// the verdict per Secret resourceVersion. It never sends a request;
	// plain-http policy is left to the caller's Router.
	checker *ghclient.Router
}

// NewResolver returns a Resolver. Options.Reader is required.
func NewResolver(opts Options) *Resolver {
	// A zero-valued RouterConfig with AllowHTTP is always valid.
	checker, _ := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: true})
	return &Resolver{reader: opts.Reader, writer: opts.Writer, arcCreds: opts.CredentialsFromARC, checker: checker}
}

// Runner is what ARC's objects say about the runner of one pod.
type Runner struct {
	// Scope and API host from spec.githubConfigUrl; Name from status.runnerName
	// (the pod name when empty); ID from status.runnerId (0: not yet known);
	// Creds in ARC credentials mode only, and nil when Removed is set.
	ghclient.Runner
	// BaseURL is the API base spec.githubConfigUrl points at (see
	// ghclient.APIBaseForConfigURL), set in every mode: with static
	// credentials the caller can tell a runner on another host, which its
	// client would look up in vain.
	BaseURL         string
	EphemeralRunner types.NamespacedName
	UID             types.UID
	// Removed is non-empty when ARC has already removed the runner from
	// GitHub: the EphemeralRunner is being deleted without
	// RegistrationFinalizer, or its phase is Succeeded, Failed or Outdated
	// (ARC sets Failed and Outdated just before it removes the runner, once
	// the runner can no longer run a job). It says why, for messages.
	Removed string
}

// Resolve reads the EphemeralRunner that controls pod. It returns
//   - (nil, nil) when the pod's controller is not an EphemeralRunner (or it has none);
//   - (nil, *UnavailableError) when the EphemeralRunner cannot be read: CRD
//     absent, RBAC forbidden, not found; the caller falls back to labels;
//   - (nil, *InvalidError) when it holds an unusable value (a bad githubConfigUrl);
//   - (nil, *CredentialsError) in ARC credentials mode when the Secret is
//     missing, unreadable or malformed;
//   - (nil, other error) for transient API errors, worth a retry.
func (r *Resolver) Resolve(ctx context.Context, pod *corev1.Pod) (*Runner, error) {
	if pod == nil {
		return nil, nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != Kind {
		return nil, nil
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil || gv.Group != Group {
		return nil, nil
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}
	if owner.Name == "" {
		return nil, &UnavailableError{EphemeralRunner: key, Reason: UnavailableNotFound, Err: errors.New("the pod's owner reference names no EphemeralRunner")}
	}
	if gv.Version != Version {
		// ARC's object in a version this code does not know: fall back, and say so.
		return nil, &UnavailableError{EphemeralRunner: key, Reason: UnavailableNoKind,
			Err: fmt.Errorf("pod is owned by %s %s; runner-guard reads %s/%s", owner.APIVersion, Kind, Group, Version)}
	}

	if r.reader == nil {
		return nil, errors.New("arc: Resolver has no Reader")
	}
	er, err := r.get(ctx, key, owner.UID)
	if err != nil {
		return nil, err
	}
	base, scope, err := ghclient.APIBaseForConfigURL(er.configURL)
	if err != nil {
		return nil, &InvalidError{EphemeralRunner: key, Field: fieldConfigURL, Err: err}
	}
	run := &Runner{
		Runner:          ghclient.Runner{Scope: scope, Name: er.runnerName, ID: er.runnerID},
		BaseURL:         base,
		EphemeralRunner: key,
		UID:             er.uid,
		Removed:         er.removedReason(),
	}
	if run.Name == "" {
		// ARC registers the runner under the EphemeralRunner's name, which is the pod's.
		run.Name = pod.Name
	}
	// A removed runner needs no GitHub request, so no credentials: ARC may
	// already have deleted the Secret while it tears a scale set down.
	if r.arcCreds && run.Removed == "" {
		if run.Creds, err = r.credentials(ctx, er, base, scope); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// get reads and validates the EphemeralRunner; uid, when set, must match.
func (r *Resolver) get(ctx context.Context, key types.NamespacedName, uid types.UID) (*ephemeralRunner, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GroupVersionKind())
	if err := r.reader.Get(ctx, key, u); err != nil {
		return nil, classifyGetError(key, err)
	}
	if uid != "" && u.GetUID() != uid {
		// The owner is gone and another EphemeralRunner took its name.
		return nil, &UnavailableError{EphemeralRunner: key, Reason: UnavailableNotFound,
			Err: fmt.Errorf("it has UID %s, the pod's owner had UID %s", u.GetUID(), uid)}
	}
	return parseEphemeralRunner(u)
}

func classifyGetError(key types.NamespacedName, err error) error {
	unavailable := func(reason UnavailableReason) error {
		return &UnavailableError{EphemeralRunner: key, Reason: reason, Err: err}
	}
	switch {
	case meta.IsNoMatchError(err):
		return unavailable(UnavailableNoKind)
	case apierrors.IsNotFound(err) && notFoundIsResource(err):
		// The CRD was removed after discovery: the API server answers 404 for the resource.
		return unavailable(UnavailableNoKind)
	case apierrors.IsNotFound(err):
		return unavailable(UnavailableNotFound)
	case apierrors.IsForbidden(err):
		return unavailable(UnavailableForbidden)
	}
	return fmt.Errorf("reading EphemeralRunner %s: %w", key, err)
}

// notFoundIsResource tells a 404 for the whole resource (no such API) from a
// 404 for one object: the API server names the object only in the latter.
func notFoundIsResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// Retire deletes the EphemeralRunner so ARC's EphemeralRunnerSet creates a
// fresh runner instead of restarting the pod with a dead registration. The UID
// precondition keeps it from deleting a newer object of the same name. It uses
// background propagation, as ARC's own deletes do: ARC's finalizer deletes the
// pod and the JIT Secret itself. An EphemeralRunner already gone is success.
func (r *Resolver) Retire(ctx context.Context, run *Runner) error {
	if r.writer == nil {
		return ErrRetireDisabled
	}
	if run == nil || run.EphemeralRunner.Name == "" {
		return errors.New("retire: no EphemeralRunner named")
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GroupVersionKind())
	u.SetNamespace(run.EphemeralRunner.Namespace)
	u.SetName(run.EphemeralRunner.Name)
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if run.UID != "" {
		uid := run.UID
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	err := r.writer.Delete(ctx, u, opts...)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err) && run.UID != "":
		// Only the UID precondition can conflict: our EphemeralRunner is gone.
		return nil
	}
	return fmt.Errorf("deleting EphemeralRunner %s: %w", run.EphemeralRunner, err)
}
