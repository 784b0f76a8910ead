package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/certs"
)

// UpgradeRunnerGuard runs `helm upgrade` of the release with the node's
// values (chartValues) and then overrides, a values file's YAML ("" for none:
// the node's values as installed), and waits until the webhook has rolled out
// and a replica has set the configuration's entries to their policies.
func (c *Cluster) UpgradeRunnerGuard(ctx context.Context, repoRoot, helm, overrides string) error {
	args := []string{"upgrade", releaseName, filepath.Join(repoRoot, "charts", "runner-guard"),
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
