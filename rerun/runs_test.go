package rerun

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// settle runs advance until every record is decided or GitHub asks to
// wait, saving the changes as the reconciler does.
func settle(t *testing.T, s stepper, gh Runs, recs []Record, reruns int) []change {
	t.Helper()
	out, _, err := s.advance(context.Background(), gh, recs, reruns)
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	return out
}

func states(out []change) string {
	var s []string
	for _, c := range out {
		s = append(s, string(c.rec.State))
	}
	return strings.Join(s, ",")
}

func TestAdvanceOneLostJob(t *testing.T) {
	tests := map[string]struct {
		enabled    bool
		conclusion string // the job's, once the run completes
		runEnd     string
		want       State
		wantReruns int
		outcome    Outcome
	}{
		"lost, re-runs on":         {enabled: true, conclusion: ghfake.ConclusionFailure, runEnd: ghfake.ConclusionFailure, want: StateRerun, wantReruns: 1, outcome: OutcomeRerun},
		"lost, re-runs off":        {conclusion: ghfake.ConclusionFailure, runEnd: ghfake.ConclusionFailure, want: StateLost, outcome: OutcomeExcluded},
		"cancelled by the user":    {enabled: true, conclusion: ghfake.ConclusionCancelled, runEnd: ghfake.ConclusionCancelled, want: StateFinished, outcome: OutcomeEnded},
		"finished after all":       {enabled: true, conclusion: ghfake.ConclusionSuccess, runEnd: ghfake.ConclusionSuccess, want: StateFinished, outcome: OutcomeEnded},
		"the whole run cancelled":  {enabled: true, runEnd: ghfake.ConclusionCancelled, want: StateFinished, outcome: OutcomeEnded},
		"timed out, re-runs on":    {enabled: true, conclusion: "timed_out", runEnd: ghfake.ConclusionFailure, want: StateRerun, wantReruns: 1, outcome: OutcomeRerun},
		"skipped, never re-run":    {enabled: true, conclusion: ghfake.ConclusionSkipped, runEnd: ghfake.ConclusionSuccess, want: StateFinished, outcome: OutcomeEnded},
		"failed run, re-runs on 2": {enabled: true, runEnd: ghfake.ConclusionFailure, want: StateRerun, wantReruns: 1, outcome: OutcomeRerun},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, gh := gitHub(t)
			run := f.AddRun("acme/app", "ci")
			job, _ := f.AddJob(run, "build", "runner-1")
			_, _ = f.AddJob(run, "lint", "runner-2")
			s := testStepper(tc.enabled)
			recs := []Record{lostRecord(run, "runner-1")}

			// In progress: the attempt is noted, nothing decided.
			out, again, err := s.advance(context.Background(), gh, recs, 0)
			if err != nil || again != DefaultPoll || out[0].rec.Attempt != 1 || out[0].rec.State.Done() {
				t.Fatalf("run in progress: %+v, again %s, %v", out[0], again, err)
			}
			recs[0] = out[0].rec

			if tc.conclusion != "" {
				_ = f.FinishJob(job, tc.conclusion)
			}
			_ = f.CompleteRun(run, tc.runEnd)
			out = settle(t, s, gh, recs, 0)
			if got := out[0].rec.State; got != tc.want || out[0].rec.Outcome != tc.outcome {
				t.Fatalf("state %s outcome %s (%s), want %s %s", got, out[0].rec.Outcome, out[0].rec.Message, tc.want, tc.outcome)
			}
			if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}) + f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunFailedJobs}); n != tc.wantReruns {
				t.Errorf("%d re-runs asked, want %d", n, tc.wantReruns)
			}
			if tc.want == StateRerun {
				if r, _ := f.Run(run); r.RunAttempt != 2 {
					t.Errorf("run attempt %d after the re-run, want 2", r.RunAttempt)
				}
				if out[0].rec.JobID != job || !strings.Contains(out[0].rec.Message, string(CauseNodeGone)) {
					t.Errorf("record %+v: want job %d and the cause in the message", out[0].rec, job)
				}
			}
			if tc.want == StateLost && !strings.Contains(out[0].rec.Message, "--rerun-lost-jobs") {
				t.Errorf("message %q does not say re-runs are off", out[0].rec.Message)
			}
		})
	}
}

// A restart between GitHub's 201 and saving the record finds the run in a
// newer attempt: the job is not re-run twice.
func TestAdvanceAfterRestartRerunsOnce(t *testing.T) {
	f, gh := gitHub(t)
	run := f.AddRun("acme/app", "ci")
	job, _ := f.AddJob(run, "build", "runner-1")
	s := testStepper(true)
	rec := lostRecord(run, "runner-1")
	out := settle(t, s, gh, []Record{rec}, 0)
	saved := out[0].rec // attempt 1 noted and saved
	_ = f.FinishJob(job, ghfake.ConclusionFailure)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	if out = settle(t, s, gh, []Record{saved}, 0); out[0].rec.State != StateRerun {
		t.Fatalf("first decision %s", out[0].rec.State)
	}
	// The save was lost: the new leader sees the record as it was saved.
	out = settle(t, s, gh, []Record{saved}, 0)
	if out[0].rec.State != StateSuperseded {
		t.Errorf("after a restart: %s (%s), want superseded", out[0].rec.State, out[0].rec.Message)
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}); n != 1 {
		t.Errorf("%d re-runs, want 1", n)
	}
}

func TestAdvanceSeveralLostInOneRun(t *testing.T) {
	tests := map[string]struct {
		lost        int
		otherFails  bool
		otherEnd    string // the other job's conclusion when it did not fail
		reruns      int    // of the run, before
		wantOp      ghfake.Op
		wantRerun   int
		wantLostMsg string
	}{
		"all failed jobs are ours: one rerun-failed-jobs": {lost: 3, wantOp: ghfake.OpRerunFailedJobs, wantRerun: 3},
		"another job failed on its own: one job re-run":   {lost: 2, otherFails: true, wantOp: ghfake.OpRerunJob, wantRerun: 1, wantLostMsg: "one attempt at a time"},
		"another job was cancelled: one job re-run":       {lost: 2, otherEnd: ghfake.ConclusionCancelled, wantOp: ghfake.OpRerunJob, wantRerun: 1, wantLostMsg: "one attempt at a time"},
		"more than maxPerRun: one job re-run":             {lost: 4, wantOp: ghfake.OpRerunJob, wantRerun: 1, wantLostMsg: "one attempt at a time"},
		"maxPerRun reached before":                        {lost: 1, reruns: DefaultMaxPerRun, wantRerun: 0, wantLostMsg: "--rerun-max-per-run"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, gh := gitHub(t)
			run := f.AddRun("acme/app", "ci")
			var recs []Record
			for i := range tc.lost {
				runner := fmt.Sprintf("runner-%d", i)
				job, _ := f.AddJob(run, fmt.Sprintf("matrix-%d", i), runner)
				_ = f.FinishJob(job, ghfake.ConclusionFailure)
				rec := lostRecord(run, runner)
				rec.Attempt = 1
				recs = append(recs, rec)
			}
			ok, _ := f.AddJob(run, "lint", "runner-lint")
			switch {
			case tc.otherFails:
				_ = f.FinishJob(ok, ghfake.ConclusionFailure)
			case tc.otherEnd != "":
				_ = f.FinishJob(ok, tc.otherEnd)
			default:
				_ = f.FinishJob(ok, ghfake.ConclusionSuccess)
			}
			_ = f.CompleteRun(run, ghfake.ConclusionFailure)
			out := settle(t, testStepper(true), gh, recs, tc.reruns)
			rerun := 0
			for _, c := range out {
				if c.rec.Outcome == "" {
					t.Errorf("%s has no outcome", c.rec.Runner)
				}
				switch c.rec.State {
				case StateRerun:
					rerun++
				case StateLost:
					if !strings.Contains(c.rec.Message, tc.wantLostMsg) {
						t.Errorf("%s: %q, want it to say %q", c.rec.Runner, c.rec.Message, tc.wantLostMsg)
					}
				default:
					t.Errorf("%s: %s", c.rec.Runner, c.rec.State)
				}
			}
			if rerun != tc.wantRerun {
				t.Errorf("%d re-run (%s), want %d", rerun, states(out), tc.wantRerun)
			}
			posts := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}) + f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunFailedJobs})
			if want := min(tc.wantRerun, 1); posts != want || want == 1 && f.CountMatching(ghfake.RequestMatch{Op: tc.wantOp}) != 1 {
				t.Errorf("%d re-run requests, want %d %s", posts, want, tc.wantOp)
			}
			if tc.otherFails || tc.otherEnd != "" {
				for _, j := range f.Jobs(run, 2) {
					if j.Name == "lint" && j.Status == ghfake.StatusQueued {
						t.Error("the job that failed or was cancelled on its own was re-run")
					}
				}
			}
		})
	}
}

// A token that may not re-run jobs: GitHub's 403 becomes a lost record
// whose message says what to grant.
func TestAdvanceRefused(t *testing.T) {
	f, gh := gitHub(t)
	f.SetTokenRights(ghfake.TokenRights{NoActionsWrite: true})
	run := f.AddRun("acme/app", "ci")
	job, _ := f.AddJob(run, "build", "runner-1")
	_ = f.FinishJob(job, ghfake.ConclusionFailure)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	rec := lostRecord(run, "runner-1")
	rec.Attempt = 1
	out := settle(t, testStepper(true), gh, []Record{rec}, 0)
	if c := out[0]; c.rec.State != StateLost || c.rec.Outcome != OutcomeRefused || !strings.Contains(c.rec.Message, "actions: write") {
		t.Errorf("refused re-run: %+v", c.rec)
	}
}

func TestAdvanceUnknownRunAndJob(t *testing.T) {
	f, gh := gitHub(t)
	out := settle(t, testStepper(true), gh, []Record{lostRecord(424242, "runner-1")}, 0)
	if out[0].rec.State != StateUnknown || out[0].rec.Outcome != OutcomeUnnamed {
		t.Errorf("unknown run: %s %s", out[0].rec.State, out[0].rec.Outcome)
	}
	run := f.AddRun("acme/app", "ci")
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	rec := lostRecord(run, "runner-elsewhere")
	rec.Attempt = 1
	if out = settle(t, testStepper(true), gh, []Record{rec}, 0); out[0].rec.State != StateUnknown || out[0].rec.Outcome != OutcomeUnnamed {
		t.Errorf("a runner the run's jobs do not name: %+v", out[0])
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}); n != 0 {
		t.Errorf("%d re-runs", n)
	}
}

// calls_per_lost_job's shape: 100 lost jobs in 10 runs of one repository,
// each run asked once in progress and once completed, cost 1+1+1 requests
// per run when every failed job is a lost one.
func TestAdvanceCallsPerRun(t *testing.T) {
	f, gh := gitHub(t)
	s := testStepper(true)
	s.maxPerRun = 10
	for range 10 {
		run := f.AddRun("acme/app", "ci")
		var recs []Record
		for i := range 10 {
			runner := fmt.Sprintf("runner-%d-%d", run, i)
			_, _ = f.AddJob(run, fmt.Sprintf("m-%d", i), runner)
			recs = append(recs, lostRecord(run, runner))
		}
		out := settle(t, s, gh, recs, 0)
		for i := range recs {
			recs[i] = out[i].rec
		}
		_ = f.CompleteRun(run, ghfake.ConclusionFailure)
		if out = settle(t, s, gh, recs, 0); states(out) != strings.TrimSuffix(strings.Repeat("rerun,", 10), ",") {
			t.Fatalf("states %s", states(out))
		}
	}
	if n := len(f.Requests()); n != 40 {
		t.Errorf("%d requests for 100 lost jobs, want 40 (0.4 a job)", n)
	}
}

// The job re-run is the one that was lost, or none: a verified annotation's
// job ID, else the attempt's one job of the runner.
func TestAdvanceNamesTheLostJob(t *testing.T) {
	tests := map[string]struct {
		// jobs are the runner names of the attempt's jobs, all failed.
		jobs []string
		// lostJob indexes the job the annotation names (-1: none, found by runner).
		lostJob    int
		runner     string
		wantRerun  int // index into jobs, -1: none
		wantState  State
		wantSaying string
	}{
		"a persistent runner lost during its second job": {jobs: []string{"legacy-1", "legacy-1"}, lostJob: 1, runner: "legacy-1", wantRerun: 1, wantState: StateRerun},
		"a persistent runner lost during its fifth job":  {jobs: []string{"legacy-1", "legacy-1", "other", "legacy-1", "legacy-1", "legacy-1"}, lostJob: 5, runner: "legacy-1", wantRerun: 5, wantState: StateRerun},
		"an ephemeral runner's one job":                  {jobs: []string{"runner-1", "runner-2"}, lostJob: -1, runner: "runner-1", wantRerun: 0, wantState: StateRerun},
		"several jobs ran on the runner":                 {jobs: []string{"runner-1", "runner-1"}, lostJob: -1, runner: "runner-1", wantRerun: -1, wantState: StateUnknown, wantSaying: "cannot tell which"},
		"no job ran on the runner":                       {jobs: []string{"runner-2"}, lostJob: -1, runner: "runner-1", wantRerun: -1, wantState: StateUnknown, wantSaying: "name no job"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, gh := gitHub(t)
			run := f.AddRun("acme/app", "ci")
			var ids []int64
			for i, r := range tc.jobs {
				id, _ := f.AddJob(run, fmt.Sprintf("job-%d", i), r)
				_ = f.FinishJob(id, ghfake.ConclusionFailure)
				ids = append(ids, id)
			}
			_ = f.CompleteRun(run, ghfake.ConclusionFailure)
			rec := lostRecord(run, tc.runner)
			rec.Attempt = 1
			if tc.lostJob >= 0 {
				rec.ID = ids[tc.lostJob]
			}
			out := settle(t, testStepper(true), gh, []Record{rec}, 0)
			if got := out[0].rec; got.State != tc.wantState || !strings.Contains(got.Message, tc.wantSaying) {
				t.Fatalf("record %s (%s): %s, want %s saying %q", got.State, got.Outcome, got.Message, tc.wantState, tc.wantSaying)
			}
			var reruns []ghfake.Request
			for _, r := range f.Requests() {
				if (ghfake.RequestMatch{Op: ghfake.OpRerunJob}).Matches(r) {
					reruns = append(reruns, r)
				}
			}
			if tc.wantRerun < 0 {
				if len(reruns) != 0 || out[0].rec.Outcome != OutcomeUnnamed {
					t.Errorf("%d re-runs, outcome %s; want none, unnamed", len(reruns), out[0].rec.Outcome)
				}
				return
			}
			want := fmt.Sprintf("/actions/jobs/%d/rerun", ids[tc.wantRerun])
			if len(reruns) != 1 || !strings.HasSuffix(reruns[0].Path, want) {
				t.Errorf("re-runs %v, want one of %s", reruns, want)
			}
		})
	}
}

// rerun.exclude: a repository is never asked about; a workflow path is
// known after the run's GET.
func TestAdvanceExcluded(t *testing.T) {
	tests := map[string]struct {
		exclude      []string
		wantState    State
		wantRequests int
	}{
		"the repository":                 {exclude: []string{"acme/*"}, wantState: StateExcluded},
		"the workflow, any repository":   {exclude: []string{".github/workflows/nightly.yml"}, wantState: StateExcluded, wantRequests: 1},
		"the workflow of the repository": {exclude: []string{"acme/app:.github/workflows/night*.yml"}, wantState: StateExcluded, wantRequests: 1},
		"another repository's workflow":  {exclude: []string{"acme/other:.github/workflows/nightly.yml", "other/*"}, wantState: StateRerun, wantRequests: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, gh := gitHub(t)
			run := f.AddRun("acme/app", "nightly")
			job, _ := f.AddJob(run, "build", "runner-1")
			_ = f.FinishJob(job, ghfake.ConclusionFailure)
			_ = f.CompleteRun(run, ghfake.ConclusionFailure)
			x, err := ParseExclusions(tc.exclude)
			if err != nil {
				t.Fatal(err)
			}
			s := testStepper(true)
			s.exclude = x
			rec := lostRecord(run, "runner-1")
			rec.Attempt = 1
			out := settle(t, s, gh, []Record{rec}, 0)
			if got := out[0].rec; got.State != tc.wantState || (got.State == StateExcluded) != (got.Outcome == OutcomeExcluded) {
				t.Errorf("record %s %s: %s", got.State, got.Outcome, got.Message)
			}
			if n := len(f.Requests()); n != tc.wantRequests {
				t.Errorf("%d requests, want %d", n, tc.wantRequests)
			}
		})
	}
}

// A run at GitHub's 50 attempts is not asked to re-run.
func TestAdvanceAttemptCap(t *testing.T) {
	f, gh := gitHub(t)
	run := f.AddRun("acme/app", "ci")
	_, _ = f.AddJob(run, "build", "runner-0")
	for range ghfake.MaxRunAttempts - 1 {
		_ = f.CompleteRun(run, ghfake.ConclusionFailure)
		if err := gh.RerunFailedJobs(context.Background(), mustRepo(t, "acme/app"), run); err != nil {
			t.Fatal(err)
		}
	}
	last := f.Jobs(run, ghfake.MaxRunAttempts)
	_ = f.StartJob(last[0].ID, "runner-50")
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	rec := lostRecord(run, "runner-50")
	before := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunFailedJobs})
	out := settle(t, testStepper(true), gh, []Record{rec}, 0)
	if got := out[0].rec; got.State != StateLost || got.Outcome != OutcomeRefused || !strings.Contains(got.Message, "cap of 50") {
		t.Errorf("record %s %s: %s", got.State, got.Outcome, got.Message)
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}) + f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunFailedJobs}) - before; n != 0 {
		t.Errorf("%d re-runs asked of a run at its cap", n)
	}
}

func mustRepo(t *testing.T, name string) ghclient.Scope {
	t.Helper()
	s, err := ghclient.RepoScope(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
