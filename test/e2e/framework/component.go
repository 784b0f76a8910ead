// Package framework runs runner-guard's e2e environment on this machine: etcd,
// kube-apiserver and kube-controller-manager built from their Go modules, the
// fake GitHub, the real webhook binary, and the ValidatingWebhookConfiguration
// rendered from manifests/local. Everything binds 127.0.0.1 and is torn down
// by Stop; logs of every component stay in the run directory.
package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// component is one child process whose output goes to a log file.
type component struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProcess(dir, name, bin string, args []string, env []string) (*component, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: create log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// Own process group: a signal to the test does not reach the children
	// before Stop has a chance to end them in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	p := &component{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *component) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (p *component) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed", p.name, grace)
	}
}

// waitFor polls check until it succeeds, the process dies, or timeout passes.
func waitFor(ctx context.Context, what string, timeout time.Duration, p *component, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p != nil && p.exited() {
			return fmt.Errorf("%s: process exited (%v) before it was ready; see %s", what, p.err, p.logPath)
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", what, timeout, errors.Join(last, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
