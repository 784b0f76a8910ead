package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// This file is the one place that answers "which runner is this pod, and how
// do we know": the runner's name, scope, ID, API base and credentials, each
// with the source it came from and whether that source can name another
// runner than the pod's own.

// trimSuffix is what ARC appends to a label value it truncated at 63 characters.
const trimSuffix = "-trim"

// SourceKind is where one fact about a runner came from.
type SourceKind string

const (
	// SourceARCObject: ARC's EphemeralRunner or legacy Runner, verified to
	// control the pod (same name, referenced UID).
	SourceARCObject SourceKind = "arc-object"
	// SourcePodName, SourcePodEnv, SourcePodLabels and SourcePodAnnotation:
	// the pod itself, which whoever may create pods in its namespace chose.
	SourcePodName       SourceKind = "pod-name"
	SourcePodEnv        SourceKind = "pod-env"
	SourcePodLabels     SourceKind = "pod-labels"
	SourcePodAnnotation SourceKind = "pod-annotation"
	// SourceGitHubRecord: GitHub's record of the runner (an ID is checked
	// against it before use).
	SourceGitHubRecord SourceKind = "github-record"
	// SourceFlags: runner-guard's own configuration (static credentials, --github-url).
	SourceFlags SourceKind = "flags"
	// SourceARCSecret: the githubConfigSecret an EphemeralRunner names.
	SourceARCSecret SourceKind = "arc-secret"
)

// Source says where a fact came from and whether it is trusted: a trusted
// fact cannot name another runner than the pod's own.
type Source struct {
	Kind SourceKind
	// Detail names the object, env var, label or annotation.
	Detail  string
	Trusted bool
}

func (s Source) String() string {
	t := "untrusted"
	if s.Trusted {
		t = "trusted"
	}
	if s.Detail == "" {
		return fmt.Sprintf("%s (%s)", s.Kind, t)
	}
	return fmt.Sprintf("%s %s (%s)", s.Kind, s.Detail, t)
}

// Provenance holds the source of each fact of a Target.
type Provenance struct {
	Name, Scope, ID, Creds Source
}

// Target is the GitHub runner behind a runner pod.
type Target struct {
	Scope ghclient.Scope
	Name  string
	// IDHint is the runner ID known before asking GitHub, 0 when unknown;
	// ghclient verifies an untrusted one against GitHub's record (From.ID).
	IDHint int64
	// Creds are the runner's own credentials (ARC's githubConfigSecret); nil
	// uses the flags' credentials.
	Creds *ghclient.Credentials
	From  Provenance
}

// runner is the GitHub client's name for the target.
func (t Target) runner() ghclient.Runner {
	return ghclient.Runner{Scope: t.Scope, Name: t.Name, ID: t.IDHint, IDTrusted: t.IDHint > 0 && t.From.ID.Trusted, Creds: t.Creds}
}

// resolution is the resolver's answer. At most one of the errors is set, and
// each has one meaning.
type resolution struct {
	Target Target
	// Runner is Target as GitHub is asked about it (Target.runner), worked
	// out once here for every request a decision makes of GitHub.
	Runner ghclient.Runner
	// ARC is the verified ARC object behind the pod, nil when there is none.
	ARC *arc.Runner
	// ARCJob names the job ARC's job fields record (arc.Job.String), worked
	// out once here: set, the runner took a job (rule 4f); "" when they
	// record none or there is no ARC object.
	ARCJob string
	// NotOwner: the pod claims an ARC object it does not match.
	NotOwner error
	// ObjectErr: ARC's object could not be read (a transient API error).
	ObjectErr error
	// ScopeErr: the runner's scope cannot be found.
	ScopeErr error
	// CredsErr: the runner's own credentials are missing or malformed.
	CredsErr error
	// HostErr: the runner is registered at a GitHub the flags' credentials do not ask.
	HostErr error
	// NotBound says why the runner's scope is outside what the pod's
	// namespace may name (scopeBindings); "" when it may.
	NotBound string
	// Fallback, when set, says once per pod why the pod's own labels and env
	// were read instead of ARC's object; the handler records it as an Event.
	Fallback string
}

// resolver answers which runner a pod runs.
type resolver struct {
	// runners reads ARC's objects; nil reads the pod only.
	runners RunnerResolver
	// githubBase is the flags' API base (--github-url); "" skips the host check.
	githubBase string
	bindings   scopeBindings
	fallbacks  *fallbackMemory
}

// resolve returns the runner of pod, a runner pod matched by spec.
func (rs *resolver) resolve(ctx context.Context, pod *corev1.Pod, spec *RunnerPodSpec) resolution {
	res := rs.fromARC(ctx, pod, spec)
	if res.ARC == nil && res.NotOwner == nil && res.ObjectErr == nil && res.ScopeErr == nil && res.CredsErr == nil {
		fallback := res.Fallback
		res = fromPod(pod, spec)
		res.Fallback = fallback
	}
	if res.ScopeErr == nil && res.NotOwner == nil && res.ObjectErr == nil {
		res.NotBound = rs.bindings.scopeNotBound(pod.Namespace, spec.Name, res.Target.Scope)
	}
	if res.HostErr == nil && res.Target.Creds == nil {
		res.HostErr = otherGitHub(pod, spec, rs.githubBase)
	}
	res.Runner = res.Target.runner()
	if res.ARC != nil {
		res.ARCJob = res.ARC.Job.String()
	}
	return res
}

// otherGitHub is the error when the pod's env (spec.GitHubURLEnv) names a
// GitHub other than github.com while runner-guard asks github.com (the
// default --github-url), nil otherwise: asked there, its "not found" would
// let the pod of a busy runner go. A --github-url set to anything else is
// taken as the operator's word for every runner whose pod names another
// host: it may be a proxy, or another name of the same server.
func otherGitHub(pod *corev1.Pod, spec *RunnerPodSpec, githubBase string) error {
	if spec.GitHubURLEnv == "" || !ghclient.SameBaseURL(githubBase, ghclient.DefaultBaseURL) {
		return nil
	}
	raw := strings.TrimSpace(literalEnv(pod, spec.Container)[spec.GitHubURLEnv])
	web, err := url.Parse(raw)
	if raw == "" || err != nil || web.Host == "" {
		return nil
	}
	if host := strings.ToLower(web.Host); host == "github.com" || host == "www.github.com" || host == "api.github.com" {
		return nil
	}
	return fmt.Errorf("container %q env %s=%s names the GitHub its runner registered at, but runner-guard asks github.com (--github-url): point --github-url at that GitHub's API",
		spec.Container, spec.GitHubURLEnv, ghclient.RedactURL(raw))
}

// fromARC reads the ARC object that controls the pod. It leaves the
// resolution empty when there is none, or when it cannot be read for good
// (CRD absent, RBAC): the pod's own facts are read then.
func (rs *resolver) fromARC(ctx context.Context, pod *corev1.Pod, spec *RunnerPodSpec) resolution {
	var res resolution
	if rs.runners == nil {
		return res
	}
	run, err := rs.runners.Resolve(ctx, pod)
	var (
		notOwner    *arc.NotOwnerError
		unavailable *arc.UnavailableError
		creds       *arc.CredentialsError
		invalid     *arc.InvalidError
	)
	switch {
	case err == nil && run != nil:
		res.ARC, res.Target = run, arcTarget(run)
		if run.Creds != nil {
			res.Target.From.Creds = Source{Kind: SourceARCSecret, Detail: run.Creds.Key, Trusted: true}
		}
		if run.Kind == arc.LegacyKind {
			// ARC's legacy controller keeps the runner ID on the pod it names
			// after the Runner. It is not trusted even there: whoever may
			// create pods in the namespace can make one with the Runner's
			// owner reference (its name and UID are readable) and another
			// runner's ID, so ghclient checks it against GitHub's record.
			res.Target.IDHint = runnerIDHint(pod, spec.RunnerIDAnnotation)
			res.Target.From.ID = Source{Kind: SourcePodAnnotation, Detail: spec.RunnerIDAnnotation}
		}
		if run.Creds == nil && run.Removed == "" && rs.githubBase != "" && run.BaseURL != "" &&
			!ghclient.SameBaseURL(run.BaseURL, ghclient.DefaultBaseURL) && !ghclient.SameBaseURL(run.BaseURL, rs.githubBase) {
			// The flags' credentials would ask another GitHub, whose "not
			// found" would let the pod go unguarded. (A github.com runner is
			// asked at --github-url: it may be a proxy for it.)
			res.HostErr = fmt.Errorf("EphemeralRunner %s is registered at %s (its githubConfigUrl), but runner-guard asks %s (--github-url): "+
				"point --github-url there or use --credentials-mode=arc", run.EphemeralRunner, ghclient.RedactURL(run.BaseURL), ghclient.RedactURL(rs.githubBase))
		}
	case errors.As(err, &notOwner):
		res.NotOwner = err
	case errors.As(err, &unavailable):
		res.Fallback = rs.fallbacks.report(ctx, pod, unavailable)
	case errors.As(err, &creds) && run != nil:
		// The runner is ARC's (scope, name, job fields): pod labels, which ARC
		// may trim or strip, would give another scope, and with it another
		// binding. Only its credentials are unusable.
		res.ARC, res.Target, res.CredsErr = run, arcTarget(run), err
		res.Target.From.Creds = Source{Kind: SourceARCSecret, Detail: creds.Secret.String()}
	case errors.As(err, &creds):
		res.CredsErr = err
	case errors.As(err, &invalid):
		res.ScopeErr = err
	case err != nil:
		res.ObjectErr = err
	}
	return res
}

// arcTarget is the runner ARC's object names, every fact from that object;
// the credentials are the flags' until the caller says otherwise.
func arcTarget(run *arc.Runner) Target {
	obj := Source{Kind: SourceARCObject, Detail: fmt.Sprintf("%s %s", run.Kind, run.EphemeralRunner), Trusted: true}
	return Target{Scope: run.Scope, Name: run.Name, IDHint: run.ID, Creds: run.Creds,
		From: Provenance{Name: obj, Scope: obj, ID: obj, Creds: Source{Kind: SourceFlags, Trusted: true}}}
}

// fromPod reads the runner from the pod itself, as its runner pod spec says.
// None of these facts is trusted: the binding of the pod's namespace limits
// the scope, and ghclient checks an ID against GitHub's record before use.
func fromPod(pod *corev1.Pod, spec *RunnerPodSpec) resolution {
	t, err := podTarget(pod, spec)
	return resolution{Target: t, ScopeErr: err}
}

// podTarget reads the runner's name, scope and ID hint from the pod.
func podTarget(pod *corev1.Pod, spec *RunnerPodSpec) (Target, error) {
	env := literalEnv(pod, spec.Container)
	t := Target{
		Name:   pod.Name,
		IDHint: runnerIDHint(pod, spec.RunnerIDAnnotation),
		From: Provenance{
			Name:  Source{Kind: SourcePodName},
			ID:    Source{Kind: SourcePodAnnotation, Detail: spec.RunnerIDAnnotation},
			Creds: Source{Kind: SourceFlags, Trusted: true},
		},
	}
	if spec.RunnerNameEnv != "" && env[spec.RunnerNameEnv] != "" {
		// Only a runner pod spec that names this env var explicitly reads it.
		t.Name = env[spec.RunnerNameEnv]
		t.From.Name = Source{Kind: SourcePodEnv, Detail: spec.RunnerNameEnv}
	}

	var tried []string
	if spec.ScopeEnv != nil {
		s, ok, err := scopeFrom(spec.ScopeEnv, env, "")
		if err != nil {
			return t, fmt.Errorf("container %q env: %w", spec.Container, err)
		}
		if ok {
			t.Scope, t.From.Scope = s, Source{Kind: SourcePodEnv, Detail: keyList(spec.ScopeEnv)}
			return t, nil
		}
		tried = append(tried, fmt.Sprintf("env %s in container %q", keyList(spec.ScopeEnv), spec.Container))
	}
	if spec.ScopeLabels != nil {
		s, ok, err := scopeFrom(spec.ScopeLabels, pod.Labels, spec.ScopeLabels.Organization)
		if err != nil {
			return t, fmt.Errorf("pod labels: %w", err)
		}
		if ok {
			t.Scope, t.From.Scope = s, Source{Kind: SourcePodLabels, Detail: keyList(spec.ScopeLabels)}
			return t, nil
		}
		tried = append(tried, "labels "+keyList(spec.ScopeLabels))
	}
	return t, fmt.Errorf("no runner scope found: pod sets none of %s", strings.Join(tried, ", nor "))
}

// scopeFrom picks the scope with precedence repository > organization >
// enterprise. ownerKey, when set, supplies the owner of a bare repository name
// (ARC scale sets label the repository without its owner).
func scopeFrom(keys *ScopeKeys, values map[string]string, ownerKey string) (ghclient.Scope, bool, error) {
	get := func(key string) (string, error) {
		if key == "" {
			return "", nil
		}
		v := strings.TrimSpace(values[key])
		if truncated(v) {
			return "", fmt.Errorf("%s=%q was truncated by the runner controller; the full name is unknown", key, v)
		}
		return v, nil
	}
	repoScope := func(repo string) (ghclient.Scope, error) {
		if !strings.Contains(repo, "/") && ownerKey != "" {
			owner, err := get(ownerKey)
			if err != nil {
				return ghclient.Scope{}, err
			}
			if owner == "" {
				return ghclient.Scope{}, fmt.Errorf("%s=%q names no owner and %s is not set", keys.Repository, repo, ownerKey)
			}
			repo = owner + "/" + repo
		}
		return ghclient.RepoScope(repo)
	}
	for _, kind := range []struct {
		key   string
		scope func(string) (ghclient.Scope, error)
	}{
		{keys.Repository, repoScope},
		{keys.Organization, ghclient.OrgScope},
		{keys.Enterprise, ghclient.EnterpriseScope},
	} {
		v, err := get(kind.key)
		if err != nil {
			return ghclient.Scope{}, false, err
		}
		if v != "" {
			s, err := kind.scope(v)
			return s, err == nil, err
		}
	}
	return ghclient.Scope{}, false, nil
}

// truncated reports whether ARC cut a label value to fit 63 characters.
func truncated(v string) bool {
	return len(v) == 63 && strings.HasSuffix(v, trimSuffix)
}

// literalEnv returns the container's env vars that have literal values; values
// from ConfigMaps or Secrets are unknown to an admission webhook.
func literalEnv(pod *corev1.Pod, container string) map[string]string {
	env := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				env[e.Name] = e.Value
			}
		}
	}
	return env
}

// runnerIDHint parses the runner ID annotation; anything unparsable is no hint.
func runnerIDHint(pod *corev1.Pod, annotation string) int64 {
	if annotation == "" {
		return 0
	}
	id, err := strconv.ParseInt(strings.TrimSpace(pod.Annotations[annotation]), 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

func keyList(k *ScopeKeys) string {
	var keys []string
	for _, key := range []string{k.Repository, k.Organization, k.Enterprise} {
		if key != "" {
			keys = append(keys, key)
		}
	}
	return strings.Join(keys, ", ")
}
