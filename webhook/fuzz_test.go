package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// fuzzGitHub is the fake GitHub behind the fuzzed handler, with a rate limit
// no fuzzing run exhausts, and a busy and an idle runner in org acme.
func fuzzGitHub(f *testing.F) *ghclient.Router {
	gh, client := fixture.FakeGitHub(f)
	gh.SetRateLimit(1<<30, 1<<30, time.Time{})
	acme := fixture.Org("acme")
	gh.AddRunner(acme, "runner-1")
	gh.AddRunner(acme, "runner-busy")
	gh.SetBusy(acme, "runner-busy", true)
	return client
}

// FuzzAdmissionHTTP posts arbitrary bodies to the admission endpoint the way
// the webhook server serves it: never a panic, never a 5xx, always an
// AdmissionReview answer.
func FuzzAdmissionHTTP(f *testing.F) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").RunnerID(7).Running().Obj()
	reader := fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build()
	cfg := DefaultConfig()
	h, err := NewHandler(Options{Config: cfg, GitHub: fuzzGitHub(f), Pods: reader, Metrics: NewMetrics()})
	if err != nil {
		f.Fatal(err)
	}
	wh := (&admission.Webhook{Handler: h}).WithRecoverPanic(false)

	for _, seed := range fuzzAdmissionSeeds(f, pod) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		wh.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code >= 500 {
			t.Fatalf("HTTP %d for body %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("answer is not an AdmissionReview (HTTP %d, %v): %s", rec.Code, err, rec.Body.Bytes())
		}
		if r := out.Response; r.Result != nil && r.Result.Code >= 500 && r.Result.Code != http.StatusServiceUnavailable {
			// 503 is the on-error denial; anything else 5xx is the handler failing.
			t.Fatalf("response code %d for body %q: %s", r.Result.Code, body, r.Result.Message)
		}
	})
}

func fuzzAdmissionSeeds(f *testing.F, pod *corev1.Pod) [][]byte {
	raw, _ := json.Marshal(pod)
	review := func(mut func(*admissionv1.AdmissionRequest)) []byte {
		r := &admissionv1.AdmissionRequest{
			UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "ci", Name: "runner-1", Operation: admissionv1.Delete,
		}
		r.OldObject.Raw = raw
		mut(r)
		b, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: r})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	return [][]byte{
		review(func(*admissionv1.AdmissionRequest) {}),
		review(func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.SubResource, r.OldObject.Raw = admissionv1.Create, "eviction", nil
			r.Object.Raw = []byte(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"runner-1","namespace":"ci"}}`)
		}),
		review(func(r *admissionv1.AdmissionRequest) {
			r.OldObject.Raw = []byte(`{"kind":"Pod","metadata":{"labels":{"actions-ephemeral-runner":"True"}}}`)
		}),
		[]byte(`{}`),
		[]byte(`{"request":{}}`),
		[]byte(`not json`),
		[]byte(``),
	}
}

// FuzzRunnerRecognition feeds arbitrary label, env and annotation strings
// through runner-pod recognition, scope resolution and the whole decision:
// never a panic, and a resolved scope is always one GitHub accepts.
func FuzzRunnerRecognition(f *testing.F) {
	cfg := DefaultConfig()
	gh := fuzzGitHub(f)
	f.Add("runner-1", "actions-runner", "", "RUNNER_ORG", "acme", "RUNNER_NAME", "runner-1", "1001")
	f.Add("r", "actions-ephemeral-runner", "True", "X", "", "actions.github.com/repository", "app", "")
	f.Add("r", "actions-runner", "", "RUNNER_REPO", "acme/app", "RUNNER_ENTERPRISE", "big", "-5")
	f.Add("r", "actions-ephemeral-runner", "True", "", "", "actions.github.com/organization", strings.Repeat("o", 58)+"-trim", "x")
	f.Add("r", "actions-runner", "", "RUNNER_REPO", "/", "RUNNER_NAME", "", "99999999999999999999")
	f.Fuzz(func(t *testing.T, podName, labelKey, labelValue, envName, envValue, key2, value2, idAnnotation string) {
		p := fixture.MakeLegacyRunnerPod("ci", podName).Running().Obj()
		p.Labels = map[string]string{labelKey: labelValue, key2: value2}
		p.Annotations = map[string]string{"actions-runner/id": idAnnotation, key2: value2}
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
			corev1.EnvVar{Name: envName, Value: envValue}, corev1.EnvVar{Name: key2, Value: value2})

		spec := matchRunnerPod(p, cfg.RunnerPods)
		if spec != nil {
			target, err := podTarget(p, spec)
			if target.IDHint < 0 {
				t.Fatalf("negative ID hint %d", target.IDHint)
			}
			if err == nil {
				var again ghclient.Scope
				var serr error
				switch target.Scope.Kind {
				case ghclient.ScopeRepo:
					again, serr = ghclient.RepoScope(target.Scope.Name)
				case ghclient.ScopeOrg:
					again, serr = ghclient.OrgScope(target.Scope.Name)
				case ghclient.ScopeEnterprise:
					again, serr = ghclient.EnterpriseScope(target.Scope.Name)
				default:
					t.Fatalf("resolved scope of unknown kind %q", target.Scope.Kind)
				}
				if serr != nil || again != target.Scope {
					t.Fatalf("resolved scope %v does not validate: %v", target.Scope, serr)
				}
				if truncated(target.Scope.Name) {
					t.Fatalf("truncated label value used as scope: %v", target.Scope)
				}
			}
		}
		d := newDecider(cfg, gh, fake.NewClientBuilder().WithObjects(p.DeepCopy()).Build(), time.Now)
		for _, dry := range []bool{false, true} {
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: p.Namespace, Name: p.Name, Pod: p, DryRun: dry})
			if dec.Reason == "" || dec.Message == "" {
				t.Fatalf("decision without reason or message: %+v", dec)
			}
			if !dec.Allowed && dec.Code == 0 {
				t.Fatalf("denial without code: %+v", dec)
			}
		}
	})
}
