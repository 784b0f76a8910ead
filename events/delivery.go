package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// Headers of a GitHub webhook delivery.
const (
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
	HeaderSignature = "X-Hub-Signature-256"
)

// MaxPayload is the largest body read: workflow_job payloads are a few KiB
// (GitHub's 25 MB cap is for every event), and nothing larger is buffered
// from a sender that may not be GitHub.
const MaxPayload = 1 << 20

// Sign is the X-Hub-Signature-256 value of body under secret.
func Sign(body, secret []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write(body)
	return "sha256=" + hex.EncodeToString(h.Sum(nil))
}

// Secret is one webhook's secret and the scopes its webhook may speak for.
type Secret struct {
	jobannotation.Secret
	// Scopes are the organizations, enterprises and repositories the
	// webhook may name; nil: every scope (--github-webhook-secret-file).
	Scopes []ghclient.ScopePattern
}

// coversRepository reports whether the webhook may speak of a job of
// repository (OWNER/REPO) in enterprise ("" outside one).
func (s Secret) coversRepository(repository, enterprise string) bool {
	if s.Scopes == nil {
		return true
	}
	repo := ghclient.Scope{Kind: ghclient.ScopeRepo, Name: repository}
	ent := ghclient.Scope{Kind: ghclient.ScopeEnterprise, Name: enterprise}
	for _, p := range s.Scopes {
		if p.Matches(repo) || (enterprise != "" && p.Matches(ent)) {
			return true
		}
	}
	return false
}

// coversRunner reports whether the webhook may speak of a runner
// registered at scope: an organization's webhook of its organization's and
// repositories' runners, never of another organization's or an enterprise's.
func (s Secret) coversRunner(scope ghclient.Scope) bool {
	if s.Scopes == nil {
		return true
	}
	for _, p := range s.Scopes {
		if p.Matches(scope) {
			return true
		}
	}
	return false
}

// signatures computes, while a body streams through it, the HMAC of the
// body under every secret value accepted now.
type signatures struct {
	secrets []*Secret
	macs    []hash.Hash
}

func newSignatures(secrets []Secret, now time.Time) *signatures {
	s := &signatures{}
	for i := range secrets {
		sec := &secrets[i]
		s.secrets = append(s.secrets, sec)
		s.macs = append(s.macs, hmac.New(sha256.New, sec.Value))
		if sec.PreviousAccepted(now) {
			s.secrets = append(s.secrets, sec)
			s.macs = append(s.macs, hmac.New(sha256.New, sec.Previous))
		}
	}
	return s
}

// Write feeds every HMAC; it never fails.
func (s *signatures) Write(p []byte) (int, error) {
	for _, m := range s.macs {
		m.Write(p)
	}
	return len(p), nil
}

// errUnsigned and errBadSignature are the two ways a delivery fails to prove
// it comes from a webhook that holds a configured secret.
var (
	errUnsigned     = errors.New("no " + HeaderSignature + " header")
	errBadSignature = errors.New(HeaderSignature + " does not match the body under any configured webhook secret")
)

// parseSignature reads the header's HMAC.
func parseSignature(header string) ([]byte, error) {
	if header == "" {
		return nil, errUnsigned
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return nil, errBadSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return nil, errBadSignature
	}
	return got, nil
}

// signers are the secrets whose value made sig, each compared in constant
// time.
func (s *signatures) signers(sig []byte) []*Secret {
	var out []*Secret
	for i, m := range s.macs {
		if hmac.Equal(sig, m.Sum(nil)) && !slices.Contains(out, s.secrets[i]) {
			out = append(out, s.secrets[i])
		}
	}
	return out
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
		ID          int64      `json:"id"`
		RunID       int64      `json:"run_id"`
		RunAttempt  int64      `json:"run_attempt"`
		Name        string     `json:"name"`
		RunnerName  string     `json:"runner_name"`
		StartedAt   *time.Time `json:"started_at"`
		CompletedAt *time.Time `json:"completed_at"`
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

// parseWorkflowJob reads a workflow_job payload; an error names what is
// wrong. Actions other than in_progress and completed are returned unchecked.
func parseWorkflowJob(body []byte) (workflowJob, error) {
	var p workflowJob
	if err := json.Unmarshal(body, &p); err != nil {
		return p, fmt.Errorf("workflow_job payload: %w", err)
	}
	switch {
	case p.Action == "":
		return p, errors.New("workflow_job payload: no action")
	case p.Action != ActionInProgress && p.Action != ActionCompleted:
		return p, nil
	case p.WorkflowJob.ID <= 0:
		return p, errors.New("workflow_job payload: no workflow_job.id")
	case p.WorkflowJob.StartedAt == nil && p.WorkflowJob.CompletedAt == nil:
		return p, errors.New("workflow_job payload: no workflow_job.started_at")
	}
	if _, err := ghclient.RepoScope(p.Repository.FullName); err != nil {
		return p, fmt.Errorf("workflow_job payload: repository.full_name: %w", err)
	}
	return p, nil
}

// record is what the annotation records of the delivery, signed under the
// secret named secret: the job, its state and when it reached it.
func (p workflowJob) record(secret string) jobannotation.Record {
	j := p.WorkflowJob
	at := j.StartedAt
	if p.Action == ActionCompleted && j.CompletedAt != nil {
		at = j.CompletedAt
	}
	if at == nil {
		at = j.CompletedAt
	}
	return jobannotation.Record{
		Job: jobannotation.Job{Repository: p.Repository.FullName, RunID: j.RunID,
			Attempt: j.RunAttempt, JobID: j.ID, Name: j.Name},
		State: p.Action, At: at.UTC(), Secret: secret,
	}
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
