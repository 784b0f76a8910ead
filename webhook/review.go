package webhook

import (
	"context"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// This file declares what a decision is made of: the reasons and Events, the
// review each step of the walk fills in, the policy the rules read and the
// decider that walks them (rules.go).

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
// fills the request's facts and decide the few derived from them (Spec,
// Disrupted, ReadOnly); decide's steps add the rest when the first rule
// that needs them is reached: readLive (live.go) the live pod, resolve
// (resolve.go) the fields marked stageRunner, ask (github.go) those marked
// stageGitHub; settle (settle.go) writes what was learnt back from it. Each
// fact is worked out once, where it is first needed, so no later step
// calls back for it.
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
	// Released: the Eviction says its evictor has just unregistered the
	// runner (EvictionReleasedAnnotation): GitHub is asked, nothing cheaper
	// refuses it.
	Released bool
	// Arrived is when the review reached the handler: the API server's
	// timeoutSeconds runs from about then.
	Arrived time.Time
	// Disrupted: the pod was marked Failed with a DisruptionTarget condition
	// (pod GC after a Node was deleted, taint eviction) while its runner may
	// still be running on a node that is alive.
	Disrupted bool
	// ReadOnly: the review's GitHub question is a read-only look-up rather
	// than an unregister (dry runs, bypass users, disrupted pods). decide
	// sets it with Disrupted, for every stage that asks.
	ReadOnly bool

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
	// NodeDeadlinePassed: Karpenter deletes the pod for that deadline now
	// (nodeDeadlinePasses; stageRunner).
	NodeDeadlinePassed bool
	// GitHub is GitHub's answer (stageGitHub).
	GitHub githubResult
}

// githubResult is what GitHub answered: an Unregister outcome, or a Status for
// a dry run, and the error of either call.
type githubResult struct {
	Outcome ghclient.Outcome
	Status  *ghclient.RunnerStatus
	Err     error
	// retryIn is set when Err is this pod's last failure, answered from the
	// failure memory: GitHub is asked again in retryIn. The rules decide on
	// Err as they did; their messages say so (githubResult.err).
	retryIn time.Duration
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
