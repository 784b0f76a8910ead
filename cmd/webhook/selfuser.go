package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// selfUserTimeout bounds the start-up look-up of runner-guard's own user.
const selfUserTimeout = 10 * time.Second

// selfUser is the user the API server knows runner-guard's own credentials
// as (a SelfSubjectReview, which every authenticated user may create): its
// drain evicts as that user, and only that user's Evictions marked
// runner-guard.io/runner-released are heeded (webhook.Options.ReleasedBy).
// When it cannot be learnt the reason is logged and "" returned: then no
// mark is heeded, and the drain's evictions are answered as anyone's.
func selfUser(ctx context.Context, cfg *rest.Config, log logr.Logger) string {
	user, err := lookUpSelfUser(ctx, cfg)
	if err != nil {
		log.Info("cannot learn runner-guard's own user; evictions its drain marks runner-released are answered as anyone's (from listings and memory)", "error", err.Error())
		return ""
	}
	log.V(1).Info("runner-guard's own user", "user", user)
	return user
}

func lookUpSelfUser(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("API client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, selfUserTimeout)
	defer cancel()
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("SelfSubjectReview: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("SelfSubjectReview named no user")
	}
	return review.Status.UserInfo.Username, nil
}
