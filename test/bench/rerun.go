package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/rerun"
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
	return nil
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
