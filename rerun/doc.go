// Package rerun knows the jobs lost with their runner pod and re-runs each
// once. When a guarded runner pod goes away holding a job it can name (a
// verified job annotation's job ID, else its controlling EphemeralRunner's
// jobRepositoryName and workflowRunId), and the job's repository is inside
// the runner's scope and the namespace's scope binding, it records the job,
// and which credentials reach it, in a ConfigMap of runner-guard's own
// namespace, so the record survives a restart and a change of leader. Once
// GitHub reports the run completed it names the job in the run's attempt (by
// ID, or the one job of the runner's runner_name); a job that did not
// succeed and was not cancelled is lost: with re-runs on (--rerun-lost-jobs)
// it asks GitHub to re-run it, with those credentials only, at most once per
// job and maxPerRun per run, never once the run has a newer attempt or its 50,
// never for a job --rerun-exclude or the pod's runner-guard.io/rerun: "false"
// opts out. Every loss counts once in runner_guard_jobs_lost_total{cause,
// outcome} and an Event in the pod's namespace says what happened and why.
// docs/reruns.md has the rules and GitHub's facts.
package rerun
