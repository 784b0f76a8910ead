package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/runner-guard/runner-guard/test/process"
)

// kubelet is the running kubelet process, nil when none runs.
func (c *Cluster) kubelet() *process.Child {
	for i := len(c.components) - 1; i >= 0; i-- {
		p := c.components[i]
		if strings.HasPrefix(p.Name, "kubelet") && !p.Exited() {
			return p
		}
	}
	return nil
}

// KillKubelet ends the kubelet with SIGKILL, as a node that fails: it
// reports nothing more, so the node lifecycle controller marks the Node
// NotReady once its grace period passes. The pods' containers keep running
// under containerd, as on a node cut off from the control plane.
func (c *Cluster) KillKubelet() error {
	p := c.kubelet()
	if p == nil {
		return errors.New("no kubelet running")
	}
	p.Kill()
	return nil
}

// RestartKubelet starts the kubelet again with its configuration (its
// output in kubelet-restart-N.log) and waits until the Node is Ready.
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if c.kubelet() != nil {
		return errors.New("the kubelet still runs")
	}
	n := 0
	for _, p := range c.components {
		if strings.HasPrefix(p.Name, "kubelet") {
			n++
		}
	}
	return c.runKubelet(ctx, fmt.Sprintf("kubelet-restart-%d", n))
}
