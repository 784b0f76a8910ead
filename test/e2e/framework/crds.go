package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// crdDir holds the CustomResourceDefinitions of the runner controllers the
// scenarios play (ARC's EphemeralRunner), relative to the repository root.
const crdDir = "test/e2e/testdata/crds"

// installClusterObjects applies what the webhook needs before it starts: its
// identity and RBAC from manifests/base, then the test CRDs.
func (e *Env) installClusterObjects(ctx context.Context) error {
	if err := e.installIdentity(ctx); err != nil {
		return err
	}
	return e.installCRDs(ctx)
}

// installCRDs applies every CustomResourceDefinition in crdDir and waits until
// the API server serves each (condition Established), so the webhook's first
// discovery already finds them.
func (e *Env) installCRDs(ctx context.Context) error {
	dir := filepath.Join(e.opts.RepoRoot, crdDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		if _, statErr := os.Stat(dir); statErr != nil {
			return fmt.Errorf("test CRDs: %w", statErr)
		}
		return nil
	}
	if _, stderr, err := e.Kubectl(ctx, "apply", "-f", dir); err != nil {
		return fmt.Errorf("apply CRDs from %s: %w: %s", dir, err, stderr)
	}
	if _, stderr, err := e.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir); err != nil {
		return fmt.Errorf("CRDs from %s not established: %w: %s", dir, err, stderr)
	}
	e.opts.Logf("CRDs installed from %s", crdDir)
	return nil
}
