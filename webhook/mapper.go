package webhook

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// DecisionRESTMapper maps every kind a decision reads or writes (pods, PDBs,
// namespaces, Secrets, ConfigMaps, ARC's EphemeralRunners and Runners, the
// Leases sharing budget reservations between replicas, Nodes and Karpenter's
// NodeClaims) to its
// resource without asking the API server. A discovering mapper fills itself
// on first use with requests that carry no deadline, so the first decisions
// after a start (or after a CRD appears) could outlive the API server's
// webhook timeout on a slow API server. A kind whose CRD is not installed
// answers 404 for its resource, which the resolver already reads as "no such
// kind".
func DecisionRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	namespaced := []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Pod"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
		coordinationv1.SchemeGroupVersion.WithKind("Lease"),
		arc.GroupVersionKind(),
		arc.LegacyGroupVersionKind(),
	}
	for _, gvk := range namespaced {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	// Karpenter's DELETE past a node's deadline (rule 4g) reads the Node and
	// its NodeClaim.
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(nodeClaimGVK(), meta.RESTScopeRoot)
	return m
}
