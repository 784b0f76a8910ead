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
	changed := a.Changed()
	a.Check()
	if got := testutil.ToFloat64(a.gauge); got != 0 {
		t.Fatalf("served = %v before ARC is installed", got)
	}
	select {
	case <-changed:
		t.Fatal("the first look closed the channel")
	default:
	}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: arc.GroupVersionKind().GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: "ephemeralrunners", Kind: arc.Kind}}}}
	a.Check()
	if got := testutil.ToFloat64(a.gauge); got != 1 {
		t.Fatalf("served = %v after ARC was installed", got)
	}
	select {
	case <-changed:
	default:
		t.Fatal("installing ARC did not close the channel")
	}
	again := a.Changed()
	a.Check()
	select {
	case <-again:
		t.Fatal("no change closed the channel")
	default:
	}
	d.Resources = nil
	a.Check()
	if got := testutil.ToFloat64(a.gauge); got != 0 {
		t.Fatalf("served = %v after ARC was removed", got)
	}
	select {
	case <-again:
	default:
		t.Fatal("removing ARC did not close the channel")
	}
}
