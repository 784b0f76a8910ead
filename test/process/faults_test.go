package process_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

func acme(*testing.T) ghclient.Scope { return fixture.Org("acme") }

// expect is what the webhook must answer.
type expect struct {
	allowed bool
	code    int32
	// retryAfter: exact retryAfterSeconds when > 0; with retryAfterMax, a range.
	retryAfter, retryAfterMax int32
	msg                       []string
	warning                   bool
}

type faultCase struct {
	fault *ghfake.Fault
	// noHint leaves the runner ID annotation off, so the first request is the list by name.
	noHint bool
	// githubDown points --github-url at a closed port (a separate process per policy).
	githubDown bool
	// isolated runs the case on a process of its own.
	isolated bool
	// limit: the case trips a rate limit that go-github remembers client-side
	// until it lapses; such cases run after the others and wait it out.
	limit time.Duration
	// run replaces the default single request (setup, request and checks of its own).
	run func(t *testing.T, e *env, name string) *admissionv1.AdmissionResponse
	// deny and allow are the expectations under each --on-error policy; a
	// case with only deny set expects the same answer under both.
	deny, allow *expect
}

func onErrorDeny(msg ...string) *expect {
	return &expect{code: http.StatusServiceUnavailable, msg: append(msg, "cannot check runner", "(denied by --on-error=deny)")}
}

func rateLimitDeny(msg ...string) *expect {
	return &expect{code: http.StatusServiceUnavailable, msg: append(msg, "GitHub rate limit reached", "(denied by --on-error=deny)")}
}

func rateLimitAllow(msg ...string) *expect {
	return &expect{allowed: true, code: http.StatusOK, warning: true, msg: append(msg, "GitHub rate limit reached", "(allowed by --on-error=allow)")}
}

func onErrorAllow(msg ...string) *expect {
	return &expect{allowed: true, code: http.StatusOK, warning: true, msg: append(msg, "cannot check runner", "(allowed by --on-error=allow)")}
}

// TestFaultMatrix drives the real binary through its HTTPS transport while the
// fake GitHub misbehaves, once per --on-error policy. One binary per policy is
// reused across cases (faults and request log reset in between); every case
// uses its own runner name because the client caches name -> ID.
func TestFaultMatrix(t *testing.T) {
	cases := map[string]faultCase{
		"500": {
			fault: &ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500},
			deny:  onErrorDeny("500"), allow: onErrorAllow("500"),
		},
		"502": {
			fault: &ghfake.Fault{Kind: ghfake.FaultStatus, Status: 502},
			deny:  onErrorDeny("502"), allow: onErrorAllow("502"),
		},
		"503": {
			fault: &ghfake.Fault{Kind: ghfake.FaultStatus, Status: 503},
			deny:  onErrorDeny("503"), allow: onErrorAllow("503"),
		},
		"slower than --github-timeout": {
			fault: &ghfake.Fault{Kind: ghfake.FaultHang, Delay: 2 * time.Second},
			deny:  onErrorDeny("context deadline exceeded"), allow: onErrorAllow("context deadline exceeded"),
		},
		"slower than --github-timeout on the list": {
			fault: &ghfake.Fault{Kind: ghfake.FaultHang, Delay: 2 * time.Second, Method: http.MethodGet}, noHint: true,
			deny: onErrorDeny("context deadline exceeded"), allow: onErrorAllow("context deadline exceeded"),
		},
		"connection refused": {
			githubDown: true,
			deny:       onErrorDeny("connection refused"), allow: onErrorAllow("connection refused"),
		},
		"401 bad credentials": {
			// A scope's 401 is remembered for a minute (ghclient.FailureTTL):
			// the case has a process of its own.
			fault: &ghfake.Fault{Kind: ghfake.FaultStatus, Status: 401}, isolated: true,
			deny: onErrorDeny("401", "Bad credentials"), allow: onErrorAllow("401", "Bad credentials"),
		},
		"malformed JSON": {
			fault: &ghfake.Fault{Kind: ghfake.FaultMalformedJSON, Method: http.MethodGet}, noHint: true,
			deny: onErrorDeny("list runners", "HTTP 200"), allow: onErrorAllow("list runners", "HTTP 200"),
		},
		// A refused DELETE is a 503 without Retry-After, so kubectl shows it at
		// once (client-go silently retries a 429); --on-error decides.
		"403 secondary rate limit with retry-after": {
			fault: &ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 403, RetryAfterSeconds: 1},
			limit: 1500 * time.Millisecond,
			deny:  rateLimitDeny("retry in 1s", "secondary"), allow: rateLimitAllow("secondary"),
		},
		"403 primary rate limit, remaining 0 with a reset time": {
			fault: &ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, Status: 403, ResetAfterSeconds: 1},
			limit: 2200 * time.Millisecond,
			deny:  rateLimitDeny("primary"), allow: rateLimitAllow("primary"),
		},
		"429 without retry-after": {
			// GitHub says to wait a minute: the client refuses requests until
			// then, so the case has a process of its own.
			fault: &ghfake.Fault{Kind: ghfake.FaultStatus, Status: 429}, isolated: true,
			deny: rateLimitDeny("retry in 1m0s", "429"), allow: rateLimitAllow("429"),
		},
		"429 secondary rate limit with retry-after": {
			fault: &ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 1},
			limit: 1500 * time.Millisecond,
			deny:  rateLimitDeny("retry in 1s"), allow: rateLimitAllow(),
		},
		"404 on a cached ID, runner re-registered under a new ID": {
			run:  reRegistered,
			deny: &expect{allowed: true, code: http.StatusOK, msg: []string{"unregistered from"}},
		},
	}

	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	// Rate-limit cases last: go-github refuses requests client-side until the
	// limit lapses, which would leak into the following cases.
	slices.SortFunc(names, func(a, b string) int {
		la, lb := cases[a].limit > 0, cases[b].limit > 0
		if la != lb {
			if la {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})

	for _, policy := range []string{"deny", "allow"} {
		t.Run("on-error="+policy, func(t *testing.T) {
			t.Parallel()
			args := []string{"--on-error=" + policy, "--github-timeout=300ms"}
			up := start(t, args...)
			var (
				downOnce sync.Once
				down     *env
			)
			for _, name := range names {
				tc := cases[name]
				want := tc.deny
				if policy == "allow" && tc.allow != nil {
					want = tc.allow
				}
				t.Run(name, func(t *testing.T) {
					e := up
					if tc.isolated {
						e = start(t, args...)
					}
					if tc.githubDown {
						downOnce.Do(func() {
							url, err := process.ClosedURL()
							if err != nil {
								t.Fatal(err)
							}
							down = startWith(t, nil, url, newFiles(t), args...)
						})
						if down == nil {
							t.Fatal("no webhook with GitHub down")
						}
						e = down
					}
					runnerName := fmt.Sprintf("fm-%s-%s", policy, slug(name))
					var resp *admissionv1.AdmissionResponse
					if tc.run != nil {
						resp = tc.run(t, e, runnerName)
					} else {
						resp = faultRequest(t, e, tc, runnerName)
					}
					check(t, resp, want, runnerName)
					if tc.limit > 0 {
						time.Sleep(tc.limit)
					}
				})
			}
			// After every fault the webhook still works.
			t.Run("recovered", func(t *testing.T) {
				resp := faultRequest(t, up, faultCase{}, "fm-"+policy+"-recovered")
				check(t, resp, &expect{allowed: true, code: http.StatusOK, msg: []string{"unregistered from"}}, "fm-"+policy+"-recovered")
			})
		})
	}
}

// faultRequest registers an idle runner, injects the case's fault and sends one DELETE review.
func faultRequest(t *testing.T, e *env, tc faultCase, runnerName string) *admissionv1.AdmissionResponse {
	t.Helper()
	pod := fixture.MakeLegacyRunnerPod("ci", runnerName).Org("acme").Running()
	if e.github != nil {
		e.github.ClearFaults()
		e.github.ResetLog()
		id := e.github.AddRunner(acme(t), runnerName)
		if !tc.noHint {
			pod.RunnerID(id)
		}
		if tc.fault != nil {
			e.github.InjectFault(*tc.fault)
		}
		defer e.github.ClearFaults()
	} else {
		pod.RunnerID(4242)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.proc.Delete(ctx, process.Review{Pod: pod.Obj()})
	if err != nil {
		t.Fatalf("admission request: %v", err)
	}
	if e.github != nil && tc.fault != nil {
		// A request the client gave up on is logged once the fake notices.
		for deadline := time.Now().Add(5 * time.Second); e.github.Count("") == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if e.github != nil && tc.fault != nil && e.github.Count("") == 0 {
		t.Errorf("the fake GitHub saw no request")
	}
	return resp
}

// reRegistered: a dry run caches the runner's ID; the runner then re-registers
// under a new ID; the delete gets 404 on the cached ID, looks the name up once
// more and removes the new ID.
func reRegistered(t *testing.T, e *env, runnerName string) *admissionv1.AdmissionResponse {
	t.Helper()
	scope := acme(t)
	e.github.ClearFaults()
	oldID := e.github.AddRunner(scope, runnerName)
	pod := fixture.MakeLegacyRunnerPod("ci", runnerName).Org("acme").Running().Obj()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dry, err := e.proc.Delete(ctx, process.Review{Pod: pod, DryRun: true})
	if err != nil || !dry.Allowed || !strings.Contains(dry.Result.Message, "idle") {
		t.Fatalf("dry run to cache the ID: %+v %v", dry, err)
	}
	newID := e.github.ReRegister(scope, runnerName)
	e.github.ResetLog()
	resp, err := e.proc.Delete(ctx, process.Review{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range e.github.Requests() {
		got = append(got, fmt.Sprintf("%s %s %d", r.Method, r.Path, r.Status))
	}
	want := []string{
		fmt.Sprintf("DELETE /orgs/acme/actions/runners/%d 404", oldID),
		"GET /orgs/acme/actions/runners 200",
		fmt.Sprintf("DELETE /orgs/acme/actions/runners/%d 204", newID),
	}
	if !slices.Equal(got, want) {
		t.Errorf("GitHub requests:\n got %q\nwant %q", got, want)
	}
	if _, ok := e.github.Runner(scope, runnerName); ok {
		t.Errorf("runner %s (new ID %d) still registered", runnerName, newID)
	}
	return resp
}

func check(t *testing.T, resp *admissionv1.AdmissionResponse, want *expect, runnerName string) {
	t.Helper()
	if resp.Result == nil {
		t.Fatalf("response without status: %+v", resp)
	}
	msg := resp.Result.Message
	if resp.Allowed != want.allowed || resp.Result.Code != want.code {
		t.Errorf("allowed=%v code=%d, want allowed=%v code=%d; message: %s", resp.Allowed, resp.Result.Code, want.allowed, want.code, msg)
	}
	for _, w := range append([]string{runnerName}, want.msg...) {
		if !strings.Contains(msg, w) {
			t.Errorf("message does not contain %q: %s", w, msg)
		}
	}
	if want.warning != (len(resp.Warnings) > 0) {
		t.Errorf("warnings %q, want some: %v", resp.Warnings, want.warning)
	}
	if want.code == http.StatusTooManyRequests {
		if resp.Result.Reason != "TooManyRequests" || resp.Result.Details == nil {
			t.Fatalf("429 without reason TooManyRequests and details: %+v", resp.Result)
		}
		got, lo, hi := resp.Result.Details.RetryAfterSeconds, want.retryAfter, max(want.retryAfter, want.retryAfterMax)
		if got < lo || got > hi {
			t.Errorf("retryAfterSeconds = %d, want %d..%d", got, lo, hi)
		}
	}
}

func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}
