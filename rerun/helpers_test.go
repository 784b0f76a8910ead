package rerun

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

const testToken = "t0ken"

// gitHub serves a fake GitHub that requires testToken and a client of it
// without a budget (a test's requests come faster than an hour's).
func gitHub(t *testing.T) (*ghfake.Fake, *ghclient.Client) {
	t.Helper()
	f := ghfake.New()
	f.SetToken(testToken)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	budgets, err := ghclient.NewBudgets(ghclient.BudgetConfig{Unlimited: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ghclient.New(ghclient.Config{BaseURL: srv.URL, AllowHTTP: true, Token: testToken, Budgets: budgets})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// lostRecord is a waiting record of runner's job in run of acme/app.
func lostRecord(runID int64, runner string) Record {
	return Record{
		Job:   Job{Repository: "acme/app", RunID: runID, Runner: runner},
		Cause: CauseNodeGone, PodNamespace: "ci", PodName: runner, State: StateWaiting,
		Credentials: CredentialsRef{Mode: CredentialsStatic},
		Recorded:    time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC),
	}
}

func testStepper(enabled bool) stepper {
	return stepper{enabled: enabled, maxPerRun: DefaultMaxPerRun, poll: DefaultPoll, log: logr.Discard()}
}
