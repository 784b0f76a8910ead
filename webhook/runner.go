package webhook

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/runner-guard/runner-guard/ghclient"
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
