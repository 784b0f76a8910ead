package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/events/jobannotation"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
)

// Guard is what the endpoint shares with the admission decision:
// *webhook.Handler, so both agree on which pods are guarded, which runner
// each runs and which scopes its namespace may name.
type Guard interface {
	Resolve(ctx context.Context, pod *corev1.Pod) (webhook.Resolved, error)
	ScopeBound(pod *corev1.Pod, scope ghclient.Scope) bool
}

var _ Guard = &webhook.Handler{}

// Options configure the endpoint.
type Options struct {
	// Secret is the webhook's secret (--github-webhook-secret-file): it
	// verifies deliveries and signs the annotation.
	Secret []byte
	// Pods lists and patches pods; it must read the API server, not a cache.
	Pods  client.Client
	Guard Guard
	// Namespaces limits the pods looked at (runnerNamespaces); empty: all.
	Namespaces []string
	// Remembered bounds the delivery IDs and completed jobs remembered
	// (default DefaultRemembered).
	Remembered int
	// Now tells time for the memories (time.Now if nil).
	Now     func() time.Time
	Metrics *Metrics
	Log     logr.Logger
}

// applier writes a delivery's job onto the pods of its runner.
type applier struct {
	pods       client.Client
	guard      Guard
	namespaces []string
	secret     []byte
	// completed are the jobs whose completed delivery arrived: a late
	// in_progress of one of them must not put it back.
	completed *recent
}

// apply applies an in_progress or completed delivery and returns its outcome.
func (a *applier) apply(ctx context.Context, p workflowJob) (string, error) {
	jobKey := strconv.FormatInt(p.WorkflowJob.ID, 10)
	if p.Action == ActionCompleted {
		a.completed.add(jobKey)
	} else if a.completed.has(jobKey) {
		return OutcomeStale, nil
	}
	if p.WorkflowJob.RunnerName == "" {
		return OutcomeNoPod, nil
	}
	pods, err := a.runnerPods(ctx, p)
	if err != nil {
		return "", err
	}
	if len(pods) == 0 {
		return OutcomeNoPod, nil
	}
	for i := range pods {
		if p.Action == ActionInProgress {
			err = a.annotate(ctx, &pods[i], p.job())
		} else {
			err = a.unannotate(ctx, &pods[i], p.WorkflowJob.ID)
		}
		if err != nil {
			return "", err
		}
	}
	return OutcomeApplied, nil
}

// runnerPods are the guarded pods that run the delivery's runner: ARC names
// a runner after its pod, and the runner's scope and the namespace's scope
// binding must both cover the job's repository.
func (a *applier) runnerPods(ctx context.Context, p workflowJob) ([]corev1.Pod, error) {
	namespaces := a.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	repo, _ := ghclient.RepoScope(p.Repository.FullName) // checked by parseWorkflowJob
	log := logr.FromContextOrDiscard(ctx)
	var out []corev1.Pod
	for _, ns := range namespaces {
		var list corev1.PodList
		// From the API server's watch cache (resourceVersion 0), not a
		// scan of etcd: a runner pod is older than its runner's job.
		if err := a.pods.List(ctx, &list, client.InNamespace(ns),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", p.WorkflowJob.RunnerName)},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
			return nil, fmt.Errorf("listing pods named %q: %w", p.WorkflowJob.RunnerName, err)
		}
		for _, pod := range list.Items {
			if pod.DeletionTimestamp != nil {
				continue
			}
			res, err := a.guard.Resolve(ctx, &pod)
			switch {
			case err != nil:
				log.V(1).Info("pod not applied to", "pod", client.ObjectKeyFromObject(&pod), "why", err.Error())
			case !strings.EqualFold(res.Runner.Name, p.WorkflowJob.RunnerName):
			case !p.covers(res.Runner.Scope):
				log.V(1).Info("pod not applied to: its runner's scope does not cover the job's repository", "pod", client.ObjectKeyFromObject(&pod), "scope", res.Runner.Scope.String(), "repository", p.Repository.FullName)
			case !a.guard.ScopeBound(&pod, repo):
				log.V(1).Info("pod not applied to: its namespace's scope binding does not cover the job's repository", "pod", client.ObjectKeyFromObject(&pod), "repository", p.Repository.FullName)
			default:
				out = append(out, pod)
			}
		}
	}
	return out, nil
}

// annotate writes job onto pod.
func (a *applier) annotate(ctx context.Context, pod *corev1.Pod, job jobannotation.Job) error {
	value := jobannotation.Value(job, string(pod.UID), a.secret)
	if pod.Annotations[jobannotation.Annotation] == value {
		return nil
	}
	return a.patch(ctx, pod, &value, "")
}

// unannotate removes the annotation of job jobID from pod; one naming
// another job (a newer one on a runner that is not ephemeral) stays.
func (a *applier) unannotate(ctx context.Context, pod *corev1.Pod, jobID int64) error {
	for range 3 {
		job, ok := jobannotation.JobFromPod(pod, a.secret)
		if !ok || job.JobID != jobID {
			return nil
		}
		err := a.patch(ctx, pod, nil, pod.ResourceVersion)
		if !apierrors.IsConflict(err) {
			return err
		}
		// The pod changed since it was read (a newer job?): read it again.
		if err := a.pods.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	return fmt.Errorf("pod %s kept changing while its job annotation was removed", client.ObjectKeyFromObject(pod))
}

// patch sets (value) or removes (nil) the annotation, with the
// resourceVersion as precondition when one is given.
func (a *applier) patch(ctx context.Context, pod *corev1.Pod, value *string, resourceVersion string) error {
	meta := map[string]any{"annotations": map[string]any{jobannotation.Annotation: value}}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	err = a.pods.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("patching pod %s: %w", client.ObjectKeyFromObject(pod), err)
	}
	return err
}
