package framework

import (
	"context"
	"time"
)

// Process is a child process that a harness built on this one starts beside
// the control plane (test/karpenter runs Karpenter, KWOK and kube-scheduler
// this way), with its output in a log file of the run directory, in its own
// process group and killed if the test binary dies.
type Process struct{ c *component }

// StartProcess starts bin with args; env is added to the test's environment.
// Its output goes to dir/name.log.
func StartProcess(dir, name, bin string, args, env []string) (*Process, error) {
	c, err := startProcess(dir, name, bin, args, env)
	if err != nil {
		return nil, err
	}
	return &Process{c: c}, nil
}

// Stop sends SIGTERM, then SIGKILL to its process group after grace.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil {
		return nil
	}
	return p.c.stop(grace)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { return p.c.exited() }

// LogPath is the file with its output.
func (p *Process) LogPath() string { return p.c.logPath }

// WaitReady polls check every 100ms until it succeeds, the process exits, or
// timeout passes.
func (p *Process) WaitReady(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error) error {
	return waitFor(ctx, what, timeout, p.c, check)
}
