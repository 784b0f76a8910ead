package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Scenario 4a: a controller deleting pods through client-go with its own
// ServiceAccount token goes through the same guard.
func TestControllerDeleteThroughClientGo(t *testing.T) {
	s := newBusyAndIdle(t, "controller")
	controller := s.serviceAccountClient("arc-controller", []string{"get", "list", "delete"})

	err := controller.CoreV1().Pods(s.ns).Delete(s.ctx, "runner-busy", metav1.DeleteOptions{})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") {
		t.Fatalf("controller delete of a busy runner's pod: err = %v, want Forbidden with 'runner busy'", err)
	}
	s.requireAlive("runner-busy")

	if err := controller.CoreV1().Pods(s.ns).Delete(s.ctx, "runner-idle", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("controller delete of an idle runner's pod: %v", err)
	}
	s.requireDeleting("runner-idle")
	if s.registered("runner-idle") || !s.registered("runner-busy") {
		t.Errorf("registered: idle %v busy %v, want false true", s.registered("runner-idle"), s.registered("runner-busy"))
	}
}

// serviceAccountClient creates a ServiceAccount allowed the verbs on pods in the
// scenario's namespace and returns a client using its token.
func (s *scenario) serviceAccountClient(name string, verbs []string) kubernetes.Interface {
	s.t.Helper()
	c := env.Client
	if _, err := c.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles(s.ns).Create(s.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(s.ns).Create(s.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: s.ns}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	tok, err := c.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(env.RESTConfig(tok.Status.Token))
	if err != nil {
		s.t.Fatal(err)
	}
	return client
}

// Scenario 4b: the ReplicaSet controller scaling down: its deletes of busy
// runners' pods are refused and retried; once a runner is idle its pod goes.
func TestReplicaSetScaleDown(t *testing.T) {
	s := newScenario(t, "replicaset")
	labels := map[string]string{"actions-runner": "", "app": "runners"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "runners", Namespace: s.ns},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeName: "e2e-node-1",
					// No RUNNER_NAME: ARC names the runner after the pod, as runner-guard assumes.
					Containers: []corev1.Container{{Name: "runner", Image: "actions-runner:e2e", Env: []corev1.EnvVar{{Name: "RUNNER_ORG", Value: s.scope.Name}}}},
				},
			},
		},
	}
	if _, err := env.Client.AppsV1().ReplicaSets(s.ns).Create(s.ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	s.eventually("ReplicaSet creates 2 pods", 30*time.Second, func() error {
		list, err := env.Client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: "app=runners"})
		if err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d pods", len(list.Items))
		}
		pods = list.Items
		return nil
	})
	for i := range pods {
		env.GitHub.AddRunner(s.scope, pods[i].Name)
		env.GitHub.SetBusy(s.scope, pods[i].Name, true)
		if _, err := env.MarkRunning(s.ctx, &pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	first, second := pods[0].Name, pods[1].Name

	scale(t, s, "runners", 0)
	// The controller tries both pods, is refused, and tries again: a retry of
	// a runner busy moments ago reads the scope's listing, not another DELETE.
	s.eventually("ReplicaSet controller retries refused deletes", 30*time.Second, func() error {
		// While the budget is pressed, even a first delete reads the listing.
		if d, l := s.count("DELETE"), s.count("GET"); d < 1 || d+l < 3 {
			return fmt.Errorf("%d DELETEs and %d listings reached GitHub", d, l)
		}
		return nil
	})
	s.requireAlive(first)
	s.requireAlive(second)

	env.GitHub.SetBusy(s.scope, first, false)
	waitDeletedByController(s, "idle runner's pod deleted by the ReplicaSet controller", first)
	s.requireDeleting(first)
	s.requireAlive(second)
	if s.registered(first) || !s.registered(second) {
		t.Fatalf("registered: %s %v, %s %v; want false, true", first, s.registered(first), second, s.registered(second))
	}

	env.GitHub.SetBusy(s.scope, second, false)
	waitDeletedByController(s, "second pod deleted once idle", second)
	s.requireDeleting(second)
	if s.registered(second) {
		t.Error("second runner still registered")
	}
}

// waitDeletedByController waits until the pod's controller has had its
// delete admitted. Each refused sync lengthened the controller's backoff for
// the ReplicaSet (5 ms doubling, up to 1,000 s), and every pod event (the
// hints runner-guard sets on a busy runner's pod among them) caused one more,
// so the test writes an annotation on the pod every few seconds, as the
// kubelet's status updates would: each is a pod event that syncs the
// ReplicaSet at once, instead of after its grown backoff.
func waitDeletedByController(s *scenario, what, pod string) {
	s.t.Helper()
	var nudged time.Time
	s.eventually(what, 90*time.Second, func() error {
		err := s.deletionAdmitted(pod)
		if err != nil && time.Since(nudged) > 3*time.Second {
			nudged = time.Now()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.runner-guard.io/nudged":%q}}}`, nudged.Format(time.RFC3339Nano))
			if _, perr := env.Client.CoreV1().Pods(s.ns).Patch(s.ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); perr != nil && !apierrors.IsNotFound(perr) {
				return fmt.Errorf("annotate pod %s: %w", pod, perr)
			}
		}
		return err
	})
}

func scale(t *testing.T, s *scenario, name string, replicas int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	// The ReplicaSet controller writes status meanwhile: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := env.Client.AppsV1().ReplicaSets(s.ns).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = replicas
		_, err = env.Client.AppsV1().ReplicaSets(s.ns).UpdateScale(ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
