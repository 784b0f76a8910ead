package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/certs"
)

// UpgradeRunnerGuard runs `helm upgrade` of the release with the node's
// values (chartValues) and then overrides, a values file's YAML ("" for none:
// the node's values as installed), and waits until the webhook has rolled out
// and a replica has set the configuration's entries to their policies.
func (c *Cluster) UpgradeRunnerGuard(ctx context.Context, repoRoot, helm, overrides string) error {
	return c.UpgradeRunnerGuardChart(ctx, filepath.Join(repoRoot, "charts", "runner-guard"), helm, overrides)
}

// UpgradeRunnerGuardChart is UpgradeRunnerGuard to the chart in directory
// chart (another version's, for the upgrade test).
func (c *Cluster) UpgradeRunnerGuardChart(ctx context.Context, chart, helm, overrides string) error {
	args := []string{"upgrade", releaseName, chart,
		"--namespace", certs.Namespace, "--values", c.file("values.yaml")}
	if overrides != "" {
		f := c.file("values-overrides.yaml")
		if err := os.WriteFile(f, []byte(overrides), 0o644); err != nil {
			return err
		}
		args = append(args, "--values", f)
	}
	if out, err := c.Helm(ctx, helm, append(args, "--wait", "--timeout", "3m")...); err != nil {
		return fmt.Errorf("helm upgrade: %w: %s\n%s", err, out, c.diagnose(certs.Namespace))
	}
	if err := c.rolledOut(ctx, "deployment/runner-guard-webhook"); err != nil {
		return err
	}
	// A rollout is complete while the old replicas still run their preStop
	// pause, leader and controllers included: wait for them to be gone, so
	// only the new values act and the next test counts two replicas.
	for {
		pods, err := c.Client.CoreV1().Pods(certs.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		if err != nil {
			return err
		}
		terminating := ""
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				terminating = p.Name
			}
		}
		if terminating == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("old runner-guard replica %s still terminating after the upgrade: %w", terminating, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// Baseline is the release the upgrade test starts from (UPGRADE_BASELINE in
// the Makefile; make node-deps builds it): its commit, the tag of its webhook
// image, that image's docker-archive, and its chart's directory.
type Baseline struct {
	Commit, Tag, Image, Chart string
}

// ParseBaseline reads RUNNER_GUARD_NODE_BASELINE, as node-deps writes it:
// "<commit> <tag> <image.tar> <chart dir>".
func ParseBaseline(v string) (Baseline, error) {
	f := strings.Fields(v)
	if len(f) != 4 {
		return Baseline{}, fmt.Errorf("RUNNER_GUARD_NODE_BASELINE %q: want the commit, the image tag, the image tarball and the chart directory (make node-deps writes it)", v)
	}
	b := Baseline{Commit: f[0], Tag: f[1], Image: f[2], Chart: f[3]}
	for _, p := range []string{b.Image, filepath.Join(b.Chart, "Chart.yaml")} {
		if _, err := os.Stat(p); err != nil {
			return Baseline{}, fmt.Errorf("the upgrade baseline %s: %w (make node-upgrade-baseline)", b.Commit, err)
		}
	}
	return b, nil
}

// InstallBaseline imports the baseline's webhook image into the node's
// containerd and `helm upgrade`s the release to its chart and image, with
// the node's values.
func (c *Cluster) InstallBaseline(ctx context.Context, helm string, b Baseline) error {
	if err := c.ctr(ctx, "images", "import", b.Image); err != nil {
		return fmt.Errorf("import the baseline image: %w", err)
	}
	return c.UpgradeRunnerGuardChart(ctx, b.Chart, helm, "image:\n  tag: "+b.Tag+"\n")
}
