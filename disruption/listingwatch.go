package disruption

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
)

// listingWatch looks at legacy runner pods (no job fields) when a listing
// can say something about them, instead of every listingRecheck for every
// pod. Without --hint-from-listing the only listings are those the webhook
// takes for its decisions, and there may be none for hours: requeueing
// 10,000 pods every 30 s kept 10,000 items queued and resolved each pod
// (a live read of its Runner) 330 times a second for nothing.
//
//   - Until some listing exists, legacy pods' events are left alone, except
//     for pods carrying hints runner-guard set, which it must follow.
//   - The first time one exists, every legacy runner pod is looked at once.
//   - After that each pod is remembered under its scope, and when the
//     listing of that scope is taken anew, the scope's pods are looked at.
type listingWatch struct {
	listing Listing
	// pods lists the cached runner pods for the first look.
	pods  client.Reader
	guard Guard
	every time.Duration

	mu      sync.Mutex
	started bool // a listing has existed: every legacy pod is watched
	byPod   map[types.NamespacedName]string
	scopes  map[string]*watchedScope
}

// watchedScope is one scope's remembered pods and the listing last seen.
type watchedScope struct {
	runner ghclient.Runner // one of the scope's runners: routes to its client
	taken  time.Time
	pods   map[types.NamespacedName]struct{}
}

func newListingWatch(l Listing, pods client.Reader, g Guard, every time.Duration) *listingWatch {
	return &listingWatch{listing: l, pods: pods, guard: g, every: every,
		byPod: map[types.NamespacedName]string{}, scopes: map[string]*watchedScope{}}
}

// scopeKey names a scope as its client sees it: the same organization under
// two credentials is listed twice.
func scopeKey(r ghclient.Runner) string {
	creds := "default"
	if r.Creds != nil {
		creds = r.Creds.Fingerprint()
	}
	return creds + "|" + r.Scope.String()
}

// admits reports whether a legacy pod's event is worth a reconcile: once a
// listing has existed, when the pod is remembered, or when it carries hints
// runner-guard set.
func (w *listingWatch) admits(cp *cachedPod) bool {
	if cp.carriesOurs() {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, known := w.byPod[types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name}]
	return w.started || known
}

// remember files a pod under its runner's scope.
func (w *listingWatch) remember(key types.NamespacedName, r ghclient.Runner) {
	sk := scopeKey(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.byPod[key]; ok && old != sk {
		w.dropLocked(key, old)
	}
	ws := w.scopes[sk]
	if ws == nil {
		ws = &watchedScope{runner: r, pods: map[types.NamespacedName]struct{}{}}
		w.scopes[sk] = ws
	}
	ws.pods[key] = struct{}{}
	w.byPod[key] = sk
}

// forget drops a pod that is gone or needs no more hints.
func (w *listingWatch) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sk, ok := w.byPod[key]; ok {
		w.dropLocked(key, sk)
	}
}

func (w *listingWatch) dropLocked(key types.NamespacedName, sk string) {
	delete(w.byPod, key)
	if ws := w.scopes[sk]; ws != nil {
		delete(ws.pods, key)
		if len(ws.pods) == 0 {
			delete(w.scopes, sk)
		}
	}
}

// start is the hint controller's source: it looks at the listings every
// w.every until ctx ends.
func (w *listingWatch) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	go func() {
		t := time.NewTicker(w.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.look(ctx, q.Add)
			}
		}
	}()
	return nil
}

// look enqueues the pods a listing can now say something about: every
// legacy runner pod the first time a listing exists, then the pods of each
// scope whose listing was taken anew.
func (w *listingWatch) look(ctx context.Context, enqueue func(reconcile.Request)) {
	w.mu.Lock()
	first := !w.started && w.listing.Any()
	w.started = w.started || first
	type probe struct {
		key    string
		runner ghclient.Runner
	}
	probes := make([]probe, 0, len(w.scopes))
	for k, ws := range w.scopes {
		probes = append(probes, probe{k, ws.runner})
	}
	w.mu.Unlock()

	if first {
		var pods cachedPodList // the cache's own objects: only read
		if err := w.pods.List(ctx, &pods); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "listing cached runner pods for their first hint look")
		}
		for i := range pods.Items {
			cp := &pods.Items[i]
			if w.guard.Guards(cp.Namespace, cp.labels) && !ephemeralRunnerOwned(cp) {
				enqueue(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name}})
			}
		}
	}
	for _, p := range probes {
		taken := w.listing.Taken(ctx, p.runner)
		if taken.IsZero() {
			continue
		}
		w.mu.Lock()
		ws := w.scopes[p.key]
		var due []types.NamespacedName
		if ws != nil && !taken.Equal(ws.taken) {
			ws.taken = taken
			for key := range ws.pods {
				due = append(due, key)
			}
		}
		w.mu.Unlock()
		for _, key := range due {
			enqueue(reconcile.Request{NamespacedName: key})
		}
	}
}
