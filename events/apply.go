package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
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

// applier records a delivery's job on the pods of its runner.
type applier struct {
	pods       client.Client
	guard      Guard
	namespaces []string
	keys       *jobannotation.Keyring
}

// apply applies an in_progress or completed delivery verified under secret
// and returns its outcome: applied when a pod's record changed, stale when
// every pod records the job's end or a later job, duplicate when they record
// it already.
func (a *applier) apply(ctx context.Context, p workflowJob, secret *Secret) (string, error) {
	if p.WorkflowJob.RunnerName == "" {
		return OutcomeNoPod, nil
	}
	pods, err := a.runnerPods(ctx, p, secret)
	if err != nil {
		return "", err
	}
	outcome := OutcomeNoPod
	rec := p.record(secret.Name)
	for _, pod := range pods {
		o, err := a.record(ctx, pod, rec)
		if err != nil {
			return "", err
		}
		outcome = strongerOutcome(outcome, o)
	}
	return outcome, nil
}

// strongerOutcome is the delivery's outcome over two pods: applied over
// duplicate over stale over no pod.
func strongerOutcome(a, b string) string {
	rank := map[string]int{OutcomeNoPod: 0, OutcomeStale: 1, OutcomeDuplicate: 2, OutcomeApplied: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// runnerPods are the guarded pods that run the delivery's runner: ARC names
// a runner after its pod, the runner's scope and the namespace's scope
// binding must both cover the job's repository, and the secret's scopes the
// runner's scope.
func (a *applier) runnerPods(ctx context.Context, p workflowJob, secret *Secret) ([]corev1.Pod, error) {
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
			case !secret.coversRunner(res.Runner.Scope):
				log.V(1).Info("pod not applied to: the webhook's secret does not cover its runner's scope", "pod", client.ObjectKeyFromObject(&pod), "scope", res.Runner.Scope.String(), "secret", secret.Name)
			case !a.guard.ScopeBound(&pod, repo):
				log.V(1).Info("pod not applied to: its namespace's scope binding does not cover the job's repository", "pod", client.ObjectKeyFromObject(&pod), "repository", p.Repository.FullName)
			default:
				out = append(out, pod)
			}
		}
	}
	return out, nil
}

// record writes rec onto the pod unless the pod's verified record is the
// job's end or a later job, or the job started before the pod. The pod is read live and written with its
// resourceVersion as precondition, so concurrent deliveries (on any
// replica) converge on the latest record.
func (a *applier) record(ctx context.Context, candidate corev1.Pod, rec jobannotation.Record) (string, error) {
	key := client.ObjectKeyFromObject(&candidate)
	for range 8 {
		var pod corev1.Pod
		if err := a.pods.Get(ctx, key, &pod); err != nil {
			if apierrors.IsNotFound(err) {
				return OutcomeNoPod, nil
			}
			return "", fmt.Errorf("reading pod %s: %w", key, err)
		}
		if pod.UID != candidate.UID || pod.DeletionTimestamp != nil {
			return OutcomeNoPod, nil
		}
		if startedBeforePod(rec, &pod) {
			return OutcomeStale, nil
		}
		cur, err := a.keys.Read(&pod)
		if !jobannotation.Supersedes(rec, cur, err == nil) {
			if err == nil && cur.JobID == rec.JobID && cur.State == rec.State {
				return OutcomeDuplicate, nil
			}
			return OutcomeStale, nil
		}
		value, err := a.keys.Value(rec, string(pod.UID))
		if err != nil {
			return "", err
		}
		err = a.patch(ctx, &pod, value)
		switch {
		case apierrors.IsNotFound(err):
			return OutcomeNoPod, nil
		case apierrors.IsConflict(err):
			continue // changed since read (another delivery?): decide again
		case err != nil:
			return "", fmt.Errorf("patching pod %s: %w", key, err)
		}
		return OutcomeApplied, nil
	}
	return "", fmt.Errorf("pod %s kept changing while its job record was written", key)
}

// clockSkew is how far GitHub's clock and the API server's may differ.
const clockSkew = 2 * time.Minute

// startedBeforePod reports whether rec is a job in progress that started
// before the pod existed: a runner registers from its pod, so such a job ran
// on an earlier pod of the same name (a replayed delivery), not on this one.
func startedBeforePod(rec jobannotation.Record, pod *corev1.Pod) bool {
	return rec.Running() && !pod.CreationTimestamp.IsZero() && rec.At.Before(pod.CreationTimestamp.Add(-clockSkew))
}

// patch sets the annotation with the pod's resourceVersion as precondition.
func (a *applier) patch(ctx context.Context, pod *corev1.Pod, value string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"annotations":     map[string]any{jobannotation.Annotation: value},
	}})
	if err != nil {
		return err
	}
	return a.pods.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body))
}
