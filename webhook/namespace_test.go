package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// A runner of a namespace being deleted whose Secret went first, without
// static credentials, goes with a warning and no GitHub request; a
// CredentialsGone runner (static credentials exist) is asked about as usual.
func TestNamespaceDeletingRule(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	base := func() *arc.Runner {
		return &arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7},
			Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}}
	}
	tests := map[string]struct {
		edit      func(*arc.Runner)
		want      Reason
		allowed   bool
		wantCalls int
	}{
		"no static credentials, no job":     {edit: func(r *arc.Runner) { r.NamespaceDeleting = "namespace \"ci\" is being deleted" }, want: ReasonNamespaceDeleting, allowed: true},
		"static credentials ask GitHub":     {edit: func(r *arc.Runner) { r.CredentialsGone = "namespace \"ci\" is being deleted" }, want: ReasonRunnerBusy, wantCalls: 1},
		"ARC's removal state decides first": {edit: func(r *arc.Runner) { r.NamespaceDeleting, r.Removed = "deleting", "removed" }, want: ReasonRemovedByARC, allowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			run := base()
			tc.edit(run)
			gh := &countingGitHub{}
			d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.runners = oneRunner{run}
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod})
			if dec.Reason != tc.want || dec.Allowed != tc.allowed || gh.calls != tc.wantCalls {
				t.Fatalf("decision %s (allowed %v), %d GitHub calls; want %s (allowed %v), %d calls: %s", dec.Reason, dec.Allowed, gh.calls, tc.want, tc.allowed, tc.wantCalls, dec.Message)
			}
			if tc.want == ReasonNamespaceDeleting && (dec.Warning == "" || !strings.Contains(dec.Message, "being deleted") || dec.EventReason != EventNamespaceDeleting) {
				t.Errorf("want a warning naming the namespace deletion and a %s Event: %+v", EventNamespaceDeleting, dec)
			}
		})
	}
}
