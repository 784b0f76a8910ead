package disruption

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// ARC's CRD coming and going is seen at the next check: the gauge follows,
// and a change (not the first look) closes the channel the controllers wait on.
func TestARCServedFollowsTheCRD(t *testing.T) {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	a := NewARCServed(d, 0, logr.Discard())
	served := []*metav1.APIResourceList{{GroupVersion: arc.GroupVersionKind().GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: "ephemeralrunners", Kind: arc.Kind}}}}
	// In order: each step changes what discovery serves, then checks.
	for _, step := range []struct {
		name       string
		resources  []*metav1.APIResourceList
		wantServed float64
		wantClosed bool
	}{
		{name: "the first look, before ARC is installed", wantServed: 0, wantClosed: false},
		{name: "installing ARC", resources: served, wantServed: 1, wantClosed: true},
		{name: "no change", resources: served, wantServed: 1, wantClosed: false},
		{name: "removing ARC", wantServed: 0, wantClosed: true},
	} {
		changed := a.Changed()
		d.Resources = step.resources
		a.Check()
		if got := testutil.ToFloat64(a.gauge); got != step.wantServed {
			t.Fatalf("%s: served = %v, want %v", step.name, got, step.wantServed)
		}
		closed := false
		select {
		case <-changed:
			closed = true
		default:
		}
		if closed != step.wantClosed {
			t.Fatalf("%s: closed the channel %v, want %v", step.name, closed, step.wantClosed)
		}
	}
}
