package webhook

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecisionRESTMapperMapsEveryKindADecisionReads(t *testing.T) {
	cases := map[string]struct {
		gvk      schema.GroupVersionKind
		resource string
		scope    meta.RESTScopeName
	}{
		"pod":             {schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods", meta.RESTScopeNameNamespace},
		"secret":          {schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "secrets", meta.RESTScopeNameNamespace},
		"configmap":       {schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "configmaps", meta.RESTScopeNameNamespace},
		"namespace":       {schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "namespaces", meta.RESTScopeNameRoot},
		"pdb":             {schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, "poddisruptionbudgets", meta.RESTScopeNameNamespace},
		"lease":           {schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}, "leases", meta.RESTScopeNameNamespace},
		"ephemeralrunner": {schema.GroupVersionKind{Group: "actions.github.com", Version: "v1alpha1", Kind: "EphemeralRunner"}, "ephemeralrunners", meta.RESTScopeNameNamespace},
		"legacy runner":   {schema.GroupVersionKind{Group: "actions.summerwind.dev", Version: "v1alpha1", Kind: "Runner"}, "runners", meta.RESTScopeNameNamespace},
	}
	m := DecisionRESTMapper()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := m.RESTMapping(c.gvk.GroupKind(), c.gvk.Version)
			if err != nil {
				t.Fatalf("RESTMapping(%s): %v", c.gvk, err)
			}
			if got.Resource != c.gvk.GroupVersion().WithResource(c.resource) || got.Scope.Name() != c.scope {
				t.Errorf("RESTMapping(%s) = %s, scope %s; want %s, scope %s", c.gvk, got.Resource, got.Scope.Name(), c.resource, c.scope)
			}
		})
	}
	if _, err := m.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind no decision reads mapped (err %v): the mapper must stay as narrow as the decisions", err)
	}
}
