package explain

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/webhook"
)

// This file turns what the cluster said into lines: pure functions of
// their inputs, so each is tested on its own.

// needs names a permission: "get configmaps in namespace x".
func needs(verb, resource, namespace string) string {
	if namespace == "" {
		return verb + " " + resource
	}
	return fmt.Sprintf("%s %s in namespace %s", verb, resource, namespace)
}

// runnerLine renders the resolver's answer. erNeeds, when set, is the
// permission that would let the user read ARC's object behind the pod (the
// resolver then read the pod's own labels, as the webhook would without it).
func runnerLine(ex webhook.Explained, erNeeds string) RunnerLine {
	if ex.NotGuarded != "" {
		return RunnerLine{Status: Status{Text: "not a guarded runner pod: " + ex.NotGuarded + "; runner-guard lets it go unchecked"}}
	}
	t := ex.Target
	l := RunnerLine{RunnerPodSpec: ex.RunnerPodSpec}
	if ex.ARC != nil {
		l.Object = fmt.Sprintf("%s %s", ex.ARC.Kind, ex.ARC.EphemeralRunner)
		l.Job = ex.ARC.Job.String()
	}
	if t.Name != "" {
		l.Name = &Fact{Value: t.Name, Source: t.From.Name.String()}
	}
	if t.Scope.Name != "" {
		l.Scope = &Fact{Value: fmt.Sprintf("%s:%s", t.Scope.Kind, t.Scope.Name), Source: t.From.Scope.String()}
	}
	if t.IDHint > 0 {
		l.ID = &Fact{Value: fmt.Sprint(t.IDHint), Source: t.From.ID.String()}
	}
	text := fmt.Sprintf("runner pod spec %q: %s", ex.RunnerPodSpec, factsText(l))
	if l.Job != "" {
		text += "; ARC records " + l.Job
	}
	if ex.Fallback != "" && erNeeds == "" {
		text += "; " + ex.Fallback
	}
	if erNeeds != "" {
		text += "; ARC's object unknown: needs " + erNeeds
		l.Unknown, l.Needs = true, erNeeds
	}
	if ex.Problem != nil {
		l.Problem = ex.Problem.Error()
		text += "; GitHub is not asked: " + l.Problem
	}
	l.Text = text
	return l
}

// factsText renders the runner's facts, naming a source shared by all of
// them once.
func factsText(l RunnerLine) string {
	type named struct {
		what string
		fact *Fact
	}
	var facts []named
	for _, f := range []named{{"name", l.Name}, {"scope", l.Scope}, {"ID", l.ID}} {
		if f.fact != nil {
			facts = append(facts, f)
		}
	}
	shared := len(facts) > 1
	for _, f := range facts {
		shared = shared && f.fact.Source == facts[0].fact.Source
	}
	var parts []string
	for _, f := range facts {
		if shared {
			parts = append(parts, f.what+" "+f.fact.Value)
		} else {
			parts = append(parts, fmt.Sprintf("%s %s from %s", f.what, f.fact.Value, f.fact.Source))
		}
	}
	if l.ID == nil && l.Name != nil {
		parts = append(parts, "ID unknown (looked up on GitHub by name)")
	}
	if shared {
		return strings.Join(parts, ", ") + ", all from " + facts[0].fact.Source
	}
	return strings.Join(parts, "; ")
}

// bindingLine says which scope binding covers the pod and whether it allows
// the runner's scope. open: no binding is configured at all.
func bindingLine(ex webhook.Explained, open bool) BindingLine {
	switch {
	case ex.NotGuarded != "":
		return BindingLine{Status: Status{Text: "none: the pod is not guarded"}}
	case open:
		return BindingLine{Status: Status{Text: "no scopeBindings configured: this namespace's runner pods may name any GitHub scope"}, Allowed: true}
	case ex.Binding == "":
		return BindingLine{Status: Status{Text: ex.NotBound}}
	}
	l := BindingLine{Name: ex.Binding, Scopes: ex.BindingScopes, Allowed: ex.NotBound == ""}
	l.Text = fmt.Sprintf("%s allows %s", ex.Binding, strings.Join(ex.BindingScopes, ", "))
	if ex.NotBound != "" {
		l.Text += "; the runner's scope is not among them, so its pod goes without a GitHub request"
	} else if ex.Target.Scope.Name != "" {
		l.Text += fmt.Sprintf("; the runner's %s is one of them", ex.Target.Scope)
	}
	return l
}

// Install is what was read of runner-guard's own Deployment: the
// credentials mode its flags choose and the Secrets its GitHub flags read.
type Install struct {
	// Deployment is namespace/name, "" when not found.
	Deployment string
	// CredentialsMode is the --credentials-mode flag, "" when not set.
	CredentialsMode string
	// Secrets the static GitHub credentials are read from.
	Secrets []string
	// Needs is the permission that would show the Deployment.
	Needs string
}

// ARCSecret is the EphemeralRunner's spec.githubConfigSecret: its name
// ("" when unknown or legacy) and whether it exists, read as metadata only.
type ARCSecret struct {
	Name    string
	Missing bool
	// Needs is the permission that would tell whether it exists.
	Needs string
}

// credsLine names the credentials GitHub would be asked with.
func credsLine(ex webhook.Explained, mode webhook.CredentialsMode, inst Install, arcSecret ARCSecret) CredsLine {
	if ex.NotGuarded != "" {
		return CredsLine{Status: Status{Text: "none: the pod is not guarded"}}
	}
	l := CredsLine{Mode: string(mode)}
	if mode == webhook.CredentialsARC && ex.ARC != nil && ex.ARC.Kind != "Runner" && arcSecret.Name != "" {
		secret := ex.ARC.EphemeralRunner.Namespace + "/" + arcSecret.Name
		l.Secrets = []string{secret}
		l.Text = fmt.Sprintf("ARC's: Secret %s (the EphemeralRunner's githubConfigSecret; --credentials-mode=arc)", secret)
		switch {
		case arcSecret.Needs != "":
			l.Text += "; whether it exists is unknown: needs " + arcSecret.Needs
			l.Unknown, l.Needs = true, arcSecret.Needs
		case arcSecret.Missing:
			l.Text += "; it does not exist, so runner-guard cannot ask GitHub about this runner (reason credentials-unusable)"
		}
		return l
	}
	if mode == webhook.CredentialsARC && ex.ARC != nil && ex.ARC.Kind != "Runner" {
		l.Status = unknown(needs("get", "ephemeralrunners.actions.github.com", ex.ARC.EphemeralRunner.Namespace))
		l.Text = "ARC's githubConfigSecret, name " + l.Text
		return l
	}
	switch {
	case inst.Needs != "":
		l.Status = unknown(inst.Needs)
		l.Text = "runner-guard's own (flags), Secret " + l.Text
	case len(inst.Secrets) == 0:
		l.Text = "runner-guard's own (flags); no Secret found on its Deployment"
		if inst.Deployment == "" {
			l.Text = "runner-guard's own (flags); its Deployment was not found (pass --guard-namespace)"
		}
	default:
		l.Secrets = inst.Secrets
		l.Text = "runner-guard's own (flags): Secret " + strings.Join(inst.Secrets, ", Secret ")
	}
	return l
}

// hintsLine reports the hint annotations on the pod and which of them
// runner-guard set.
func hintsLine(pod *corev1.Pod) HintsLine {
	l := HintsLine{}
	var parts []string
	for _, h := range disruption.AllHints() {
		if v, ok := pod.Annotations[h.Key]; ok {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[h.Key] = v
		}
	}
	for _, n := range strings.Split(pod.Annotations[disruption.AnnotationOwned], ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(l.Owned, n) {
			l.Owned = append(l.Owned, n)
		}
	}
	for _, h := range disruption.AllHints() {
		v, ok := l.Annotations[h.Key]
		if !ok {
			continue
		}
		who := "set by someone else"
		if slices.Contains(l.Owned, h.Name) {
			who = "set by runner-guard while the job runs"
		}
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", h.Key, v, who))
	}
	if len(parts) == 0 {
		l.Text = "none: runner-guard sets them only while the runner holds a job"
		return l
	}
	l.Text = strings.Join(parts, ", ")
	return l
}

// budgetLine is the GitHub budget of the runner's credential, split between
// the Deployment's replicas, and the PodDisruptionBudgets covering the pod.
func budgetLine(b webhook.GitHubBudget, pdbs []string, pdbNeeds string) BudgetLine {
	l := BudgetLine{PointsPerMinute: b.PointsPerMinute, Concurrency: b.Concurrency, Replicas: b.Replicas, Unlimited: b.Unlimited, PDBs: pdbs}
	if b.Unlimited {
		l.Text = "GitHub budget off (githubBudget.unlimited)"
	} else {
		l.Text = fmt.Sprintf("GitHub budget %d points/min and %d requests at once per credential, shared by %d replica(s)", b.PointsPerMinute, b.Concurrency, b.Replicas)
	}
	switch {
	case pdbNeeds != "":
		l.PDBsUnknown = pdbNeeds
		l.Text += "; PodDisruptionBudgets unknown: needs " + pdbNeeds
	case len(pdbs) == 0:
		l.Text += "; no PodDisruptionBudget covers the pod"
	default:
		l.Text += "; PodDisruptionBudget " + strings.Join(pdbs, ", ")
	}
	return l
}

// reasonInMessage finds the stable reason a runner-guard message ends with.
var reasonInMessage = regexp.MustCompile(`\[reason: ([a-z0-9-]+)\]`)

// Reporter is the name runner-guard's Events are reported under.
const Reporter = "runner-guard"

// decisionLine picks runner-guard's latest Event about the pod.
func decisionLine(events []corev1.Event, now time.Time) DecisionLine {
	var last *corev1.Event
	var lastAt time.Time
	for i := range events {
		e := &events[i]
		if e.ReportingController != Reporter && e.Source.Component != Reporter {
			continue
		}
		if at := eventTime(e); last == nil || at.After(lastAt) {
			last, lastAt = e, at
		}
	}
	if last == nil {
		return DecisionLine{Status: Status{Text: "none recorded: runner-guard records an Event when it refuses, unregisters or lets a pod go unchecked (dry runs and quiet allows record none; Events expire after an hour by default)"}}
	}
	l := DecisionLine{EventReason: last.Reason, Action: last.Action, Message: last.Message}
	if m := reasonInMessage.FindStringSubmatch(last.Message); m != nil {
		l.Reason = m[1]
	}
	if !lastAt.IsZero() {
		l.Time = lastAt.UTC().Format(time.RFC3339)
	}
	ago := ""
	if !lastAt.IsZero() {
		ago = fmt.Sprintf(" %s ago", now.Sub(lastAt).Round(time.Second))
	}
	l.Text = fmt.Sprintf("%s%s on %s: %s", last.Reason, ago, strings.ToLower(last.Action), shorten(last.Message, 240))
	return l
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// dryRunLine renders the API server's answer to a server-side dry run of
// action ("delete", "evict"). need is the permission the action takes.
func dryRunLine(err error, need string) DryRunLine {
	if err == nil {
		return DryRunLine{Status: Status{Text: "allowed (server-side dry run; nothing was deleted)"}, Allowed: true}
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return DryRunLine{Status: Status{Text: "unknown: " + err.Error(), Unknown: true}}
	}
	st := status.Status()
	msg := st.Message
	if apierrors.IsForbidden(err) && !strings.Contains(msg, "admission webhook") {
		return DryRunLine{Status: unknown(need)}
	}
	l := DryRunLine{Code: st.Code, Message: msg}
	if m := reasonInMessage.FindStringSubmatch(msg); m != nil {
		l.Reason = m[1]
	}
	code := fmt.Sprint(st.Code)
	if l.Reason != "" {
		code += ", " + l.Reason
	}
	l.Text = fmt.Sprintf("refused (%s): %s", code, shorten(trimAdmissionPrefix(msg), 240))
	return l
}

// trimAdmissionPrefix drops the API server's `admission webhook "x" denied
// the request: ` from a denial, which says nothing the line does not.
func trimAdmissionPrefix(msg string) string {
	if _, rest, ok := strings.Cut(msg, "denied the request: "); ok {
		return rest
	}
	return msg
}

// shorten keeps a line readable; the JSON output has the whole message.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
