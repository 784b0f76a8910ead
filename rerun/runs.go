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
)

// refusedHint is what a refused re-run asks of the operator.
const refusedHint = "GitHub refused the re-run (403): give runner-guard's credential the right to re-run jobs (classic tokens: the repo scope; GitHub Apps and fine-grained tokens: actions: write), then re-run the job on GitHub"

// runReconciler decides a workflow run's lost-job records once GitHub
// reports the run completed. Its request is the records' namespace and the
// run's ID.
type runReconciler struct {
	reader    client.Reader
	writer    client.Client
	namespace string
	client    func(*ghclient.Credentials) (Runs, error)
	creds     *credsMemo
	enabled   bool
	maxPerRun int
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

func (r *runReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.log.WithValues("runID", req.Name)
	var list corev1.ConfigMapList
	if err := r.reader.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabels{LabelLostJob: "true", LabelRun: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list the records of run %s: %w", req.Name, err)
	}
	var waiting []item
	reruns := 0
	for i := range list.Items {
		cm := &list.Items[i]
		rec, err := parseRecord(cm)
		switch {
		case err != nil:
			log.Error(err, "a lost-job record runner-guard cannot read: deleted")
			_ = r.writer.Delete(ctx, cm)
		case rec.State == StateRerun:
			reruns++
		}
		switch {
		case err != nil:
		case rec.State.Done() && r.now().Sub(rec.Recorded) > keepDone:
			if err := r.writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("delete the old record %s: %w", cm.Name, err)
			}
			r.creds.drop(cm.Name)
		case !rec.State.Done():
			waiting = append(waiting, item{cm: cm, rec: rec})
		}
	}
	if len(waiting) == 0 {
		return reconcile.Result{}, nil
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].rec.Runner < waiting[j].rec.Runner })
	first := waiting[0].rec
	gh, err := r.client(r.creds.get(first.Name()))
	if err != nil {
		log.Error(err, "no GitHub client for the run's records: asked again later")
		return reconcile.Result{RequeueAfter: r.poll}, nil
	}
	recs := make([]Record, len(waiting))
	for i, it := range waiting {
		recs[i] = it.rec
	}
	st := r.stepper()
	out, again, err := st.advance(ctx, gh, recs, reruns)
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
				return reconcile.Result{}, err
			}
			continue
		}
		if err := r.decide(ctx, waiting[i], c.lost); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

// stepper is the reconciler's GitHub side.
func (r *runReconciler) stepper() stepper {
	return stepper{enabled: r.enabled, maxPerRun: r.maxPerRun, poll: r.poll, log: r.log}
}

// stepper decides a run's waiting records from GitHub's answers; it knows
// nothing of Kubernetes.
type stepper struct {
	enabled   bool
	maxPerRun int
	poll      time.Duration
	log       logr.Logger
}

// change is what became of one record: changed says it must be saved, lost
// that the job did not succeed (jobs_lost_total).
type change struct {
	rec     Record
	changed bool
	lost    bool
}

// advance asks GitHub about the run of recs (its waiting records, all of
// one run) and decides what it can; reruns is how many jobs of the run were
// re-run already. It returns each record's change, in recs' order, and when
// to ask again (0: all decided). It makes at most three requests: the run,
// once completed its attempt's jobs, and one re-run.
func (s stepper) advance(ctx context.Context, gh Runs, recs []Record, reruns int) ([]change, time.Duration, error) {
	out := make([]change, len(recs))
	for i, rec := range recs {
		out[i].rec = rec
	}
	decideAll := func(st State, msg string) ([]change, time.Duration, error) {
		for i := range out {
			out[i].rec.State, out[i].rec.Message, out[i].changed = st, msg, true
		}
		return out, 0, nil
	}
	first := recs[0]
	repo, err := ghclient.RepoScope(first.Repository)
	if err != nil {
		return decideAll(StateUnknown, fmt.Sprintf("the job's repository %q is no owner/repo", first.Repository))
	}
	run, err := gh.WorkflowRun(ctx, repo, first.RunID)
	switch {
	case errors.Is(err, ghclient.ErrNotFound):
		return decideAll(StateUnknown, fmt.Sprintf("GitHub does not know workflow run %d of %s (or the credential cannot see it)", first.RunID, repo.Name))
	case err != nil:
		return out, s.later(err), err
	}
	var current []int
	for i := range out {
		rec := &out[i].rec
		switch {
		case rec.Attempt == 0:
			// The job belongs to the attempt the run had when first asked.
			rec.Attempt, out[i].changed = run.Attempt, true
			current = append(current, i)
		case rec.Attempt < run.Attempt:
			rec.State, out[i].changed = StateSuperseded, true
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
	case errors.Is(err, ghclient.ErrRerunRefused):
		s.log.Error(err, refusedHint, "repository", repo.Name, "runID", run.ID)
		for k := range outs {
			if outs[k].state == StateRerun {
				outs[k].state = StateLost
				outs[k].message = fmt.Sprintf("job %q was lost with its runner pod (%s); %s", outs[k].jobName, cur[outs[k].index].Cause, refusedHint)
			}
		}
	case err != nil:
		return out, s.later(err), err
	}
	for _, o := range outs {
		c := &out[current[o.index]]
		c.rec.State, c.rec.JobID, c.rec.JobName, c.rec.Message = o.state, o.jobID, o.jobName, o.message
		c.changed, c.lost = true, o.lost
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
// metrics, a log line. Saved first, so a restart never says it twice for
// the same record... nor re-runs it: a re-run starts a newer attempt.
func (r *runReconciler) decide(ctx context.Context, it item, lost bool) error {
	if err := r.save(ctx, it); err != nil {
		return err
	}
	rec := it.rec
	r.creds.drop(rec.Name())
	if lost {
		r.metrics.jobLost(rec.Cause)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}}
	note := fmt.Sprintf("%s: %s", jobTitle(rec), rec.Message)
	switch rec.State {
	case StateRerun:
		r.metrics.jobRerun(rec.Cause)
		r.events.Eventf(pod, nil, corev1.EventTypeNormal, ReasonJobRerun, "Rerun", "%s", truncate(note))
	case StateLost, StateSuperseded, StateUnknown:
		r.events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonJobLost, "Record", "%s", truncate(note))
	}
	r.log.Info("lost job decided", "state", rec.State, "repository", rec.Repository, "runID", rec.RunID,
		"runner", rec.Runner, "job", rec.JobName, "jobID", rec.JobID, "cause", rec.Cause, "message", rec.Message)
	return nil
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
func NewStepper(enabled bool, maxPerRun int, poll time.Duration) Stepper {
	return Stepper{s: stepper{enabled: enabled, maxPerRun: maxPerRun, poll: poll, log: logr.Discard()}}
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
