package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	jsoniter "github.com/json-iterator/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// EvictionReleasedAnnotation, on an Eviction (not the pod), says its evictor
// has just unregistered the pod's runner: runner-guard's drain sets it. It
// only makes the webhook ask GitHub rather than answer from a listing or
// memory that may predate the unregister; GitHub's answer still decides.
// It is heeded only from runner-guard's own user (Options.ReleasedBy):
// anyone else's would be a GitHub request per eviction, memory bypassed.
const EvictionReleasedAnnotation = "runner-guard.io/runner-released"

// Path is where the handler is served; the manifests point every webhook entry here.
const Path = "/validate-runner-pods"

// Options wires a Handler.
type Options struct {
	// Config must have been completed (ParseConfig, DefaultConfig or Complete).
	Config Config
	GitHub GitHub
	// Pods reads the pod named by an eviction. It must not be a cache: an
	// eviction can name a pod created a moment ago.
	Pods client.Reader
	// Events is optional; nil records no Events.
	Events events.EventRecorder
	// Metrics is optional.
	Metrics *Metrics
	// GitHubBaseURL is the API base of the static credentials (--github-url);
	// set, a scale-set runner whose githubConfigUrl names another host is
	// refused by the on-error policy rather than asked at the wrong GitHub.
	GitHubBaseURL string
	// Runners reads ARC's EphemeralRunners (arc.NewResolver); nil reads
	// scale-set pods' labels only.
	Runners RunnerResolver
	// Retirements receives the EphemeralRunners of runners a decision
	// unregistered (disruption.Retirer deletes them outside the admission
	// call); nil retires none.
	Retirements Retirements
	// Scheme decodes review objects; defaults to client-go's scheme.
	Scheme *runtime.Scheme
	// Now is the clock of the recently-admitted memory; defaults to time.Now.
	Now func() time.Time
	// JobKeys is the GitHub webhook secret (--github-webhook-secret-file):
	// a runner-guard.io/job annotation it verifies refuses as busy (rule
	// 4h); nil trusts none.
	JobKeys *jobannotation.Keyring
	// Reservations shares the disruptions reserved under each
	// PodDisruptionBudget with the other replicas (a Lease per budget);
	// nil: each replica counts only its own.
	Reservations *Reservations
	// ReleasedBy is the user runner-guard's own drain evicts as: only its
	// Evictions' EvictionReleasedAnnotation is heeded ("": nobody's).
	ReleasedBy string
}

// Handler is the admission.Handler for DELETE pods and CREATE pods/eviction.
type Handler struct {
	decider *decider
	// runnerNamespaces, when not nil, are the only namespaces whose pods are
	// guarded (Config.RunnerNamespaces): an eviction elsewhere reads nothing.
	runnerNamespaces map[string]bool
	// exempt and specs let the handler skip decoding what the rules will not read.
	exempt  []string
	specs   []RunnerPodSpec
	decoder admission.Decoder
	pods    client.Reader
	events  events.EventRecorder
	metrics *Metrics
	// releasedBy is Options.ReleasedBy.
	releasedBy string
}

var _ admission.Handler = &Handler{}

// NewHandler validates the options and builds a Handler.
func NewHandler(o Options) (*Handler, error) {
	if o.GitHub == nil {
		return nil, errors.New("webhook: GitHub client is required")
	}
	if o.Pods == nil {
		return nil, errors.New("webhook: pod reader is required (evictions name pods by name only)")
	}
	if err := o.Config.Validate().ToAggregate(); err != nil {
		return nil, fmt.Errorf("webhook: invalid config: %w", err)
	}
	if o.Scheme == nil {
		o.Scheme = clientgoscheme.Scheme
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := newDecider(o.Config, o.GitHub, o.Pods, o.Now)
	d.policy.JobKeys = o.JobKeys
	d.budgets.Share(o.Reservations)
	d.metrics = o.Metrics
	if o.Metrics != nil && d.resolver.bindings.open() {
		o.Metrics.ScopesOpen.Set(1)
	}
	d.resolver.runners, d.resolver.githubBase = o.Runners, o.GitHubBaseURL
	if o.Runners != nil && o.Retirements != nil {
		d.retirements = o.Retirements
	} else {
		d.retire = false
	}
	h := &Handler{
		decider:    d,
		exempt:     o.Config.ExemptNamespaces,
		specs:      o.Config.RunnerPods,
		decoder:    admission.NewDecoder(o.Scheme),
		pods:       o.Pods,
		events:     o.Events,
		metrics:    o.Metrics,
		releasedBy: o.ReleasedBy,
	}
	if len(o.Config.RunnerNamespaces) > 0 {
		h.runnerNamespaces = map[string]bool{}
		for _, ns := range o.Config.RunnerNamespaces {
			h.runnerNamespaces[ns] = true
		}
	}
	return h, nil
}

// ScopesOpen reports that no scope binding is configured: a runner pod in
// any namespace may name any GitHub scope (today's behaviour, said at start-up).
func (h *Handler) ScopesOpen() bool { return h.decider.resolver.bindings.open() }

// Handle answers one AdmissionReview. It gathers the review's facts, hands
// them to the decider, and records every decision the same way: metric, log
// line and (where the decision table says so) an Event.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.UID == "" || req.Operation == "" {
		return admission.Errored(http.StatusBadRequest, errors.New("AdmissionReview carries no request (uid and operation are required)"))
	}
	var op Operation
	switch {
	case req.Operation == admissionv1.Delete && req.Resource.Resource == "pods" && req.SubResource == "":
		op = OperationDelete
	case req.Operation == admissionv1.Create && req.Resource.Resource == "pods" && req.SubResource == "eviction":
		op = OperationEvict
	default:
		// Only reachable through a misconfigured webhook rule; never block it.
		return admission.Allowed(fmt.Sprintf("runner-guard does not handle %s %s/%s", req.Operation, req.Resource.Resource, req.SubResource))
	}
	// The API server's timeoutSeconds runs from about now: the eviction's pod
	// read below, like every later step, ends inside it. Only that deadline
	// bounds it: controller-runtime's request contexts end when the server is
	// told to stop (a rollout's SIGTERM), and a review in flight then must
	// still be answered on its facts, not refused as a failed read.
	arrived := time.Now()
	readCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), decisionDeadline(arrived, h.decider.timeout()))
	defer cancel()
	r, err := h.facts(readCtx, op, req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	r.Arrived = arrived
	dec, target := h.decider.decide(ctx, r)
	h.metrics.observe(op, dec)
	h.record(r, dec)
	h.log(ctx, r, dec, target)
	return toResponse(dec)
}

// facts gathers what the rules decide on: the pod (the DELETE's oldObject, or
// for an eviction the live pod, nil if it is gone, or the error reading it),
// the requester and whether this is a dry run. An error means a malformed review.
func (h *Handler) facts(ctx context.Context, op Operation, req admission.Request) (review, error) {
	r := review{
		Operation: op,
		Namespace: req.Namespace,
		Name:      req.Name,
		User:      req.UserInfo,
		DryRun:    req.DryRun != nil && *req.DryRun,
	}
	if slices.Contains(h.exempt, r.Namespace) {
		// The first rule decides on the namespace alone: read nothing more.
		return r, nil
	}
	if h.runnerNamespaces != nil && !h.runnerNamespaces[r.Namespace] && r.Namespace != "" {
		// Outside the runner namespaces no pod is guarded, and runner-guard
		// may not read pods there: read nothing, so nothing blocks.
		r.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
		return r, nil
	}
	if op == OperationDelete {
		if len(req.OldObject.Raw) == 0 {
			return r, errors.New("DELETE review carries no oldObject")
		}
		// Most deleted pods are not running runners: read only what rules 1
		// to 3 need and decode the whole pod only when they do not decide.
		if partial := h.fastPathPod(req.OldObject.Raw); partial != nil {
			r.Pod = partial
		} else {
			pod := &corev1.Pod{}
			if err := h.decoder.DecodeRaw(req.OldObject, pod); err != nil {
				return r, fmt.Errorf("decode oldObject as Pod: %w", err)
			}
			r.Pod = pod
		}
		r.Name = r.Pod.Name
		return r, nil
	}

	if len(req.Object.Raw) > 0 {
		// kubectl drain --dry-run=server sends the dry run only inside the
		// Eviction's deleteOptions; the review's own dryRun is false.
		ev := &policyv1.Eviction{}
		if err := h.decoder.DecodeRaw(req.Object, ev); err != nil {
			return r, fmt.Errorf("decode Eviction: %w", err)
		}
		if r.Name == "" {
			r.Name = ev.Name
		}
		if ev.DeleteOptions != nil && len(ev.DeleteOptions.DryRun) > 0 {
			r.DryRun = true
		}
		_, marked := ev.Annotations[EvictionReleasedAnnotation]
		r.Released = marked && h.releasedBy != "" && req.UserInfo.Username == h.releasedBy
	}
	if r.Name == "" || r.Namespace == "" {
		return r, errors.New("eviction review names no pod")
	}
	// An Eviction carries none of the pod's labels: read the live pod. No
	// cache answers for it, since a cache that does not hold a pod cannot
	// tell a pod that is no runner from a runner pod it has not seen yet
	// (created a moment ago, or missed by a stalled watch). Only a failed read
	// goes to the on-error policy (rule 1b).
	pod := &corev1.Pod{}
	err := h.pods.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, pod)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		r.PodErr = err
	default:
		r.Pod = pod
	}
	return r, nil
}

// log writes the decision's line. Quiet allows are most decisions: their
// fields are built only when verbose logging is on.
func (h *Handler) log(ctx context.Context, r review, dec Decision, target Target) {
	log := logf.FromContext(ctx)
	quiet := dec.Allowed && dec.Warning == "" && dec.Reason != ReasonUnregistered && dec.Reason != ReasonPodNotLive
	if quiet && !log.V(1).Enabled() {
		return
	}
	kv := []any{"operation", r.Operation, "pod", klog.KRef(r.Namespace, r.Name), "allowed", dec.Allowed, "reason", dec.Reason, "dryRun", r.DryRun}
	if target.Name != "" {
		kv = append(kv, "runner", target.Name, "scope", target.Scope.String())
	}
	if b := r.budgetHold; dec.Allowed && b.Budget() != "" {
		// Which budget the eviction took a disruption of, and what it read.
		read := b.Read()
		kv = append(kv, "budget", b.Budget(), "budgetAllowed", read.Allowed, "budgetInFlight", read.InFlight, "budgetVersion", read.Version)
	}
	if quiet {
		log.V(1).Info("admitted", kv...)
		return
	}
	log.Info(dec.Message, kv...)
}

// fastJSON reads podHead; json-iterator skips the fields podHead does not
// name several times faster than encoding/json.
var fastJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// podHead is the part of a pod that rules 1 to 3 read.
type podHead struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               types.UID         `json:"uid"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
	} `json:"metadata"`
	// Status is read only for runner pods.
	Status jsoniter.RawMessage `json:"status"`
}

type podStatusHead struct {
	Phase             corev1.PodPhase       `json:"phase"`
	Conditions        []corev1.PodCondition `json:"conditions"`
	ContainerStatuses []struct {
		Name  string `json:"name"`
		State struct {
			Running *corev1.ContainerStateRunning `json:"running"`
		} `json:"state"`
	} `json:"containerStatuses"`
}

// fastPathPod reads only what rules 1 to 3 need and returns that partial pod
// when one of them will decide (not a runner, terminating, runner not
// running), so most deletes skip the full Pod decode. It returns nil when the
// pod must be decoded whole, or when raw is not a v1 Pod it can read.
func (h *Handler) fastPathPod(raw []byte) *corev1.Pod {
	var head podHead
	if err := fastJSON.Unmarshal(raw, &head); err != nil || head.Kind != "Pod" || head.APIVersion != "v1" {
		return nil
	}
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace, pod.UID = head.Metadata.Name, head.Metadata.Namespace, head.Metadata.UID
	pod.Labels, pod.DeletionTimestamp = head.Metadata.Labels, head.Metadata.DeletionTimestamp
	spec := matchRunnerPod(pod, h.specs)
	if spec == nil || pod.DeletionTimestamp != nil {
		return pod
	}
	var status podStatusHead
	if len(head.Status) > 0 {
		if err := fastJSON.Unmarshal(head.Status, &status); err != nil {
			return nil
		}
	}
	pod.Status.Phase, pod.Status.Conditions = status.Phase, status.Conditions
	for _, cs := range status.ContainerStatuses {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses,
			corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Running: cs.State.Running}})
	}
	if !runnerContainerRunning(pod, spec.Container) && !disrupted(pod) {
		return pod
	}
	return nil
}

// record emits the decision's Event on the pod. Dry runs have no side effects.
func (h *Handler) record(r review, d Decision) {
	if h.events == nil || r.DryRun {
		return
	}
	if r.Fallback != "" && r.Pod != nil {
		h.events.Eventf(r.Pod, nil, corev1.EventTypeWarning, EventFallbackToLabels, "Resolve", "%s", r.Fallback)
	}
	if d.EventReason == "" {
		return
	}
	var regarding runtime.Object = r.Pod
	if r.Pod == nil {
		// The pod could not be read: record the Event against its reference.
		regarding = &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: r.Namespace, Name: r.Name}
	}
	action := "Delete"
	if r.Operation == OperationEvict {
		action = "Evict"
	}
	note := fmt.Sprintf("%s [reason: %s]", d.Message, d.Reason)
	if d.Reason == ReasonUnregistered {
		// A validating webhook cannot undo: say what happens if a later step rejects the delete.
		note += "; if the deletion is rejected after this, the runner process exits and its controller replaces the pod"
	}
	if len(note) > 1000 {
		note = note[:1000]
	}
	h.events.Eventf(regarding, nil, d.EventType, d.EventReason, action, "%s", note)
}

// toResponse turns a decision into an admission response. The code and reason
// reach the client unchanged: a 429 makes kubectl drain and autoscalers retry.
func toResponse(d Decision) admission.Response {
	if d.Allowed {
		resp := admission.Allowed(d.Message)
		if d.Warning != "" {
			resp = resp.WithWarnings(d.Warning)
		}
		return resp
	}
	// The stable reason closes the message, so scripts and people can match it
	// against Events and the decisions metric.
	resp := admission.Denied(fmt.Sprintf("%s [reason: %s]", d.Message, d.Reason))
	code := d.Code
	if code == 0 {
		code = http.StatusForbidden
	}
	resp.Result.Code = code
	switch code {
	case http.StatusTooManyRequests:
		resp.Result.Reason = metav1.StatusReasonTooManyRequests
		resp.Result.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds(d.RetryAfter)}
	case http.StatusServiceUnavailable:
		resp.Result.Reason = metav1.StatusReasonServiceUnavailable
	default:
		resp.Result.Reason = metav1.StatusReasonForbidden
	}
	return resp
}

// Budgets is the ledger of evictions this replica let through under each
// PodDisruptionBudget; the drain controller reserves in it too, so the
// webhook and the drain of one replica count the same evictions.
func (h *Handler) Budgets() *BudgetLedger { return h.decider.budgets }

// FitTimeout tells the handler the API server's deadline for a review as
// the webhook configuration gives it (its shortest timeoutSeconds): when
// that is shorter than --webhook-timeout, reviews are decided within it, so
// no unregister starts after the API server has given up.
func (h *Handler) FitTimeout(t time.Duration) { h.decider.apiTimeout.Store(int64(t)) }
