package rerun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Defaults of the re-run controller.
const (
	DefaultMaxPerRun = 3
	// DefaultPoll is how often a waiting run is asked about: a completed
	// run's lost job is re-run within about that long.
	DefaultPoll = 15 * time.Second
)

// Event reasons, shared by Events, logs and metrics' meaning: JobRerun
// (outcome rerun), LostJobEnded (outcome ended: a Normal Event, the job
// needs nothing), JobLost (every other outcome, named in the note), and
// JobRerunWaiting (a record whose credentials cannot be resolved).
const (
	ReasonJobRerun        = "JobRerun"
	ReasonJobLost         = "JobLost"
	ReasonLostJobEnded    = "LostJobEnded"
	ReasonJobRerunWaiting = "JobRerunWaiting"
)

// Guard is what the lost-job watch shares with the admission decision
// (*webhook.Handler): which pods are guarded, which runner a pod runs, and
// which scopes its namespace may name.
type Guard interface {
	RunnerContainer(pod *corev1.Pod) (string, bool)
	Resolve(ctx context.Context, pod *corev1.Pod) (webhook.Resolved, error)
	ScopeBound(pod *corev1.Pod, scope ghclient.Scope) bool
}

var _ Guard = &webhook.Handler{}

// Runs is the GitHub side of the re-run path; *ghclient.Client implements it.
type Runs interface {
	WorkflowRun(ctx context.Context, repo ghclient.Scope, runID int64) (ghclient.WorkflowRun, error)
	AttemptJobs(ctx context.Context, repo ghclient.Scope, runID int64, attempt int) ([]ghclient.WorkflowJob, error)
	RerunJob(ctx context.Context, repo ghclient.Scope, jobID int64) error
	RerunFailedJobs(ctx context.Context, repo ghclient.Scope, runID int64) error
	CheckRerunRight(ctx context.Context) (ghclient.RerunRight, string, error)
}

var _ Runs = &ghclient.Client{}

// Options configure Setup.
type Options struct {
	// Namespace holds the records (runner-guard's own).
	Namespace string
	// PodDeletes brings the runner pods the controllers' cache saw deleted
	// (disruption.Options.PodDeleted); nil: no job is known lost.
	PodDeletes *PodDeletes
	// RunnerNamespaces limits the EphemeralRunner watch; empty: all.
	RunnerNamespaces []string
	// Guard decides which pods are guarded runner pods, their runner's
	// scope and their namespace's scope binding.
	Guard Guard
	// ARCCredentials: scale-set runners' credentials are their
	// EphemeralRunner's githubConfigSecret (credentialsMode arc); legacy
	// runners' are the static ones either way.
	ARCCredentials bool
	// StaticBaseURL is the API base the static credentials reach ("": no
	// static credentials): a scale-set runner registered at another GitHub
	// is not asked about with them.
	StaticBaseURL string
	// Client returns the GitHub client of credentials (nil: the static ones).
	Client func(*ghclient.Credentials) (Runs, error)
	// Exclude are rerun.exclude's entries: never re-run.
	Exclude Exclusions
	// JobKeys verifies the job annotation (AnnotationJob) that names a
	// legacy runner pod's job; nil: legacy pods name no job.
	JobKeys *jobannotation.Keyring
	// HonorNodeDeadlines: the webhook lets Karpenter delete a busy runner's
	// pod past its NodeClaim's deadline (--honor-node-deadlines); such a
	// loss is recorded node-deadline.
	HonorNodeDeadlines bool
	// Enabled re-runs lost jobs; off, their Events only say they were lost.
	Enabled   bool
	MaxPerRun int
	Poll      time.Duration
	Events    events.EventRecorder
	Metrics   *Metrics
	Log       logr.Logger
	Now       func() time.Time
}

// Setup adds the lost-job watch and the re-run controller to mgr (a
// leader-elected manager), each reading a cache of its own, trimmed to the
// fields it reads.
func Setup(mgr ctrl.Manager, o Options) error {
	switch {
	case o.Namespace == "":
		return errors.New("rerun: Options.Namespace is required")
	case o.Client == nil || o.Guard == nil:
		return errors.New("rerun: Options.Client and Options.Guard are required")
	}
	o = o.withDefaults()
	er := &unstructured.Unstructured{}
	er.SetGroupVersionKind(arc.GroupVersionKind())
	// Without ARC's scale-set CRDs (legacy ARC only, or ARC not installed
	// yet) the cache must not name EphemeralRunners: it could not start,
	// and with it every controller of the leader. The controllers restart
	// when the CRD appears (cmd/webhook's ARC watch).
	erServed := true
	if _, err := mgr.GetRESTMapper().RESTMapping(arc.GroupVersionKind().GroupKind(), arc.GroupVersionKind().Version); err != nil {
		erServed = false
		o.Log.Info("the API server serves no EphemeralRunners: only legacy runner pods' jobs (named by GitHub's events) are known lost until ARC's CRDs are installed", "error", err.Error())
	}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Node{}: {Transform: trimNode},
		&corev1.ConfigMap{}: {
			Namespaces: map[string]cache.Config{o.Namespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{LabelLostJob: "true"}),
		},
	}
	if erServed {
		byObject[er] = cache.ByObject{Transform: trimEphemeralRunner}
	}
	copts := cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), ByObject: byObject}
	if len(o.RunnerNamespaces) > 0 {
		copts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.RunnerNamespaces {
			copts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(mgr.GetConfig(), copts)
	if err != nil {
		return fmt.Errorf("rerun cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("rerun cache: %w", err)
	}
	cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		return fmt.Errorf("rerun client: %w", err)
	}
	w := newLossWatch(o, c, mgr.GetAPIReader(), cl, erServed)
	b := ctrl.NewControllerManagedBy(mgr).Named("lost-jobs").
		// Nodes are only read (lossCause); watched so the cache holds them
		// from the start and a pod's delete never waits for their sync.
		WatchesRawSource(source.Kind(c, &corev1.Node{}, handler.TypedFuncs[*corev1.Node, reconcile.Request]{}))
	if o.PodDeletes != nil {
		b = b.WatchesRawSource(source.Channel(o.PodDeletes.ch, handler.TypedFuncs[*corev1.Pod, reconcile.Request]{GenericFunc: w.podDeleted}))
	} else {
		o.Log.Info("no pod deletions reach the lost-job watch: no job is known lost")
	}
	if erServed {
		b = b.WatchesRawSource(source.Kind(c, er, handler.TypedFuncs[*unstructured.Unstructured, reconcile.Request]{
			CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*unstructured.Unstructured], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				w.runnerSeen(e.Object)
			},
			UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*unstructured.Unstructured], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				w.runnerSeen(e.ObjectNew)
			},
			DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*unstructured.Unstructured], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				w.runnerGone(ctx, e.Object)
			},
		}))
	}
	if err := b.WithOptions(controller.Options{MaxConcurrentReconciles: 2}).Complete(w); err != nil {
		return fmt.Errorf("lost-job controller: %w", err)
	}
	r := newRunReconciler(o, c, cl, mgr.GetAPIReader())
	// A record's creation (also the cache's first listing after a restart
	// or a change of leader) starts its run's reconciles; they requeue
	// themselves. Updates are the reconciler's own writes: reacting to them
	// would only ask GitHub again.
	created := predicate.TypedFuncs[*corev1.ConfigMap]{
		UpdateFunc: func(event.TypedUpdateEvent[*corev1.ConfigMap]) bool { return false },
		DeleteFunc: func(event.TypedDeleteEvent[*corev1.ConfigMap]) bool { return false },
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("job-reruns").
		WatchesRawSource(source.Kind(c, &corev1.ConfigMap{}, handler.TypedEnqueueRequestsFromMapFunc(runOf), created)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("re-run controller: %w", err)
	}
	return nil
}

// withDefaults fills what o leaves zero; Setup and NewOffline decide alike.
func (o Options) withDefaults() Options {
	if o.MaxPerRun <= 0 {
		o.MaxPerRun = DefaultMaxPerRun
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Events == nil {
		o.Events = &events.FakeRecorder{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return o
}

// newLossWatch is the lost-job watch of o: reader holds Nodes and
// EphemeralRunners, live reads a pod, writer writes the records; erServed
// says the API server serves EphemeralRunners.
func newLossWatch(o Options, reader, live client.Reader, writer client.Client, erServed bool) *lossWatch {
	return &lossWatch{
		reader: reader, live: live, writer: writer, namespace: o.Namespace, guard: o.Guard, arcCredentials: o.ARCCredentials, staticBase: o.StaticBaseURL,
		jobKeys: o.JobKeys, exclude: o.Exclude, erServed: erServed, honorNodeDeadlines: o.HonorNodeDeadlines, events: o.Events, metrics: o.Metrics, now: o.Now, log: o.Log.WithName("lost"),
		pending: map[types.NamespacedName]loss{}, runners: map[types.NamespacedName]*unstructured.Unstructured{},
	}
}

// newRunReconciler is the re-run controller of o: reader holds the
// records, writer writes them, secrets reads ARC's credentials Secrets.
func newRunReconciler(o Options, reader client.Reader, writer client.Client, secrets client.Reader) *runReconciler {
	return &runReconciler{
		reader: reader, writer: writer, secrets: secrets, namespace: o.Namespace, client: o.Client,
		enabled: o.Enabled, maxPerRun: o.MaxPerRun, exclude: o.Exclude, poll: o.Poll, events: o.Events, metrics: o.Metrics,
		now: o.Now, log: o.Log.WithName("rerun"),
	}
}

// PodDeletes carries the guarded pods the controllers' cache saw deleted to
// the lost-job watch: the watch keeps no cache of pods of its own.
type PodDeletes struct {
	ch chan event.TypedGenericEvent[*corev1.Pod]
}

// NewPodDeletes makes the hand-over of one run of the controllers.
func NewPodDeletes() *PodDeletes {
	return &PodDeletes{ch: make(chan event.TypedGenericEvent[*corev1.Pod], podDeletesBuffer)}
}

// podDeletesBuffer lets a node's pods go at once without the cache's
// handler waiting on the watch.
const podDeletesBuffer = 1024

// Deleted hands over a deleted pod; it waits while the watch is behind,
// until ctx (the controllers' run) ends.
func (d *PodDeletes) Deleted(ctx context.Context, pod *corev1.Pod) {
	select {
	case d.ch <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}:
	case <-ctx.Done():
	}
}

// runOf maps a record to its run: one reconcile decides a run's records together.
func runOf(_ context.Context, cm *corev1.ConfigMap) []reconcile.Request {
	run := cm.Labels[LabelRun]
	if run == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: run}}}
}

// lossWatch records the jobs of runner pods that went away holding them.
type lossWatch struct {
	// reader reads Nodes and EphemeralRunners from the cache; live reads
	// a pod (rare: an EphemeralRunner gone).
	reader         client.Reader
	live           client.Reader
	writer         client.Client
	namespace      string
	guard          Guard
	arcCredentials bool
	staticBase     string
	jobKeys        *jobannotation.Keyring
	exclude        Exclusions
	// honorNodeDeadlines: losses past a NodeClaim's deadline are node-deadline.
	honorNodeDeadlines bool
	// erServed: the API server serves EphemeralRunners (the cache holds them).
	erServed bool
	events   events.EventRecorder
	metrics  *Metrics
	now      func() time.Time
	log      logr.Logger

	mu sync.Mutex
	// pending are the losses the reconcile decides, by pod.
	pending map[types.NamespacedName]loss
	// runners are the EphemeralRunners that showed job fields, by name:
	// one can be gone from the cache before its pod.
	runners map[types.NamespacedName]*unstructured.Unstructured
}

// loss is a runner pod that went away holding a job, with what named it.
type loss struct {
	rec Record
	pod *corev1.Pod
	// er is the pod's controlling EphemeralRunner (nil: a legacy pod).
	er *unstructured.Unstructured
	// distrust, when set, says why the job the pod's objects name is not
	// taken (the loss is counted unnamed, nothing recorded).
	distrust string
}

func (w *lossWatch) runnerSeen(er *unstructured.Unstructured) {
	if _, ok := erJob(er); ok && !runnerDone(er) {
		w.mu.Lock()
		w.runners[types.NamespacedName{Namespace: er.GetNamespace(), Name: er.GetName()}] = er
		w.mu.Unlock()
		return
	}
	w.forgetRunner(types.NamespacedName{Namespace: er.GetNamespace(), Name: er.GetName()})
}

func (w *lossWatch) forgetRunner(k types.NamespacedName) {
	w.mu.Lock()
	delete(w.runners, k)
	w.mu.Unlock()
}

// runnerGone forgets an EphemeralRunner's job unless its pod is still there
// to be lost.
func (w *lossWatch) runnerGone(ctx context.Context, er *unstructured.Unstructured) {
	k := types.NamespacedName{Namespace: er.GetNamespace(), Name: er.GetName()}
	if err := w.live.Get(ctx, k, &corev1.Pod{}); apierrors.IsNotFound(err) {
		w.forgetRunner(k)
	}
}

// podDeleted notes a runner pod that went away holding its job.
func (w *lossWatch) podDeleted(ctx context.Context, e event.TypedGenericEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	pod := e.Object
	if l, ok := w.lost(ctx, pod); ok {
		k := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		w.mu.Lock()
		w.pending[k] = l
		w.mu.Unlock()
		q.Add(reconcile.Request{NamespacedName: k})
	}
}

// lost tells whether a deleted pod went away holding a job, and names it.
func (w *lossWatch) lost(ctx context.Context, pod *corev1.Pod) (loss, bool) {
	k := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	container, ok := w.guard.RunnerContainer(pod)
	if !ok {
		return loss{}, false
	}
	var er *unstructured.Unstructured
	if w.erServed {
		er = &unstructured.Unstructured{}
		er.SetGroupVersionKind(arc.GroupVersionKind())
		if err := w.reader.Get(ctx, k, er); err != nil {
			er = nil
		}
	}
	node, known := w.node(ctx, pod.Spec.NodeName)
	w.mu.Lock()
	if _, ok := erJob(er); !ok {
		if seen := w.runners[k]; seen != nil {
			er = seen
		}
	}
	delete(w.runners, k)
	w.mu.Unlock()
	if finishedNormally(pod, container) || runnerDone(er) {
		return loss{}, false
	}
	l := loss{pod: pod}
	erNamed, hasERJob := erJob(er)
	controller := er != nil && controlledBy(pod, er)
	annotated, attempt, hasAnnotation := legacyJob(pod, w.jobKeys)
	switch {
	case hasERJob && !controller && claimsEphemeralRunner(pod):
		// The pod claims an EphemeralRunner that is not this one (another
		// UID: a stale or copied reference): its job fields name nothing.
		l.rec.Job = erNamed
		l.distrust = fmt.Sprintf("EphemeralRunner %s (UID %s) is not the pod's controller: its job fields name no job of this pod", k, er.GetUID())
	case controller && hasAnnotation && (!hasERJob || sameRun(annotated, erNamed)):
		// A verified delivery named the very job: its ID, not a match by
		// runner name. The EphemeralRunner gives the scope and credentials.
		l.er = er
		l.rec.Job, l.rec.Attempt, l.rec.JobID = annotated, attempt, annotated.ID
	case controller && hasERJob:
		l.er = er
		l.rec.Job = erNamed
	case hasAnnotation && claimsEphemeralRunner(pod) && w.arcCredentials:
		// Its EphemeralRunner is gone: nothing says which Secret reaches
		// the job, and no other credentials are used.
		l.rec.Job, l.rec.Attempt, l.rec.JobID = annotated, attempt, annotated.ID
		l.distrust = fmt.Sprintf("the pod's EphemeralRunner %s is gone, so the credentials that reach its job are unknown", k)
	case hasAnnotation:
		l.rec.Job, l.rec.Attempt, l.rec.JobID = annotated, attempt, annotated.ID
	default:
		return loss{}, false
	}
	l.rec.Cause = lossCause(pod, node, known, w.pastDeadline(ctx, pod, node))
	l.rec.PodNamespace, l.rec.PodName, l.rec.PodUID = pod.Namespace, pod.Name, string(pod.UID)
	l.rec.State, l.rec.Recorded = StateWaiting, w.now()
	return l, true
}

// pastDeadline reports whether the pod was deleted past its draining node's
// NodeClaim deadline, read live (the NodeClaim outlives the node's pods);
// false when that cannot be told.
func (w *lossWatch) pastDeadline(ctx context.Context, pod *corev1.Pod, node *corev1.Node) bool {
	if !w.honorNodeDeadlines || node == nil || !nodeDraining(node) || pod.DeletionTimestamp == nil {
		return false
	}
	dl, ok, err := webhook.ReadNodeDeadline(ctx, w.live, node.Name)
	if err != nil {
		w.log.V(1).Info("cannot read the NodeClaim of a lost pod's node", "node", node.Name, "error", err.Error())
	}
	return ok && deletedPastDeadline(pod, dl)
}

// node reads the pod's node; known is false when that could not be told.
func (w *lossWatch) node(ctx context.Context, name string) (*corev1.Node, bool) {
	if name == "" {
		return nil, false
	}
	n := &corev1.Node{}
	switch err := w.reader.Get(ctx, types.NamespacedName{Name: name}, n); {
	case err == nil:
		return n, true
	case apierrors.IsNotFound(err):
		return nil, true
	}
	return nil, false
}

// admit decides whether a loss is recorded: only a job runner-guard may
// re-run for that pod, with the credentials that reach it. It returns the
// record, or the outcome the loss is counted with now and why.
func (w *lossWatch) admit(ctx context.Context, l loss) (Record, Outcome, string) {
	rec, pod := l.rec, l.pod
	if l.distrust != "" {
		return rec, OutcomeUnnamed, l.distrust
	}
	if optedOut(pod) {
		return rec, OutcomeExcluded, fmt.Sprintf("the pod was annotated %s: \"false\": never re-run", AnnotationRerun)
	}
	if x := w.exclude.excludedRepository(rec.Repository); x != "" {
		return rec, OutcomeExcluded, fmt.Sprintf("rerun.exclude %q names repository %s: never re-run", x, rec.Repository)
	}
	repo, err := ghclient.RepoScope(rec.Repository)
	if err != nil {
		return rec, OutcomeUnnamed, fmt.Sprintf("the job's repository %q is no owner/repo", rec.Repository)
	}
	var scope ghclient.Scope
	rec.Credentials = CredentialsRef{Mode: CredentialsStatic}
	if l.er != nil {
		configURL, _, _ := unstructured.NestedString(l.er.Object, "spec", "githubConfigUrl")
		base, s, err := ghclient.APIBaseForConfigURL(configURL)
		if err != nil {
			return rec, OutcomeUnnamed, fmt.Sprintf("EphemeralRunner %s/%s: spec.githubConfigUrl: %s", l.er.GetNamespace(), l.er.GetName(), err.Error())
		}
		scope = s
		if !w.arcCredentials && w.staticBase != "" && !ghclient.SameBaseURL(base, ghclient.DefaultBaseURL) && !ghclient.SameBaseURL(base, w.staticBase) {
			return rec, OutcomeUnnamed, fmt.Sprintf("EphemeralRunner %s/%s is registered at %s, and runner-guard's static credentials reach %s: not asked there",
				l.er.GetNamespace(), l.er.GetName(), ghclient.RedactURL(base), ghclient.RedactURL(w.staticBase))
		}
		if w.arcCredentials {
			secret, _, _ := unstructured.NestedString(l.er.Object, "spec", "githubConfigSecret")
			if secret == "" {
				return rec, OutcomeUnnamed, fmt.Sprintf("EphemeralRunner %s/%s names no spec.githubConfigSecret: no credentials reach its job", l.er.GetNamespace(), l.er.GetName())
			}
			rec.Credentials = CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: l.er.GetNamespace(), Name: secret}, BaseURL: base}
		}
	} else {
		res, err := w.guard.Resolve(ctx, pod)
		if err != nil {
			return rec, OutcomeUnnamed, fmt.Sprintf("the pod's runner cannot be told: %s", err.Error())
		}
		scope = res.Runner.Scope
	}
	switch {
	case !repoCovered(scope, rec.Repository):
		return rec, OutcomeUnnamed, fmt.Sprintf("the job's repository %s is outside the runner's scope (%s): not recorded, no GitHub request", rec.Repository, scope)
	case !w.guard.ScopeBound(pod, repo):
		return rec, OutcomeUnnamed, fmt.Sprintf("the job's repository %s is outside what namespace %q may name (its scope binding): not recorded, no GitHub request", rec.Repository, pod.Namespace)
	}
	return rec, "", ""
}

// Reconcile writes a pending loss into its record's ConfigMap, or counts
// and says why it is not recorded; a record already there (a replayed
// delete) is left as it is.
func (w *lossWatch) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	w.mu.Lock()
	l, ok := w.pending[req.NamespacedName]
	w.mu.Unlock()
	if !ok {
		return reconcile.Result{}, nil
	}
	rec, out, why := w.admit(ctx, l)
	if out != "" {
		w.metrics.jobLost(rec.Cause, out)
		w.events.Eventf(l.pod, nil, corev1.EventTypeWarning, ReasonJobLost, "Record", "%s",
			truncate(fmt.Sprintf("%s was lost with its runner pod (%s) (%s): %s", jobTitle(rec), rec.Cause, out, why)))
		w.log.Info("a runner pod went away holding its job: not recorded", "pod", req.NamespacedName, "repository", rec.Repository,
			"runID", rec.RunID, "runner", rec.Runner, "cause", rec.Cause, "outcome", out, "why", why)
	} else {
		err := w.writer.Create(ctx, rec.ConfigMap(w.namespace))
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, fmt.Errorf("record %s: %w", rec.Job, err)
		}
		if err == nil {
			w.log.Info("a runner pod went away holding its job: recorded until its run completes",
				"pod", req.NamespacedName, "repository", rec.Repository, "runID", rec.RunID, "runner", rec.Runner, "jobID", rec.ID,
				"cause", rec.Cause, "credentials", rec.Credentials.String())
		}
	}
	w.mu.Lock()
	delete(w.pending, req.NamespacedName)
	w.mu.Unlock()
	return reconcile.Result{}, nil
}
