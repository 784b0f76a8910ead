// Package rerun knows the jobs lost with their runner pod and re-runs each
// once. When a runner pod whose job is named (its EphemeralRunner's
// jobRepositoryName and workflowRunId) goes away holding that job, it
// records the job in a ConfigMap of runner-guard's own namespace, so the
// record survives a restart and a change of leader. Once GitHub reports the
// run completed it finds the job by runner_name in the run's attempt; a job
// that did not succeed and was not cancelled is lost: with re-runs on
// (--rerun-lost-jobs) it asks GitHub to re-run it, at most once per job and
// maxPerRun per run, never once the run has a newer attempt; either way an
// Event in the pod's namespace says what happened and why. docs/reruns.md
// has the rules and GitHub's facts.
package rerun
