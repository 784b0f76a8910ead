package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// reasonConstants returns the values of every Reason constant declared in
// this package's non-test sources, so a new reason cannot hide from the table.
func reasonConstants(t *testing.T) []Reason {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []Reason
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				return true
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					reasons = append(reasons, Reason(s))
				}
			}
			return true
		})
	}
	if len(reasons) == 0 {
		t.Fatal("found no Reason constants")
	}
	return reasons
}

// designRows returns the reasons of the decision table in docs/DESIGN.md, in order.
func designRows(t *testing.T) []Reason {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| [0-9]+[a-z]? \\| `([a-z-]+)` \\|")
	var rows []Reason
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		rows = append(rows, Reason(m[1]))
	}
	return rows
}

func TestDesignTableCoversEveryReason(t *testing.T) {
	rows := designRows(t)
	var inCode []Reason
	for _, rl := range decisionTable() {
		for _, r := range rl.reasons {
			if !slices.Contains(inCode, r) {
				inCode = append(inCode, r)
			}
		}
	}
	for _, r := range reasonConstants(t) {
		if !slices.Contains(rows, r) {
			t.Errorf("reason %q has no row in docs/DESIGN.md's decision table", r)
		}
		if !slices.Contains(inCode, r) {
			t.Errorf("reason %q is decided by no rule of decisionTable()", r)
		}
	}
	if !slices.Equal(rows, inCode) {
		t.Errorf("docs/DESIGN.md lists the reasons in the order\n  %v\nbut decisionTable() decides them in the order\n  %v", rows, inCode)
	}
}

// fastPathPod hands the rules a partial pod; the rules that decide on it must
// read nothing else. For pods of every shape, the partial pod and the whole
// pod must get the same decision from the same rule, and that rule must be one
// of the request-stage rules the fast path is for.
func TestFastPathPodHoldsWhatItsRulesRead(t *testing.T) {
	terminated := fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").RunnerTerminated().Force().RunnerID(3).Obj()
	failed := fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Obj()
	failed.Status.Phase = corev1.PodFailed
	failed.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	pods := map[string]*corev1.Pod{
		"plain pod":              fixture.MakePod("ci", "web").Running().Annotation(DefaultForceAnnotation, "true").Obj(),
		"terminating runner":     fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Terminating().Obj(),
		"pending runner":         fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Pending().Obj(),
		"terminated runner":      terminated,
		"failed disrupted":       failed,
		"running legacy":         fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Force().Obj(),
		"running scale-set":      fixture.MakeScaleSetRunnerPod("ci", "r").Label("actions.github.com/organization", "acme").Running().Obj(),
		"runner in exempt space": fixture.MakeLegacyRunnerPod("kube-system", "r").Org("acme").Running().Obj(),
	}
	cfg := DefaultConfig()
	h, err := NewHandler(Options{Config: cfg, GitHub: unusedGitHub{}, Pods: fake.NewClientBuilder().Build()})
	if err != nil {
		t.Fatal(err)
	}
	early := 0
	for _, rl := range decisionTable() {
		if rl.needs > stageRequest {
			break
		}
		early++
	}
	pol := cfg.policy()
	firstDecision := func(pod *corev1.Pod) (int, Decision) {
		r := review{Operation: OperationDelete, Namespace: pod.Namespace, Name: pod.Name, Pod: pod, Spec: matchRunnerPod(pod, cfg.RunnerPods)}
		for i, rl := range decisionTable()[:early] {
			if d, ok := rl.decide(&r, &pol); ok {
				return i, d
			}
		}
		return -1, Decision{}
	}
	for name, pod := range pods {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			partial := h.fastPathPod(raw)
			if partial == nil {
				return // decoded whole: nothing to compare
			}
			pi, pd := firstDecision(partial)
			fi, fd := firstDecision(pod)
			if pi < 0 {
				t.Fatalf("fast path returned a partial pod that no request-stage rule decides (whole pod: rule %d %q)", fi, fd.Reason)
			}
			if pi != fi || pd != fd {
				t.Errorf("partial pod: rule %d %+v; whole pod: rule %d %+v", pi, pd, fi, fd)
			}
		})
	}
}

// unusedGitHub fails the test run if a decision reaches GitHub.
type unusedGitHub struct{ GitHub }

// A failed pod read is a decision like any other: counted, logged and recorded.
func TestHandlerPodLookupFailedIsRecorded(t *testing.T) {
	reader := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	rec := events.NewFakeRecorder(10)
	metrics := NewMetrics()
	handler, err := NewHandler(Options{Config: DefaultConfig(), GitHub: unusedGitHub{}, Pods: reader, Events: rec, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(reviewJSON(t, request{op: OperationEvict, pod: pod}), &rev); err != nil {
		t.Fatal(err)
	}
	resp := handler.Handle(context.Background(), admission.Request{AdmissionRequest: *rev.Request})
	if resp.Allowed || resp.Result.Code != http.StatusTooManyRequests || !strings.Contains(resp.Result.Message, "connection refused") {
		t.Fatalf("response = %+v, want a 429 naming the read error", resp.Result)
	}
	if got := testutil.ToFloat64(metrics.Decisions.WithLabelValues("evict", "deny", string(ReasonPodLookupFailed))); got != 1 {
		t.Errorf("pod-lookup-failed decisions = %v, want 1", got)
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, EventPodLookupFailed) || !strings.Contains(ev, "connection refused") {
			t.Errorf("event = %q", ev)
		}
	default:
		t.Error("no Event recorded for pod-lookup-failed")
	}
}
