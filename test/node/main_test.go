package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runner-guard/runner-guard/test/process"
)

// cluster is the node every scenario shares; each works in its own
// namespace and GitHub organization.
var cluster *Cluster

// repoRoot is the repository, two levels up from this package.
var repoRoot = func() string { d, _ := filepath.Abs("../.."); return d }()

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts the node and runner-guard, runs the scenarios and removes the
// node again, also when the run is interrupted.
func run(m *testing.M) int {
	if why := os.Getenv("RUNNER_GUARD_NODE_SKIP"); why != "" {
		fmt.Printf("node: skipped: %s\n", why)
		return 0
	}
	opts, reason := optionsFromEnv()
	if reason != "" {
		if process.CannotRun("node", reason) {
			return 1
		}
		return 0
	}
	unlock, err := lockNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	defer unlock()

	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-interrupted
		fmt.Fprintf(os.Stderr, "node: %s: stopping the node\n", s)
		if cluster != nil {
			cluster.Stop()
		} else {
			_ = Cleanup(opts.Logf)
		}
		unlock()
		os.Exit(1)
	}()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cluster, err = Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node: start: %v\nnode: logs in %s\n", err, opts.Dir)
		return 1
	}
	fmt.Printf("node: cluster up in %s (logs in %s)\n", time.Since(start).Round(time.Millisecond), opts.Dir)
	code := 1
	if err := deploy(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "node: deploy runner-guard: %v\n", err)
	} else {
		fmt.Printf("node: runner-guard deployed after %s\n", time.Since(start).Round(time.Millisecond))
		code = m.Run()
	}
	signal.Stop(interrupted)
	cluster.Stop()
	return process.EndSuite("node", code, opts.Dir)
}

func deploy(ctx context.Context) error {
	return cluster.InstallRunnerGuard(ctx, repoRoot, os.Getenv("HELM"))
}

// optionsFromEnv reads what `make e2e-node` passes; a non-empty reason says
// why the node cannot run.
func optionsFromEnv() (Options, string) {
	if os.Geteuid() != 0 {
		return Options{}, "needs root (network namespaces, mounts, cgroups)"
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return Options{}, "nsenter not found"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return Options{}, "ip (iproute2) not found"
	}
	if err := loadEnvFile(os.Getenv("RUNNER_GUARD_NODE_ENV")); err != nil {
		return Options{}, err.Error()
	}
	opts := Options{
		K8sAssets:  os.Getenv("KUBEBUILDER_ASSETS"),
		NodeAssets: os.Getenv("RUNNER_GUARD_NODE_ASSETS"),
		Logf:       func(f string, a ...any) { fmt.Printf("node: "+f+"\n", a...) },
	}
	images := strings.Fields(os.Getenv("RUNNER_GUARD_NODE_IMAGES"))
	if opts.K8sAssets == "" || opts.NodeAssets == "" || len(images) == 0 || os.Getenv("HELM") == "" {
		return Options{}, "KUBEBUILDER_ASSETS, RUNNER_GUARD_NODE_ASSETS, RUNNER_GUARD_NODE_IMAGES and HELM are not set (run make e2e-node)"
	}
	for _, f := range append(images, filepath.Join(opts.NodeAssets, "kubelet"), filepath.Join(opts.K8sAssets, "kube-apiserver"), os.Getenv("HELM")) {
		if _, err := os.Stat(f); err != nil {
			return Options{}, fmt.Sprintf("missing %v (run make e2e-node)", err)
		}
	}
	opts.Images = images
	dir, err := os.MkdirTemp("", "runner-guard-node-")
	if err != nil {
		return Options{}, fmt.Sprintf("run directory: %v", err)
	}
	opts.Dir = dir
	if err := probeNetns(); err != nil {
		return Options{}, fmt.Sprintf("cannot create network namespaces: %v", err)
	}
	return opts, ""
}

// probeNetns checks that this machine lets us make a network namespace.
func probeNetns() error {
	const name = "runner-guard-node-probe"
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns add: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// lockNode makes concurrent runs on one machine (two clones running make
// test) take turns: the node's names and paths are fixed. It waits up to 20
// minutes.
func lockNode() (func(), error) {
	f, err := os.OpenFile("/run/runner-guard-node.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	deadline := time.Now().Add(20 * time.Minute)
	for announced := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another node run holds /run/runner-guard-node.lock for 20 minutes: %w", err)
		}
		if !announced {
			fmt.Println("node: waiting for another run's node to finish")
			announced = true
		}
		time.Sleep(2 * time.Second)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			f.Close()
		})
	}, nil
}

// loadEnvFile sets the KEY=VALUE lines of path (written by make node-deps)
// in the environment; an empty path leaves it alone.
func loadEnvFile(path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("RUNNER_GUARD_NODE_ENV: %w (run make e2e-node)", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			os.Setenv(k, v)
		}
	}
	return nil
}
