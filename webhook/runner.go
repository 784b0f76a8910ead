package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// trimSuffix is what ARC appends to a label value it truncated at 63 characters.
const trimSuffix = "-trim"

// Target is the GitHub runner behind a runner pod.
type Target struct {
	Scope ghclient.Scope
	Name  string
	// IDHint is the runner ID recorded on the pod, 0 when unknown.
	IDHint int64
	// Creds are the runner's own credentials (ARC's githubConfigSecret); nil
	// uses the flags' credentials.
	Creds *ghclient.Credentials
}

// runner is the GitHub client's name for the target.
func (t Target) runner() ghclient.Runner {
	return ghclient.Runner{Scope: t.Scope, Name: t.Name, ID: t.IDHint, Creds: t.Creds}
}

// matchRunnerPod returns the first runner pod spec whose selector matches the
// pod's labels, or nil for a pod that is not a runner pod.
func matchRunnerPod(pod *corev1.Pod, specs []RunnerPodSpec) *RunnerPodSpec {
	if pod == nil {
		return nil
	}
	set := labels.Set(pod.Labels)
	for i := range specs {
		if specs[i].selector != nil && specs[i].selector.Matches(set) {
			return &specs[i]
		}
	}
	return nil
}

// labelsOf is the pod's label set.
func labelsOf(pod *corev1.Pod) labels.Set { return labels.Set(pod.Labels) }

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

// resolveTarget reads the runner's name, scope and ID hint from the pod.
func resolveTarget(pod *corev1.Pod, spec *RunnerPodSpec) (Target, error) {
	env := literalEnv(pod, spec.Container)
	name := pod.Name
	if spec.RunnerNameEnv != "" && env[spec.RunnerNameEnv] != "" {
		name = env[spec.RunnerNameEnv]
	}
	t := Target{Name: name, IDHint: runnerIDHint(pod, spec.RunnerIDAnnotation)}

	var tried []string
	if spec.ScopeEnv != nil {
		s, ok, err := scopeFrom(spec.ScopeEnv, env, "")
		if err != nil {
			return t, fmt.Errorf("container %q env: %w", spec.Container, err)
		}
		if ok {
			t.Scope = s
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
			t.Scope = s
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
	repo, err := get(keys.Repository)
	if err != nil {
		return ghclient.Scope{}, false, err
	}
	if repo != "" {
		if !strings.Contains(repo, "/") && ownerKey != "" {
			owner, err := get(ownerKey)
			if err != nil {
				return ghclient.Scope{}, false, err
			}
			if owner == "" {
				return ghclient.Scope{}, false, fmt.Errorf("%s=%q names no owner and %s is not set", keys.Repository, repo, ownerKey)
			}
			repo = owner + "/" + repo
		}
		s, err := ghclient.RepoScope(repo)
		return s, err == nil, err
	}
	org, err := get(keys.Organization)
	if err != nil {
		return ghclient.Scope{}, false, err
	}
	if org != "" {
		s, err := ghclient.OrgScope(org)
		return s, err == nil, err
	}
	ent, err := get(keys.Enterprise)
	if err != nil {
		return ghclient.Scope{}, false, err
	}
	if ent != "" {
		s, err := ghclient.EnterpriseScope(ent)
		return s, err == nil, err
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

// resolveRunner finds the runner behind the pod: from its runner
// controller's own objects where they can be read (ARC's EphemeralRunner),
// else from the pod's labels and env as its runner pod spec says.
func (d *decider) resolveRunner(ctx context.Context, r *review) {
	if d.runners != nil {
		run, err := d.runners.Resolve(ctx, r.Pod)
		var unavailable *arc.UnavailableError
		var creds *arc.CredentialsError
		var invalid *arc.InvalidError
		switch {
		case err == nil && run != nil:
			r.ARC = run
			r.Target = Target{Scope: run.Scope, Name: run.Name, IDHint: run.ID, Creds: run.Creds}
			if run.Creds == nil && run.Removed == "" && d.githubBase != "" &&
				!sameAPIBase(run.BaseURL, ghclient.DefaultBaseURL) && !sameAPIBase(run.BaseURL, d.githubBase) {
				// The flags' credentials would ask another GitHub, whose
				// "not found" would let the pod go unguarded. (A github.com
				// runner is asked at --github-url: it may be a proxy for it.)
				r.CredsErr = fmt.Errorf("EphemeralRunner %s is registered at %s (its githubConfigUrl), but runner-guard asks %s (--github-url): "+
					"point --github-url there or use --credentials-mode=arc", run.EphemeralRunner, ghclient.RedactURL(run.BaseURL), ghclient.RedactURL(d.githubBase))
			}
			return
		case errors.As(err, &unavailable):
			r.Fallback = d.fallbacks.report(ctx, r.Pod, unavailable)
		case errors.As(err, &creds):
			r.Target, _ = resolveTarget(r.Pod, r.Spec)
			r.CredsErr = err
			return
		case errors.As(err, &invalid):
			r.ScopeErr = err
			return
		case err != nil:
			r.LiveErr = err
			return
		}
	}
	r.Target, r.ScopeErr = resolveTarget(r.Pod, r.Spec)
}

// retireEphemeralRunner deletes the EphemeralRunner of a runner runner-guard
// just unregistered, so ARC's EphemeralRunnerSet creates a fresh runner
// instead of restarting the pod with a dead registration. A failure does not
// change the answer: the runner is already gone from GitHub.
func (d *decider) retireEphemeralRunner(ctx context.Context, run *arc.Runner, dec Decision) Decision {
	err := d.runners.Retire(ctx, run)
	d.metrics.retired(err)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "cannot retire the EphemeralRunner; ARC replaces it after its runner fails to start", "ephemeralRunner", run.EphemeralRunner.String())
		dec.Message += fmt.Sprintf("; retiring EphemeralRunner %s failed (%v): ARC replaces it after the runner fails to start", run.EphemeralRunner, err)
		return dec
	}
	dec.Message += fmt.Sprintf("; EphemeralRunner %s deleted so ARC creates a fresh runner", run.EphemeralRunner)
	return dec
}

// readLive replaces the DELETE review's pod with the live pod of the same
// name and UID, or records why there is none.
func (d *decider) readLive(ctx context.Context, r *review) {
	live := &corev1.Pod{}
	err := d.pods.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		r.LiveGone = "no such pod exists"
	case err != nil:
		r.LiveErr = err
	case live.UID != r.Pod.UID:
		r.LiveGone = fmt.Sprintf("the review names UID %q but the live pod has UID %q", r.Pod.UID, live.UID)
	default:
		r.Pod = live
		if spec := matchRunnerPod(live, d.specs); spec != nil {
			r.Spec = spec
		}
	}
}

// blockingPDB names a PodDisruptionBudget selecting the pod that allows no
// disruption now, or "". A failed read blocks nothing: the API server checks
// the budgets itself after the webhooks.
func (d *decider) blockingPDB(ctx context.Context, pod *corev1.Pod) string {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := d.pods.List(ctx, &pdbs, client.InNamespace(pod.Namespace)); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot list PodDisruptionBudgets; the API server will check them", "error", err.Error())
		return ""
	}
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labelsOf(pod)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			return pdb.Name
		}
	}
	return ""
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

// sameAPIBase compares two GitHub API base URLs by scheme, host and path,
// ignoring a trailing slash and letter case of the host.
func sameAPIBase(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return false
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		strings.TrimSuffix(ua.Path, "/") == strings.TrimSuffix(ub.Path, "/")
}
