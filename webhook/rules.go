package webhook

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// This file is the decision walk's root: decide, the decision table and its
// rules, with the helpers the rules call (the runner pod spec matched, the
// runner container's state, the job clause of a busy refusal) beside them,
// so a rule never leaves the file for a fact: the walk enters each other
// file once (docs/DESIGN.md, "The decision walk"). The types a review is
// made of are in review.go.

// timeout is the deadline a review is decided within.
func (d *decider) timeout() time.Duration {
	if t := time.Duration(d.apiTimeout.Load()); t > 0 && t < d.webhookTimeout {
		return t
	}
	return d.webhookTimeout
}

// decide returns the decision for one review and the runner it concerns (zero
// when the decision was made before the runner was resolved). It walks the
// review once, each step in one place and each entered once: the request's
// own facts decide first (worked out here: the runner pod spec, whether the
// pod was disrupted, whether GitHub is only looked up); for a DELETE,
// readLive (live.go) then reads the live pod; resolve (resolve.go) reads
// everything the runner rules decide on; ask (github.go) makes the one
// GitHub call the rest need; and settle (settle.go) carries out what the
// decision implies. A decision made early costs no read and no GitHub
// request. What several steps need is kept in the review, not asked of the
// step that knows it again.
func (d *decider) decide(ctx context.Context, r review) (Decision, Target) {
	r.Spec = matchRunnerPod(r.Pod, d.specs)
	r.Disrupted = r.Spec != nil && disrupted(r.Pod)
	r.ReadOnly = r.readOnly(&d.policy)
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
	if r.Operation == OperationDelete {
		if live := d.readLive(ctx, &r); live != nil {
			r.Pod = live
			if spec := matchRunnerPod(live, d.specs); spec != nil {
				r.Spec = spec
			}
		}
	}
	if r.LiveErr == nil && r.LiveGone == "" {
		d.resolve(ctx, &r)
	}
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

// matchRunnerPod returns the first runner pod spec whose selector matches the
// pod's labels, or nil for a pod that is not a runner pod.
func matchRunnerPod(pod *corev1.Pod, specs []RunnerPodSpec) *RunnerPodSpec {
	if pod == nil {
		return nil
	}
	return matchRunnerLabels(labels.Set(pod.Labels), specs)
}

// matchRunnerLabels is matchRunnerPod for a pod's labels alone.
func matchRunnerLabels(podLabels labels.Labels, specs []RunnerPodSpec) *RunnerPodSpec {
	for i := range specs {
		if specs[i].selector != nil && specs[i].selector.Matches(podLabels) {
			return &specs[i]
		}
	}
	return nil
}

// disrupted reports a pod the control plane marked Failed with a
// DisruptionTarget condition (pod GC, taint eviction) rather than one whose
// containers ended.
func disrupted(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// runnerContainerStatus returns the status of the runner container, nil when
// the pod reports none for it.
func runnerContainerStatus(pod *corev1.Pod, container string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == container {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// runnerContainerRunning reports whether the runner container is running: only
// then can its process hold a job.
func runnerContainerRunning(pod *corev1.Pod, container string) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
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
// rather than an unregister: dry runs, bypass users and disrupted pods
// (review.ReadOnly, set once by decide).
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
	if err == nil || (!r.DryRun && r.ReadOnly) {
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
	if r.ARCJob == "" || (!r.DryRun && r.ReadOnly) {
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
// with the flag off the busy runner is held as ever (resolve worked out
// which: review.NodeDeadlinePassed).
func ruleNodeDeadline(r *review, p *policy) (Decision, bool) {
	if !r.NodeDeadlinePassed || !r.heldBusy(p) {
		return Decision{}, false
	}
	dl := r.NodeDeadline
	msg := fmt.Sprintf("node deadline: NodeClaim %s of node %s ends at %s, and pod %s's terminationGracePeriodSeconds (%ds) no longer fits before it; Karpenter deletes the pod although its runner %q is running a job%s (--honor-node-deadlines): the runner was not unregistered and the job is lost (recorded %s; with --rerun-lost-jobs it is re-run once its run completes)",
		dl.NodeClaim, r.Pod.Spec.NodeName, dl.At.UTC().Format(time.RFC3339), r.podRef(), *r.Pod.Spec.TerminationGracePeriodSeconds,
		r.Target.Name, parenthesized(jobClause(r.ARCJob, r.Pod, time.Now())), ReasonNodeDeadline)
	d := allow(ReasonNodeDeadline, msg)
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventNodeDeadline
	return d, true
}

// heldBusy reports what a busy refusal would hold the pod for: the
// EphemeralRunner's job fields (rule 4f), a verified job annotation (rule
// 4h), or GitHub's "busy" (rules 6c, 6d, 8).
func (r *review) heldBusy(p *policy) bool {
	if r.ARCJob != "" {
		return true
	}
	if r.Pod != nil && p.JobKeys.Configured() {
		if _, ok := p.JobKeys.JobFromPod(r.Pod); ok {
			return true
		}
	}
	return r.GitHub.Err == nil && r.GitHub.Outcome == ghclient.Busy
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
		why += fmt.Sprintf("; GitHub could not be asked: %v", r.GitHub.err())
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
		Message: fmt.Sprintf("runner %q of pod %s: %s", r.Target.Name, r.podRef(), oot.Error())}
	refusedEviction(r, p, &d, time.Second)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventGitHubError
	return d, true
}

// outOfTimeError: the review's deadline left too little time to unregister
// (ask's answer then). It lives beside the rule that words it, which calls
// Error itself rather than through fmt, so the walk does not leave the file.
type outOfTimeError struct{ left time.Duration }

func (e *outOfTimeError) Error() string {
	return fmt.Sprintf("only %s left before the API server's webhook deadline (webhookTimeout), too little to unregister the runner safely; nothing was sent to GitHub, retry", max(e.left, 0).Round(time.Millisecond))
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
		r.Target.Name, r.Target.Scope, roundUp(wait), time.Now().Add(wait).UTC().Format(time.RFC3339), r.GitHub.err())
	d := onError(p, ReasonRateLimited, msg, http.StatusServiceUnavailable)
	refusedEviction(r, p, &d, wait)
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventRateLimited
	return d, true
}

// Rule 10: any other GitHub failure (or the deadline): the on-error policy decides.
func ruleGitHubError(r *review, p *policy) (Decision, bool) {
	err := r.GitHub.err()
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
	res.GitHub.Err, res.GitHub.retryIn = fmt.Errorf("GitHub client returned unexpected outcome %s", r.GitHub.Outcome), 0
	return ruleGitHubError(&res, p)
}

// err is GitHub's error as the messages name it: when it was answered from
// the failure memory (retryIn), with when GitHub is asked again. The rules
// match Err itself; the words are formatted here, beside them, so the walk
// does not leave this file to render an error.
func (g githubResult) err() error {
	if g.Err == nil || g.retryIn <= 0 {
		return g.Err
	}
	return fmt.Errorf("%w (this pod's last decision failed moments ago: runner-guard asks GitHub again in %s)", g.Err, roundUp(g.retryIn))
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
		r.Target.Name, r.Target.Scope, r.Operation, r.podRef(), parenthesized(jobClause(r.ARCJob, r.Pod, time.Now())), what)
	return d
}

// JobClause names, for messages, what a busy runner's pod holds: the job
// from its EphemeralRunner's job fields when known (repository, workflow
// run, job name), and how long the pod has run (the job started after it).
// It is "" when neither is known.
func JobClause(run *arc.Runner, pod *corev1.Pod, now time.Time) string {
	var job string
	if run != nil {
		job = run.Job.String()
	}
	return jobClause(job, pod, now)
}

// jobClause is JobClause for the job already named (review.ARCJob).
func jobClause(job string, pod *corev1.Pod, now time.Time) string {
	var since string
	if pod != nil {
		start := pod.CreationTimestamp.Time
		if pod.Status.StartTime != nil {
			start = pod.Status.StartTime.Time
		}
		if !start.IsZero() && now.Sub(start) >= time.Second {
			since = fmt.Sprintf("its pod started %s ago", now.Sub(start).Round(time.Second))
		}
	}
	switch {
	case job != "" && since != "":
		return job + ", " + since
	case job != "":
		return job
	}
	return since
}

// parenthesized renders a non-empty clause as " (clause)".
func parenthesized(clause string) string {
	if clause == "" {
		return ""
	}
	return " (" + clause + ")"
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
