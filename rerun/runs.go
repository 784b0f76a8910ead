package rerun

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// refusedHint is what a refused re-run asks of the operator.
const refusedHint = "GitHub refused the re-run (403): give runner-guard's credential the right to re-run jobs (classic tokens: the repo scope; GitHub Apps and fine-grained tokens: actions: write), then re-run the job on GitHub"

// runReconciler decides a workflow run's lost-job records once GitHub
// reports the run completed. Its request is the records' namespace and the
// run's ID.
type runReconciler struct {
	reader client.Reader
	writer client.Client
	// secrets reads ARC's credentials Secrets, live.
	secrets   client.Reader
	namespace string
	client    func(*ghclient.Credentials) (Runs, error)
	enabled   bool
	maxPerRun int
	exclude   Exclusions
	poll      time.Duration
	events    events.EventRecorder
	metrics   *Metrics
	now       func() time.Time
	log       logr.Logger
}

// item is a record and its ConfigMap.
type item struct {
	cm  *corev1.ConfigMap
	rec Record
}

// legacyMessage decides a waiting record an older runner-guard wrote: it
// kept neither the credentials that reach the job nor its job ID, so it is
// not asked about.
const legacyMessage = "recorded by an older runner-guard that kept neither the credentials reaching the job nor its job ID: not asked about, re-run it on GitHub if it failed"

func (r *runReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.log.WithValues("runID", req.Name)
	var list corev1.ConfigMapList
	if err := r.reader.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabels{LabelLostJob: "true", LabelRun: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list the records of run %s: %w", req.Name, err)
	}
	now := r.now()
	var waiting []item
	reruns := 0
	for i := range list.Items {
		cm := &list.Items[i]
		rec, err := parseRecord(cm)
		if err != nil {
			log.Error(err, "a lost-job record runner-guard cannot read: deleted")
			_ = r.writer.Delete(ctx, cm)
			continue
		}
		if rec.State == StateRerun {
			reruns++
		}
		it := item{cm: cm, rec: rec}
		switch {
		case rec.State.Done() && now.After(rec.Expires()):
			if err := r.writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("delete the old record %s: %w", cm.Name, err)
			}
		case rec.State.Done():
		case rec.Legacy:
			log.Info("a lost-job record of an older runner-guard: decided without asking GitHub", "record", cm.Name, "repository", rec.Repository, "runner", rec.Runner)
			it.rec.State, it.rec.Outcome, it.rec.Message = StateUnknown, OutcomeUnnamed, legacyMessage
			if err := r.decide(ctx, it); err != nil {
				return reconcile.Result{}, err
			}
		case now.After(rec.Expires()):
			it.rec.State, it.rec.Outcome = StateExpired, OutcomeRefused
			it.rec.Message = fmt.Sprintf("not decided by %s, 31 days after its run started: GitHub re-runs nothing older than 30 days (last: %s)", rec.Expires().UTC().Format(time.RFC3339), rec.Message)
			if err := r.decide(ctx, it); err != nil {
				return reconcile.Result{}, err
			}
		default:
			waiting = append(waiting, it)
		}
	}
	if len(waiting) == 0 {
		return reconcile.Result{}, nil
	}
	// Records of one run reached through other credentials are asked
	// about apart, each with its own.
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].rec.Runner < waiting[j].rec.Runner })
	groups := map[CredentialsRef][]item{}
	var refs []CredentialsRef
	for _, it := range waiting {
		ref := it.rec.Credentials
		if _, ok := groups[ref]; !ok {
			refs = append(refs, ref)
		}
		groups[ref] = append(groups[ref], it)
	}
	var again time.Duration
	for _, ref := range refs {
		a, err := r.advanceGroup(ctx, log, ref, groups[ref], reruns)
		if err != nil {
			return reconcile.Result{}, err
		}
		if a > 0 && (again == 0 || a < again) {
			again = a
		}
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

// advanceGroup asks GitHub about waiting records of one run reached with
// ref's credentials, and saves and says what became of them. Credentials
// that cannot be resolved leave the records waiting, their Message and an
// Event saying why: no other credentials are ever used.
func (r *runReconciler) advanceGroup(ctx context.Context, log logr.Logger, ref CredentialsRef, waiting []item, reruns int) (time.Duration, error) {
	gh, why := r.clientOf(ctx, ref)
	if why != "" {
		why = fmt.Sprintf("waits: the credentials that reach the job (%s) cannot be resolved: %s; no other credentials are used", ref, why)
		for _, it := range waiting {
			if it.rec.Message == why {
				continue
			}
			it.rec.Message = why
			if err := r.save(ctx, it); err != nil {
				return 0, err
			}
			r.events.Eventf(podOf(it.rec), nil, corev1.EventTypeWarning, ReasonJobRerunWaiting, "Resolve", "%s", truncate(fmt.Sprintf("%s: %s", jobTitle(it.rec), why)))
			log.Info("a lost job's credentials cannot be resolved: it waits", "record", it.cm.Name, "credentials", ref.String(), "why", why)
		}
		return r.poll, nil
	}
	recs := make([]Record, len(waiting))
	for i, it := range waiting {
		recs[i] = it.rec
	}
	out, again, err := r.stepper().advance(ctx, gh, recs, reruns)
	if err != nil {
		log.Error(err, "asking GitHub about a run with lost jobs: asked again later")
	}
	for i, c := range out {
		if !c.changed {
			continue
		}
		waiting[i].rec = c.rec
		if !c.rec.State.Done() {
			if err := r.save(ctx, waiting[i]); err != nil {
				return 0, err
			}
			continue
		}
		if err := r.decide(ctx, waiting[i]); err != nil {
			return 0, err
		}
	}
	return again, nil
}

// clientOf resolves ref into a GitHub client, or says why it cannot.
func (r *runReconciler) clientOf(ctx context.Context, ref CredentialsRef) (Runs, string) {
	var creds *ghclient.Credentials
	switch ref.Mode {
	case CredentialsStatic:
	case CredentialsARC:
		var secret corev1.Secret
		if r.secrets == nil {
			return nil, "runner-guard reads no Secrets here"
		}
		if err := r.secrets.Get(ctx, ref.Secret, &secret); err != nil {
			return nil, fmt.Sprintf("reading Secret %s: %s", ref.Secret, err.Error())
		}
		c, err := arc.CredentialsFromSecret(&secret)
		if err != nil {
			return nil, fmt.Sprintf("Secret %s: %s", ref.Secret, err.Error())
		}
		c.BaseURL = ref.BaseURL
		creds = c
	default:
		return nil, fmt.Sprintf("unknown credentials mode %q", ref.Mode)
	}
	gh, err := r.client(creds)
	if err != nil {
		return nil, err.Error()
	}
	return gh, ""
}

// stepper is the reconciler's GitHub side.
func (r *runReconciler) stepper() stepper {
	return stepper{enabled: r.enabled, maxPerRun: r.maxPerRun, exclude: r.exclude, poll: r.poll, log: r.log}
}

// stepper decides a run's waiting records from GitHub's answers; it knows
// nothing of Kubernetes.
type stepper struct {
	enabled   bool
	maxPerRun int
	exclude   Exclusions
	poll      time.Duration
	log       logr.Logger
}

// change is what became of one record: changed says it must be saved.
type change struct {
	rec     Record
	changed bool
}

// advance asks GitHub about the run of recs (its waiting records, all of
// one run, reached with one client) and decides what it can; reruns is how
// many jobs of the run were re-run already. It returns each record's
// change, in recs' order, and when to ask again (0: all decided). It makes
// at most three requests: the run, once completed its attempt's jobs, and
// one re-run; none for a repository rerun.exclude names.
func (s stepper) advance(ctx context.Context, gh Runs, recs []Record, reruns int) ([]change, time.Duration, error) {
	out := make([]change, len(recs))
	for i, rec := range recs {
		out[i].rec = rec
	}
	decideAll := func(st State, o Outcome, msg string) ([]change, time.Duration, error) {
		for i := range out {
			out[i].rec.State, out[i].rec.Outcome, out[i].rec.Message, out[i].changed = st, o, msg, true
		}
		return out, 0, nil
	}
	first := recs[0]
	if x := s.exclude.excludedRepository(first.Repository); x != "" {
		return decideAll(StateExcluded, OutcomeExcluded, fmt.Sprintf("rerun.exclude %q names repository %s: never re-run", x, first.Repository))
	}
	repo, err := ghclient.RepoScope(first.Repository)
	if err != nil {
		return decideAll(StateUnknown, OutcomeUnnamed, fmt.Sprintf("the job's repository %q is no owner/repo", first.Repository))
	}
	run, err := gh.WorkflowRun(ctx, repo, first.RunID)
	switch {
	case errors.Is(err, ghclient.ErrNotFound):
		return decideAll(StateUnknown, OutcomeUnnamed, fmt.Sprintf("GitHub does not know workflow run %d of %s (or the credential cannot see it)", first.RunID, repo.Name))
	case err != nil:
		return out, s.later(err), err
	}
	if x := s.exclude.excludedWorkflow(first.Repository, run.Path); x != "" {
		return decideAll(StateExcluded, OutcomeExcluded, fmt.Sprintf("rerun.exclude %q names workflow %s of %s: never re-run", x, run.Path, first.Repository))
	}
	var current []int
	for i := range out {
		rec := &out[i].rec
		if rec.RunStarted.IsZero() && !run.Started.IsZero() {
			rec.RunStarted, out[i].changed = run.Started, true
		}
		switch {
		case rec.Attempt == 0:
			// The job belongs to the attempt the run had when first asked.
			rec.Attempt, out[i].changed = run.Attempt, true
			current = append(current, i)
		case rec.Attempt < run.Attempt:
			rec.State, rec.Outcome, out[i].changed = StateSuperseded, OutcomeEnded, true
			rec.Message = fmt.Sprintf("the run has attempt %d already (the job ran in attempt %d): it was re-run, so runner-guard does not", run.Attempt, rec.Attempt)
		default:
			current = append(current, i)
		}
	}
	if len(current) == 0 {
		return out, 0, nil
	}
	if !run.Completed() {
		return out, s.poll, nil
	}
	jobs, err := gh.AttemptJobs(ctx, repo, run.ID, run.Attempt)
	if err != nil {
		return out, s.later(err), err
	}
	cur := make([]Record, len(current))
	for k, i := range current {
		cur[k] = out[i].rec
	}
	act, outs := plan(run, jobs, cur, s.enabled, s.maxPerRun-reruns, s.maxPerRun)
	switch act.kind {
	case actRerunJob:
		err = gh.RerunJob(ctx, repo, act.jobID)
	case actRerunFailed:
		err = gh.RerunFailedJobs(ctx, repo, run.ID)
	}
	switch {
	case errors.Is(err, ghclient.ErrRerunRefused), errors.Is(err, ghclient.ErrNotFound):
		s.log.Error(err, refusedHint, "repository", repo.Name, "runID", run.ID)
		for k := range outs {
			if outs[k].state == StateRerun {
				outs[k].state, outs[k].outcome = StateLost, OutcomeRefused
				outs[k].message = fmt.Sprintf("job %q was lost with its runner pod (%s); %s (%s)", outs[k].jobName, cur[outs[k].index].Cause, refusedHint, err.Error())
			}
		}
	case err != nil:
		return out, s.later(err), err
	}
	for _, o := range outs {
		c := &out[current[o.index]]
		c.rec.State, c.rec.Outcome, c.rec.JobName, c.rec.Message = o.state, o.outcome, o.jobName, o.message
		if o.jobID > 0 {
			c.rec.JobID = o.jobID
		}
		c.changed = true
	}
	return out, 0, nil
}

// later is when to ask again after a GitHub error: its wait for a rate
// limit or a spent budget, else the poll.
func (s stepper) later(err error) time.Duration {
	var rl *ghclient.RateLimited
	var spent *ghclient.Spent
	switch {
	case errors.As(err, &rl):
		return max(rl.RetryAfter, s.poll)
	case errors.As(err, &spent):
		return max(spent.RetryAfter, s.poll)
	}
	return s.poll
}

// decide saves a decided record, then says so: an Event on the pod, the
// metrics (every decided record counts once, by its outcome), a log line.
// Saved first, so a restart never says it twice for the same record... nor
// re-runs it: a re-run starts a newer attempt.
func (r *runReconciler) decide(ctx context.Context, it item) error {
	if err := r.save(ctx, it); err != nil {
		return err
	}
	rec := it.rec
	r.metrics.jobLost(rec.Cause, rec.Outcome)
	note := fmt.Sprintf("%s (%s): %s", jobTitle(rec), rec.Outcome, rec.Message)
	switch rec.Outcome {
	case OutcomeRerun:
		r.metrics.jobRerun(rec.Cause)
		r.events.Eventf(podOf(rec), nil, corev1.EventTypeNormal, ReasonJobRerun, "Rerun", "%s", truncate(note))
	case OutcomeEnded:
		r.events.Eventf(podOf(rec), nil, corev1.EventTypeNormal, ReasonLostJobEnded, "Record", "%s", truncate(note))
	default:
		r.events.Eventf(podOf(rec), nil, corev1.EventTypeWarning, ReasonJobLost, "Record", "%s", truncate(note))
	}
	r.log.Info("lost job decided", "state", rec.State, "outcome", rec.Outcome, "repository", rec.Repository, "runID", rec.RunID,
		"runner", rec.Runner, "job", rec.JobName, "jobID", rec.JobID, "cause", rec.Cause, "message", rec.Message)
	return nil
}

// podOf is the pod a record's Events are about (it may be long gone: the
// Event stays in its namespace).
func podOf(rec Record) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}}
}

// save writes the record back into its ConfigMap.
func (r *runReconciler) save(ctx context.Context, it item) error {
	cm := it.cm.DeepCopy()
	it.rec.into(cm)
	if err := r.writer.Update(ctx, cm); err != nil {
		return fmt.Errorf("save the record of %s: %w", it.rec.Job, err)
	}
	it.cm.ResourceVersion = cm.ResourceVersion
	return nil
}

func jobTitle(rec Record) string {
	name := rec.JobName
	if name == "" {
		name = "job of runner " + strconv.Quote(rec.Runner)
	} else {
		name = "job " + strconv.Quote(name)
	}
	return fmt.Sprintf("%s in workflow run %d of %s", name, rec.RunID, rec.Repository)
}

// truncate keeps an Event's note under the API server's 1 kB limit.
func truncate(s string) string {
	const limit = 1000
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}

// Stepper is the GitHub side of deciding a run's lost-job records, apart
// from Kubernetes (the bench drives it as the controller does).
type Stepper struct{ s stepper }

// NewStepper decides as the controller with those options does.
func NewStepper(enabled bool, maxPerRun int, poll time.Duration, exclude Exclusions) Stepper {
	return Stepper{s: stepper{enabled: enabled, maxPerRun: maxPerRun, exclude: exclude, poll: poll, log: logr.Discard()}}
}

// Advance asks GitHub about the run of recs (waiting records of one run)
// and returns them as they now stand and when to ask again (0: all decided).
func (s Stepper) Advance(ctx context.Context, gh Runs, recs []Record, reruns int) ([]Record, time.Duration, error) {
	out, again, err := s.s.advance(ctx, gh, recs, reruns)
	recs = make([]Record, len(out))
	for i, c := range out {
		recs[i] = c.rec
	}
	return recs, again, err
}
