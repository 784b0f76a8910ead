package process

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodAPI stands in for the API server where the process tests have none: it
// serves the reads the webhook makes before asking GitHub (GET of a pod, the
// namespace's PodDisruptionBudgets) from pods a test added, answers the
// discovery those reads need, and accepts Events. Everything else is 404.
// The e2e suite (test/e2e) runs the webhook against a real kube-apiserver.
type PodAPI struct {
	srv *httptest.Server

	mu   sync.Mutex
	pods map[string]*corev1.Pod // namespace/name
}

// NewPodAPI starts a PodAPI on loopback over TLS.
func NewPodAPI() *PodAPI {
	a := &PodAPI{pods: map[string]*corev1.Pod{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	return a
}

// URL is the server's base URL, for a kubeconfig.
func (a *PodAPI) URL() string { return a.srv.URL }

// Close stops the server.
func (a *PodAPI) Close() { a.srv.Close() }

// Add makes pods readable, replacing any of the same namespace and name.
func (a *PodAPI) Add(pods ...*corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range pods {
		a.pods[p.Namespace+"/"+p.Name] = p.DeepCopy()
	}
}

func (a *PodAPI) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, r.Body)
	case r.Method != http.MethodGet:
		notFound(w)
	case r.URL.Path == "/api":
		writeJSON(w, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case r.URL.Path == "/apis":
		writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{
			group("policy", "v1"), group("events.k8s.io", "v1"),
		}})
	case r.URL.Path == "/api/v1":
		writeJSON(w, resources("v1", metav1.APIResource{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "list"}},
			metav1.APIResource{Name: "events", Kind: "Event", Namespaced: true, Verbs: []string{"create"}}))
	case r.URL.Path == "/apis/policy/v1":
		writeJSON(w, resources("policy/v1", metav1.APIResource{Name: "poddisruptionbudgets", Kind: "PodDisruptionBudget", Namespaced: true, Verbs: []string{"list"}}))
	case r.URL.Path == "/apis/events.k8s.io/v1":
		writeJSON(w, resources("events.k8s.io/v1", metav1.APIResource{Name: "events", Kind: "Event", Namespaced: true, Verbs: []string{"create"}}))
	case len(parts) == 6 && parts[0] == "api" && parts[2] == "namespaces" && parts[4] == "pods":
		a.mu.Lock()
		pod, ok := a.pods[parts[3]+"/"+parts[5]]
		a.mu.Unlock()
		if !ok {
			notFound(w)
			return
		}
		out := pod.DeepCopy()
		out.APIVersion, out.Kind = "v1", "Pod"
		writeJSON(w, out)
	case len(parts) == 6 && parts[1] == "policy" && parts[5] == "poddisruptionbudgets":
		writeJSON(w, map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList", "metadata": map[string]any{}, "items": []any{}})
	default:
		notFound(w)
	}
}

func group(name, version string) metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + version, Version: version}
	return metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func resources(gv string, rs ...metav1.APIResource) *metav1.APIResourceList {
	return &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: rs}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func notFound(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
}
