package disruption

import (
	"context"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// grantRecheck is how long a namespace's answer is kept: a Role granting
// pods/eviction may be added (or removed) while runner-guard runs.
const grantRecheck = 10 * time.Minute

// evictionGrants says where runner-guard may create pods/eviction, asked
// with SelfSubjectAccessReviews: once cluster-wide, and, when that is not
// granted (the chart's policy.guardedNamespaces grants it through Roles),
// once per namespace every grantRecheck.
type evictionGrants struct {
	now func() time.Time

	clusterOnce sync.Once
	cluster     bool

	mu   sync.Mutex
	byNS map[string]grantAnswer
}

type grantAnswer struct {
	allowed bool
	at      time.Time
}

func newEvictionGrants(now func() time.Time) *evictionGrants {
	if now == nil {
		now = time.Now
	}
	return &evictionGrants{now: now, byNS: map[string]grantAnswer{}}
}

// mayEvict reports whether pods/eviction is granted in namespace. A review
// that fails counts as granted: the eviction is then tried, and a refusal
// keeps the pod, which is safe; a DELETE in its place would not be.
func (g *evictionGrants) mayEvict(ctx context.Context, c client.Writer, namespace string) bool {
	if g == nil {
		return true
	}
	g.clusterOnce.Do(func() { g.cluster = askEviction(ctx, c, "") })
	if g.cluster {
		return true
	}
	g.mu.Lock()
	a, ok := g.byNS[namespace]
	g.mu.Unlock()
	if ok && g.now().Sub(a.at) < grantRecheck {
		return a.allowed
	}
	a = grantAnswer{allowed: askEviction(ctx, c, namespace), at: g.now()}
	g.mu.Lock()
	g.byNS[namespace] = a
	g.mu.Unlock()
	return a.allowed
}

// askEviction asks the API server whether runner-guard may create
// pods/eviction in namespace ("" for every namespace).
func askEviction(ctx context.Context, c client.Writer, namespace string) bool {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "pods", Subresource: "eviction"},
	}}
	if err := c.Create(ctx, review); err != nil {
		return true
	}
	return review.Status.Allowed
}
