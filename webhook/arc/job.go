package arc

import "fmt"

// This file is the job an EphemeralRunner records: the decision reads it
// once, through String (a job named is a job started), after Resolve.

// Job is what ARC's listener writes into an EphemeralRunner's status when a
// job starts (HandleJobStarted merge-patches status.jobRequestId, jobId,
// jobRepositoryName, jobWorkflowRef, workflowRunId and jobDisplayName). The
// fields are never cleared while the object lives, so a set Job proves the
// runner took a job; an empty one proves nothing (between assignment and
// JobStarted a busy runner looks idle here).
type Job struct {
	RequestID     int64
	ID            string
	Repository    string
	WorkflowRef   string
	WorkflowRunID int64
	DisplayName   string
}

// Started reports whether the listener recorded a job: ARC's own HasJob()
// is jobId != ""; a request ID alone is taken as proof as well.
func (j Job) Started() bool { return j.ID != "" || j.RequestID > 0 }

// String names the job for messages: repository, workflow run and job name
// where known.
func (j Job) String() string {
	if !j.Started() {
		return ""
	}
	s := "job"
	if j.DisplayName != "" {
		s = fmt.Sprintf("job %q", j.DisplayName)
	}
	if j.Repository != "" {
		s += " of " + j.Repository
	}
	if j.WorkflowRunID > 0 {
		s += fmt.Sprintf(" (workflow run %d)", j.WorkflowRunID)
	} else if j.WorkflowRef != "" {
		s += fmt.Sprintf(" (%s)", j.WorkflowRef)
	}
	return s
}
