package process

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Step is one stage of bringing a harness up: the control plane, a node
// component, a controller.
type Step struct {
	Name string
	Run  func(context.Context) error
}

// RunSteps runs steps in order and logs how long each took; the error names
// the step that failed, and the steps after it do not run.
func RunSteps(ctx context.Context, logf func(string, ...any), steps ...Step) error {
	for _, s := range steps {
		start := time.Now()
		if err := s.Run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if logf != nil {
			logf("%s up in %s", s.Name, time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// StopAll stops children in the reverse of their start order (a component
// stops before what it depends on), giving each grace, and logs the ones it
// had to kill. Nil children are passed over.
func StopAll(children []*Child, grace time.Duration, logf func(string, ...any)) {
	for i := len(children) - 1; i >= 0; i-- {
		if err := children[i].Stop(grace); err != nil && logf != nil {
			logf("%v", err)
		}
	}
}

// EndSuite is how a suite's TestMain ends, with the code m.Run returned: the
// components' logs in dir stay when the suite failed or E2E_KEEP_LOGS is set,
// and are removed otherwise.
func EndSuite(suite string, code int, dir string) int {
	switch {
	case code != 0:
		fmt.Printf("%s: FAILED; component logs kept in %s\n", suite, dir)
	case os.Getenv("E2E_KEEP_LOGS") != "":
		fmt.Printf("%s: component logs kept in %s\n", suite, dir)
	default:
		os.RemoveAll(dir)
	}
	return code
}
