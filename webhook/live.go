package webhook

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// readLive is the first read of a DELETE's decision, a step of its own
// before resolve: the review's oldObject may be forged, so the pod decided
// on is the live pod of the same name and UID. It returns that pod, or nil
// with the reason recorded in the review (LiveErr, LiveGone), or nil and
// nothing recorded when the review's own copy must decide. decide matches
// the live pod's runner pod spec itself (rules.go), so resolve starts from
// the pod and spec it decides on.
func (d *decider) readLive(ctx context.Context, r *review) *corev1.Pod {
	live := &corev1.Pod{}
	err := d.pods.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		r.LiveGone = fmt.Sprintf("no live pod has the UID %q the review names", r.Pod.UID)
	case apierrors.IsForbidden(err) && namespaceDeleting(ctx, d.pods, r.Namespace):
		// A namespace being deleted takes its Roles with it, and with them
		// the right to read its pods that guardedNamespaces grants: the
		// review's own copy of the pod decides, or every runner pod there
		// would be refused until someone restored the Role, and the
		// namespace would stay Terminating.
		logr.FromContextOrDiscard(ctx).Info("the pod may no longer be read in a namespace being deleted; deciding from the review's copy", "error", err.Error())
	case err != nil:
		r.LiveErr = err
	case live.UID != r.Pod.UID:
		// The same words as for no pod at all: the answer goes to whoever sent
		// the review, and the live UID is what a forged review would need.
		r.LiveGone = fmt.Sprintf("no live pod has the UID %q the review names", r.Pod.UID)
	default:
		return live
	}
	return nil
}

// namespaceDeleting is arc.NamespaceDeleting's verdict alone.
func namespaceDeleting(ctx context.Context, pods client.Reader, name string) bool {
	_, deleting := arc.NamespaceDeleting(ctx, pods, name)
	return deleting
}
