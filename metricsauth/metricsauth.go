// Package metricsauth guards the metrics endpoint the way kubebuilder's
// scaffold does (controller-runtime's filters.WithAuthenticationAndAuthorization):
// a requester's bearer token is checked with a TokenReview and its access to
// the path with a SubjectAccessReview, both answered by the API server. It is
// written against the two typed clients alone because controller-runtime's
// filter pulls in k8s.io/apiserver, which more than doubles the binary and its
// resident memory (issue 17's rss_mib).
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runner-guard/runner-guard/internal/lru"
)

// How long answers are remembered: controller-runtime's figures, so a
// scraper every 15 s costs the API server about one review a minute.
const (
	authnTTL      = time.Minute
	allowTTL      = 5 * time.Minute
	denyTTL       = 30 * time.Second
	reviewTimeout = 10 * time.Second
	// maxRemembered bounds each cache; a full cache forgets its least
	// recently used answer (scrapers are few).
	maxRemembered = 1024
)

// TokenReviewer and AccessReviewer are the two API calls the filter makes
// (the typed clients' Create methods).
type (
	TokenReviewer interface {
		Create(ctx context.Context, r *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
	}
	AccessReviewer interface {
		Create(ctx context.Context, r *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
	}
)

// Provider is a metricsserver.Options.FilterProvider.
func Provider(c *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("authentication client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("authorization client: %w", err)
	}
	g := New(authn.TokenReviews(), authz.SubjectAccessReviews(), time.Now)
	return g.Filter, nil
}

// Guard answers whether a request may read the metrics.
type Guard struct {
	tokens TokenReviewer
	access AccessReviewer
	now    func() time.Time

	// users maps a token's hash to its *authnv1.UserInfo (nil: not
	// authenticated); grants maps a user, verb and path to whether it is
	// allowed. Each is bounded: the least recently used answer goes first.
	users, grants *cache.LRUExpireCache
}

// New returns a Guard asking tokens and access.
func New(tokens TokenReviewer, access AccessReviewer, now func() time.Time) *Guard {
	return &Guard{tokens: tokens, access: access, now: now,
		users:  cache.NewLRUExpireCacheWithClock(maxRemembered, lru.Clock(now)),
		grants: cache.NewLRUExpireCacheWithClock(maxRemembered, lru.Clock(now))}
}

// Filter wraps handler: 401 without a token the API server authenticates,
// 403 without access to the path, 500 when the API server cannot be asked.
func (g *Guard) Filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearerToken(req)
		if !ok {
			http.Error(w, "Unauthorized: send a ServiceAccount token as Authorization: Bearer", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
		defer cancel()
		user, err := g.authenticate(ctx, token)
		if err != nil {
			log.Error(err, "metrics: TokenReview failed")
			http.Error(w, "Authentication failed: the API server could not be asked", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized: the API server does not accept this token", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(req.Method)
		allowed, err := g.authorize(ctx, user, verb, req.URL.Path)
		if err != nil {
			log.Error(err, "metrics: SubjectAccessReview failed", "user", user.Username)
			http.Error(w, fmt.Sprintf("Authorization for user %s failed: the API server could not be asked", user.Username), http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, fmt.Sprintf("Forbidden: user %s may not %s %s (bind the runner-guard-metrics-reader ClusterRole)", user.Username, verb, req.URL.Path), http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}

// bearerToken is the request's bearer token, if it carries one.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// authenticate returns the token's user, nil when the API server does not
// authenticate it. Only a hash of the token is kept.
func (g *Guard) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if u, ok := g.users.Get(key); ok {
		return u.(*authnv1.UserInfo), nil
	}
	review, err := g.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authnv1.UserInfo
	if review.Status.Authenticated {
		if review.Status.User.Username == "" {
			return nil, errors.New("TokenReview: authenticated, but no username")
		}
		user = &review.Status.User
	}
	g.users.Add(key, user, authnTTL)
	return user, nil
}

// authorize asks whether user may verb the non-resource path.
func (g *Guard) authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (bool, error) {
	key := strings.Join([]string{user.UID, user.Username, strings.Join(user.Groups, ","), fmt.Sprint(user.Extra), verb, path}, "\x00")
	if allowed, ok := g.grants.Get(key); ok {
		return allowed.(bool), nil
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	review, err := g.access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := review.Status.Allowed && !review.Status.Denied
	ttl := denyTTL
	if allowed {
		ttl = allowTTL
	}
	g.grants.Add(key, allowed, ttl)
	return allowed, nil
}
