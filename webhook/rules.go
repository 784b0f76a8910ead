package webhook

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Operation is what the requester is doing to the pod.
type Operation string

const (
	OperationDelete Operation = "delete"
	OperationEvict  Operation = "evict"
)

// Reason is a stable name for why a decision was made, used in messages,
// Events and the decisions metric. Do not rename: dashboards depend on them.
// docs/DESIGN.md has one row per reason; a test keeps the two in step.
type Reason string

const (
	ReasonExemptNamespace    Reason = "exempt-namespace"
	ReasonPodLookupFailed    Reason = "pod-lookup-failed"
	ReasonNotRunnerPod       Reason = "not-runner-pod"
	ReasonPodNotFound        Reason = "pod-not-found"
	ReasonTerminating        Reason = "already-terminating"
	ReasonContainerMissing   Reason = "runner-container-missing"
	ReasonRunnerNotRunning   Reason = "runner-not-running"
	ReasonForceAnnotation    Reason = "force-annotation"
	ReasonPodNotLive         Reason = "pod-not-live"
	ReasonNotOwner           Reason = "runner-owner-mismatch"
	ReasonRunnerLookupFailed Reason = "runner-lookup-failed"
	ReasonRemovedByARC       Reason = "runner-removed-by-arc"
	ReasonScopeUnknown       Reason = "scope-unknown"
	ReasonScopeNotBound      Reason = "scope-not-bound"
	ReasonCredentials        Reason = "credentials-unusable"
	ReasonRecentlyAdmitted   Reason = "recently-admitted"
	ReasonRecentlyBusy       Reason = "recently-busy"
	ReasonJobRunning         Reason = "runner-job-running"
	ReasonJobAnnotated       Reason = "runner-job-annotated"
	ReasonListedBusy         Reason = "runner-listed-busy"
	ReasonBudgetSpent        Reason = "github-budget-spent"
	ReasonPDBBlocks          Reason = "disruption-budget"
	ReasonBypassUser         Reason = "bypass-user"
	ReasonDisrupted          Reason = "disrupted-pod"
	ReasonBypassBusy         Reason = "bypass-runner-busy"
	ReasonDryRunBusy         Reason = "dry-run-runner-busy"
	ReasonDryRunIdle         Reason = "dry-run-runner-idle"
	ReasonDryRunNotFound     Reason = "dry-run-runner-not-found"
	ReasonUnregistered       Reason = "unregistered"
	ReasonRunnerNotFound     Reason = "runner-not-found"
	ReasonRunnerBusy         Reason = "runner-busy"
	ReasonDeadline           Reason = "deadline-too-close"
	ReasonRateLimited        Reason = "rate-limited"
	ReasonGitHubError        Reason = "github-error"
	ReasonNodeDeadline       Reason = "node-deadline"
)

// Event reasons (events.k8s.io reason field, CamelCase by convention).
const (
	EventRunnerBusy         = "RunnerBusy"
	EventRunnerUnregistered = "RunnerUnregistered"
	EventForcedDelete       = "GuardBypassed"
	EventGitHubError        = "GitHubError"
	EventScopeUnknown       = "RunnerScopeUnknown"
	EventRateLimited        = "GitHubRateLimited"
	EventPodLookupFailed    = "PodLookupFailed"
	EventContainerMissing   = "RunnerContainerMissing"
	EventBypassRefused      = "GuardBypassRefused"
	EventCredentials        = "GitHubCredentialsUnusable"
	EventFallbackToLabels   = "EphemeralRunnerUnreadable"
	EventNotOwner           = "RunnerOwnerMismatch"
	EventRunnerLookupFailed = "RunnerLookupFailed"
	EventScopeNotBound      = "RunnerScopeNotBound"
	EventBudgetSpent        = "GitHubBudgetSpent"
	EventNodeDeadline       = "NodeDeadlinePassed"
)

// Decision is the outcome of one review.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Message says why and what to do; for denials it reaches the requester.
	Message string
	// Code is the HTTP status of a denial: 403, 429 or 503.
	Code int32
	// RetryAfter becomes retryAfterSeconds of a 429.
	RetryAfter time.Duration
	// Warning is an admission warning shown by kubectl on an allowed request.
	Warning string
	// EventType and EventReason describe the Event to record on the pod; empty
	// EventReason means no Event.
	EventType   string
	EventReason string
}

// review holds the facts of one request that the rules decide on. The handler
// fills the request's facts; decide's steps add the rest when the first rule
// that needs them is reached: resolve (resolve.go) the fields marked
// stageRunner, ask (github.go) those marked stageGitHub; settle (settle.go)
// writes what was learnt back from it.
type review struct {
	Operation Operation
	// Namespace and Name name the pod under review, even when Pod is nil.
	Namespace string
	Name      string
	// Pod is the pod under review; nil when an eviction names a pod that is gone.
	Pod *corev1.Pod
	// PodErr is set when the pod could not be read; Pod is then nil.
	PodErr error
	User   authenticationv1.UserInfo
	DryRun bool
	// Arrived is when the review reached the handler: the API server's
	// timeoutSeconds runs from about then.
	Arrived time.Time
	// Disrupted: the pod was marked Failed with a DisruptionTarget condition
	// (pod GC after a Node was deleted, taint eviction) while its runner may
	// still be running on a node that is alive.
	Disrupted bool

	// Spec is the matched runner pod spec, nil for a pod that is not a runner.
	Spec *RunnerPodSpec
	// LiveErr is the error reading the live pod of a DELETE; LiveGone says
	// the pod does not exist or has another UID (stageRunner).
	LiveErr  error
	LiveGone string
	// resolution is the runner behind the pod and how it is known (stageRunner).
	resolution
	// RecentlyAdmitted: this pod's deletion was admitted moments ago after
	// GitHub removed its runner (stageRunner).
	RecentlyAdmitted bool
	// Busy is GitHub's remembered "busy" for this runner (stageRunner, read
	// by ask and the GitHub rules).
	Busy busyMemo
	// Recalled is what else the memories held of the runner, for ask, and
	// where settle records GitHub's answer (stageRunner).
	Recalled recollection
	// PDBBlocks names a PodDisruptionBudget that allows no disruption now (evictions, stageRunner).
	PDBBlocks string
	// PDBSeveral names the budgets selecting the pod when there are several:
	// the API server refuses its eviction (evictions, stageRunner).
	PDBSeveral []string
	// PDBInFlight is how many evictions under PDBBlocks this replica let
	// through that the API server has not accounted for yet.
	PDBInFlight int
	// PDBReserveErr says why no disruption of PDBBlocks could be reserved
	// with the other replicas (its Lease could not be read or written).
	PDBReserveErr error
	// budgetHold is the disruption reserved for this eviction: kept when it
	// is let through, given back otherwise.
	budgetHold BudgetHold
	// NodeDeadline is the deadline of the pod's node's NodeClaim, read for
	// Karpenter's DELETE with --honor-node-deadlines (zero: none; stageRunner).
	NodeDeadline NodeDeadline
	// GitHub is GitHub's answer (stageGitHub).
	GitHub githubResult
}

// githubResult is what GitHub answered: an Unregister outcome, or a Status for
// a dry run, and the error of either call.
type githubResult struct {
	Outcome ghclient.Outcome
	Status  *ghclient.RunnerStatus
	Err     error
	// listedAt is when the listing that said busy was taken.
	listedAt time.Time
	// From says where a "busy" came from when GitHub was not asked to
	// unregister: the scope's listing, or the busy memory.
	From knowledge
	// call is the request made of the GitHub client for this answer (none
	// when a memory or the listing answered, or the budget held an
	// unregister), and cut that the call's context had ended when it
	// returned: settle records the answer from them.
	call ghCall
	cut  bool
}

// ghCall is a request made of the GitHub client.
type ghCall int

const (
	callNone       ghCall = iota
	callStatus            // a read-only look-up
	callUnregister        // an unregister, sent to GitHub
)

// knowledge is where a decision's word on the runner came from, for the
// decisions-from-knowledge metric. Each source can prove "busy", never
// "idle": only GitHub's DELETE (or a look-up) lets a pod go.
type knowledge string

const (
	knowGitHub    knowledge = "github"     // a request about this runner
	knowJobFields knowledge = "job-fields" // the EphemeralRunner's job fields
	knowListing   knowledge = "listing"    // the scope's shared listing
	knowMemory    knowledge = "memory"     // GitHub's "busy", remembered
)

// busy reports a look-up that found the runner busy.
func (g githubResult) busy() bool {
	return g.Err == nil && g.Status != nil && g.Status.State == ghclient.StateBusy
}

// policy is the configuration the rules read.
type policy struct {
	OnError          OnErrorPolicy
	BypassUsers      []string
	BypassGroups     []string
	ForceAnnotation  string // "" when disabled
	ExemptNamespaces []string
	BusyRetryAfter   time.Duration
	// BusyRetryMax caps how long a remembered "busy" answer is trusted.
	BusyRetryMax time.Duration
	// OnErrorSource says where OnError was set, for messages: "--on-error=deny",
	// "onError: deny in --config" or "the default onError: deny".
	OnErrorSource string
	// JobKeys verifies the runner-guard.io/job annotation (rule 4h);
	// nil: no annotation is trusted.
	JobKeys *jobannotation.Keyring
	// HonorNodeDeadlines lets Karpenter delete a busy runner's pod past its
	// NodeClaim's deadline (rule 4i, --honor-node-deadlines).
	HonorNodeDeadlines bool
	// KarpenterUsers are the usernames Karpenter deletes pods as.
	KarpenterUsers []string
}

// GitHub is what the decision needs from GitHub; *ghclient.Router implements
// it, with the flags' credentials or a runner's own (ARC's githubConfigSecret).
type GitHub interface {
	Unregister(ctx context.Context, r ghclient.Runner) (ghclient.Outcome, error)
	Status(ctx context.Context, r ghclient.Runner) (ghclient.RunnerStatus, error)
	// Listed answers from the runner's scope listing: from a fresh one only,
	// or, with refresh, taking it anew (cheap: one point per 100 runners).
	Listed(ctx context.Context, r ghclient.Runner, refresh ghclient.Refresh) (ghclient.Listing, error)
	// Pressed says the runner's credential budget is getting short.
	Pressed(r ghclient.Runner) bool
}

var _ GitHub = &ghclient.Router{}

// RunnerResolver reads what a runner controller's own objects say about the
// runner of a pod; *arc.Resolver implements it for ARC's scale-set mode.
type RunnerResolver interface {
	Resolve(ctx context.Context, pod *corev1.Pod) (*arc.Runner, error)
	Retire(ctx context.Context, run *arc.Runner) error
}

var _ RunnerResolver = &arc.Resolver{}

// decider runs the decision table (rules.go) over the facts of one review,
// resolving the runner and asking GitHub only when a rule needs them.
type decider struct {
	policy        policy
	specs         []RunnerPodSpec
	table         []rule
	github        GitHub
	githubTimeout time.Duration
	// webhookTimeout is the API server's deadline for a review
	// (--webhook-timeout); apiTimeout, when shorter and set, is the one the
	// webhook configuration really gives (see fitTimeout).
	webhookTimeout time.Duration
	apiTimeout     atomic.Int64
	// pods reads live pods and PodDisruptionBudgets through the API server.
	pods   client.Reader
	memory *admittedMemory
	busy   *busyMemory
	// failures backs off GitHub requests for a pod whose last decision failed.
	failures *failureMemory
	// statuses remembers read-only look-ups, so forged dry runs cannot
	// spend the rate limit.
	statuses *statusMemory
	// resolver answers which runner a pod runs.
	resolver resolver
	// budgets counts the evictions let through and not yet accounted for
	// by their PodDisruptionBudget (rule 5d).
	budgets *BudgetLedger
	// retire deletes the EphemeralRunner of a runner runner-guard unregistered.
	retire bool
	// retirements queues what retire deletes (disruption.Retirer).
	retirements Retirements
	metrics     *Metrics
}

func newDecider(cfg Config, gh GitHub, pods client.Reader, now func() time.Time) *decider {
	pol := cfg.policy()
	return &decider{
		retire:         cfg.retireEphemeralRunners(),
		resolver:       resolver{bindings: compileBindings(cfg.ScopeBindings), fallbacks: newFallbackMemory()},
		statuses:       newStatusMemory(cfg.ReadOnlyMemoryTTL.Duration, now),
		policy:         pol,
		specs:          cfg.RunnerPods,
		table:          decisionTable(),
		github:         gh,
		githubTimeout:  cfg.GitHubTimeout.Duration,
		webhookTimeout: cfg.WebhookTimeout.Duration,
		pods:           pods,
		memory:         newAdmittedMemory(cfg.RecentlyAdmittedTTL.Duration, now),
		busy:           newBusyMemory(pol.BusyRetryAfter, pol.BusyRetryMax, now),
		failures:       newFailureMemory(now),
		// An admitted eviction reaches the budget within the API server's
		// deadline; one it never made stops counting a little after.
		budgets: NewBudgetLedger(cfg.WebhookTimeout.Duration, now),
	}
}

// timeout is the deadline a review is decided within.
func (d *decider) timeout() time.Duration {
	if t := time.Duration(d.apiTimeout.Load()); t > 0 && t < d.webhookTimeout {
		return t
	}
	return d.webhookTimeout
}

// decide returns the decision for one review and the runner it concerns (zero
// when the decision was made before the runner was resolved). It walks the
// review once, each step in one place: the request's own facts decide
// first; resolve (resolve.go) then reads everything the runner rules decide
// on; ask (github.go) makes the one GitHub call the rest need; and settle
// (settle.go) carries out what the decision implies. A decision made early
// costs no read and no GitHub request.
func (d *decider) decide(ctx context.Context, r review) (Decision, Target) {
	r.Spec = matchRunnerPod(r.Pod, d.specs)
	r.Disrupted = r.Spec != nil && disrupted(r.Pod)
	if dec, ok := d.decideAt(stageRequest, &r); ok {
		return dec, r.Target
	}
	// From here the decision reads the API server and asks GitHub. It runs
	// to its end even when the server shuts down (a rollout's SIGTERM):
	// GitHub may already have removed the runner, and the API server must
	// hear so. The review's deadline, inside the API server's, bounds it
	// instead.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), r.deadline(d.timeout()))
	defer cancel()
	d.resolve(ctx, &r)
	dec, ok := d.decideAt(stageRunner, &r)
	asked := !ok
	if asked {
		r.GitHub = d.ask(ctx, &r)
		if dec, ok = d.decideAt(stageGitHub, &r); !ok {
			// The table's last rule always decides; reaching here is a programming error.
			panic("webhook: decision table ended without a decision")
		}
	}
	return d.settle(&r, dec, asked), r.Target
}

// decideAt runs the rules of stage s in the table's order: the first that
// decides wins.
func (d *decider) decideAt(s stage, r *review) (Decision, bool) {
	for _, rl := range d.table {
		if rl.needs != s {
			continue
		}
		if dec, ok := rl.decide(r, &d.policy); ok {
			return dec, true
		}
	}
	return Decision{}, false
}

// deadlineMargin is how long before the API server gives up (the webhook
// configuration's timeoutSeconds, counted from the review's arrival) every
// read and GitHub request of a decision must have ended; the answer still
// has to travel back.
const deadlineMargin = time.Second

// decisionDeadline is when a review that arrived then must have ended its
// reads and GitHub requests.
func decisionDeadline(arrived time.Time, webhookTimeout time.Duration) time.Time {
	return arrived.Add(webhookTimeout - deadlineMargin)
}

// deadline is the review's decisionDeadline (from now for a review without
// an arrival time, as in tests that call the decider directly).
func (r *review) deadline(webhookTimeout time.Duration) time.Time {
	arrived := r.Arrived
	if arrived.IsZero() {
		arrived = time.Now()
	}
	return decisionDeadline(arrived, webhookTimeout)
}

// stage is how much the decider has resolved before a rule runs.
type stage int

const (
	// stageRequest: the request's own facts and the matched runner pod spec.
	stageRequest stage = iota
	// stageRunner: the runner's name and scope.
	stageRunner
	// stageGitHub: GitHub's answer.
	stageGitHub
)

// rule is one row of the decision table: it decides or passes (false).
type rule struct {
	reasons []Reason // the reasons it can decide with, for docs and tests
	needs   stage
	decide  func(r *review, p *policy) (Decision, bool)
}

// decisionTable is docs/DESIGN.md's decision table in code: the first rule that
// decides wins. The decider resolves what a rule needs just before it runs, so
// a decision made early costs no runner resolution and no GitHub request.
func decisionTable() []rule {
	return slices.Concat(
		at(stageRequest,
			decides(ruleExemptNamespace, ReasonExemptNamespace),
			decides(rulePodLookupFailed, ReasonPodLookupFailed),
			decides(ruleNotRunnerPod, ReasonPodNotFound, ReasonNotRunnerPod),
			decides(ruleAlreadyTerminating, ReasonTerminating),
			decides(ruleContainerMissing, ReasonContainerMissing),
			decides(ruleRunnerNotRunning, ReasonRunnerNotRunning),
			decides(ruleForceAnnotation, ReasonForceAnnotation),
		),
		at(stageRunner,
			decides(rulePodNotLive, ReasonPodNotLive),
			decides(ruleNotOwner, ReasonNotOwner),
			decides(ruleRunnerLookupFailed, ReasonRunnerLookupFailed),
			decides(ruleRemovedByARC, ReasonRemovedByARC),
			decides(ruleNamespaceDeleting, ReasonNamespaceDeleting),
			decides(ruleNodeDeadline, ReasonNodeDeadline),
			decides(ruleJobRunning, ReasonJobRunning),
			decides(ruleScopeUnknown, ReasonScopeUnknown),
			decides(ruleScopeNotBound, ReasonScopeNotBound),
			decides(ruleCredentialsUnusable, ReasonCredentials),
			decides(ruleRecentlyAdmitted, ReasonRecentlyAdmitted),
			decides(ruleJobAnnotated, ReasonJobAnnotated),
			decides(rulePDBBlocks, ReasonPDBBlocks),
		),
		at(stageGitHub,
			decides(ruleBypass, ReasonBypassUser, ReasonDisrupted, ReasonBypassBusy),
			decides(ruleDryRun, ReasonDryRunBusy, ReasonDryRunIdle, ReasonDryRunNotFound),
			decides(ruleNodeDeadline, ReasonNodeDeadline),
			decides(ruleRecentlyBusy, ReasonRecentlyBusy),
			decides(ruleListedBusy, ReasonListedBusy),
			decides(ruleUnregistered, ReasonUnregistered, ReasonRunnerNotFound),
			decides(ruleRunnerBusy, ReasonRunnerBusy),
			decides(ruleDeadline, ReasonDeadline),
			decides(ruleBudgetSpent, ReasonBudgetSpent),
			decides(ruleRateLimited, ReasonRateLimited),
			decides(ruleGitHubError, ReasonGitHubError),
			decides(ruleUnexpectedOutcome, ReasonGitHubError),
		),
	)
}

// at is the rows of one stage of the table, in their order.
func at(s stage, rows ...rule) []rule {
	for i := range rows {
		rows[i].needs = s
	}
	return rows
}

// decides is a row: the rule and the reasons it can decide with.
func decides(decide func(r *review, p *policy) (Decision, bool), reasons ...Reason) rule {
	return rule{reasons: reasons, decide: decide}
}

func allow(reason Reason, msg string) Decision {
	return Decision{Allowed: true, Reason: reason, Message: msg}
}

func (r *review) podRef() string { return r.Namespace + "/" + r.Name }

// Rule 1a: kube-system and runner-guard's own namespace are never guarded, so
// a misconfigured selector cannot lock the cluster's own pods.
func ruleExemptNamespace(r *review, p *policy) (Decision, bool) {
	if slices.Contains(p.ExemptNamespaces, r.Namespace) {
		return allow(ReasonExemptNamespace, fmt.Sprintf("namespace %q is exempt", r.Namespace)), true
	}
	return Decision{}, false
}

// Rule 1b: the pod named by an eviction could not be read, so runner-guard
// cannot tell whether it is a runner; the on-error policy decides, and a
// refusal is a 429 so drains retry.
func rulePodLookupFailed(r *review, p *policy) (Decision, bool) {
	if r.PodErr == nil {
		return Decision{}, false
	}
	msg := fmt.Sprintf("cannot read pod %s to check its runner: %v", r.podRef(), r.PodErr)
	return podLookupFailed(r, p, msg), true
}

// podLookupFailed applies the on-error policy to a failed pod read.
func podLookupFailed(r *review, p *policy, msg string) Decision {
	d := onError(p, ReasonPodLookupFailed, msg, http.StatusServiceUnavailable)
	refusedEviction(r, p, &d, p.BusyRetryAfter)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventPodLookupFailed
	return d
}

// refusedEviction makes a refused eviction a 429 with retryAfterSeconds:
// kubectl drain and the cluster autoscaler retry a 429 and give up on any
// other code. A refused DELETE keeps its code and no Retry-After, so kubectl
// shows it at once instead of retrying silently.
func refusedEviction(r *review, p *policy, d *Decision, wait time.Duration) {
	if d.Allowed || r.Operation != OperationEvict {
		return
	}
	d.Code, d.RetryAfter = http.StatusTooManyRequests, max(wait, time.Second)
}

// Rule 1: a pod that is not a runner pod (or, for an eviction, no longer exists)
// holds no job.
func ruleNotRunnerPod(r *review, _ *policy) (Decision, bool) {
	switch {
	case r.Pod == nil:
		return allow(ReasonPodNotFound, "pod not found"), true
	case r.Spec == nil:
		return allow(ReasonNotRunnerPod, "not a runner pod"), true
	}
	return Decision{}, false
}

// Rule 2: a pod with a deletionTimestamp was admitted for deletion before; the
// kubelet or garbage collector is finishing it.
func ruleAlreadyTerminating(r *review, _ *policy) (Decision, bool) {
	if r.Pod.DeletionTimestamp != nil {
		return allow(ReasonTerminating, "pod is already terminating"), true
	}
	return Decision{}, false
}

// Rule 3a: a runner pod spec names a container the pod does not have: the
// configuration is wrong, so runner-guard cannot tell whether a job runs.
func ruleContainerMissing(r *review, p *policy) (Decision, bool) {
	if r.Pod.Status.Phase != corev1.PodRunning || runnerContainerStatus(r.Pod, r.Spec.Container) != nil {
		return Decision{}, false
	}
	msg := fmt.Sprintf("pod %s has no container %q, which runner pod spec %q names as the runner: fix runnerPods in --config",
		r.podRef(), r.Spec.Container, r.Spec.Name)
	d := onError(p, ReasonContainerMissing, msg, http.StatusForbidden)
	refusedEviction(r, p, &d, p.BusyRetryAfter)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventContainerMissing
	return d, true
}

// Rule 3: without a running runner container no process can hold a job. A pod
// marked Failed with a DisruptionTarget condition is the exception: the
// control plane marked it (pod GC after its Node object was deleted, taint
// eviction), and its runner may still be running a job on a live node.
func ruleRunnerNotRunning(r *review, _ *policy) (Decision, bool) {
	if r.Disrupted {
		return Decision{}, false
	}
	if !runnerContainerRunning(r.Pod, r.Spec.Container) {
		return allow(ReasonRunnerNotRunning, fmt.Sprintf("container %q is not running", r.Spec.Container)), true
	}
	return Decision{}, false
}

// forced is the loud allow of a pod whose runner was not unregistered.
func forced(r *review, reason Reason, why string) Decision {
	d := allow(reason, fmt.Sprintf("runner-guard bypassed for pod %s: %s; the runner was not unregistered and a running job may be cancelled", r.podRef(), why))
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventForcedDelete
	return d
}

// Rule 4: the force annotation is a person's explicit choice: the pod goes
// without asking GitHub, loudly.
func ruleForceAnnotation(r *review, p *policy) (Decision, bool) {
	if p.ForceAnnotation != "" && r.Pod.Annotations[p.ForceAnnotation] == "true" {
		return forced(r, ReasonForceAnnotation, fmt.Sprintf("annotation %s=true", p.ForceAnnotation)), true
	}
	return Decision{}, false
}

// bypassedBy says why the requester is on the bypass list, or "".
func bypassedBy(u authenticationv1.UserInfo, p *policy) string {
	if slices.Contains(p.BypassUsers, u.Username) {
		return fmt.Sprintf("requester %q is on the bypass list", u.Username)
	}
	for _, g := range u.Groups {
		if slices.Contains(p.BypassGroups, g) {
			return fmt.Sprintf("requester %q is in bypass group %q", u.Username, g)
		}
	}
	return ""
}

// readOnly reports whether the review's GitHub question is a read-only look-up
// rather than an unregister: dry runs, bypass users and disrupted pods.
func (r *review) readOnly(p *policy) bool {
	return r.DryRun || r.Disrupted || bypassedBy(r.User, p) != ""
}

// Rule 4b: the pod a DELETE review names must be the live pod, with the same
// UID. A forged or stale review names a pod that does not exist (or another
// pod of the same name): there is nothing to protect and nothing is asked.
func rulePodNotLive(r *review, p *policy) (Decision, bool) {
	switch {
	case r.LiveErr != nil:
		return podLookupFailed(r, p, fmt.Sprintf("cannot read the live pod %s from the API server: %v", r.podRef(), r.LiveErr)), true
	case r.LiveGone != "":
		return allow(ReasonPodNotLive, fmt.Sprintf("pod %s: %s; nothing to protect, GitHub not asked", r.podRef(), r.LiveGone)), true
	}
	return Decision{}, false
}

// Rule 4d: a pod whose controller reference names an ARC object it does not
// match (another name, another UID) is not that object's
// runner: the reference was copied from a sibling or is stale. Nothing is
// asked or changed on GitHub for it, and the pod goes, loudly.
func ruleNotOwner(r *review, _ *policy) (Decision, bool) {
	if r.NotOwner == nil {
		return Decision{}, false
	}
	d := allow(ReasonNotOwner, fmt.Sprintf("pod %s is not the runner it claims: %v; runner-guard asked GitHub nothing and lets the pod go", r.podRef(), r.NotOwner))
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventNotOwner
	return d, true
}

// Rule 4e: ARC's object could not be read (a transient API error), so
// runner-guard cannot tell which runner the pod is.
func ruleRunnerLookupFailed(r *review, p *policy) (Decision, bool) {
	if r.ObjectErr == nil {
		return Decision{}, false
	}
	msg := fmt.Sprintf("cannot read the ARC object behind pod %s from the API server: %v", r.podRef(), r.ObjectErr)
	d := onError(p, ReasonRunnerLookupFailed, msg, http.StatusServiceUnavailable)
	refusedEviction(r, p, &d, p.BusyRetryAfter)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventRunnerLookupFailed
	return d, true
}

// Rule 4c: ARC removed the runner itself (its EphemeralRunner is being
// deleted and the registration finalizer is gone, or the runner is done):
// nothing on GitHub can give the pod a job, and ARC must never be refused.
func ruleRemovedByARC(r *review, _ *policy) (Decision, bool) {
	if r.ARC == nil || r.ARC.Removed == "" {
		return Decision{}, false
	}
	return allow(ReasonRemovedByARC, fmt.Sprintf("ARC already removed runner %q from GitHub: %s", r.ARC.Name, r.ARC.Removed)), true
}

// Rule 5a: the runner's own credentials (ARC's githubConfigSecret) are
// missing or malformed (the message names the Secret and the key), or the
// flags' credentials would ask another GitHub than the runner's.
func ruleCredentialsUnusable(r *review, p *policy) (Decision, bool) {
	err := r.CredsErr
	if err == nil {
		err = r.HostErr
	}
	return cannotAskGitHub(r, p, err, ReasonCredentials, EventCredentials, "cannot ask GitHub about the runner of pod %s: %v")
}

// Rule 5e: the runner pod names a scope outside what its namespace may reach
// (scopeBindings). runner-guard's credentials are not pointed there: the pod
// goes without any GitHub request, loudly, and the message names the binding.
func ruleScopeNotBound(r *review, _ *policy) (Decision, bool) {
	if r.NotBound == "" {
		return Decision{}, false
	}
	d := allow(ReasonScopeNotBound, fmt.Sprintf("runner %q of pod %s: %s; runner-guard asked GitHub nothing and does not guard this pod: bind the scope to the namespace in scopeBindings to guard it",
		r.Target.Name, r.podRef(), r.NotBound))
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventScopeNotBound
	return d, true
}

// Rule 5: without a scope runner-guard cannot ask GitHub.
func ruleScopeUnknown(r *review, p *policy) (Decision, bool) {
	return cannotAskGitHub(r, p, r.ScopeErr, ReasonScopeUnknown, EventScopeUnknown, "cannot tell where the runner of pod %s is registered on GitHub: %v")
}

// cannotAskGitHub decides, by the on-error policy, a review whose question to
// GitHub cannot be asked (err, rendered with the pod into format). Bypass
// users and disrupted pods are left to rule 6b, which lets them go then.
func cannotAskGitHub(r *review, p *policy, err error, reason Reason, event, format string) (Decision, bool) {
	if err == nil || (!r.DryRun && r.readOnly(p)) {
		return Decision{}, false
	}
	d := onError(p, reason, fmt.Sprintf(format, r.podRef(), err), http.StatusForbidden)
	refusedEviction(r, p, &d, p.BusyRetryAfter)
	d.EventType, d.EventReason = corev1.EventTypeWarning, event
	return d, true
}

// Rule 5b: the API server reviews one deletion up to three times; the repeats
// of an admitted deletion are answered without asking GitHub again.
func ruleRecentlyAdmitted(r *review, _ *policy) (Decision, bool) {
	if r.DryRun || !r.RecentlyAdmitted {
		return Decision{}, false
	}
	return allow(ReasonRecentlyAdmitted, "deletion of this pod was admitted moments ago; runner already unregistered"), true
}

// Rule 4f: ARC's listener wrote a job into the EphemeralRunner's status:
// the runner took a job, and the fields are never cleared while it lives. No
// GitHub request is needed to refuse. Empty fields prove nothing (a runner
// is assigned a job before the listener hears it started), so they never let
// a pod go. Bypass users and disrupted pods are left to their look-up: the
// fields stay set on a runner whose node died mid-job.
func ruleJobRunning(r *review, p *policy) (Decision, bool) {
	if r.ARC == nil || !r.ARC.Job.Started() || (!r.DryRun && r.readOnly(p)) {
		return Decision{}, false
	}
	d := busyDenial(r, p, p.BusyRetryAfter)
	d.Reason = ReasonJobRunning
	d.Message = strings.Replace(d.Message, "is running a job", fmt.Sprintf("is running a job (EphemeralRunner %s records it; GitHub not asked)", r.ARC.EphemeralRunner), 1)
	return d, true
}

// Rule 4i: Karpenter deletes a busy runner's pod past its NodeClaim's
// termination deadline less the pod's terminationGracePeriodSeconds, as its
// node termination does (past budgets and do-not-disrupt), and ends the
// instance once the pod is gone. With --honor-node-deadlines the operator's
// deadline wins: the DELETE is let go, loudly, the runner is not
// unregistered, and the job is lost (the re-run controller records it
// node-deadline). It decides only what would be a busy refusal (job fields,
// a verified job annotation, or GitHub's "busy"): an idle runner is still
// unregistered first, and before the deadline, for any other requester or
// with the flag off the busy runner is held as ever.
func ruleNodeDeadline(r *review, p *policy) (Decision, bool) {
	if !p.HonorNodeDeadlines || r.DryRun || r.Operation != OperationDelete || !karpenterUser(r.User.Username, p) ||
		!r.heldBusy(p) || !NodeDeadlinePassed(r.NodeDeadline, r.Pod, r.arrived()) {
		return Decision{}, false
	}
	dl := r.NodeDeadline
	msg := fmt.Sprintf("node deadline: NodeClaim %s of node %s ends at %s, and pod %s's terminationGracePeriodSeconds (%ds) no longer fits before it; Karpenter deletes the pod although its runner %q is running a job%s (--honor-node-deadlines): the runner was not unregistered and the job is lost (recorded %s; with --rerun-lost-jobs it is re-run once its run completes)",
		dl.NodeClaim, r.Pod.Spec.NodeName, dl.At.UTC().Format(time.RFC3339), r.podRef(), *r.Pod.Spec.TerminationGracePeriodSeconds,
		r.Target.Name, parenthesized(JobClause(r.ARC, r.Pod, time.Now())), ReasonNodeDeadline)
	d := allow(ReasonNodeDeadline, msg)
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventNodeDeadline
	return d, true
}

// heldBusy reports what a busy refusal would hold the pod for: the
// EphemeralRunner's job fields (rule 4f), a verified job annotation (rule
// 4h), or GitHub's "busy" (rules 6c, 6d, 8).
func (r *review) heldBusy(p *policy) bool {
	if r.ARC != nil && r.ARC.Job.Started() {
		return true
	}
	if r.Pod != nil && p.JobKeys.Configured() {
		if _, ok := p.JobKeys.JobFromPod(r.Pod); ok {
			return true
		}
	}
	return r.GitHub.Err == nil && r.GitHub.Outcome == ghclient.Busy
}

// arrived is when the review reached the handler (now for a review without
// an arrival time, as in tests that call the decider directly).
func (r *review) arrived() time.Time {
	if r.Arrived.IsZero() {
		return time.Now()
	}
	return r.Arrived
}

// Rule 6c: GitHub answered "busy" for this runner moments ago, and nothing
// fresher can be had now (the request budget is spent, or the listing
// failed). A remembered refusal is always safe: at worst a pod waits longer.
func ruleRecentlyBusy(r *review, p *policy) (Decision, bool) {
	if r.DryRun || r.GitHub.From != knowMemory {
		return Decision{}, false
	}
	d := busyDenial(r, p, r.Busy.Wait)
	d.Reason = ReasonRecentlyBusy
	// One Event per GitHub answer is enough; the repeats are counted in the metric.
	d.EventType, d.EventReason = "", ""
	return d, true
}

// Rule 6d: the scope's listing shows the runner busy. A listing that says busy
// is safe to refuse on (one that says idle is never enough to let a pod go),
// and it answers every retry in the scope for the price of one request per
// 100 runners. runner-guard looks again when the listing is renewed.
func ruleListedBusy(r *review, p *policy) (Decision, bool) {
	if r.DryRun || r.GitHub.Err != nil || r.GitHub.From != knowListing || r.GitHub.Outcome != ghclient.Busy {
		return Decision{}, false
	}
	wait := ghclient.ListingTTL - time.Since(r.GitHub.listedAt)
	d := busyDenial(r, p, max(wait, time.Second))
	d.Reason = ReasonListedBusy
	d.Message = strings.Replace(d.Message, "is running a job", "is running a job (GitHub's runner listing shows it busy)", 1)
	if !r.Busy.Known {
		return d, true
	}
	// The first refusal of a runner says so in an Event; the repeats only count.
	d.EventType, d.EventReason = "", ""
	return d, true
}

// Rule 8c: runner-guard chose not to ask GitHub: its own request budget for
// the runner's credential (githubBudget: the window, the namespace's share
// of it, or the last 5 % of GitHub's hourly limit kept for releases) has no
// room before the API server's deadline. Nothing was sent: the refusal is
// whatever the on-error policy, since GitHub was not failing, only not asked.
// So is any request held back (GitHub's own limit too) for a runner known to
// have been busy, or for a bypass user or disrupted pod (rule 6b): not asking
// never lets such a pod go. Drains retry the 429.
func ruleBudgetSpent(r *review, p *policy) (Decision, bool) {
	var spent *ghclient.Spent
	if !errors.As(r.GitHub.Err, &spent) || spent.GitHub && !r.Busy.Known && !r.bypassed(p) {
		return Decision{}, false
	}
	wait := max(spent.RetryAfter, time.Second)
	why := ""
	switch {
	case r.bypassed(p):
		why = " (a bypass user's or disrupted pod's delete is let go only on GitHub's word)"
	case spent.GitHub:
		why = " (the runner was busy lately: it is not let go unasked)"
	}
	d := Decision{Reason: ReasonBudgetSpent, Code: http.StatusServiceUnavailable,
		Message: fmt.Sprintf("runner %q of pod %s: %v; nothing was sent to GitHub, so the runner is still registered%s: retry in %s (the budget is githubBudget in --config)",
			r.Target.Name, r.podRef(), spent, why, roundUp(wait))}
	refusedEviction(r, p, &d, wait)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventBudgetSpent
	return d, true
}

// bypassed reports a bypass user's delete or a disrupted pod's (rule 6b).
func (r *review) bypassed(p *policy) bool {
	return !r.DryRun && (r.Disrupted || bypassedBy(r.User, p) != "")
}

// Rule 5d: an eviction the API server would refuse anyway, because a
// PodDisruptionBudget allows no disruption now, must not unregister the runner
// first (the API server checks budgets after the webhooks).
func rulePDBBlocks(r *review, p *policy) (Decision, bool) {
	if r.Operation != OperationEvict {
		return Decision{}, false
	}
	if len(r.PDBSeveral) > 0 {
		// As the API server answers: a 500, which drains report at once
		// instead of retrying a refusal that cannot change.
		return Decision{Reason: ReasonPDBBlocks, Code: http.StatusInternalServerError,
			Message: fmt.Sprintf("pod %s is selected by several PodDisruptionBudgets (%s), and the API server evicts no such pod; runner not unregistered: fix the budgets, or delete the pod",
				r.podRef(), strings.Join(r.PDBSeveral, ", "))}, true
	}
	if r.PDBBlocks == "" {
		return Decision{}, false
	}
	if r.PDBReserveErr != nil {
		return Decision{Reason: ReasonPDBBlocks, Code: http.StatusTooManyRequests, RetryAfter: p.BusyRetryAfter,
			Message: fmt.Sprintf("PodDisruptionBudget %s: cannot reserve a disruption of pod %s with runner-guard's other replicas (%v); runner not unregistered, retry in %s",
				r.PDBBlocks, r.podRef(), r.PDBReserveErr, roundUp(p.BusyRetryAfter))}, true
	}
	inFlight := ""
	if r.PDBInFlight > 0 {
		inFlight = fmt.Sprintf(" once the %d eviction(s) runner-guard's replicas let through under it, not yet accounted for by the API server, are counted", r.PDBInFlight)
	}
	d := Decision{Reason: ReasonPDBBlocks, Code: http.StatusTooManyRequests, RetryAfter: p.BusyRetryAfter,
		Message: fmt.Sprintf("PodDisruptionBudget %s allows no disruption of pod %s now%s; runner not unregistered, retry in %s",
			r.PDBBlocks, r.podRef(), inFlight, roundUp(p.BusyRetryAfter))}
	return d, true
}

// Rule 6b: bypass users (the pod garbage collector, the node and taint
// eviction controllers) and disrupted pods get one read-only look-up: a
// runner GitHub reports online and busy is running a job on a node that is
// still alive, so the delete is refused; offline, unknown, idle or a GitHub
// failure lets the pod go (these requesters clean up after dead nodes). A
// look-up runner-guard held back (its budget, or GitHub's limit it knows to
// be spent) asked nothing, which proves nothing: rule 8c refuses it.
func ruleBypass(r *review, p *policy) (Decision, bool) {
	why := bypassedBy(r.User, p)
	var spent *ghclient.Spent
	if r.DryRun || (why == "" && !r.Disrupted) || errors.As(r.GitHub.Err, &spent) {
		return Decision{}, false
	}
	reason := ReasonBypassUser
	if why == "" {
		reason, why = ReasonDisrupted, "the pod was marked Failed by the control plane (DisruptionTarget)"
	}
	if st := r.GitHub.Status; st != nil && r.GitHub.Err == nil && st.State == ghclient.StateBusy && st.Online {
		d := busyDenial(r, p, p.BusyRetryAfter)
		d.Reason, d.EventReason = ReasonBypassBusy, EventBypassRefused
		d.Message = fmt.Sprintf("%s (%s, but GitHub reports the runner online and running a job: its node is alive)", d.Message, why)
		return d, true
	}
	switch {
	case r.ScopeErr != nil:
		why += fmt.Sprintf("; GitHub not asked: %v", r.ScopeErr)
	case r.CredsErr != nil:
		why += fmt.Sprintf("; GitHub not asked: %v", r.CredsErr)
	case r.HostErr != nil:
		why += fmt.Sprintf("; GitHub not asked: %v", r.HostErr)
	case r.GitHub.Err != nil:
		why += fmt.Sprintf("; GitHub could not be asked: %v", r.GitHub.Err)
	default:
		why += "; GitHub reports the runner offline, idle or unknown"
	}
	return forced(r, reason, why), true
}

// Rule 6: a dry run never unregisters; it reports what GitHub says now.
func ruleDryRun(r *review, p *policy) (Decision, bool) {
	res, t := r.GitHub, r.Target
	if !r.DryRun || res.Err != nil || res.Status == nil {
		return Decision{}, false
	}
	switch res.Status.State {
	case ghclient.StateBusy:
		d := busyDenial(r, p, p.BusyRetryAfter)
		d.Reason = ReasonDryRunBusy
		return d, true
	case ghclient.StateIdle:
		return allow(ReasonDryRunIdle, fmt.Sprintf("dry run: runner %q in %s is idle; a real %s would unregister it", t.Name, t.Scope, r.Operation)), true
	default:
		return allow(ReasonDryRunNotFound, fmt.Sprintf("dry run: runner %q is not registered in %s", t.Name, t.Scope)), true
	}
}

// Rule 7: GitHub removed the runner (204) or does not know it: it can get no job.
func ruleUnregistered(r *review, _ *policy) (Decision, bool) {
	res, t := r.GitHub, r.Target
	if r.DryRun || res.Err != nil {
		return Decision{}, false
	}
	switch res.Outcome {
	case ghclient.Removed:
		d := allow(ReasonUnregistered, fmt.Sprintf("runner %q unregistered from %s", t.Name, t.Scope))
		d.EventType, d.EventReason = corev1.EventTypeNormal, EventRunnerUnregistered
		return d, true
	case ghclient.NotFound:
		return allow(ReasonRunnerNotFound, fmt.Sprintf("runner %q is not registered in %s", t.Name, t.Scope)), true
	}
	return Decision{}, false
}

// Rule 8: GitHub answered 422: the runner is running a job and nothing changed.
func ruleRunnerBusy(r *review, p *policy) (Decision, bool) {
	if r.DryRun || r.GitHub.Err != nil || r.GitHub.Outcome != ghclient.Busy {
		return Decision{}, false
	}
	wait := r.Busy.Next
	if wait <= 0 {
		wait = p.BusyRetryAfter
	}
	// The next retry reads the scope's listing, renewed every ListingTTL:
	// that is when runner-guard looks again, however long the memory trusts
	// this answer when nothing fresher can be had.
	return busyDenial(r, p, min(wait, ghclient.ListingTTL)), true
}

// Rule 8b: too little time was left to unregister before the API server
// gives up, so nothing was sent. This is a refusal whatever the on-error
// policy: the runner may be busy, and nothing has been decided yet.
func ruleDeadline(r *review, p *policy) (Decision, bool) {
	var oot *outOfTimeError
	if !errors.As(r.GitHub.Err, &oot) {
		return Decision{}, false
	}
	d := Decision{Reason: ReasonDeadline, Code: http.StatusServiceUnavailable,
		Message: fmt.Sprintf("runner %q of pod %s: %v", r.Target.Name, r.podRef(), oot)}
	refusedEviction(r, p, &d, time.Second)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventGitHubError
	return d, true
}

// Rule 9: GitHub's rate limit. The on-error policy decides, as for any
// failure to get an answer. A refused eviction is a 429 with the limit's wait;
// a refused DELETE is a 503 without Retry-After, because client-go silently
// retries a 429 up to 10 times and kubectl delete would hang without output.
func ruleRateLimited(r *review, p *policy) (Decision, bool) {
	var rl *ghclient.RateLimited
	var held *ghclient.Spent
	var wait time.Duration
	switch {
	case errors.As(r.GitHub.Err, &rl):
		wait = max(rl.RetryAfter, time.Second)
	case errors.As(r.GitHub.Err, &held) && held.GitHub:
		// GitHub's own limit holds the credential: nothing was sent.
		wait = max(held.RetryAfter, time.Second)
	default:
		return Decision{}, false
	}
	msg := fmt.Sprintf("GitHub rate limit reached while checking runner %q in %s; retry in %s (at %s): %v",
		r.Target.Name, r.Target.Scope, roundUp(wait), time.Now().Add(wait).UTC().Format(time.RFC3339), r.GitHub.Err)
	d := onError(p, ReasonRateLimited, msg, http.StatusServiceUnavailable)
	refusedEviction(r, p, &d, wait)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventRateLimited
	return d, true
}

// Rule 10: any other GitHub failure (or the deadline): the on-error policy decides.
func ruleGitHubError(r *review, p *policy) (Decision, bool) {
	err := r.GitHub.Err
	if err == nil {
		return Decision{}, false
	}
	msg := fmt.Sprintf("cannot check runner %q in %s with GitHub: %v", r.Target.Name, r.Target.Scope, err)
	d := onError(p, ReasonGitHubError, msg, http.StatusServiceUnavailable)
	// Drains and autoscalers retry a 429; GitHub may be back by then.
	refusedEviction(r, p, &d, p.BusyRetryAfter)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventGitHubError
	return d, true
}

// Last row: an answer no rule above explains (a GitHub client bug) is a
// GitHub error, so the table always decides.
func ruleUnexpectedOutcome(r *review, p *policy) (Decision, bool) {
	res := *r
	res.GitHub.Err = fmt.Errorf("GitHub client returned unexpected outcome %s", r.GitHub.Outcome)
	return ruleGitHubError(&res, p)
}

// busyDenial is the refusal for a runner that is running a job; wait is when
// runner-guard will ask GitHub again.
func busyDenial(r *review, p *policy, wait time.Duration) Decision {
	d := Decision{
		Reason:      ReasonRunnerBusy,
		Code:        http.StatusForbidden,
		EventType:   corev1.EventTypeWarning,
		EventReason: EventRunnerBusy,
	}
	what := fmt.Sprintf("wait for the job to finish and delete the pod again (runner-guard asks GitHub again in %s)", roundUp(wait))
	if r.Operation == OperationEvict {
		d.Code, d.RetryAfter = http.StatusTooManyRequests, max(wait, time.Second)
		what = fmt.Sprintf("the eviction can be retried in %s", roundUp(wait))
	}
	if p.ForceAnnotation != "" {
		what += fmt.Sprintf(", or annotate the pod %s=true to delete it anyway (cancels the job; with --rerun-lost-jobs runner-guard re-runs it once its run completes, unless the pod is also annotated runner-guard.io/rerun=false)", p.ForceAnnotation)
	}
	d.Message = fmt.Sprintf("runner busy: GitHub runner %q in %s is running a job, so runner-guard refused to %s pod %s%s; %s",
		r.Target.Name, r.Target.Scope, r.Operation, r.podRef(), parenthesized(JobClause(r.ARC, r.Pod, time.Now())), what)
	return d
}

// onError applies the on-error policy to a failure described by msg, naming
// the setting that decided.
func onError(p *policy, reason Reason, msg string, code int32) Decision {
	source := p.OnErrorSource
	if source == "" {
		source = "--on-error=" + string(p.OnError)
	}
	if p.OnError == OnErrorAllow {
		d := allow(reason, fmt.Sprintf("%s (allowed by %s)", msg, source))
		d.Warning = d.Message
		return d
	}
	return Decision{Reason: reason, Code: code, Message: fmt.Sprintf("%s (denied by %s)", msg, source)}
}

// roundUp renders a wait in whole seconds, never less than one.
func roundUp(d time.Duration) time.Duration {
	return time.Duration(retryAfterSeconds(d)) * time.Second
}

func retryAfterSeconds(d time.Duration) int32 {
	return int32(max(1, math.Ceil(d.Seconds())))
}
