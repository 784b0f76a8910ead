package karpenter

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// cluster is the environment every scenario shares; each works in its own
// namespace, NodePool and GitHub organization, one after another (Karpenter
// may move any pod to any node its simulation allows).
var cluster *Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts the cluster when this machine can run it (or must: E2E_NODE=1),
// then runs every test; without a cluster the scenarios skip and the unit
// tests still run.
func run(m *testing.M) int {
	if why := os.Getenv("RUNNER_GUARD_KARPENTER_SKIP"); why != "" {
		fmt.Printf("karpenter: scenarios skipped: %s\n", why)
		return m.Run()
	}
	opts, reason := optionsFromEnv()
	if reason != "" {
		if process.CannotRun("karpenter", reason) {
			return 1
		}
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	cluster, err = Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "karpenter: start: %v\nkarpenter: logs in %s\n", err, opts.Env.Dir)
		return 1
	}
	fmt.Printf("karpenter: cluster up in %s (logs in %s)\n", time.Since(start).Round(time.Millisecond), cluster.Dir)
	code := m.Run()
	cluster.Stop()
	return process.EndSuite("karpenter", code, cluster.Dir)
}

// optionsFromEnv reads what `make e2e-karpenter` passes; a non-empty reason
// says why the scenarios cannot run.
func optionsFromEnv() (Options, string) {
	if os.Geteuid() != 0 {
		return Options{}, "needs root (a network namespace of its own for Karpenter)"
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return Options{}, "nsenter (util-linux) not found"
	}
	ns, err := newNetns()
	if err != nil {
		return Options{}, fmt.Sprintf("cannot create a network namespace: %v", err)
	}
	ns.close()
	assets := os.Getenv("KARPENTER_ASSETS")
	if assets == "" {
		return Options{}, "KARPENTER_ASSETS is not set (run make e2e-karpenter)"
	}
	env, err := framework.FromEnvironment()
	if err != nil {
		return Options{}, err.Error()
	}
	if env.Dir, err = os.MkdirTemp("", "runner-guard-karpenter-"); err != nil {
		return Options{}, fmt.Sprintf("run directory: %v", err)
	}
	logf := func(f string, a ...any) { fmt.Printf("karpenter: "+f+"\n", a...) }
	env.Logf = logf
	return Options{Env: env, Assets: assets, Logf: logf}, ""
}
