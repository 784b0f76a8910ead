package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/runner-guard/runner-guard/events/jobannotation"
	"github.com/runner-guard/runner-guard/ghclient"
)

// Headers of a GitHub webhook delivery.
const (
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
	HeaderSignature = "X-Hub-Signature-256"
)

// MaxPayload is the largest delivery GitHub sends (25 MB).
const MaxPayload = 25 << 20

// Sign is the X-Hub-Signature-256 value of body under secret.
func Sign(body, secret []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write(body)
	return "sha256=" + hex.EncodeToString(h.Sum(nil))
}

// errUnsigned and errBadSignature are the two ways a delivery fails to prove
// it comes from the webhook that holds the secret.
var (
	errUnsigned     = errors.New("no " + HeaderSignature + " header")
	errBadSignature = errors.New(HeaderSignature + " does not match the body under the webhook secret")
)

// verify checks a delivery's signature in constant time.
func verify(body []byte, header string, secret []byte) error {
	if header == "" {
		return errUnsigned
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return errBadSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return errBadSignature
	}
	h := hmac.New(sha256.New, secret)
	h.Write(body)
	if !hmac.Equal(got, h.Sum(nil)) {
		return errBadSignature
	}
	return nil
}

// Actions of a workflow_job delivery runner-guard applies.
const (
	ActionInProgress = "in_progress"
	ActionCompleted  = "completed"
)

// workflowJob is the part of a workflow_job payload runner-guard reads.
type workflowJob struct {
	Action      string `json:"action"`
	WorkflowJob struct {
		ID         int64  `json:"id"`
		RunID      int64  `json:"run_id"`
		RunAttempt int64  `json:"run_attempt"`
		Name       string `json:"name"`
		RunnerName string `json:"runner_name"`
	} `json:"workflow_job"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Organization struct {
		Login string `json:"login"`
	} `json:"organization"`
	Enterprise struct {
		Slug string `json:"slug"`
	} `json:"enterprise"`
}

// parseWorkflowJob reads a workflow_job payload; an error names what is wrong.
func parseWorkflowJob(body []byte) (workflowJob, error) {
	var p workflowJob
	if err := json.Unmarshal(body, &p); err != nil {
		return p, fmt.Errorf("workflow_job payload: %w", err)
	}
	switch {
	case p.Action == "":
		return p, errors.New("workflow_job payload: no action")
	case p.WorkflowJob.ID <= 0:
		return p, errors.New("workflow_job payload: no workflow_job.id")
	}
	if _, err := ghclient.RepoScope(p.Repository.FullName); err != nil {
		return p, fmt.Errorf("workflow_job payload: repository.full_name: %w", err)
	}
	return p, nil
}

// job is what the annotation records of the delivery's job.
func (p workflowJob) job() jobannotation.Job {
	return jobannotation.Job{Repository: p.Repository.FullName, RunID: p.WorkflowJob.RunID,
		Attempt: p.WorkflowJob.RunAttempt, JobID: p.WorkflowJob.ID, Name: p.WorkflowJob.Name}
}

// covers reports whether a runner registered at scope can have run the
// delivery's job: a repository runner only its repository's, an
// organization runner its repositories', an enterprise runner its
// organizations'.
func (p workflowJob) covers(scope ghclient.Scope) bool {
	owner, _, _ := strings.Cut(p.Repository.FullName, "/")
	switch scope.Kind {
	case ghclient.ScopeRepo:
		return strings.EqualFold(scope.Name, p.Repository.FullName)
	case ghclient.ScopeOrg:
		return strings.EqualFold(scope.Name, owner)
	case ghclient.ScopeEnterprise:
		return p.Enterprise.Slug != "" && strings.EqualFold(scope.Name, p.Enterprise.Slug)
	}
	return false
}
