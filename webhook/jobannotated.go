package webhook

import (
	"fmt"
	"strings"
)

// Rule 4h: a legacy runner pod carries the job a signed workflow_job
// delivery said its runner took (runner-guard.io/job, whose MAC only keys
// derived from the webhook secrets make): as with rule 4f's job fields, no
// GitHub request is needed to refuse, and a dry run is answered as the real
// delete would be. The annotation only keeps pods: a missing one proves
// nothing, and one whose job's "completed" was lost is answered by the
// drain's DELETE (admitted by rule 5b, before this rule), a bypass user's
// or a disrupted pod's look-up, or the force annotation.
func ruleJobAnnotated(r *review, p *policy) (Decision, bool) {
	if r.Pod == nil || !p.JobKeys.Configured() || (!r.DryRun && r.ReadOnly) {
		return Decision{}, false
	}
	job, ok := p.JobKeys.JobFromPod(r.Pod)
	if !ok {
		return Decision{}, false
	}
	d := busyDenial(r, p, p.BusyRetryAfter)
	d.Reason = ReasonJobAnnotated
	d.Message = strings.Replace(d.Message, "is running a job", fmt.Sprintf("is running a job (%s, from GitHub's workflow_job delivery; GitHub not asked)", job), 1)
	return d, true
}
