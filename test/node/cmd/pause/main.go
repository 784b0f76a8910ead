// Command pause is the node's pod sandbox image: it holds the pod's namespaces
// open and does nothing else until it is told to stop. The node tests build
// it because there is no registry to pull the usual pause image from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the sandbox it inherits orphans and must reap them itself.
	signal.Notify(sig, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
