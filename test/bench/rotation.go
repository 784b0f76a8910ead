package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/rotationload"
)

// rotationUnderLoad renews the self-managed CA and serving certificate
// (lifetimes of seconds) on a real API server while 64 clients' reviews go
// through a failurePolicy Fail configuration: failed calls, target 0.
func (e *env) rotationUnderLoad() error {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return errors.New("needs the control plane binaries in KUBEBUILDER_ASSETS (`make bench` sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "runner-guard-bench-rotation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cp, err := framework.StartControlPlane(ctx, dir, assets, func(string, ...any) {})
	if err != nil {
		return err
	}
	defer cp.Stop()
	res, err := rotationload.Run(ctx, rotationload.Options{
		Client: cp.Client, Replicas: 2, Clients: clients, Duration: 30 * time.Second,
		Policy: rotation.Policy{Validity: 6 * time.Second, CAValidity: 18 * time.Second, Propagation: 2 * time.Second},
		Log:    logr.Discard(),
	})
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d CAs, %d certificates, %d calls", res.CAs, res.Certs, res.Passed+res.Failed)
	if res.FirstError != "" {
		note += "; first failure: " + res.FirstError
	}
	e.record("rotation_failed_calls", float64(res.Failed), "calls", "0", res.Failed == 0 && res.CAs >= 2, note)
	return nil
}
