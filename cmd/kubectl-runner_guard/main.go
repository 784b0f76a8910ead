// Command kubectl-runner_guard is runner-guard's kubectl plugin: on PATH,
// `kubectl runner-guard explain POD -n NS` says why runner-guard keeps or
// lets go one pod, with the user's own kubeconfig.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/runner-guard/runner-guard/explain"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches the plugin's subcommands; explain is the one there is.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "kubectl runner-guard"
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "Usage: %s %s\n", name, explain.Usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "explain" {
		fmt.Fprintf(stderr, "%s: unknown command %q; the command is: %s %s\n", name, args[0], name, explain.Usage)
		return 2
	}
	return explain.Main(ctx, name, args[1:], stdout, stderr)
}
