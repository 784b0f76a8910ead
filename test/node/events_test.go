package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/events"
)

// eventsOOMLimit is the events container's memory limit in this scenario,
// far below the chart's 96Mi and below what the endpoint takes under a flood.
const eventsOOMLimit = 16 << 20

// eventsOOMValues: the events Deployment on (the webhook secret inline), its
// memory at eventsOOMLimit, requests to match.
var eventsOOMValues = fmt.Sprintf(`events:
  enabled: true
  secret: node-events-secret
  resources:
    requests: {cpu: 10m, memory: %[1]dMi}
    limits: {cpu: 200m, memory: %[1]dMi}
`, eventsOOMLimit>>20)

const eventsSelector = "app.kubernetes.io/component=events"

// The events Deployment killed for memory (issue 36): its container's limit
// is 16Mi, and a flood of the largest deliveries the endpoint reads (1 MiB,
// forged signatures, as the chart's events.resources comment measures it)
// takes it past that, so the kernel's OOM killer ends it (OOMKilled, the
// memory cgroup's limit at 16Mi on this node: cgroup v1 memory limits are
// enforced here, CAP_SYS_RESOURCE or not), again after each restart, into
// CrashLoopBackOff. Idle, the process fits in 16Mi; the flood is what takes
// the memory. Meanwhile the admission Deployment answers as before: a busy
// runner's delete refused as runner busy, an idle runner's admitted and
// its runner unregistered with one DELETE answered 204, and its pods the
// same Ready pods, never restarted.
func TestNodeEventsOOMKilledAdmissionAnswers(t *testing.T) {
	s := newScenario(t, "events-oom")
	s.withRunnerGuardValues(eventsOOMValues)
	s.logRunnerGuardOnFailure()
	s.logEventsOnFailure()
	webhook := s.webhookPods()

	pods := s.eventsPods()
	if len(pods) == 0 {
		t.Fatal("no events pod after the upgrade with events.enabled")
	}
	for _, p := range pods {
		s.requirePodMemoryLimit(p, eventsOOMLimit)
	}

	idle := []string{"runner-idle-0", "runner-idle-1", "runner-idle-2"}
	s.startRunners(append([]string{"runner-busy"}, idle...)...)
	s.startJob("runner-busy")
	admitted := 0
	s.requireDecisions("before the flood", "runner-busy", idle[0], &admitted)

	flood := s.floodEvents(32)
	defer flood.stop()
	start := time.Now()
	s.eventually("an events container OOMKilled", 2*time.Minute, func() error {
		if n := s.eventsOOMKills(); n == 0 {
			return fmt.Errorf("no OOM kill yet; %d deliveries answered, %d failed; events pods: %s", flood.answered.Load(), flood.failed.Load(), s.eventsSummary())
		}
		return nil
	})
	t.Logf("first OOM kill %s into the flood (%d deliveries answered, %d failed): %s",
		time.Since(start).Round(time.Second), flood.answered.Load(), flood.failed.Load(), s.eventsSummary())
	s.requireDecisions("after the first OOM kill", "runner-busy", idle[1], &admitted)

	s.eventually("an events container OOMKilled again and in CrashLoopBackOff", 2*time.Minute, func() error {
		for _, p := range s.eventsPods() {
			for _, cs := range p.Status.ContainerStatuses {
				last := cs.LastTerminationState.Terminated
				if cs.RestartCount >= 2 && last != nil && last.Reason == "OOMKilled" &&
					cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
					return nil
				}
			}
		}
		return fmt.Errorf("events pods: %s", s.eventsSummary())
	})
	t.Logf("events Deployment crash-looping for memory: %s", s.eventsSummary())
	s.requireDecisions("while the events pods crash-loop", "runner-busy", idle[2], &admitted)
	flood.stop()
	t.Logf("flood: %d deliveries answered (%s), %d failed", flood.answered.Load(), flood.codes(), flood.failed.Load())

	s.requireSameWebhookPods(webhook)
	if p := s.pod("runner-busy"); p == nil || p.DeletionTimestamp != nil || !s.containerRunning("runner-busy") || !s.registered("runner-busy") {
		t.Fatalf("busy runner disturbed: %s", s.podSummary("runner-busy"))
	}
}

// requireDecisions deletes the busy runner's pod, which must be refused as
// runner busy, and the idle runner's, which must be admitted with the runner
// unregistered by one more DELETE answered 204.
func (s *scenario) requireDecisions(when, busy, idle string, admitted *int) {
	s.t.Helper()
	out, err := s.deletePod(busy)
	if err == nil || !strings.Contains(out, "runner busy") {
		s.t.Fatalf("%s: kubectl delete of a busy runner: err %v, output %q; want refused as runner busy", when, err, out)
	}
	if p := s.pod(busy); p == nil || p.DeletionTimestamp != nil || !s.registered(busy) {
		s.t.Fatalf("%s: busy runner disturbed by its refused delete: %s", when, s.podSummary(busy))
	}
	if out, err := s.deletePod(idle); err != nil {
		s.t.Fatalf("%s: kubectl delete of an idle runner: %v: %s", when, err, out)
	}
	*admitted++
	if s.registered(idle) {
		s.t.Fatalf("%s: idle runner %s admitted for deletion but still registered", when, idle)
	}
	if n := s.countDeletes(204); n != *admitted {
		s.t.Fatalf("%s: %d unregisters answered 204 for %d idle runners admitted, want one each: %+v", when, n, *admitted, s.githubRequests())
	}
	s.t.Logf("%s: busy runner's delete refused (%s), idle runner %s's admitted and unregistered", when, strings.TrimSpace(out), idle)
}

// webhookPods are the admission Deployment's pods by UID; each must be Ready
// with no restart.
func (s *scenario) webhookPods() map[types.UID]string {
	s.t.Helper()
	list, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		s.t.Fatalf("webhook pods: %v", err)
	}
	out := map[types.UID]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready || cs.RestartCount != 0 {
				s.t.Fatalf("webhook pod %s: container %s ready %v restarts %d", p.Name, cs.Name, cs.Ready, cs.RestartCount)
			}
		}
		out[p.UID] = p.Name
	}
	if len(out) != 2 {
		s.t.Fatalf("%d webhook pods, want 2: %v", len(out), out)
	}
	return out
}

// requireSameWebhookPods: the admission Deployment's pods are those of
// before, still Ready, never restarted.
func (s *scenario) requireSameWebhookPods(before map[types.UID]string) {
	s.t.Helper()
	now := s.webhookPods()
	for uid, name := range before {
		if _, ok := now[uid]; !ok {
			s.t.Fatalf("webhook pod %s replaced: now %v", name, now)
		}
	}
}

func (s *scenario) eventsPods() []corev1.Pod {
	s.t.Helper()
	list, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: eventsSelector})
	if err != nil {
		s.t.Fatalf("events pods: %v", err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// eventsOOMKills counts the events containers the kubelet reports ended by
// the OOM killer, now or last.
func (s *scenario) eventsOOMKills() int {
	n := 0
	for _, p := range s.eventsPods() {
		for _, cs := range p.Status.ContainerStatuses {
			for _, term := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if term != nil && term.Reason == "OOMKilled" {
					n++
					break
				}
			}
		}
	}
	return n
}

func (s *scenario) eventsSummary() string {
	var b strings.Builder
	for _, p := range s.eventsPods() {
		for _, cs := range p.Status.ContainerStatuses {
			state := "running"
			switch {
			case cs.State.Waiting != nil:
				state = "waiting " + cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				state = "terminated " + cs.State.Terminated.Reason
			}
			last := "-"
			if term := cs.LastTerminationState.Terminated; term != nil {
				last = fmt.Sprintf("%s exit %d", term.Reason, term.ExitCode)
			}
			fmt.Fprintf(&b, "[%s: %s ready %v restarts %d last %s] ", p.Name, state, cs.Ready, cs.RestartCount, last)
		}
	}
	return strings.TrimSpace(b.String())
}

// requirePodMemoryLimit checks the pod's memory cgroup on this node (cgroup
// v1, the kubelet's cgroupfs driver) holds limit, and logs what it uses.
func (s *scenario) requirePodMemoryLimit(p corev1.Pod, limit int64) {
	s.t.Helper()
	var found []string
	for _, qos := range []string{"", "burstable", "besteffort"} {
		found = append(found, filepath.Join(cgroupFS, "memory", CgroupRoot, "kubepods", qos, "pod"+string(p.UID), "memory.limit_in_bytes"))
	}
	for _, f := range found {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		got, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || got != limit {
			s.t.Fatalf("events pod %s: %s holds %q, want %d", p.Name, f, b, limit)
		}
		usage, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "memory.usage_in_bytes"))
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "memory.stat"))
		s.t.Logf("events pod %s: memory cgroup limit %d bytes, usage %s bytes (%s) (%s)", p.Name, got,
			strings.TrimSpace(string(usage)), strings.Join(strings.Fields(lines(string(stat), "total_rss ", "total_cache ")), " "), f)
		return
	}
	s.t.Fatalf("events pod %s (QoS %s): no memory cgroup among %v", p.Name, p.Status.QOSClass, found)
}

// logEventsOnFailure logs the events pods' state and their last container's
// output when the test has failed.
func (s *scenario) logEventsOnFailure() {
	s.onFailure(func(ctx context.Context) {
		pods, _ := cluster.Kubectl(ctx, "-n", rgNamespace, "get", "pods", "-l", eventsSelector, "-o", "yaml")
		logs, _ := cluster.Kubectl(ctx, "-n", rgNamespace, "logs", "-l", eventsSelector, "--prefix", "--previous", "--tail=40")
		s.t.Logf("events pods:\n%s\nprevious events containers' logs:\n%s", lines(pods, "reason", "restartCount", "exitCode", "message", "name: events", "podIP:"), logs)
	})
}

// eventsFlood posts the largest deliveries the endpoint reads (MaxPayload,
// with a forged signature) to every events pod at once, from inside the
// node's network namespace, until stopped.
type eventsFlood struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once
	answered atomic.Int64
	failed   atomic.Int64
	byCode   sync.Map // status code -> *atomic.Int64
}

// floodEvents starts perPod senders for each events pod's address; a pod
// keeps its address through its container's restarts.
func (s *scenario) floodEvents(perPod int) *eventsFlood {
	s.t.Helper()
	port := 0
	var targets []string
	for _, p := range s.eventsPods() {
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "events" {
					port = int(cp.ContainerPort)
				}
			}
		}
		if p.Status.PodIP == "" || port == 0 {
			s.t.Fatalf("events pod %s: address %q port %d", p.Name, p.Status.PodIP, port)
		}
		targets = append(targets, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))+events.Path)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	f := &eventsFlood{cancel: cancel}
	client := &http.Client{
		Transport: &http.Transport{DialContext: DialContext, MaxIdleConnsPerHost: perPod},
		Timeout:   30 * time.Second,
	}
	body := bytes.Repeat([]byte(" "), events.MaxPayload)
	forged := "sha256=" + strings.Repeat("0", 64)
	for _, url := range targets {
		for i := 0; i < perPod; i++ {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
					req.Header.Set(events.HeaderEvent, "workflow_job")
					req.Header.Set(events.HeaderSignature, forged)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						f.failed.Add(1)
						// The container is down: try again shortly, not in a spin.
						select {
						case <-ctx.Done():
						case <-time.After(100 * time.Millisecond):
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					f.answered.Add(1)
					c, _ := f.byCode.LoadOrStore(resp.StatusCode, new(atomic.Int64))
					c.(*atomic.Int64).Add(1)
				}
			}()
		}
	}
	s.t.Logf("flooding %d events pods with %d senders each of %d-byte deliveries: %v", len(targets), perPod, events.MaxPayload, targets)
	return f
}

// stop ends the flood and waits for its senders.
func (f *eventsFlood) stop() {
	f.once.Do(func() {
		f.cancel()
		f.wg.Wait()
	})
}

func (f *eventsFlood) codes() string {
	var parts []string
	f.byCode.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%d: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return strings.Join(parts, ", ")
}
