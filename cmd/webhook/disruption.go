package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
)

// disruptionFlags configure the disruption controller (package disruption).
type disruptionFlags struct {
	hintDoNotDisrupt        bool
	hintSafeToEvict         bool
	hintFromListing         bool
	hintDeletionCost        bool
	budgets                 bool
	removeJobBudgets        bool
	drain                   bool
	leaderElect             bool
	leaderElectionNamespace string
	busyRetryMax            time.Duration
}

func (f *disruptionFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.hintDoNotDisrupt, "hint-do-not-disrupt", true, `Keep `+disruption.AnnotationDoNotDisrupt+`: "true" on a runner pod while its runner holds a job (Karpenter then chooses other nodes); a value runner-guard did not set is never changed.`)
	fs.BoolVar(&f.hintSafeToEvict, "hint-safe-to-evict", true, `Keep `+disruption.AnnotationSafeToEvict+`: "false" on a runner pod while its runner holds a job (the cluster autoscaler then scales other nodes down).`)
	fs.BoolVar(&f.hintFromListing, "hint-from-listing", false, "Give pods without job fields (legacy runners) hints from GitHub's shared runner listing of their scope, taken every 15s while such pods run (one request per 100 runners of a scope); off, they get hints only from listings the webhook took anyway.")
	fs.BoolVar(&f.hintDeletionCost, "hint-deletion-cost", true, `Keep `+disruption.AnnotationDeletionCost+` "`+disruption.DeletionCost.Idle+`" on an idle runner's pod and "`+disruption.DeletionCost.Value+`" on a busy one's (Karpenter's Balanced consolidation then prefers idle runners' nodes); a value runner-guard did not set is never changed.`)
	fs.BoolVar(&f.budgets, "disruption-budgets", true, `While a runner pod's runner holds a job, keep a PodDisruptionBudget (minAvailable 1, owned by the pod) selecting only that pod through the label `+webhook.LabelJobBudget+`, so the API server refuses evicting it even while runner-guard is down; none where another budget selects the pod. Off, the budgets runner-guard made are removed at start.`)
	fs.BoolVar(&f.removeJobBudgets, "remove-job-budgets", false, "Delete every job budget runner-guard made (in the guarded namespaces of --config) and exit: the chart's uninstall hook.")
	fs.BoolVar(&f.drain, "drain-runners", true, "On a cordoned node, one tainted "+disruption.TaintKarpenterDisrupted+" or "+disruption.TaintClusterAutoscaler+", or one whose condition DrainInProgress, MaintenanceInProgress or MaintenancePlanned is True, unregister idle runners at once and delete their pods, and release busy ones when their job ends.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Run the hint and drain controllers on one replica at a time (a Lease in --leader-election-namespace); the webhook serves on every replica.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: $POD_NAMESPACE, else runner-guard-system).")
	fs.DurationVar(&f.busyRetryMax, "drain-busy-retry-max", disruption.DefaultBusyRetryMax, "Longest wait between two DELETEs of a busy runner on a draining node (the wait starts at 1s and doubles): how late a job's end is seen, at 5 points of GitHub's secondary limit per DELETE.")
}

// hints are the hints the flags turn on.
func (f *disruptionFlags) hints() []disruption.Hint {
	var out []disruption.Hint
	if f.hintDoNotDisrupt {
		out = append(out, disruption.DoNotDisrupt)
	}
	if f.hintSafeToEvict {
		out = append(out, disruption.SafeToEvict)
	}
	if f.hintDeletionCost {
		out = append(out, disruption.DeletionCost)
	}
	return out
}

// hintListing is the hints' listing: one that refreshes itself with
// --hint-from-listing, else only listings taken for decisions.
func (f *disruptionFlags) hintListing(gh *ghclient.Router) disruption.Listing {
	return disruption.RouterListing{Router: gh, Refresh: f.hintFromListing}
}

// enabled reports whether any leader-elected controller runs.
func (f *disruptionFlags) enabled() bool { return f.drain || len(f.hints()) > 0 || f.budgets }

// check validates the flags, naming the one at fault.
func (f *disruptionFlags) check() error {
	if f.busyRetryMax < disruption.DefaultBusyRetryFirst {
		return fmt.Errorf("--drain-busy-retry-max: must be at least %s, got %s", disruption.DefaultBusyRetryFirst, f.busyRetryMax)
	}
	return nil
}

// leaseNamespace is where the leader election Lease lives.
func (f *disruptionFlags) leaseNamespace(getenv func(string) string) string {
	switch {
	case f.leaderElectionNamespace != "":
		return f.leaderElectionNamespace
	case getenv("POD_NAMESPACE") != "":
		return getenv("POD_NAMESPACE")
	}
	return "runner-guard-system"
}

// addARCServed follows whether the API server serves EphemeralRunners, on
// every replica, and returns what tells the controllers to start anew when
// that changes.
func addARCServed(mgr ctrl.Manager, cfg *rest.Config, log logr.Logger) (func() <-chan struct{}, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	w := disruption.NewARCServed(dc, 0, log)
	for _, c := range w.Collectors() {
		if err := metrics.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	if err := mgr.Add(w); err != nil {
		return nil, fmt.Errorf("ARC CRD watch: %w", err)
	}
	return w.Changed, nil
}
