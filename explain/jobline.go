package explain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
)

// JobLine is the runner-guard.io/job annotation on the pod: the job a
// signed workflow_job delivery recorded, and whether it verifies under the
// webhook secrets runner-guard's Deployment reads, so whether it holds the pod.
type JobLine struct {
	Status
	// Record is what the annotation says, verified or not; nil when it is
	// not a record at all. Its secret ("" or absent: the single
	// --github-webhook-secret-file) names the webhook secret it claims to
	// be signed under.
	Record *jobannotation.Record `json:"record,omitempty"`
	// Verified: its MAC verifies under the webhook secrets explain read.
	Verified bool `json:"verified"`
	// VerifiedUntil is when a record signed under a secret's previous value
	// stops verifying (RFC 3339); "" when it does not.
	VerifiedUntil string `json:"verifiedUntil,omitempty"`
	// Problem is why it does not verify, or why it cannot be verified here.
	Problem string `json:"problem,omitempty"`
	// EventsOff: runner-guard's Deployment passes no webhook secret, so no
	// annotation verifies.
	EventsOff bool `json:"eventsOff,omitempty"`
	// Holds: runner-guard refuses the pod's delete and eviction for it
	// (reason runner-job-annotated).
	Holds bool `json:"holds"`
}

// WebhookSecrets is what explain learnt of the webhook secrets
// runner-guard's Deployment verifies runner-guard.io/job with.
type WebhookSecrets struct {
	// Flag is the Deployment's secret flag as passed
	// ("--github-webhook-secrets=PATH"); "" when it passes neither flag
	// (events off) or when the Deployment is unknown (All says so).
	Flag string
	// Keys holds the secrets that could be read; never nil once read.
	Keys *jobannotation.Keyring
	// All, when set, is why none of the secrets is known: the Deployment
	// or the mapping file could not be read.
	All error
	// Each is why a named secret ("" the single one) could not be read, in
	// full or in part (its previous value).
	Each map[string]error
}

// forbiddenError is a read RBAC refused; Need names the permission.
type forbiddenError struct {
	What string
	Need string
}

func (e *forbiddenError) Error() string { return e.What + " unknown: needs " + e.Need }

// neededBy is the permission err (or an error it wraps) names; "" when none.
func neededBy(err error) string {
	var f *forbiddenError
	if errors.As(err, &f) {
		return f.Need
	}
	return ""
}

// jobLine renders the runner-guard.io/job annotation on pod: nil when the
// pod has none. notGuarded is why runner-guard does not guard the pod ("" when
// it does); now tells the record's age.
func jobLine(pod *corev1.Pod, secrets WebhookSecrets, notGuarded string, now time.Time) *JobLine {
	value, found := pod.Annotations[jobannotation.Annotation]
	if !found {
		return nil
	}
	l := &JobLine{}
	var parts []string
	rec, decodeErr := jobannotation.Claimed(value)
	if decodeErr == nil {
		l.Record = &rec
		parts = append(parts, recordText(rec, now))
	}
	var cannot error
	if secrets.All != nil {
		cannot = secrets.All
	} else if decodeErr == nil {
		cannot = secrets.Each[rec.Secret]
	}
	switch {
	case secrets.All == nil && secrets.Flag == "":
		l.EventsOff = true
		parts = append(parts, "events are off (runner-guard's Deployment passes neither --github-webhook-secret-file nor --github-webhook-secrets), so it holds nothing")
	case decodeErr != nil:
		l.Problem = decodeErr.Error()
		parts = append(parts, "does not verify, so it holds nothing: "+l.Problem)
	default:
		verified, err := secrets.Keys.Read(pod)
		switch {
		case err != nil && cannot != nil:
			l.Problem = cannot.Error()
			if l.Needs = neededBy(cannot); l.Needs != "" {
				l.Unknown = true
			}
			text := "cannot be verified here: " + l.Problem
			if rec.Running() {
				text += "; if it verifies, runner-guard refuses the pod's delete and eviction (delete now and eviction now say what it answers)"
			}
			parts = append(parts, text)
		case err != nil:
			l.Problem = err.Error()
			parts = append(parts, "does not verify, so it holds nothing: "+l.Problem)
		default:
			l.Verified = true
			parts = append(parts, verifiedText(l, verified, notGuarded))
		}
	}
	l.Text = strings.Join(parts, "; ")
	return l
}

// verifiedText says what a verified record does, and sets l.Holds.
func verifiedText(l *JobLine, rec jobannotation.Record, notGuarded string) string {
	text := "verifies"
	if !rec.VerifiedUntil.IsZero() {
		l.VerifiedUntil = rec.VerifiedUntil.UTC().Format(time.RFC3339)
		text += fmt.Sprintf(" (under %s's previous value, accepted until %s)", secretName(rec.Secret), l.VerifiedUntil)
	}
	switch {
	case !rec.Running():
		return text + "; the job completed, so the record is a tombstone and holds nothing"
	case notGuarded != "":
		return text + ", but runner-guard does not guard the pod (" + notGuarded + "), so it holds nothing"
	}
	l.Holds = true
	return text + ": runner-guard refuses the pod's delete and eviction as " + string(webhook.ReasonJobAnnotated) +
		", dry runs included (a bypass user's or a disrupted pod's real request is looked up on GitHub instead)"
}

// recordText names the job a record holds, its state and when, and the
// secret it claims to be signed under.
func recordText(r jobannotation.Record, now time.Time) string {
	text := r.Job.String() + ", " + r.State
	if !r.At.IsZero() {
		since := " since "
		if r.State == jobannotation.StateCompleted {
			since = " at "
		}
		text += fmt.Sprintf("%s%s (%s ago)", since, r.At.UTC().Format(time.RFC3339), now.Sub(r.At).Round(time.Second))
	}
	return text + ", signed under " + secretName(r.Secret)
}

// secretName names a webhook secret as a record does.
func secretName(name string) string {
	if name == "" {
		return "the single webhook secret (--github-webhook-secret-file)"
	}
	return fmt.Sprintf("webhook secret %q", name)
}
