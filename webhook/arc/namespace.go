package arc

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// This file reads whether a namespace is being deleted: the webhook asks it
// when a pod may no longer be read there (webhook/live.go), and the resolver
// when a runner's githubConfigSecret is gone (secretGone). A file of its
// own, so the webhook's read does not enter the resolver's file before
// the resolver itself does.

// NamespaceDeleting reads the namespace; one that cannot be read counts as
// not being deleted (what its deletion would excuse stays required).
func NamespaceDeleting(ctx context.Context, reader client.Reader, name string) (*corev1.Namespace, bool) {
	var ns corev1.Namespace
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return nil, false
	}
	return &ns, ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating
}
