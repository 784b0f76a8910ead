package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// lostJobs measures the re-run path (package rerun's GitHub side, through
// ghclient, against a fake GitHub of its own): 100 lost jobs in 10 runs of
// one repository, each run with one more job whose pod finished it and went.
// Each run completes at a random moment in its first 5 minutes; the records
// are asked about every rerun.DefaultPoll from when they were written, on a
// simulated clock, as the controller requeues them. Then 10 runs the user
// cancelled, each with a record of a pod that went. Figures: the p99 from a
// run's completion to its re-run request (the poll's wait plus the real time
// of the requests), all requests of the path per lost job (the first 10
// runs), and re-runs of jobs that were finished or cancelled.
func (e *env) lostJobs() error {
	gh := ghfake.New()
	gh.SetToken(token)
	srv := httptest.NewServer(gh)
	defer srv.Close()
	// The clock is simulated: the budget, counted in real time, would see
	// hours of polls in a second.
	c, err := ghclient.New(ghclient.Config{BaseURL: srv.URL, AllowHTTP: true, Token: token, Budgets: unlimitedBudget()})
	if err != nil {
		return err
	}
	const runs, lostPerRun = 10, 10
	st := rerun.NewStepper(true, lostPerRun, rerun.DefaultPoll, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	var delays []time.Duration
	lost, wrongReruns, calls := 0, 0, 0
	for r := range 2 * runs {
		cancelled := r >= runs
		if r == runs {
			calls = len(gh.Requests())
		}
		run := gh.AddRun("acme/app", fmt.Sprintf("ci-%d", r))
		var recs []rerun.Record
		notLost := map[string]bool{}
		for i := range lostPerRun + 1 {
			runner := fmt.Sprintf("runner-%d-%d", r, i)
			job, err := gh.AddJob(run, fmt.Sprintf("job-%d", i), runner)
			if err != nil {
				return err
			}
			switch {
			case cancelled: // the whole run, by the user
				notLost[runner] = true
			case i == lostPerRun: // its pod finished the job, then went
				_ = gh.FinishJob(job, ghfake.ConclusionSuccess)
				notLost[runner] = true
			default:
				lost++
			}
			recs = append(recs, rerun.Record{Job: rerun.Job{Repository: "acme/app", RunID: run, Runner: runner},
				Cause: rerun.CauseNodeGone, State: rerun.StateWaiting, Recorded: time.Now()})
		}
		end := ghfake.ConclusionFailure
		if cancelled {
			end = ghfake.ConclusionCancelled
		}
		d, out, err := untilDecided(gh, c, st, run, recs, time.Duration(rng.Int64N(int64(5*time.Minute))), end)
		if err != nil {
			return err
		}
		if !cancelled {
			delays = append(delays, d)
		}
		for _, rec := range out {
			if rec.State == rerun.StateRerun && notLost[rec.Runner] {
				wrongReruns++
			}
		}
		for _, j := range gh.Jobs(run, 2) {
			if j.Status == ghfake.StatusQueued && notLost[runnerOf(gh.Jobs(run, 1), j.Name)] {
				wrongReruns++
			}
		}
	}
	slices.Sort(delays)
	p99 := delays[min(len(delays)-1, len(delays)*99/100)].Seconds()
	perJob := float64(calls) / float64(lost)
	e.record("rerun_after_run_completed_p99_s", p99, "s", "<= 60", p99 <= 60, fmt.Sprintf("polled every %s, simulated clock", rerun.DefaultPoll))
	e.record("calls_per_lost_job", perJob, "requests", "<= 4", perJob <= 4, fmt.Sprintf("%d lost jobs in %d runs of one repository", lost, runs))
	e.record("reruns_of_finished_or_cancelled_jobs", float64(wrongReruns), "requests", "0", wrongReruns == 0, "a finished job in each run, 10 runs cancelled")
	return e.lostJobsGuarded()
}

// untilDecided asks about the run's records every poll on a simulated
// clock, completing the run with end at completes, until all are decided:
// it returns the wait from completion to the decision (the real time of
// the last step's requests included) and the records.
func untilDecided(gh *ghfake.Fake, c *ghclient.Client, st rerun.Stepper, run int64, recs []rerun.Record, completes time.Duration, end string) (time.Duration, []rerun.Record, error) {
	completed := false
	for now := time.Duration(0); ; now += rerun.DefaultPoll {
		if !completed && now >= completes {
			if err := gh.CompleteRun(run, end); err != nil {
				return 0, nil, err
			}
			completed = true
		}
		start := time.Now()
		out, again, err := st.Advance(context.Background(), c, recs, 0)
		if err != nil {
			return 0, nil, err
		}
		recs = out
		if again == 0 {
			return now - completes + time.Since(start), recs, nil
		}
	}
}

// runnerOf names the runner of the job called name.
func runnerOf(jobs []ghfake.WorkflowJob, name string) string {
	for _, j := range jobs {
		if j.Name == name && j.RunnerName != nil {
			return *j.RunnerName
		}
	}
	return ""
}

// The guarded re-run path (issue 38): the lost-job watch and the re-run
// controller (rerun.Offline) behind a real webhook.Handler with scope
// bindings, against a fake GitHub holding every run a record could name.
// Two tenants, team-a bound to org:org-a and team-b to org:org-b, each
// with scale-set runners: their own jobs, EphemeralRunners that name the
// other organization's repository (with their own or the other
// organization's config URL), and pods whose EphemeralRunner is not their
// controller; with static credentials and with ARC's, every loss recorded
// by one process and decided by another (a restart). Then persistent
// legacy runners that ran 1 to 5 jobs of one attempt before the loss, the
// last one's annotation on the pod; and pods that opted out or whose
// repository or workflow rerun.exclude names. Figures: re-runs and any
// request of the path for a repository outside the pod namespace's
// binding, re-runs of a job other than the one lost, re-runs after an
// opt-out, and losses not counted in exactly one outcome.
func (e *env) lostJobsGuarded() error {
	ctx := context.Background()
	const eventsSecret = "bench-events-secret"
	keys, err := jobannotation.Single([]byte(eventsSecret))
	if err != nil {
		return err
	}
	cfg := webhook.DefaultConfig()
	cfg.ScopeBindings = []webhook.ScopeBinding{
		{Name: "team-a", Namespaces: []string{"team-a"}, Scopes: []string{"org:org-a"}},
		{Name: "team-b", Namespaces: []string{"team-b"}, Scopes: []string{"org:org-b"}},
		{Name: "legacy", Namespaces: []string{"legacy"}, Scopes: []string{"org:acme"}},
	}
	if err := cfg.Complete(); err != nil {
		return err
	}
	bound := map[string]string{"team-a": "org-a", "team-b": "org-b", "legacy": "acme"}

	var outsideReruns, outsideRequests, wrongJob, afterOptOut, lostFed int
	// insideReruns and legacyReruns show the path does re-run what it may.
	var insideReruns, legacyReruns int
	var counted float64
	for _, arcCreds := range []bool{false, true} {
		gh := ghfake.New()
		gh.SetToken(token)
		srv := httptest.NewServer(gh)
		calls := &callLog{}
		clientOf := func(creds *ghclient.Credentials) (rerun.Runs, error) {
			c, err := ghclient.New(ghclient.Config{BaseURL: srv.URL, AllowHTTP: true, Token: token, Budgets: unlimitedBudget()})
			if err != nil {
				return nil, err
			}
			key := "static"
			if creds != nil {
				key = creds.Key
			}
			return &loggedRuns{Runs: c, key: key, log: calls}, nil
		}
		api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
		for ns := range bound {
			if err := api.Create(ctx, fixture.ARCSecret(ns, "gh-"+ns, map[string]string{"github_token": token})); err != nil {
				return err
			}
		}
		router, err := ghclient.NewRouter(ghclient.RouterConfig{})
		if err != nil {
			return err
		}
		h, err := webhook.NewHandler(webhook.Options{Config: cfg, GitHub: router, Pods: api,
			Runners: arc.NewResolver(arc.Options{Reader: api, CredentialsFromARC: arcCreds, StaticCredentials: true}), Metrics: webhook.NewMetrics()})
		if err != nil {
			return err
		}
		lost := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runner_guard_jobs_lost_total"}, []string{"cause", "outcome"})
		metrics := rerun.NewMetrics(lost)
		exclude, err := rerun.ParseExclusions([]string{"org-a/frozen-*", ".github/workflows/release.yml"})
		if err != nil {
			return err
		}
		offline := func() *rerun.Offline {
			return rerun.NewOffline(rerun.OfflineOptions{API: api, Namespace: "runner-guard-system", Guard: h, JobKeys: keys,
				ARCCredentials: arcCreds, Client: clientOf, Exclude: exclude, Enabled: true, MaxPerRun: 10, Metrics: metrics})
		}
		before := offline()
		var runs []int64
		// the job's repository, by run, for the binding of the pod's namespace
		outside := map[int64]bool{}
		optedOut := map[int64]bool{}
		lastJob := map[int64]int64{}
		n := 0
		scaleSet := func(ns, configOrg, repo string, controller bool) error {
			n++
			name := fmt.Sprintf("runner-%d", n)
			run := gh.AddRun(repo, "ci")
			job, _ := gh.AddJob(run, "build", name)
			_ = gh.FinishJob(job, ghfake.ConclusionFailure)
			runs = append(runs, run)
			owner, _, _ := strings.Cut(repo, "/")
			outside[run] = owner != bound[ns]
			er := fixture.MakeEphemeralRunner(ns, name).ConfigURL("https://github.com/"+configOrg).ConfigSecret("gh-"+ns).
				Field(repo, "status", "jobRepositoryName").Field(run, "status", "workflowRunId").Field(name, "status", "runnerName")
			pod := fixture.MakeScaleSetRunnerPod(ns, name)
			if controller {
				pod = pod.OwnedByEphemeralRunner(er)
			} else {
				pod = pod.OwnedByEphemeralRunner(fixture.MakeEphemeralRunner(ns, name).UID("uid-copied"))
			}
			lostFed++
			return before.PodDeleted(ctx, pod.Running().Obj(), er.Obj())
		}
		for _, t := range []struct{ ns, own, other string }{{"team-a", "org-a", "org-b"}, {"team-b", "org-b", "org-a"}} {
			for i := range 5 {
				for _, c := range []struct {
					configOrg, repo string
					controller      bool
				}{
					{t.own, fmt.Sprintf("%s/app-%d", t.own, i), true},
					{t.own, fmt.Sprintf("%s/app-%d", t.other, i), true},
					{t.other, fmt.Sprintf("%s/app-%d", t.other, i), true},
					{t.own, fmt.Sprintf("%s/app-%d", t.own, i), false},
				} {
					if err := scaleSet(t.ns, c.configOrg, c.repo, c.controller); err != nil {
						return err
					}
				}
			}
		}
		// Opt-outs: the pod's annotation, an excluded repository, an excluded workflow.
		for i := range 3 {
			n++
			name := fmt.Sprintf("runner-%d", n)
			repo, workflow := "org-a/app", "ci"
			switch i {
			case 1:
				repo = "org-a/frozen-1"
			case 2:
				workflow = "release"
			}
			run := gh.AddRun(repo, workflow)
			job, _ := gh.AddJob(run, "build", name)
			_ = gh.FinishJob(job, ghfake.ConclusionFailure)
			runs = append(runs, run)
			optedOut[run] = true
			er := fixture.MakeEphemeralRunner("team-a", name).ConfigURL("https://github.com/org-a").ConfigSecret("gh-team-a").
				Field(repo, "status", "jobRepositoryName").Field(run, "status", "workflowRunId")
			pod := fixture.MakeScaleSetRunnerPod("team-a", name).OwnedByEphemeralRunner(er).Running()
			if i == 0 {
				pod = pod.Annotation(rerun.AnnotationRerun, "false")
			}
			lostFed++
			if err := before.PodDeleted(ctx, pod.Obj(), er.Obj()); err != nil {
				return err
			}
		}
		// Persistent legacy runners that ran k jobs of one attempt, lost during the last.
		for k := 1; k <= 5; k++ {
			for i := range 4 {
				name := fmt.Sprintf("legacy-%d-%d", k, i)
				run := gh.AddRun("acme/app", "ci")
				var job int64
				for j := range k {
					job, _ = gh.AddJob(run, fmt.Sprintf("job-%d", j), name)
					if j < k-1 {
						end := ghfake.ConclusionFailure // failed on its own merits
						if j%2 == 1 {
							end = ghfake.ConclusionSuccess
						}
						_ = gh.FinishJob(job, end)
					}
				}
				_ = gh.FinishJob(job, ghfake.ConclusionFailure)
				runs = append(runs, run)
				lastJob[run] = job
				pod := fixture.MakeLegacyRunnerPod("legacy", name).Org("acme").Running().Obj()
				v, err := keys.Value(jobannotation.Record{Job: jobannotation.Job{Repository: "acme/app", RunID: run, Attempt: 1, JobID: job, Name: fmt.Sprintf("job-%d", k-1)},
					State: jobannotation.StateInProgress, At: time.Now()}, string(pod.UID))
				if err != nil {
					return err
				}
				pod.Annotations = map[string]string{rerun.AnnotationJob: v}
				lostFed++
				if err := before.PodDeleted(ctx, pod, nil); err != nil {
					return err
				}
			}
		}
		// A restart: another process decides the records.
		after := offline()
		for _, run := range runs {
			if _, err := after.Decide(ctx, run); err != nil {
				return err
			}
			_ = gh.CompleteRun(run, ghfake.ConclusionFailure)
			for range 3 {
				again, err := after.Decide(ctx, run)
				if err != nil {
					return err
				}
				if again == 0 {
					break
				}
			}
		}
		srv.Close()
		for _, c := range calls.all() {
			if outside[c.run] {
				outsideRequests++
				if c.rerun {
					outsideReruns++
				}
			}
			if c.rerun && optedOut[c.run] {
				afterOptOut++
			}
			if c.rerun && lastJob[c.run] != 0 && c.job != lastJob[c.run] {
				wrongJob++
			}
			switch {
			case c.rerun && lastJob[c.run] != 0:
				legacyReruns++
			case c.rerun && !outside[c.run] && !optedOut[c.run]:
				insideReruns++
			}
		}
		for _, cause := range rerun.Causes {
			for _, o := range rerun.Outcomes {
				counted += testutil.ToFloat64(lost.WithLabelValues(string(cause), string(o)))
			}
		}
	}
	uncounted := float64(lostFed) - counted
	e.record("reruns_outside_binding", float64(outsideReruns), "re-runs", "0", outsideReruns == 0,
		fmt.Sprintf("2 tenants, EphemeralRunners naming the other organization's repositories or not the pod's controller; static and ARC credentials; decided after a restart; %d re-runs inside the bindings", insideReruns))
	e.record("requests_outside_binding_by_reruns", float64(outsideRequests), "requests", "0", outsideRequests == 0, "the same")
	e.record("wrong_job_reruns", float64(wrongJob), "re-runs", "0", wrongJob == 0, fmt.Sprintf("persistent runners that ran 1 to 5 jobs of one attempt, lost during the last, in both worlds; %d re-runs", legacyReruns))
	e.record("reruns_after_opt_out", float64(afterOptOut), "re-runs", "0", afterOptOut == 0, "runner-guard.io/rerun: \"false\", an excluded repository, an excluded workflow")
	e.record("lost_jobs_uncounted", uncounted, "jobs", "0", uncounted == 0, fmt.Sprintf("%d losses, each in exactly one outcome of runner_guard_jobs_lost_total", lostFed))
	return nil
}

// call is one request of the re-run path: the run (of a GET or a listing, or
// the run a re-run is of), whether it re-ran, the job re-run, the
// credentials' key.
type call struct {
	run   int64
	rerun bool
	job   int64
	key   string
}

type callLog struct {
	mu    sync.Mutex
	calls []call
	// jobRuns maps job IDs to runs, learnt from listings.
	jobRuns map[int64]int64
}

func (l *callLog) add(c call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.job != 0 && c.run == 0 {
		c.run = l.jobRuns[c.job]
	}
	l.calls = append(l.calls, c)
}

func (l *callLog) jobsOf(run int64, jobs []ghclient.WorkflowJob) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jobRuns == nil {
		l.jobRuns = map[int64]int64{}
	}
	for _, j := range jobs {
		l.jobRuns[j.ID] = run
	}
}

func (l *callLog) all() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// loggedRuns logs each call of the re-run path before it is sent.
type loggedRuns struct {
	rerun.Runs
	key string
	log *callLog
}

func (r *loggedRuns) WorkflowRun(ctx context.Context, repo ghclient.Scope, runID int64) (ghclient.WorkflowRun, error) {
	r.log.add(call{run: runID, key: r.key})
	return r.Runs.WorkflowRun(ctx, repo, runID)
}

func (r *loggedRuns) AttemptJobs(ctx context.Context, repo ghclient.Scope, runID int64, attempt int) ([]ghclient.WorkflowJob, error) {
	r.log.add(call{run: runID, key: r.key})
	jobs, err := r.Runs.AttemptJobs(ctx, repo, runID, attempt)
	r.log.jobsOf(runID, jobs)
	return jobs, err
}

func (r *loggedRuns) RerunJob(ctx context.Context, repo ghclient.Scope, jobID int64) error {
	r.log.add(call{rerun: true, job: jobID, key: r.key})
	return r.Runs.RerunJob(ctx, repo, jobID)
}

func (r *loggedRuns) RerunFailedJobs(ctx context.Context, repo ghclient.Scope, runID int64) error {
	r.log.add(call{run: runID, rerun: true, key: r.key})
	return r.Runs.RerunFailedJobs(ctx, repo, runID)
}
