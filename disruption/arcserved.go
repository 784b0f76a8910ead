package disruption

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// DefaultARCCheckInterval is how often ARCServed asks discovery whether the
// API server serves EphemeralRunners: one small request per replica.
const DefaultARCCheckInterval = 10 * time.Second

// ARCServed follows whether the API server serves ARC's EphemeralRunners, so
// the controllers start reading them when ARC is installed after
// runner-guard (an Argo CD app-of-apps or a Flux kustomization promises no
// order), and stop when it goes, with no restart. It runs on every replica.
type ARCServed struct {
	discovery discovery.DiscoveryInterface
	interval  time.Duration
	gauge     prometheus.Gauge
	log       logr.Logger

	mu      sync.Mutex
	known   bool
	served  bool
	changed chan struct{}
}

var (
	_ manager.Runnable               = &ARCServed{}
	_ manager.LeaderElectionRunnable = &ARCServed{}
)

// NewARCServed builds the watch; interval <= 0 is DefaultARCCheckInterval.
func NewARCServed(d discovery.DiscoveryInterface, interval time.Duration, log logr.Logger) *ARCServed {
	if interval <= 0 {
		interval = DefaultARCCheckInterval
	}
	return &ARCServed{discovery: d, interval: interval, log: log, changed: make(chan struct{}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runner_guard_arc_crd_served",
			Help: "1 while the API server serves ARC's EphemeralRunners (actions.github.com/v1alpha1) and the disruption controllers read them, 0 otherwise.",
		})}
}

// Collectors lists the metric for registration.
func (a *ARCServed) Collectors() []prometheus.Collector { return []prometheus.Collector{a.gauge} }

// NeedLeaderElection is false: every replica says what its API server serves.
func (a *ARCServed) NeedLeaderElection() bool { return false }

// Changed returns a channel closed at the next change of what is served.
func (a *ARCServed) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// Start checks now and every interval until ctx ends.
func (a *ARCServed) Start(ctx context.Context) error {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		a.Check()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check asks discovery once. An error leaves what was known: a slow API
// server does not stop the controllers.
func (a *ARCServed) Check() {
	served, err := ephemeralRunnersDiscovered(a.discovery)
	if err != nil {
		a.log.V(1).Info("cannot tell whether the API server serves EphemeralRunners", "error", err.Error())
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known && served == a.served {
		return
	}
	first := !a.known
	a.known, a.served = true, served
	if served {
		a.gauge.Set(1)
	} else {
		a.gauge.Set(0)
	}
	if first {
		return
	}
	if served {
		a.log.Info("the API server now serves EphemeralRunners (ARC's CRDs were installed): the disruption controllers start reading them")
	} else {
		a.log.Info("the API server no longer serves EphemeralRunners (ARC's CRDs were removed): the disruption controllers stop reading them")
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// ephemeralRunnersDiscovered asks discovery, uncached, for EphemeralRunners.
func ephemeralRunnersDiscovered(d discovery.DiscoveryInterface) (bool, error) {
	gv := arc.GroupVersionKind().GroupVersion().String()
	list, err := d.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovery of %s: %w", gv, err)
	case list == nil:
		return false, errors.New("discovery of " + gv + ": empty answer")
	}
	for _, r := range list.APIResources {
		if r.Kind == arc.Kind {
			return true, nil
		}
	}
	return false, nil
}
