package arc

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/runner-guard/runner-guard/ghclient"
)

// ARC's legacy (summerwind) Runner, which controls one runner pod of the same
// name (apis/actions.summerwind.net/v1alpha1/runner_types.go).
const (
	LegacyGroup   = "actions.summerwind.dev"
	LegacyVersion = "v1alpha1"
	LegacyKind    = "Runner"
)

// legacyScope reads spec.repository ("owner/repo"), spec.organization and
// spec.enterprise with ARC's precedence: repository, then organization, then
// enterprise.
func legacyScope(u *unstructured.Unstructured) (ghclient.Scope, string, error) {
	for _, f := range []struct {
		field string
		make  func(string) (ghclient.Scope, error)
	}{
		{"spec.repository", ghclient.RepoScope},
		{"spec.organization", ghclient.OrgScope},
		{"spec.enterprise", ghclient.EnterpriseScope},
	} {
		v, err := stringField(u, "spec", f.field[len("spec."):])
		if err != nil {
			return ghclient.Scope{}, f.field, err
		}
		if v == "" {
			continue
		}
		s, err := f.make(v)
		return s, f.field, err
	}
	return ghclient.Scope{}, "spec", fmt.Errorf("none of spec.repository, spec.organization, spec.enterprise is set")
}
