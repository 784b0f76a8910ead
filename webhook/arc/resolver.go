package arc

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// StaticCredentials says the flags configure credentials of their own:
	// in ARC credentials mode they serve a runner whose namespace is being
	// deleted and whose Secret is already gone.
	StaticCredentials bool
}

// Resolver reads a scale-set runner pod's EphemeralRunner and, in ARC
// credentials mode, its githubConfigSecret. It is safe for concurrent use.
type Resolver struct {
	reader   client.Reader
	writer   client.Writer
	arcCreds bool
	static   bool
	// checker validates ARC credentials with ghclient's own rules and caches
	// the verdict per Secret contents. It never sends a request and builds
	// no client or budget; plain-http policy is left to the caller's Router.
	checker *ghclient.CredentialsChecker
}

// NewResolver returns a Resolver. Options.Reader is required.
func NewResolver(opts Options) *Resolver {
	return &Resolver{reader: opts.Reader, writer: opts.Writer, arcCreds: opts.CredentialsFromARC, static: opts.StaticCredentials,
		checker: ghclient.NewCredentialsChecker(true)}
}

// GroupVersionKind is the GVK runner-guard reads.
func GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: Group, Version: Version, Kind: Kind}
}

// GroupResource is what RBAC rules and API errors name.
func GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: Group, Resource: "ephemeralrunners"}
}

// LegacyGroupVersionKind is the GVK of ARC's legacy Runner.
func LegacyGroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: LegacyGroup, Version: LegacyVersion, Kind: LegacyKind}
}

// LegacyGroupResource is what RBAC rules and API errors name.
func LegacyGroupResource() schema.GroupResource {
	return schema.GroupResource{Group: LegacyGroup, Resource: "runners"}
}

// Runner is what ARC's objects say about the runner of one pod. Every field
// comes from ARC's own object, verified to control the pod: its name is the
// pod's and its UID the one the pod references.
type Runner struct {
	// Scope from spec.githubConfigUrl (EphemeralRunner) or spec.repository,
	// organization, enterprise (legacy Runner); Name from status.runnerName
	// (the pod name when empty; always the pod name for a legacy Runner); ID
	// from status.runnerId (0: not yet known; legacy Runners keep it on the
	// pod); Creds in ARC credentials mode only, and nil when Removed is set.
	ghclient.Runner
	// Kind is EphemeralRunner or (legacy) Runner.
	Kind string
	// BaseURL is the API base spec.githubConfigUrl points at (see
	// ghclient.APIBaseForConfigURL), set in every mode for EphemeralRunners:
	// with static credentials the caller can tell a runner on another host,
	// which its client would look up in vain. Empty for legacy Runners,
	// whose GitHub is the controller's.
	BaseURL string
	// EphemeralRunner names the object (an EphemeralRunner or a legacy
	// Runner); Retire deletes only EphemeralRunners.
	EphemeralRunner types.NamespacedName
	UID             types.UID
	// Removed is non-empty when ARC has already removed the runner from
	// GitHub: the EphemeralRunner is being deleted without
	// RegistrationFinalizer, or its phase is Succeeded, Failed or Outdated
	// (ARC sets Failed and Outdated just before it removes the runner, once
	// the runner can no longer run a job). It says why, for messages.
	Removed string
	// Job is the EphemeralRunner's job fields (zero for legacy Runners): set,
	// they prove the runner took a job; empty, they prove nothing.
	Job Job
	// CredentialsGone, in ARC credentials mode, says why Creds is nil
	// although the runner is not removed: its namespace is being deleted and
	// its githubConfigSecret is already gone, so the flags' credentials ask
	// GitHub instead.
	CredentialsGone string
	// NamespaceDeleting, in ARC credentials mode without static credentials,
	// says why the pod may go although nothing can ask GitHub: its namespace
	// is being deleted, its githubConfigSecret is gone and ARC records no job
	// on the runner. Creds is nil then.
	NamespaceDeleting string
}

// Resolve reads the ARC object that controls pod: an EphemeralRunner
// (scale-set mode) or a legacy Runner. It returns
//   - (nil, nil) when the pod's controller is neither (or it has none);
//   - (nil, *NotOwnerError) when the pod claims an object it does not match:
//     another name or another UID;
//   - (nil, *UnavailableError) when the object cannot be read: CRD absent,
//     RBAC forbidden, or gone; the caller falls back to the pod's own labels
//     and env;
//   - (nil, *InvalidError) when it holds an unusable value (a bad githubConfigUrl);
//   - (runner without Creds, *CredentialsError) in ARC credentials mode when
//     the Secret is missing, unreadable or malformed: the scope, name and job
//     fields are still ARC's, so the caller never takes them from the pod;
//   - (nil, other error) for transient API errors, worth a retry.
func (r *Resolver) Resolve(ctx context.Context, pod *corev1.Pod) (*Runner, error) {
	if pod == nil {
		return nil, nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil, nil
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return nil, nil
	}
	var want schema.GroupVersionKind
	switch {
	case gv.Group == Group && owner.Kind == Kind:
		want = GroupVersionKind()
	case gv.Group == LegacyGroup && owner.Kind == LegacyKind:
		want = LegacyGroupVersionKind()
	default:
		return nil, nil
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}
	if owner.Name != pod.Name {
		// ARC names the pod after its object; a pod of another name borrowed the reference.
		return nil, &NotOwnerError{Kind: want.Kind, Object: key,
			Why: fmt.Sprintf("ARC names a runner pod after its %s and this pod is named %q", want.Kind, pod.Name)}
	}
	if gv.Version != want.Version {
		// ARC's object in a version this code does not know: fall back, and say so.
		return nil, &UnavailableError{Kind: want.Kind, EphemeralRunner: key, Reason: UnavailableNoKind,
			Err: fmt.Errorf("pod is owned by %s %s; runner-guard reads %s", owner.APIVersion, want.Kind, want.GroupVersion())}
	}
	if r.reader == nil {
		return nil, errors.New("arc: Resolver has no Reader")
	}
	u, err := r.get(ctx, want, key, owner.UID)
	if err != nil {
		if run := r.objectGone(ctx, pod, want.Kind, key, owner.UID, err); run != nil {
			return run, nil
		}
		return nil, err
	}
	if want.Kind == LegacyKind {
		scope, field, err := legacyScope(u)
		if err != nil {
			return nil, &InvalidError{EphemeralRunner: key, Field: field, Err: err}
		}
		return &Runner{Runner: ghclient.Runner{Scope: scope, Name: pod.Name}, Kind: LegacyKind, EphemeralRunner: key, UID: u.GetUID()}, nil
	}
	er, err := parseEphemeralRunner(u)
	if err != nil {
		return nil, err
	}
	base, scope, err := ghclient.APIBaseForConfigURL(er.configURL)
	if err != nil {
		return nil, &InvalidError{EphemeralRunner: key, Field: fieldConfigURL, Err: err}
	}
	run := &Runner{
		Runner:          ghclient.Runner{Scope: scope, Name: er.runnerName, ID: er.runnerID, IDTrusted: er.runnerID > 0},
		Kind:            Kind,
		BaseURL:         base,
		EphemeralRunner: key,
		UID:             er.uid,
		Removed:         er.removed,
		Job:             er.job,
	}
	if run.Name == "" {
		// ARC registers the runner under the EphemeralRunner's name, which is the pod's.
		run.Name = pod.Name
	}
	// A removed runner needs no GitHub request, so no credentials: ARC may
	// already have deleted the Secret while it tears a scale set down.
	if r.arcCreds && run.Removed == "" {
		run.Creds, err = r.credentials(ctx, er, base, scope)
		var gone *secretGoneError
		if errors.As(err, &gone) {
			err = r.secretGone(ctx, run, gone)
		}
		if err != nil {
			run.Creds = nil
			return run, err
		}
	}
	return run, nil
}

// secretGone decides for a runner whose githubConfigSecret does not exist.
// Outside a namespace being deleted that stays a CredentialsError (someone
// must restore the Secret). In a namespace being deleted (a GitOps prune or
// external-secrets removed the Secret first) nothing can recreate the pod,
// and refusing an idle runner forever would keep the namespace Terminating:
//   - with static credentials, those ask GitHub (run.CredentialsGone says so);
//   - without, a job the listener recorded (status.jobId) keeps the pod
//     until the job ends and the runner exits;
//   - otherwise the pod goes (run.NamespaceDeleting): no job is recorded, and nothing
//     can ask GitHub. A job assigned in the moments before the listener
//     records it is the one risk left, and the namespace's deleter asked
//     for everything in it to go.
func (r *Resolver) secretGone(ctx context.Context, run *Runner, gone *secretGoneError) error {
	ns, deleting := NamespaceDeleting(ctx, r.reader, run.EphemeralRunner.Namespace)
	if !deleting {
		return gone.CredentialsError
	}
	state := "is gone"
	if apierrors.IsForbidden(gone.Err) {
		state = "may no longer be read (the namespace's Roles go with it)"
	}
	why := fmt.Sprintf("namespace %q is being deleted and Secret %s %s", ns.Name, gone.Secret, state)
	if ts := ns.GetDeletionTimestamp(); ts != nil {
		why = fmt.Sprintf("namespace %q is being deleted (since %s) and Secret %s %s", ns.Name, ts.UTC().Format(time.RFC3339), gone.Secret, state)
	}
	switch {
	case r.static:
		run.CredentialsGone = why + ": runner-guard asks GitHub with its static credentials"
		return nil
	case run.Job.Started():
		gone.Err = fmt.Errorf("%s, runner-guard has no static credentials to ask GitHub with, and ARC records %s on the runner: the pod stays until the job ends and the runner exits (or configure static credentials): %w",
			why, run.Job, gone.Err)
		return gone.CredentialsError
	}
	run.NamespaceDeleting = why + ", runner-guard has no static credentials to ask GitHub with, and ARC records no job on the runner: no pod can be recreated there, so the pod goes unguarded; its registration stays on GitHub, offline, until removed"
	return nil
}

// objectGone decides, as secretGone does, for a pod whose ARC object cannot
// be read (Forbidden or NotFound) in ARC credentials mode: the namespace
// controller may delete the namespace's Roles, and ARC's objects, before
// its pods, and the credentials came from that object's Secret. With
// static credentials the caller falls back to the pod's labels and asks
// GitHub with those (nil: err stands). Without, in a namespace being
// deleted, the pod goes (NamespaceDeleting): nothing can ask GitHub, and
// refusing would keep the namespace Terminating forever.
func (r *Resolver) objectGone(ctx context.Context, pod *corev1.Pod, kind string, key types.NamespacedName, uid types.UID, err error) *Runner {
	var unavailable *UnavailableError
	if !r.arcCreds || r.static || !errors.As(err, &unavailable) ||
		(unavailable.Reason != UnavailableForbidden && unavailable.Reason != UnavailableNotFound) {
		return nil
	}
	ns, deleting := NamespaceDeleting(ctx, r.reader, key.Namespace)
	if !deleting {
		return nil
	}
	state := "is gone"
	if unavailable.Reason == UnavailableForbidden {
		state = "may no longer be read (the namespace's Roles go with it)"
	}
	since := ""
	if ts := ns.GetDeletionTimestamp(); ts != nil {
		since = " (since " + ts.UTC().Format(time.RFC3339) + ")"
	}
	return &Runner{
		Runner: ghclient.Runner{Name: pod.Name}, Kind: kind, EphemeralRunner: key, UID: uid,
		NamespaceDeleting: fmt.Sprintf("namespace %q is being deleted%s and %s %s %s, runner-guard has no static credentials to ask GitHub with: no pod can be recreated there, so the pod goes unguarded; its registration stays on GitHub, offline, until removed",
			ns.Name, since, kind, key, state),
	}
}

// get reads the object the pod references; it must exist and carry uid.
func (r *Resolver) get(ctx context.Context, gvk schema.GroupVersionKind, key types.NamespacedName, uid types.UID) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.reader.Get(ctx, key, u); err != nil {
		if apierrors.IsNotFound(err) && !notFoundIsResource(err) {
			// A forged reference to nothing gains nothing: the pod's own,
			// untrusted facts decide, and a real runner stays guarded.
			return nil, &UnavailableError{Kind: gvk.Kind, EphemeralRunner: key, Reason: UnavailableNotFound, Err: err}
		}
		return nil, classifyGetError(gvk.Kind, key, err)
	}
	if u.GetUID() != uid {
		return nil, &NotOwnerError{Kind: gvk.Kind, Object: key,
			Why: fmt.Sprintf("it has UID %q and the pod references UID %q (a copied or stale reference)", u.GetUID(), uid)}
	}
	return u, nil
}

func classifyGetError(kind string, key types.NamespacedName, err error) error {
	unavailable := func(reason UnavailableReason) error {
		return &UnavailableError{Kind: kind, EphemeralRunner: key, Reason: reason, Err: err}
	}
	switch {
	case meta.IsNoMatchError(err):
		return unavailable(UnavailableNoKind)
	case apierrors.IsNotFound(err):
		// The CRD was removed after discovery: the API server answers 404 for the resource.
		return unavailable(UnavailableNoKind)
	case apierrors.IsForbidden(err):
		return unavailable(UnavailableForbidden)
	}
	return fmt.Errorf("reading %s %s: %w", kind, key, err)
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
	if run == nil || run.EphemeralRunner.Name == "" || run.Kind != Kind {
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
