package process

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodAPI stands in for the API server where the process tests have none: it
// serves the reads the webhook makes before asking GitHub (GET of a pod, the
// namespace's PodDisruptionBudgets) from pods a test added, the lists and
// watches of pods and nodes the disruption controllers' caches make (a watch
// sends the initial events a watch-list asks for, then nothing), answers the
// discovery those need, and accepts Events. Everything else is 404. The e2e
// suite (test/e2e) runs the webhook against a real kube-apiserver.
type PodAPI struct {
	srv *httptest.Server

	mu         sync.Mutex
	pods       map[string]*corev1.Pod // namespace/name
	listed     chan struct{}          // closed once a client has been sent every pod
	listedOnce sync.Once
}

// NewPodAPI starts a PodAPI on loopback over TLS, speaking HTTP/2 as
// kube-apiserver does: client-go then sends every read over one connection,
// as it does in a cluster, instead of one connection per request in flight.
func NewPodAPI() *PodAPI {
	a := &PodAPI{pods: map[string]*corev1.Pod{}, listed: make(chan struct{})}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.EnableHTTP2 = true
	a.srv.StartTLS()
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

// PodsListed is closed once a client has been sent every pod of a list of
// all namespaces (a watch-list's initial events and their bookmark, or a
// list's last page) and the writes returned: the client has read all but
// what the socket buffers hold, so its cache holds (nearly) every pod.
func (a *PodAPI) PodsListed() <-chan struct{} { return a.listed }

func (a *PodAPI) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && isPodCollection(parts):
		ns := ""
		if len(parts) == 5 {
			ns = parts[3]
		}
		a.servePods(w, r, ns)
		return
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		serveList(w, r, "NodeList", nil, nil)
		return
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
		writeJSON(w, resources("v1", metav1.APIResource{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "list", "watch"}},
			metav1.APIResource{Name: "nodes", Kind: "Node", Verbs: []string{"get", "list", "watch"}},
			metav1.APIResource{Name: "events", Kind: "Event", Namespaced: true, Verbs: []string{"create"}},
			metav1.APIResource{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"get", "list", "watch", "create", "update"}}))
	case r.URL.Path == "/apis/policy/v1":
		writeJSON(w, resources("policy/v1", metav1.APIResource{Name: "poddisruptionbudgets", Kind: "PodDisruptionBudget", Namespaced: true, Verbs: []string{"list", "watch", "create", "delete"}}))
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
	case len(parts) == 6 && parts[1] == "policy" && parts[5] == "poddisruptionbudgets",
		len(parts) == 4 && parts[1] == "policy" && parts[3] == "poddisruptionbudgets":
		// None: the job budgets' watch, and rule 5d's list, see an empty namespace.
		serveListOf(w, r, "policy/v1", "PodDisruptionBudgetList", nil, nil)
	case len(parts) == 5 && parts[0] == "api" && parts[4] == "configmaps",
		len(parts) == 3 && parts[0] == "api" && parts[2] == "configmaps":
		// None: the lost-job records' watch sees an empty namespace.
		serveListOf(w, r, "v1", "ConfigMapList", nil, nil)
	default:
		notFound(w)
	}
}

// isPodCollection: /api/v1/pods or /api/v1/namespaces/NS/pods.
func isPodCollection(parts []string) bool {
	return len(parts) == 3 && parts[0] == "api" && parts[2] == "pods" ||
		len(parts) == 5 && parts[0] == "api" && parts[2] == "namespaces" && parts[4] == "pods"
}

// servePods lists or watches the pods of ns ("": all).
func (a *PodAPI) servePods(w http.ResponseWriter, r *http.Request, ns string) {
	a.mu.Lock()
	keys := make([]string, 0, len(a.pods))
	for k := range a.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []any
	for _, k := range keys {
		if p := a.pods[k]; ns == "" || p.Namespace == ns {
			out := p.DeepCopy()
			out.APIVersion, out.Kind = "v1", "Pod"
			if out.ResourceVersion == "" {
				out.ResourceVersion = "1"
			}
			items = append(items, out)
		}
	}
	a.mu.Unlock()
	serveList(w, r, "PodList", items, func() {
		if ns == "" {
			a.listedOnce.Do(func() { close(a.listed) })
		}
	})
}

// page cuts a list to the request's limit from its continue token (an
// offset, as opaque to the client as the API server's), as the API server
// pages: a reflector lists 500 at a time.
func page(r *http.Request, items []any) (out []any, cont string) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		return items, ""
	}
	from, _ := strconv.Atoi(q.Get("continue"))
	from = min(max(from, 0), len(items))
	to := min(from+limit, len(items))
	if to < len(items) {
		cont = strconv.Itoa(to)
	}
	return items[from:to], cont
}

// serveList answers a list with items, or a watch: the items as ADDED events
// and the bookmark that ends a watch-list's initial events when asked for
// them, then nothing until the client leaves. sent, if set, runs once every
// item has been written (the last page, or the initial events).
func serveList(w http.ResponseWriter, r *http.Request, kind string, items []any, sent func()) {
	serveListOf(w, r, "v1", kind, items, sent)
}

// serveListOf is serveList of a kind of group version apiVersion.
func serveListOf(w http.ResponseWriter, r *http.Request, apiVersion, kind string, items []any, sent func()) {
	if sent == nil {
		sent = func() {}
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		items, cont := page(r, items)
		if items == nil {
			items = []any{}
		}
		meta := map[string]any{"resourceVersion": "1"}
		if cont != "" {
			meta["continue"] = cont
		}
		writeJSON(w, map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "items": items})
		if cont == "" {
			sent()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	if q.Get("sendInitialEvents") == "true" {
		for _, it := range items {
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": it})
		}
		_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{
			"apiVersion": apiVersion, "kind": strings.TrimSuffix(kind, "List"),
			"metadata": map[string]any{"resourceVersion": "1", "annotations": map[string]string{"k8s.io/initial-events-end": "true"}},
		}})
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if q.Get("sendInitialEvents") == "true" {
		sent()
	}
	<-r.Context().Done()
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
