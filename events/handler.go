package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// Path is where GitHub delivers events.
const Path = "/github/events"

// applyTimeout bounds the Kubernetes work of one delivery: GitHub waits 10s
// for an answer.
const applyTimeout = 8 * time.Second

// DefaultMaxInFlight bounds the deliveries read or applied at once: with
// MaxPayload, at most 8 MiB of bodies are held, whoever sends them.
const DefaultMaxInFlight = 8

// DefaultSlotWait is how long a delivery waits for a slot before 503.
const DefaultSlotWait = 2 * time.Second

// busyRetryAfter is the Retry-After of a 503 when MaxInFlight deliveries
// are in flight.
const busyRetryAfter = "1"

// Handler serves POST /github/events.
type Handler struct {
	secrets []Secret
	applier *applier
	metrics *Metrics
	log     logr.Logger
	now     func() time.Time
	// inFlight holds a token per delivery being read or applied; a
	// delivery waits slotWait for one.
	inFlight chan struct{}
	slotWait time.Duration
	// deliveries are the X-GitHub-Delivery IDs applied (or being applied):
	// a shortcut only, since the header is not signed; the records on the
	// pods decide what a delivery changes.
	deliveries *recent
}

var _ http.Handler = &Handler{}

// NewHandler builds the endpoint; Options.Secrets, Keys, Pods and Guard
// are required.
func NewHandler(o Options) (*Handler, error) {
	if len(o.Secrets) == 0 || !o.Keys.Configured() {
		return nil, errors.New("events: no webhook secret")
	}
	if o.Pods == nil || o.Guard == nil {
		return nil, errors.New("events: Options.Pods and Options.Guard are required")
	}
	if o.Remembered <= 0 {
		o.Remembered = DefaultRemembered
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SlotWait == 0 {
		o.SlotWait = DefaultSlotWait
	}
	return &Handler{
		secrets: o.Secrets, metrics: o.Metrics, log: o.Log, now: o.Now,
		inFlight: make(chan struct{}, o.MaxInFlight), slotWait: max(0, o.SlotWait), deliveries: newRecent(o.Remembered, o.Now),
		applier: &applier{pods: o.Pods, guard: o.Guard, namespaces: o.Namespaces, keys: o.Keys},
	}, nil
}

// ServeHTTP answers one delivery. Whatever GitHub never sends is refused
// before the body is read; nothing changes unless the body is signed with a
// secret whose scopes cover what it names, well formed and newer than what
// the pod records.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	event := req.Header.Get(HeaderEvent)
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.answer(w, event, OutcomeMalformed, http.StatusMethodNotAllowed, "deliveries are POSTed")
		return
	}
	switch event {
	case "workflow_job", "ping":
	case "":
		h.answer(w, event, OutcomeMalformed, http.StatusBadRequest, "no "+HeaderEvent+" header")
		return
	default:
		// Unread: the webhook may send other events; they change nothing.
		h.answer(w, event, OutcomeIgnored, http.StatusAccepted, "runner-guard reads only workflow_job events")
		return
	}
	if ct, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		h.answer(w, event, OutcomeMalformed, http.StatusUnsupportedMediaType, "deliveries are application/json: set the webhook's content type to application/json")
		return
	}
	sig, err := parseSignature(req.Header.Get(HeaderSignature))
	if err != nil {
		h.answer(w, event, OutcomeUnauthorized, http.StatusUnauthorized, err.Error()+": set the webhook's secret")
		return
	}
	if req.ContentLength > MaxPayload {
		h.answer(w, event, OutcomeTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("a workflow_job delivery is at most %d bytes", MaxPayload))
		return
	}
	if !h.acquire(req.Context()) {
		w.Header().Set("Retry-After", busyRetryAfter)
		h.answer(w, event, OutcomeBusy, http.StatusServiceUnavailable, "too many deliveries in flight; redeliver it")
		return
	}
	defer func() { <-h.inFlight }()
	body, signers, err := h.read(w, req, sig)
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		h.answer(w, event, OutcomeTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("a workflow_job delivery is at most %d bytes", MaxPayload))
		return
	case err != nil:
		h.answer(w, event, OutcomeMalformed, http.StatusBadRequest, "cannot read the body: "+err.Error())
		return
	case len(signers) == 0:
		h.answer(w, event, OutcomeUnauthorized, http.StatusUnauthorized, errBadSignature.Error()+": check the webhook's secret against runner-guard's")
		return
	}
	if event == "ping" {
		h.answer(w, event, OutcomePing, http.StatusOK, "pong")
		return
	}
	h.workflowJob(w, req, body, signers)
}

// acquire waits a little for a delivery slot: GitHub does not retry a
// delivery answered 503 by itself, and a burst of jobs starting sends many
// at once; a waiting request holds no body.
func (h *Handler) acquire(ctx context.Context) bool {
	select {
	case h.inFlight <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.slotWait)
	defer t.Stop()
	select {
	case h.inFlight <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// read streams the body (at most MaxPayload) through the HMACs of every
// accepted secret value and returns it with the secrets that signed it.
func (h *Handler) read(w http.ResponseWriter, req *http.Request, sig []byte) ([]byte, []*Secret, error) {
	sums := newSignatures(h.secrets, h.now())
	var buf bytes.Buffer
	if req.ContentLength > 0 {
		buf.Grow(int(req.ContentLength))
	}
	if _, err := io.Copy(io.MultiWriter(&buf, sums), http.MaxBytesReader(w, req.Body, MaxPayload)); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), sums.signers(sig), nil
}

// workflowJob applies a signed workflow_job delivery.
func (h *Handler) workflowJob(w http.ResponseWriter, req *http.Request, body []byte, signers []*Secret) {
	const event = "workflow_job"
	p, err := parseWorkflowJob(body)
	if err != nil {
		h.answer(w, event, OutcomeMalformed, http.StatusBadRequest, err.Error())
		return
	}
	if p.Action != ActionInProgress && p.Action != ActionCompleted {
		h.answer(w, event, OutcomeIgnored, http.StatusAccepted, "runner-guard reads only in_progress and completed")
		return
	}
	var secret *Secret
	for _, s := range signers {
		if s.coversRepository(p.Repository.FullName, p.Enterprise.Slug) {
			secret = s
			break
		}
	}
	if secret == nil {
		h.answer(w, event, OutcomeWrongScope, http.StatusUnauthorized, fmt.Sprintf("the delivery is signed with the secret of webhook %q, whose scopes do not cover repository %s", signers[0].Name, p.Repository.FullName))
		return
	}
	delivery := req.Header.Get(HeaderDelivery)
	log := h.log.WithValues("delivery", delivery, "action", p.Action, "job", p.WorkflowJob.ID, "runner", p.WorkflowJob.RunnerName, "secret", secret.Name)
	if delivery != "" && !h.deliveries.add(delivery) {
		h.answer(w, event, OutcomeDuplicate, http.StatusOK, "delivery already applied")
		return
	}
	ctx, cancel := context.WithTimeout(logr.NewContext(context.WithoutCancel(req.Context()), log), applyTimeout)
	defer cancel()
	outcome, err := h.applier.apply(ctx, p, secret)
	if err != nil {
		// Not remembered: GitHub's redelivery of it is applied.
		h.deliveries.remove(delivery)
		log.Error(err, "cannot apply a workflow_job delivery")
		h.answer(w, event, OutcomeFailed, http.StatusInternalServerError, "cannot apply the delivery; redeliver it: "+err.Error())
		return
	}
	log.V(1).Info("workflow_job delivery", "outcome", outcome)
	h.answer(w, event, outcome, http.StatusOK, outcome)
}

func (h *Handler) answer(w http.ResponseWriter, event, outcome string, code int, msg string) {
	h.metrics.count(event, outcome)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(msg)+1))
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// Options configure the endpoint.
type Options struct {
	// Secrets are the webhooks' secrets (--github-webhook-secrets, or the
	// one of --github-webhook-secret-file for every scope): they verify
	// deliveries and bound what each may name.
	Secrets []Secret
	// Keys signs and verifies the job records (derived from Secrets).
	Keys *jobannotation.Keyring
	// Pods lists and patches pods; it must read the API server, not a cache.
	Pods  client.Client
	Guard Guard
	// Namespaces limits the pods looked at (runnerNamespaces); empty: all.
	Namespaces []string
	// Remembered bounds the delivery IDs remembered (default
	// DefaultRemembered).
	Remembered int
	// MaxInFlight bounds the deliveries read or applied at once (default
	// DefaultMaxInFlight); a delivery waits SlotWait (default
	// DefaultSlotWait, negative: not at all) for a slot, then is answered 503
	// with Retry-After.
	MaxInFlight int
	SlotWait    time.Duration
	// Now tells time for the memories and the secrets' previous windows
	// (time.Now if nil).
	Now     func() time.Time
	Metrics *Metrics
	Log     logr.Logger
}
