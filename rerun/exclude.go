package rerun

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationRerun on a runner pod, set to "false" before the pod is lost,
// keeps its job from ever being re-run (the Event and the metric say
// excluded).
const AnnotationRerun = "runner-guard.io/rerun"

// optedOut reports whether the pod's last state carries AnnotationRerun
// "false" (any value strconv.ParseBool reads as false).
func optedOut(pod *corev1.Pod) bool {
	v, ok := pod.Annotations[AnnotationRerun]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && !b
}

// Exclusions are rerun.exclude's entries: jobs they match are never re-run.
type Exclusions []exclusion

// exclusion is one entry: a repository glob, a workflow path glob, or both
// (either empty: any).
type exclusion struct {
	repo, workflow string
}

// ParseExclusions reads rerun.exclude's entries, each one of
//   - OWNER/REPO: a repository, each part a glob ("acme/*", "*/infra-*");
//   - a workflow path as the run's path names it, with at least two
//     slashes (".github/workflows/nightly.yml", ".github/workflows/release-*.yml"),
//     in any repository;
//   - OWNER/REPO:PATH: that workflow in those repositories.
//
// Globs are path.Match's: '*' stops at '/'. Repositories match
// case-insensitively, as GitHub names them; paths exactly.
func ParseExclusions(entries []string) (Exclusions, error) {
	var out Exclusions
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		var x exclusion
		repo, workflow, both := strings.Cut(e, ":")
		switch {
		case both:
			x = exclusion{repo: strings.ToLower(repo), workflow: workflow}
		case strings.Count(e, "/") == 1:
			x.repo = strings.ToLower(e)
		default:
			x.workflow = e
		}
		if both && (x.repo == "" || x.workflow == "") {
			return nil, fmt.Errorf("rerun exclude %q: want OWNER/REPO, a workflow path, or OWNER/REPO:PATH", raw)
		}
		if x.repo != "" {
			owner, name, _ := strings.Cut(x.repo, "/")
			if strings.Count(x.repo, "/") != 1 || owner == "" || name == "" {
				return nil, fmt.Errorf("rerun exclude %q: repository %q is no OWNER/REPO", raw, x.repo)
			}
			if _, err := path.Match(x.repo, ""); err != nil {
				return nil, fmt.Errorf("rerun exclude %q: %w", raw, err)
			}
		}
		if x.workflow != "" {
			if strings.Count(x.workflow, "/") < 2 && !both {
				return nil, fmt.Errorf("rerun exclude %q: want OWNER/REPO, or a workflow path as GitHub names it (.github/workflows/NAME.yml)", raw)
			}
			if _, err := path.Match(x.workflow, ""); err != nil {
				return nil, fmt.Errorf("rerun exclude %q: %w", raw, err)
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// excludedRepository returns the entry that excludes every job of
// repository ("owner/repo"), "" when none does: known before GitHub is asked.
func (xs Exclusions) excludedRepository(repository string) string {
	repo := strings.ToLower(repository)
	for _, x := range xs {
		if x.workflow != "" {
			continue
		}
		if ok, _ := path.Match(x.repo, repo); ok {
			return x.String()
		}
	}
	return ""
}

// excludedWorkflow returns the entry that excludes the jobs of the run of
// workflow file workflowPath (the run's path) in repository, "" when none does.
func (xs Exclusions) excludedWorkflow(repository, workflowPath string) string {
	repo := strings.ToLower(repository)
	for _, x := range xs {
		if x.workflow == "" || workflowPath == "" {
			continue
		}
		if x.repo != "" {
			if ok, _ := path.Match(x.repo, repo); !ok {
				continue
			}
		}
		if ok, _ := path.Match(x.workflow, workflowPath); ok {
			return x.String()
		}
	}
	return ""
}

func (x exclusion) String() string {
	switch {
	case x.repo == "":
		return x.workflow
	case x.workflow == "":
		return x.repo
	}
	return x.repo + ":" + x.workflow
}
