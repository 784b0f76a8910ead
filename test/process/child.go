package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Child is a process a harness starts: the webhook (Start), the control plane
// of test/e2e, the node of test/node, the components of test/karpenter. It
// runs in its own process group, so a signal to the test reaches it only
// through Stop, and it is killed if the test binary dies.
type Child struct {
	// Name names the process in errors.
	Name string
	// Cmd is the started command; Cmd.Process.Pid is its process group.
	Cmd *exec.Cmd
	// LogPath is the file with its output; empty when the output goes to a
	// writer of the caller's (StartChild).
	LogPath string

	closeLog func() error
	done     chan struct{}
	err      error
}

// StartLogged starts cmd with its output (stdout and stderr) in dir/name.log.
// cmd.Env, when nil, is the test's environment.
func StartLogged(dir, name string, cmd *exec.Cmd) (*Child, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: create log: %w", name, err)
	}
	c, err := startChild(name, cmd, logFile, logFile.Close)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	c.LogPath = logPath
	return c, nil
}

// StartChild starts cmd with its output (stdout and stderr) written to out.
func StartChild(name string, cmd *exec.Cmd, out io.Writer) (*Child, error) {
	return startChild(name, cmd, out, func() error { return nil })
}

func startChild(name string, cmd *exec.Cmd, out io.Writer, closeLog func() error) (*Child, error) {
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, cmd.Path, err)
	}
	c := &Child{Name: name, Cmd: cmd, closeLog: closeLog, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = c.closeLog()
		close(c.done)
	}()
	return c, nil
}

// Command is exec.Command with env added to the test's environment.
func Command(bin string, args, env []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// Done is closed once the process has ended.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the process has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Err is what waiting for the process returned, once Done is closed.
func (c *Child) Err() error { return c.err }

// ExitCode is the exit status once Done is closed (-1 when killed by a signal).
func (c *Child) ExitCode() int { return c.Cmd.ProcessState.ExitCode() }

// Wait waits up to timeout for the process to end and returns how it ended
// (nil: exit status 0), or an error saying it still runs.
func (c *Child) Wait(timeout time.Duration) error {
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", c.Name, timeout)
	}
}

// Stop sends SIGTERM to the process group and waits up to grace, then kills
// the group; it returns an error when it had to kill.
func (c *Child) Stop(grace time.Duration) error {
	if c == nil || c.Exited() {
		return nil
	}
	_ = syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
		c.Kill()
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", c.Name, grace)
	}
}

// Kill ends the process group at once and waits for the process.
func (c *Child) Kill() {
	_ = syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
}

// The poll intervals: readiness of a starting process, and conditions of a
// running test (which often run kubectl, so not too often).
const (
	readyInterval      = 100 * time.Millisecond
	eventuallyInterval = 200 * time.Millisecond
)

// WaitReady polls check until it succeeds, child (when not nil) exits, ctx
// ends or timeout passes; the error names what and check's last error.
func WaitReady(ctx context.Context, what string, timeout time.Duration, child *Child, check func(context.Context) error) error {
	return poll(ctx, what, timeout, readyInterval, child, check)
}

// Eventually polls check until it succeeds; once timeout passes or ctx ends
// it fails t with what and check's last error.
func Eventually(t testing.TB, ctx context.Context, what string, timeout time.Duration, check func() error) {
	t.Helper()
	if err := poll(ctx, what, timeout, eventuallyInterval, nil, func(context.Context) error { return check() }); err != nil {
		t.Fatal(err)
	}
}

// Poll is Eventually for callers that return the error: check gets the
// context that ends at timeout.
func Poll(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error) error {
	return poll(ctx, what, timeout, eventuallyInterval, nil, check)
}

func poll(ctx context.Context, what string, timeout, interval time.Duration, child *Child, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if child != nil && child.Exited() {
			where := ""
			if child.LogPath != "" {
				where = "; see " + child.LogPath
			}
			return fmt.Errorf("%s: process exited (%v) before it was ready%s", what, child.err, where)
		}
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %s: %w", what, timeout, errors.Join(last, ctx.Err()))
		case <-time.After(interval):
		}
	}
}

// CannotRun reports that a suite needing this machine's root and network
// namespaces (test/node, test/karpenter) cannot run here, and why: a failure
// under E2E_NODE=1 (what CI sets), which it returns as true, else a skip.
func CannotRun(suite, reason string) (fail bool) {
	if os.Getenv("E2E_NODE") == "1" {
		fmt.Fprintf(os.Stderr, "%s: E2E_NODE=1 but the suite cannot run here: %s\n", suite, reason)
		return true
	}
	fmt.Printf("%s: skipped: %s (E2E_NODE=1 makes this a failure)\n", suite, reason)
	return false
}
