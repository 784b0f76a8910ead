package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
)

// Path is where GitHub delivers events.
const Path = "/github/events"

// applyTimeout bounds the Kubernetes work of one delivery: GitHub waits 10s
// for an answer.
const applyTimeout = 8 * time.Second

// Handler serves POST /github/events.
type Handler struct {
	secret  []byte
	applier *applier
	metrics *Metrics
	log     logr.Logger
	// deliveries are the X-GitHub-Delivery IDs applied (or being applied).
	deliveries *recent
}

var _ http.Handler = &Handler{}

// NewHandler builds the endpoint; Options.Secret is required.
func NewHandler(o Options) (*Handler, error) {
	if len(o.Secret) == 0 {
		return nil, errors.New("events: no webhook secret")
	}
	if o.Pods == nil || o.Guard == nil {
		return nil, errors.New("events: Options.Pods and Options.Guard are required")
	}
	if o.Remembered <= 0 {
		o.Remembered = DefaultRemembered
	}
	return &Handler{
		secret: o.Secret, metrics: o.Metrics, log: o.Log, deliveries: newRecent(o.Remembered, o.Now),
		applier: &applier{pods: o.Pods, guard: o.Guard, namespaces: o.Namespaces, secret: o.Secret, completed: newRecent(o.Remembered, o.Now)},
	}, nil
}

// ServeHTTP answers one delivery. Nothing changes unless it is signed with
// the secret, well formed and new.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	event := req.Header.Get(HeaderEvent)
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxPayload))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.answer(w, event, OutcomeTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("a delivery is at most %d bytes", MaxPayload))
			return
		}
		h.answer(w, event, OutcomeMalformed, http.StatusBadRequest, "cannot read the body: "+err.Error())
		return
	}
	if err := verify(body, req.Header.Get(HeaderSignature), h.secret); err != nil {
		h.answer(w, event, OutcomeUnauthorized, http.StatusUnauthorized, err.Error()+": check the webhook's secret against --github-webhook-secret-file")
		return
	}
	log := h.log.WithValues("event", event, "delivery", req.Header.Get(HeaderDelivery))
	switch event {
	case "ping":
		h.answer(w, event, OutcomePing, http.StatusOK, "pong")
		return
	case "workflow_job":
	default:
		h.answer(w, event, OutcomeIgnored, http.StatusAccepted, "runner-guard reads only workflow_job events")
		return
	}
	p, err := parseWorkflowJob(body)
	if err != nil {
		h.answer(w, event, OutcomeMalformed, http.StatusBadRequest, err.Error())
		return
	}
	if p.Action != ActionInProgress && p.Action != ActionCompleted {
		h.answer(w, event, OutcomeIgnored, http.StatusAccepted, "runner-guard reads only in_progress and completed")
		return
	}
	delivery := req.Header.Get(HeaderDelivery)
	if delivery != "" && !h.deliveries.add(delivery) {
		h.answer(w, event, OutcomeDuplicate, http.StatusOK, "delivery already applied")
		return
	}
	ctx, cancel := context.WithTimeout(logr.NewContext(context.WithoutCancel(req.Context()), log), applyTimeout)
	defer cancel()
	outcome, err := h.applier.apply(ctx, p)
	if err != nil {
		// Not remembered: GitHub's redelivery of it is applied.
		h.deliveries.remove(delivery)
		log.Error(err, "cannot apply a workflow_job delivery", "action", p.Action, "job", p.WorkflowJob.ID, "runner", p.WorkflowJob.RunnerName)
		h.answer(w, event, OutcomeFailed, http.StatusInternalServerError, "cannot apply the delivery; redeliver it: "+err.Error())
		return
	}
	log.V(1).Info("workflow_job delivery", "action", p.Action, "job", p.WorkflowJob.ID, "runner", p.WorkflowJob.RunnerName, "outcome", outcome)
	h.answer(w, event, outcome, http.StatusOK, outcome)
}

func (h *Handler) answer(w http.ResponseWriter, event, outcome string, code int, msg string) {
	h.metrics.count(event, outcome)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
