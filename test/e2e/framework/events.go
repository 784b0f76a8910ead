package framework

import (
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// Fake is the in-process fake GitHub, nil when the fake runs in the cluster:
// its webhook deliveries (DeliverEvents) need a URL this process reaches.
func (e *Env) Fake() *ghfake.Fake { return e.fake }
