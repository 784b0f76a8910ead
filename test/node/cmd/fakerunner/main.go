// Command fakerunner plays a self-hosted GitHub Actions runner against the
// fake GitHub (ghclient/ghfake) inside a pod on the real-node tests:
//
//   - it registers under its runner name (RUNNER_NAME, else the pod's host
//     name, which is the pod name) in RUNNER_ORG through the fake's /_fake/
//     control API, as config.sh does against GitHub;
//   - it is idle until GitHub hands it a job: the test marks the runner busy
//     on the fake (POST /_fake/runners/state), as GitHub's job assignment
//     would, and the runner logs "job started"; the job ends when the test
//     marks it idle again ("job finished");
//   - it exits 0 once its registration is gone (runner-guard unregistered it),
//     as the real runner does when GitHub removes it;
//   - on SIGTERM it exits at once, cancelling a running job ("job cancelled"):
//     the real runner does the same, which is why runner-guard exists.
//
// Every line it prints is for the tests, which read them with kubectl logs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// config is what the pod's environment says.
type config struct {
	githubURL string // the fake GitHub's base URL, e.g. http://10.96.0.50:8080
	org       string
	name      string
	poll      time.Duration
}

// runnerState is the part of a fake GitHub runner this program reads.
type runnerState struct {
	Name   string `json:"name"`
	Busy   bool   `json:"busy"`
	Status string `json:"status"`
}

func main() {
	cfg, err := configFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakerunner: %v\n", err)
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(cfg, sigs))
}

func configFromEnv() (config, error) {
	c := config{githubURL: strings.TrimRight(os.Getenv("GITHUB_URL"), "/"), org: os.Getenv("RUNNER_ORG"), name: os.Getenv("RUNNER_NAME"), poll: 500 * time.Millisecond}
	if c.name == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("runner name: %w", err)
		}
		c.name = h
	}
	if c.githubURL == "" || c.org == "" {
		return c, errors.New("GITHUB_URL and RUNNER_ORG must be set")
	}
	return c, nil
}

// run registers and then follows the runner's state until it is removed or a
// signal arrives; it returns the exit code.
func run(cfg config, sigs <-chan os.Signal) int {
	client := &http.Client{Timeout: 5 * time.Second}
	if err := register(client, cfg, sigs); err != nil {
		fmt.Printf("registration failed: %v\n", err)
		return 1
	}
	fmt.Printf("registered runner %q in org %q; listening for jobs\n", cfg.name, cfg.org)
	busy := false
	tick := time.NewTicker(cfg.poll)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			if busy {
				fmt.Printf("received %s: job cancelled, exiting\n", s)
				return 143
			}
			fmt.Printf("received %s: exiting\n", s)
			return 143
		case <-tick.C:
		}
		st, found, err := lookup(client, cfg)
		if err != nil {
			fmt.Printf("GitHub unreachable: %v\n", err) // a real runner retries too
			continue
		}
		if !found {
			fmt.Println("runner removed from GitHub: exiting")
			return 0
		}
		if st.Busy != busy {
			busy = st.Busy
			if busy {
				fmt.Println("job started")
			} else {
				fmt.Println("job finished")
			}
		}
	}
}

// register adds the runner, retrying while the network or the fake is not
// up yet (a pod may start before its Service has endpoints), for at most a
// minute; a signal ends the wait.
func register(client *http.Client, cfg config, sigs <-chan os.Signal) error {
	body, err := json.Marshal(map[string]any{"scope": map[string]string{"kind": "org", "name": cfg.org}, "name": cfg.name})
	if err != nil {
		return fmt.Errorf("encode registration: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err = post(client, cfg.githubURL+"/_fake/runners", body, http.StatusCreated)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case s := <-sigs:
			return fmt.Errorf("%s while registering (last error: %w)", s, err)
		case <-time.After(time.Second):
		}
	}
}

func post(client *http.Client, u string, body []byte, want int) error {
	resp, err := client.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %s", u, resp.Status)
	}
	return nil
}

// lookup finds this runner among the org's runners on the fake.
func lookup(client *http.Client, cfg config) (runnerState, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := cfg.githubURL + "/_fake/runners?" + url.Values{"kind": {"org"}, "name": {cfg.org}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return runnerState{}, false, fmt.Errorf("request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return runnerState{}, false, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return runnerState{}, false, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var runners []runnerState
	if err := json.NewDecoder(resp.Body).Decode(&runners); err != nil {
		return runnerState{}, false, fmt.Errorf("decode runners: %w", err)
	}
	for _, r := range runners {
		if r.Name == cfg.name {
			return r, true, nil
		}
	}
	return runnerState{}, false, nil
}
