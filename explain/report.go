// Package explain answers, for one pod, "why is it still here?": which
// runner runner-guard takes it for and from which source, the scope binding
// and credentials that apply, the hints and budget, the last decision, and
// what a delete and an eviction would get now. It reads with the user's own
// credentials; what they may not read is reported as unknown, naming the
// permission that would show it. The webhook's resolver answers the runner
// part, so the command and the admission decision cannot disagree.
package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status is what every line carries: the sentence a person reads and, when
// the user may not read what the line needs, the permission that would show it.
type Status struct {
	Text    string `json:"text"`
	Unknown bool   `json:"unknown,omitempty"`
	// Needs names the missing permission: "get configmaps in namespace runner-guard-system".
	Needs string `json:"needs,omitempty"`
}

// unknown is the Status of a line the user may not read.
func unknown(needs string) Status {
	return Status{Text: "unknown: needs " + needs, Unknown: true, Needs: needs}
}

// Report is the whole explanation: one field per printed line.
type Report struct {
	Pod          string       `json:"pod"`
	Install      InstallLine  `json:"install"`
	Runner       RunnerLine   `json:"runner"`
	AnnotatedJob *JobLine     `json:"annotatedJob,omitempty"` // nil, and no line, without runner-guard.io/job
	Binding      BindingLine  `json:"binding"`
	Credentials  CredsLine    `json:"credentials"`
	Hints        HintsLine    `json:"hints"`
	Budget       BudgetLine   `json:"budget"`
	LastDecision DecisionLine `json:"lastDecision"`
	Delete       DryRunLine   `json:"delete"`
	Evict        DryRunLine   `json:"evict"`
}

// InstallLine says where runner-guard's configuration was read.
type InstallLine struct {
	Status
	Deployment string `json:"deployment,omitempty"`
	ConfigMap  string `json:"configMap,omitempty"`
	// Defaults is true when the built-in defaults stand in for a config
	// that was not found or could not be read.
	Defaults bool `json:"defaults,omitempty"`
}

// Fact is one fact about the runner and where it came from.
type Fact struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// RunnerLine is the runner runner-guard takes the pod for.
type RunnerLine struct {
	Status
	RunnerPodSpec string `json:"runnerPodSpec,omitempty"`
	Name          *Fact  `json:"name,omitempty"`
	Scope         *Fact  `json:"scope,omitempty"`
	ID            *Fact  `json:"id,omitempty"`
	// Object is ARC's EphemeralRunner or legacy Runner controlling the pod.
	Object string `json:"object,omitempty"`
	Job    string `json:"job,omitempty"`
	// Problem is why GitHub would not be asked about this runner.
	Problem string `json:"problem,omitempty"`
}

// BindingLine is the scope binding covering the pod.
type BindingLine struct {
	Status
	Name   string   `json:"name,omitempty"`
	Scopes []string `json:"scopes,omitempty"`
	// Allowed: the runner's scope is one the binding allows (or no binding
	// is configured at all).
	Allowed bool `json:"allowed"`
}

// CredsLine names the credentials GitHub would be asked with; never their values.
type CredsLine struct {
	Status
	Mode    string   `json:"mode,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
}

// HintsLine is the disruption hints on the pod.
type HintsLine struct {
	Status
	// Annotations are the hint annotations the pod carries, with their values.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Owned lists the hints runner-guard set (runner-guard.io/hints).
	Owned []string `json:"owned,omitempty"`
}

// BudgetLine is the GitHub budget the runner's credential draws from, and
// the PodDisruptionBudgets that cover the pod.
type BudgetLine struct {
	Status
	PointsPerMinute int      `json:"pointsPerMinute,omitempty"`
	Concurrency     int      `json:"concurrency,omitempty"`
	Replicas        int      `json:"replicas,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	PDBs            []string `json:"podDisruptionBudgets,omitempty"`
	PDBsUnknown     string   `json:"podDisruptionBudgetsNeed,omitempty"`
}

// DecisionLine is runner-guard's last Event about the pod.
type DecisionLine struct {
	Status
	EventReason string `json:"eventReason,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Action      string `json:"action,omitempty"`
	Time        string `json:"time,omitempty"`
	Message     string `json:"message,omitempty"`
}

// DryRunLine is what the API server answered a server-side dry run.
type DryRunLine struct {
	Status
	Allowed bool   `json:"allowed"`
	Code    int32  `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// WriteText prints the report, one short line per field.
func (r Report) WriteText(w io.Writer) error {
	type line struct{ label, text string }
	lines := []line{
		{"pod", r.Pod},
		{"install", r.Install.Text},
		{"runner", r.Runner.Text},
	}
	if r.AnnotatedJob != nil {
		lines = append(lines, line{"annotated job", r.AnnotatedJob.Text})
	}
	lines = append(lines, []line{
		{"binding", r.Binding.Text},
		{"credentials", r.Credentials.Text},
		{"hints", r.Hints.Text},
		{"budget", r.Budget.Text},
		{"last decision", r.LastDecision.Text},
		{"delete now", r.Delete.Text},
		{"eviction now", r.Evict.Text},
	}...)
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-14s %s\n", l.label+":", l.text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
