package webhook

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/ghclient"
)

// OnErrorPolicy says what to do when runner-guard cannot get an answer from
// GitHub or cannot tell where a runner is registered.
type OnErrorPolicy string

const (
	OnErrorDeny  OnErrorPolicy = "deny"
	OnErrorAllow OnErrorPolicy = "allow"
)

// ParseOnErrorPolicy validates a policy name from a flag or config file.
func ParseOnErrorPolicy(s string) (OnErrorPolicy, error) {
	switch p := OnErrorPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case OnErrorDeny, OnErrorAllow:
		return p, nil
	default:
		return "", fmt.Errorf("invalid on-error policy %q: want %q or %q", s, OnErrorDeny, OnErrorAllow)
	}
}

// Defaults of the bypass list and the force annotation.
const (
	DefaultForceAnnotation   = "runner-guard.io/force-delete"
	DefaultBusyRetryAfter    = 10 * time.Second
	DefaultBusyRetryMax      = 10 * time.Minute
	DefaultRecentAdmittedTTL = 10 * time.Second
	DefaultGitHubTimeout     = 5 * time.Second
	DefaultWebhookTimeout    = 10 * time.Second
	DefaultReadOnlyMemoryTTL = 15 * time.Second
)

// DefaultBypassUsers clean up after dead nodes; their pods' runners are gone.
func DefaultBypassUsers() []string {
	return []string{
		"system:serviceaccount:kube-system:pod-garbage-collector",
		"system:serviceaccount:kube-system:node-controller",
	}
}

// Config is the handler's configuration: the `--config` YAML file plus flags.
type Config struct {
	// RunnerPods says how runner pods are recognized and where their runner's
	// name, scope and ID are read. The first entry whose selector matches wins.
	RunnerPods []RunnerPodSpec `json:"runnerPods,omitempty"`
	// Bypass lists requesters whose deletes are let through unchecked.
	Bypass Bypass `json:"bypass,omitempty"`
	// ForceDelete is the annotation that lets a busy runner's pod go.
	ForceDelete ForceDelete `json:"forceDelete,omitempty"`
	// OnError applies when GitHub fails or the scope is unknown.
	OnError OnErrorPolicy `json:"onError,omitempty"`
	// GitHubTimeout bounds the GitHub part of one decision.
	GitHubTimeout metav1.Duration `json:"githubTimeout,omitempty"`
	// WebhookTimeout is the webhook configuration's timeoutSeconds: the API
	// server gives up on a review after it. Every read and GitHub request of
	// a decision ends inside it, with a margin.
	WebhookTimeout metav1.Duration `json:"webhookTimeout,omitempty"`
	// BusyRetryAfter is the retryAfterSeconds of a refused eviction.
	BusyRetryAfter metav1.Duration `json:"busyRetryAfter,omitempty"`
	// BusyRetryMax caps how long a "busy" answer is remembered while the runner
	// stays busy (the memory starts at busyRetryAfter and doubles).
	BusyRetryMax metav1.Duration `json:"busyRetryMax,omitempty"`
	// ExemptNamespaces are never guarded, whatever the webhook configuration's
	// namespaceSelector says: kube-system and runner-guard's own namespace.
	ExemptNamespaces []string `json:"exemptNamespaces,omitempty"`
	// RecentlyAdmittedTTL is how long an admitted deletion of one pod answers the
	// API server's repeated reviews of the same deletion without asking GitHub.
	RecentlyAdmittedTTL metav1.Duration `json:"recentlyAdmittedTTL,omitempty"`

	// CredentialsMode is where runners' GitHub credentials come from: "static"
	// (the flags' token or App, the default) or "arc" (each scale-set runner's
	// EphemeralRunner's githubConfigSecret; legacy pods still use the flags').
	CredentialsMode CredentialsMode `json:"credentialsMode,omitempty"`
	// RetireEphemeralRunners deletes the EphemeralRunner of a scale-set runner
	// runner-guard unregistered, so ARC creates a fresh one (default true).
	RetireEphemeralRunners *bool `json:"retireEphemeralRunners,omitempty"`

	// ScopeBindings bind namespaces (and optionally runner pod specs) to the
	// GitHub scopes their runner pods may name. Empty: every scope is open to
	// every namespace (reported at start-up and in a metric).
	ScopeBindings []ScopeBinding `json:"scopeBindings,omitempty"`
	// RunnerNamespaces, when set, are the only namespaces whose pods
	// runner-guard reads (it is granted them by a Role in each); an eviction
	// elsewhere is allowed without a read. Empty: every namespace.
	RunnerNamespaces []string `json:"runnerNamespaces,omitempty"`
	// ReadOnlyMemoryTTL is how long a read-only look-up (dry runs, bypass
	// users, disrupted pods) answers later read-only look-ups of the same
	// runner, so forged reviews cannot spend the rate limit.
	ReadOnlyMemoryTTL metav1.Duration `json:"readOnlyMemoryTTL,omitempty"`
	// GitHubBudget is how much of GitHub's rate limits runner-guard's
	// Deployment may use, per credential.
	GitHubBudget GitHubBudget `json:"githubBudget,omitempty"`

	// KarpenterUsers are the usernames Karpenter deletes pods as (default
	// DefaultKarpenterUsers): rule 4i lets only them past a node's deadline.
	KarpenterUsers []string `json:"karpenterUsers,omitempty"`
	// HonorNodeDeadlines lets Karpenter delete a busy runner's pod once its
	// NodeClaim's termination deadline, less the pod's grace period, has
	// passed (--honor-node-deadlines, rule 4i).
	HonorNodeDeadlines bool `json:"-"`

	// OnErrorSource names the setting that chose OnError, for denial messages
	// ("--on-error=deny", "onError: deny in --config"); empty means the flag's default.
	OnErrorSource string `json:"-"`
}

// GitHubBudget is the Deployment's share of GitHub's secondary rate limits
// for each credential (900 points a minute, where a GET costs 1 and a DELETE
// 5; 100 requests at once). Each replica holds replicas' share of it, so the
// Deployment stays inside it whichever replica the API server asks.
type GitHubBudget struct {
	// PointsPerMinute for the whole Deployment (default 450, half of GitHub's).
	PointsPerMinute int `json:"pointsPerMinute,omitempty"`
	// Concurrency for the whole Deployment (default 50).
	Concurrency int `json:"concurrency,omitempty"`
	// Replicas share the budget (the chart passes replicaCount; default 1).
	// With more replicas than this, the Deployment may spend more.
	Replicas int `json:"replicas,omitempty"`
	// NamespaceShare is the most of a credential's per-minute budget one
	// namespace may take while another namespace wants it (default 0.5;
	// 1 turns fair sharing off), so one team's flood of failing deletes
	// leaves the rest to the others.
	NamespaceShare float64 `json:"namespaceShare,omitempty"`
	// Unlimited turns the budget off (GitHub's own retry-after still holds
	// requests back): only for a GitHub Enterprise Server whose rate limiting
	// is off, where holding requests back only slows drains.
	Unlimited bool `json:"unlimited,omitempty"`
}

// BudgetConfig is the budget for ghclient.NewBudgets.
func (b GitHubBudget) BudgetConfig() ghclient.BudgetConfig {
	return ghclient.BudgetConfig{PointsPerMinute: b.PointsPerMinute, Concurrency: b.Concurrency, Replicas: b.Replicas,
		NamespaceShare: b.NamespaceShare, Unlimited: b.Unlimited}
}

// CredentialsMode says where runners' GitHub credentials come from.
type CredentialsMode string

const (
	CredentialsStatic CredentialsMode = "static"
	CredentialsARC    CredentialsMode = "arc"
)

// retireEphemeralRunners reports whether to retire EphemeralRunners.
func (c *Config) retireEphemeralRunners() bool {
	return c.RetireEphemeralRunners == nil || *c.RetireEphemeralRunners
}

// RunnerPodSpec describes one kind of runner pod (one ARC mode).
type RunnerPodSpec struct {
	// Name names the mode in logs and messages ("legacy", "scale-set").
	Name string `json:"name"`
	// Selector matches the pod's labels.
	Selector metav1.LabelSelector `json:"selector"`
	// Container is the runner container; the runner can hold a job only while it runs.
	Container string `json:"container"`
	// RunnerNameEnv is the env var of Container holding the runner name, for
	// controllers that do not name runners after their pods; the pod name is
	// used when it is empty or unset. ARC names runners after their pods in
	// both modes, so its specs leave it unset: an env var the pod's author
	// chose could name any runner of the scope.
	RunnerNameEnv string `json:"runnerNameEnv,omitempty"`
	// ScopeEnv reads the scope from env vars of Container (legacy ARC).
	ScopeEnv *ScopeKeys `json:"scopeEnv,omitempty"`
	// ScopeLabels reads the scope from pod labels (scale-set ARC). A repository
	// label without a "/" is joined to the organization label as owner/repo.
	ScopeLabels *ScopeKeys `json:"scopeLabels,omitempty"`
	// RunnerIDAnnotation holds the runner's GitHub ID, when the controller records it.
	RunnerIDAnnotation string `json:"runnerIDAnnotation,omitempty"`
	// GitHubURLEnv is the env var of Container naming the GitHub the runner
	// registered at (legacy ARC's GITHUB_URL). A runner of a GitHub other
	// than github.com is not asked at github.com (the default --github-url),
	// whose "not found" would let its pod go: the on-error policy decides.
	GitHubURLEnv string `json:"githubURLEnv,omitempty"`

	selector labels.Selector
}

// ScopeBinding says which GitHub scopes the runner pods of some namespaces
// may name. The first binding whose namespaces (and runnerPods, when set)
// match a pod decides: its runner's scope must match one of its scopes. A pod
// no binding covers may name no scope.
type ScopeBinding struct {
	// Name names the binding in messages; default "scopeBindings[i]".
	Name string `json:"name,omitempty"`
	// Namespaces are namespace names or glob patterns ("team-a", "team-a-*").
	Namespaces []string `json:"namespaces"`
	// RunnerPods, when set, limits the binding to these runner pod specs (by name).
	RunnerPods []string `json:"runnerPods,omitempty"`
	// Scopes are "enterprise:SLUG", "org:ORG" or "repo:OWNER/REPO", each part a
	// glob ("repo:acme/app-*", "org:*"). Matching ignores case, as GitHub
	// does. An org scope also covers the repositories of that organization.
	Scopes []string `json:"scopes"`
}

// ScopeKeys names where each scope level is read from. Precedence: repository >
// organization > enterprise.
type ScopeKeys struct {
	Enterprise   string `json:"enterprise,omitempty"`
	Organization string `json:"organization,omitempty"`
	Repository   string `json:"repository,omitempty"`
}

// Bypass lists users and groups whose deletes are not checked.
type Bypass struct {
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

// ForceDelete configures the annotation that forces a delete through.
type ForceDelete struct {
	// Enabled defaults to true.
	Enabled *bool `json:"enabled,omitempty"`
	// Annotation defaults to runner-guard.io/force-delete; its value must be "true".
	Annotation string `json:"annotation,omitempty"`
}

// DefaultRunnerPods covers both modes of actions-runner-controller.
func DefaultRunnerPods() []RunnerPodSpec {
	return []RunnerPodSpec{
		{
			Name:               "legacy",
			Selector:           metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "actions-runner", Operator: metav1.LabelSelectorOpExists}}},
			Container:          "runner",
			ScopeEnv:           &ScopeKeys{Enterprise: "RUNNER_ENTERPRISE", Organization: "RUNNER_ORG", Repository: "RUNNER_REPO"},
			RunnerIDAnnotation: "actions-runner/id",
			GitHubURLEnv:       "GITHUB_URL",
		},
		{
			Name:      "scale-set",
			Selector:  metav1.LabelSelector{MatchLabels: map[string]string{"actions-ephemeral-runner": "True"}},
			Container: "runner",
			ScopeLabels: &ScopeKeys{
				Enterprise:   "actions.github.com/enterprise",
				Organization: "actions.github.com/organization",
				Repository:   "actions.github.com/repository",
			},
		},
	}
}

// DefaultConfig is what runs without a --config file.
func DefaultConfig() Config {
	c := Config{}
	if err := c.Complete(); err != nil {
		// The defaults are static; failing here is a programming error.
		panic(fmt.Sprintf("default config invalid: %v", err))
	}
	return c
}

// ParseConfig reads a --config YAML document strictly (unknown fields are errors),
// fills in defaults and validates it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	if c.OnError != "" {
		c.OnErrorSource = fmt.Sprintf("onError: %s in --config", c.OnError)
	}
	if err := c.Complete(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// policy is the part of the configuration the rules read.
func (c *Config) policy() policy {
	return policy{
		OnError:          c.OnError,
		OnErrorSource:    c.OnErrorSource,
		BypassUsers:      c.Bypass.Users,
		BypassGroups:     c.Bypass.Groups,
		ForceAnnotation:  c.forceAnnotation(),
		ExemptNamespaces: c.ExemptNamespaces,
		BusyRetryAfter:   c.BusyRetryAfter.Duration,
		BusyRetryMax:     c.BusyRetryMax.Duration,

		HonorNodeDeadlines: c.HonorNodeDeadlines,
		KarpenterUsers:     c.KarpenterUsers,
	}
}

// Complete fills in defaults and validates, naming the offending field.
func (c *Config) Complete() error {
	c.Default()
	return c.Validate().ToAggregate()
}

// Default fills in the defaults of unset fields.
func (c *Config) Default() {
	if len(c.RunnerPods) == 0 {
		c.RunnerPods = DefaultRunnerPods()
	}
	if c.Bypass.Users == nil && c.Bypass.Groups == nil {
		c.Bypass.Users = DefaultBypassUsers()
	}
	if c.ForceDelete.Enabled == nil {
		enabled := true
		c.ForceDelete.Enabled = &enabled
	}
	if c.ForceDelete.Annotation == "" {
		c.ForceDelete.Annotation = DefaultForceAnnotation
	}
	if c.OnError == "" {
		c.OnError = OnErrorDeny
	}
	if c.CredentialsMode == "" {
		c.CredentialsMode = CredentialsStatic
	}
	if c.RetireEphemeralRunners == nil {
		retire := true
		c.RetireEphemeralRunners = &retire
	}
	if c.GitHubTimeout.Duration == 0 {
		c.GitHubTimeout.Duration = DefaultGitHubTimeout
	}
	if c.WebhookTimeout.Duration == 0 {
		c.WebhookTimeout.Duration = DefaultWebhookTimeout
	}
	if c.BusyRetryAfter.Duration == 0 {
		c.BusyRetryAfter.Duration = DefaultBusyRetryAfter
	}
	if c.BusyRetryMax.Duration == 0 {
		c.BusyRetryMax.Duration = DefaultBusyRetryMax
	}
	if !slices.Contains(c.ExemptNamespaces, "kube-system") {
		c.ExemptNamespaces = append(c.ExemptNamespaces, "kube-system")
	}
	if c.RecentlyAdmittedTTL.Duration == 0 {
		c.RecentlyAdmittedTTL.Duration = DefaultRecentAdmittedTTL
	}
	if c.ReadOnlyMemoryTTL.Duration == 0 {
		c.ReadOnlyMemoryTTL.Duration = DefaultReadOnlyMemoryTTL
	}
	if c.GitHubBudget.PointsPerMinute == 0 {
		c.GitHubBudget.PointsPerMinute = ghclient.DefaultBudgetPointsPerMinute
	}
	if c.GitHubBudget.Concurrency == 0 {
		c.GitHubBudget.Concurrency = ghclient.DefaultBudgetConcurrency
	}
	if c.GitHubBudget.Replicas == 0 {
		c.GitHubBudget.Replicas = 1
	}
	if c.GitHubBudget.NamespaceShare == 0 {
		c.GitHubBudget.NamespaceShare = ghclient.DefaultNamespaceShare
	}
	if c.KarpenterUsers == nil {
		c.KarpenterUsers = DefaultKarpenterUsers()
	}
}

// Validate checks a defaulted Config and compiles its selectors. Paths are
// the --config file's keys (runnerPods[1].selector); a caller that set a value
// from a flag renames the path to the flag.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	if _, err := ParseOnErrorPolicy(string(c.OnError)); err != nil {
		errs = append(errs, field.NotSupported(field.NewPath("onError"), c.OnError, []OnErrorPolicy{OnErrorDeny, OnErrorAllow}))
	}
	if c.CredentialsMode != CredentialsStatic && c.CredentialsMode != CredentialsARC {
		errs = append(errs, field.NotSupported(field.NewPath("credentialsMode"), c.CredentialsMode, []CredentialsMode{CredentialsStatic, CredentialsARC}))
	}
	for _, f := range []struct {
		path string
		d    time.Duration
	}{
		{"githubTimeout", c.GitHubTimeout.Duration},
		{"webhookTimeout", c.WebhookTimeout.Duration},
		{"busyRetryAfter", c.BusyRetryAfter.Duration},
		{"busyRetryMax", c.BusyRetryMax.Duration},
		{"recentlyAdmittedTTL", c.RecentlyAdmittedTTL.Duration},
		{"readOnlyMemoryTTL", c.ReadOnlyMemoryTTL.Duration},
	} {
		if f.d < 0 {
			errs = append(errs, field.Invalid(field.NewPath(f.path), f.d.String(), "must not be negative"))
		}
	}
	if c.GitHubTimeout.Duration > 10*time.Second {
		// GitHub ends requests after 10 s and the API server's webhook deadline is at most 30 s.
		errs = append(errs, field.Invalid(field.NewPath("githubTimeout"), c.GitHubTimeout.Duration.String(), "longer than GitHub's own 10s request limit"))
	}
	switch wt := c.WebhookTimeout.Duration; {
	case wt > 30*time.Second:
		errs = append(errs, field.Invalid(field.NewPath("webhookTimeout"), wt.String(), "the API server allows timeoutSeconds of at most 30s"))
	case wt > 0 && c.GitHubTimeout.Duration+2*time.Second > wt:
		errs = append(errs, field.Invalid(field.NewPath("githubTimeout"), c.GitHubTimeout.Duration.String(),
			fmt.Sprintf("must end at least 2s before webhookTimeout (%s), the webhook configuration's timeoutSeconds", wt)))
	}
	if strings.TrimSpace(c.ForceDelete.Annotation) == "" {
		errs = append(errs, field.Required(field.NewPath("forceDelete", "annotation"), ""))
	}
	seen := map[string]bool{}
	for i := range c.RunnerPods {
		errs = append(errs, c.RunnerPods[i].validate(field.NewPath("runnerPods").Index(i), seen)...)
	}
	for i := range c.ScopeBindings {
		errs = append(errs, c.ScopeBindings[i].validate(field.NewPath("scopeBindings").Index(i), seen)...)
	}
	budget := field.NewPath("githubBudget")
	switch b := c.GitHubBudget; {
	case b.PointsPerMinute < 0 || b.PointsPerMinute > ghclient.GitHubPointsPerMinute:
		errs = append(errs, field.Invalid(budget.Child("pointsPerMinute"), b.PointsPerMinute,
			fmt.Sprintf("must be between 1 and GitHub's %d points a minute per credential", ghclient.GitHubPointsPerMinute)))
	case b.Replicas > 0 && b.PointsPerMinute > 0 && b.PointsPerMinute/b.Replicas < 5:
		errs = append(errs, field.Invalid(budget.Child("pointsPerMinute"), b.PointsPerMinute,
			fmt.Sprintf("leaves each of %d replicas less than one DELETE (5 points) a minute", b.Replicas)))
	}
	if b := c.GitHubBudget; b.Concurrency < 0 || b.Concurrency > ghclient.GitHubConcurrency {
		errs = append(errs, field.Invalid(budget.Child("concurrency"), b.Concurrency,
			fmt.Sprintf("must be between 1 and GitHub's %d concurrent requests per credential", ghclient.GitHubConcurrency)))
	}
	if c.GitHubBudget.Replicas < 0 {
		errs = append(errs, field.Invalid(budget.Child("replicas"), c.GitHubBudget.Replicas, "must not be negative"))
	}
	if s := c.GitHubBudget.NamespaceShare; !(s > 0 && s <= 1) { // NaN too
		errs = append(errs, field.Invalid(budget.Child("namespaceShare"), s,
			"must be more than 0 and at most 1 (the part of a credential's per-minute budget one namespace may take while others want it)"))
	}
	for i, ns := range c.RunnerNamespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(field.NewPath("runnerNamespaces").Index(i), ns, msg))
		}
	}
	return errs
}

// validate checks one runner pod spec and compiles its selector. A spec whose
// selector does not compile is an error, never a spec that matches nothing.
func (rp *RunnerPodSpec) validate(path *field.Path, seen map[string]bool) field.ErrorList {
	var errs field.ErrorList
	if rp.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), ""))
	} else if seen[rp.Name] {
		errs = append(errs, field.Duplicate(path.Child("name"), rp.Name))
	}
	seen[rp.Name] = true
	rp.selector = nil
	sel, err := metav1.LabelSelectorAsSelector(&rp.Selector)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(path.Child("selector"), metav1.FormatLabelSelector(&rp.Selector), err.Error()))
	case sel.Empty():
		errs = append(errs, field.Invalid(path.Child("selector"), "", "must not be empty (it would match every pod)"))
	default:
		rp.selector = sel
	}
	if rp.Container == "" {
		errs = append(errs, field.Required(path.Child("container"), "name the runner container"))
	}
	if rp.ScopeEnv == nil && rp.ScopeLabels == nil {
		errs = append(errs, field.Required(path, "set scopeEnv or scopeLabels so the runner's scope can be found"))
	}
	if emptyKeys(rp.ScopeEnv) {
		errs = append(errs, field.Required(path.Child("scopeEnv"), "name at least one of enterprise, organization, repository"))
	}
	if emptyKeys(rp.ScopeLabels) {
		errs = append(errs, field.Required(path.Child("scopeLabels"), "name at least one of enterprise, organization, repository"))
	}
	return errs
}

// forceAnnotation is the annotation key that forces a delete, or "" when disabled.
func (c *Config) forceAnnotation() string {
	if c.ForceDelete.Enabled != nil && !*c.ForceDelete.Enabled {
		return ""
	}
	return c.ForceDelete.Annotation
}

func emptyKeys(k *ScopeKeys) bool {
	return k != nil && k.Enterprise == "" && k.Organization == "" && k.Repository == ""
}
