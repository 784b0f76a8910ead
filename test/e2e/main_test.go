// Package e2e proves runner-guard against a real kube-apiserver, etcd and
// kube-controller-manager, with the real webhook binary and kubectl, and the
// fake GitHub as the only test double. `make e2e` sets up the binaries.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// env is the environment shared by every scenario; each scenario works in its
// own namespace and GitHub organization so they cannot see each other.
var env *framework.Env

// webhookReplicas is how many webhook processes every local environment
// runs behind the one address the API server calls: the chart's
// replicaCount, so every scenario's reviews spread over two processes that
// share only what the cluster and GitHub hold.
const webhookReplicas = 2

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("E2E_CLUSTER") == "external" {
		return runExternal(m)
	}
	opts, err := framework.FromEnvironment()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "e2e: skipped:", err)
		return 0
	}
	opts.Logf = func(format string, args ...any) { fmt.Printf("e2e: "+format+"\n", args...) }
	opts.Replicas = webhookReplicas
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	env, err = framework.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: environment:", err)
		return 1
	}
	fmt.Printf("e2e: environment up in %s (logs in %s)\n", time.Since(start).Round(time.Millisecond), env.Dir)
	code := m.Run()
	env.Stop()
	return process.EndSuite("e2e", code, env.Dir)
}

// runExternal runs the scenarios against an existing cluster where
// `make e2e-kind` installed runner-guard and the fake GitHub.
func runExternal(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	env, err = framework.Connect(ctx, func(err error) { panic(fmt.Sprintf("fake GitHub control: %v", err)) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	fmt.Printf("e2e: using the cluster at %s\n", env.URL)
	return m.Run()
}
