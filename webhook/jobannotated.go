package webhook

import (
	"fmt"
	"strings"

	"github.com/runner-guard/runner-guard/events/jobannotation"
)

// Rule 4h: a legacy runner pod carries the job a signed workflow_job
// delivery said its runner took (runner-guard.io/job, whose MAC only the
// events secret makes): as with rule 4f's job fields, no GitHub request is
// needed to refuse. The annotation only keeps pods: a missing one proves
// nothing, and one whose job's "completed" was lost is answered by the
// drain's DELETE (admitted by rule 5b, before this rule), a bypass user's
// or a disrupted pod's look-up, or the force annotation.
func ruleJobAnnotated(r *review, p *policy) (Decision, bool) {
	if r.Pod == nil || len(p.EventsSecret) == 0 || r.readOnly(p) {
		return Decision{}, false
	}
	job, ok := jobannotation.JobFromPod(r.Pod, p.EventsSecret)
	if !ok {
		return Decision{}, false
	}
	d := busyDenial(r, p, p.BusyRetryAfter)
	d.Reason = ReasonJobAnnotated
	d.Message = strings.Replace(d.Message, "is running a job", fmt.Sprintf("is running a job (%s, from GitHub's workflow_job delivery; GitHub not asked)", job), 1)
	return d, true
}
