package framework

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// EphemeralRunnerResource is ARC's EphemeralRunner resource, whose CRD the
// harness installs from crdDir.
func EphemeralRunnerResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "actions.github.com", Version: "v1alpha1", Resource: "ephemeralrunners"}
}

// CreateEphemeralRunner creates want through dyn and then writes its status
// through the status subresource, as ARC's controller does (a create drops
// the status). It returns the object as stored; when the status write fails,
// the object it created comes back with the error, for the caller to clean up.
func CreateEphemeralRunner(ctx context.Context, dyn dynamic.Interface, want *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	res := dyn.Resource(EphemeralRunnerResource()).Namespace(want.GetNamespace())
	created, err := res.Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create EphemeralRunner %s/%s: %w", want.GetNamespace(), want.GetName(), err)
	}
	status, _, _ := unstructured.NestedMap(want.Object, "status")
	if err := unstructured.SetNestedMap(created.Object, status, "status"); err != nil {
		return created, err
	}
	updated, err := res.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return created, fmt.Errorf("status of EphemeralRunner %s/%s: %w", want.GetNamespace(), want.GetName(), err)
	}
	return updated, nil
}
