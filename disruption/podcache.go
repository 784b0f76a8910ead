package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"

	"github.com/runner-guard/runner-guard/webhook"
)

// cachedPod is a pod as the controllers' cache holds it: the API server's
// JSON decoded straight into the fields the hint and drain controllers and
// the runner resolver read (metadata, node, containers' names and
// environment, phase, start time, conditions' type and status, container
// states), and nothing else. A corev1.Pod is 1.2 KiB before any of its
// fields is set, and a cluster's runner pods are most of what the cache
// holds: 10,000 of them must fit beside the webhook's load (issue 17's
// rss_10k_runner_pods_mib). The controllers never see this type: podReader
// hands them *corev1.Pod.
type cachedPod struct {
	metav1.TypeMeta `json:",inline"`
	// ObjectMeta's Labels and Annotations are always nil: labels and
	// annotations hold them.
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cachedPodSpec   `json:"spec,omitempty"`
	Status            cachedPodStatus `json:"status,omitempty"`

	// labels and annotations are the pod's maps as sorted key-value pairs: a
	// map of a few entries costs about 400 bytes, its pairs 32 per entry,
	// and at 10,000 pods the two maps were a third of the cache.
	labels, annotations pairs
}

// cachedPodWire is cachedPod as the API server's JSON spells it, with the
// labels and annotations as maps.
type cachedPodWire struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cachedPodSpec   `json:"spec,omitempty"`
	Status            cachedPodStatus `json:"status,omitempty"`
}

// UnmarshalJSON decodes a pod as the API server's JSON serializer does
// (case-sensitive, integers kept), keeping its maps as pairs.
func (p *cachedPod) UnmarshalJSON(data []byte) error {
	var w cachedPodWire
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &w); err != nil {
		return err
	}
	labels, annotations := pairsOf(w.Labels), pairsOf(w.Annotations)
	w.Labels, w.Annotations = nil, nil
	*p = cachedPod{TypeMeta: w.TypeMeta, ObjectMeta: w.ObjectMeta, Spec: w.Spec, Status: w.Status, labels: labels, annotations: annotations}
	return nil
}

// MarshalJSON encodes the pod with its maps, so a JSON round trip (a fake
// client's, a patch's) keeps them.
func (p *cachedPod) MarshalJSON() ([]byte, error) {
	w := cachedPodWire{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta, Spec: p.Spec, Status: p.Status}
	w.Labels, w.Annotations = p.labels.asMap(), p.annotations.asMap()
	return json.Marshal(w)
}

// GetLabels implements metav1.Object; the map is a copy.
func (p *cachedPod) GetLabels() map[string]string { return p.labels.asMap() }

// SetLabels implements metav1.Object.
func (p *cachedPod) SetLabels(m map[string]string) { p.labels = pairsOf(m) }

// GetAnnotations implements metav1.Object; the map is a copy.
func (p *cachedPod) GetAnnotations() map[string]string { return p.annotations.asMap() }

// SetAnnotations implements metav1.Object.
func (p *cachedPod) SetAnnotations(m map[string]string) { p.annotations = pairsOf(m) }

// annotation is one annotation's value, without building the map.
func (p *cachedPod) annotation(key string) string { return p.annotations.Get(key) }

// carriesOurs reports a pod carrying something runner-guard must follow up:
// hints it owns, or its job budget's label.
func (p *cachedPod) carriesOurs() bool {
	return p.annotation(AnnotationOwned) != "" || p.labels.Get(webhook.LabelJobBudget) != ""
}

// pairs is a string map as key, value, key, value, ... sorted by key. It is
// never written in place: a change replaces it.
type pairs []string

func pairsOf(m map[string]string) pairs {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(pairs, 0, 2*len(m))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}

var _ labels.Labels = pairs(nil)

// Lookup implements labels.Labels, so a selector matches pairs as they are.
func (p pairs) Lookup(key string) (string, bool) {
	for i := 0; i+1 < len(p); i += 2 {
		if p[i] == key {
			return p[i+1], true
		}
	}
	return "", false
}

// Has implements labels.Labels.
func (p pairs) Has(key string) bool {
	_, ok := p.Lookup(key)
	return ok
}

// Get implements labels.Labels: the value, "" when key is absent.
func (p pairs) Get(key string) string {
	v, _ := p.Lookup(key)
	return v
}

// asMap is p as a new map; nil when p is empty.
func (p pairs) asMap() map[string]string {
	if len(p) == 0 {
		return nil
	}
	m := make(map[string]string, len(p)/2)
	for i := 0; i+1 < len(p); i += 2 {
		m[p[i]] = p[i+1]
	}
	return m
}

type cachedPodSpec struct {
	NodeName string `json:"nodeName,omitempty"`
	// TerminationGracePeriodSeconds tells whether a NodeClaim's deadline had
	// passed for the pod when it was deleted (the lost-job watch).
	TerminationGracePeriodSeconds *int64            `json:"terminationGracePeriodSeconds,omitempty"`
	Containers                    []cachedContainer `json:"containers,omitempty"`
}

type cachedContainer struct {
	Name string          `json:"name"`
	Env  []corev1.EnvVar `json:"env,omitempty"`
}

type cachedPodStatus struct {
	Phase corev1.PodPhase `json:"phase,omitempty"`
	// Reason is "Evicted" for a pod the kubelet evicted (the lost-job watch).
	Reason            string                  `json:"reason,omitempty"`
	StartTime         *metav1.Time            `json:"startTime,omitempty"`
	Conditions        []cachedCondition       `json:"conditions,omitempty"`
	ContainerStatuses []cachedContainerStatus `json:"containerStatuses,omitempty"`
}

type cachedCondition struct {
	Type   corev1.PodConditionType `json:"type"`
	Status corev1.ConditionStatus  `json:"status"`
	// Reason tells a DisruptionTarget's cause (the lost-job watch).
	Reason string `json:"reason,omitempty"`
}

type cachedContainerStatus struct {
	Name         string                `json:"name"`
	State        corev1.ContainerState `json:"state,omitempty"`
	Ready        bool                  `json:"ready"`
	RestartCount int32                 `json:"restartCount"`
	Started      *bool                 `json:"started,omitempty"`
}

// cachedPodList is the list the cache's informer decodes.
type cachedPodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []cachedPod `json:"items"`
}

var (
	_ client.Object     = &cachedPod{}
	_ client.ObjectList = &cachedPodList{}
	_ client.Reader     = podReader{}
)

// DeepCopyObject implements runtime.Object.
func (p *cachedPod) DeepCopyObject() runtime.Object { return p.deepCopy() }

func (p *cachedPod) deepCopy() *cachedPod {
	if p == nil {
		return nil
	}
	out := &cachedPod{TypeMeta: p.TypeMeta, labels: slices.Clone(p.labels), annotations: slices.Clone(p.annotations)}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.NodeName = p.Spec.NodeName
	out.Spec.TerminationGracePeriodSeconds = copyInt64(p.Spec.TerminationGracePeriodSeconds)
	if p.Spec.Containers != nil {
		out.Spec.Containers = make([]cachedContainer, len(p.Spec.Containers))
		for i, c := range p.Spec.Containers {
			out.Spec.Containers[i] = cachedContainer{Name: c.Name, Env: copyEnv(c.Env)}
		}
	}
	out.Status.Phase = p.Status.Phase
	out.Status.StartTime = p.Status.StartTime.DeepCopy()
	out.Status.Conditions = append([]cachedCondition(nil), p.Status.Conditions...)
	if p.Status.ContainerStatuses != nil {
		out.Status.ContainerStatuses = make([]cachedContainerStatus, len(p.Status.ContainerStatuses))
		for i, cs := range p.Status.ContainerStatuses {
			out.Status.ContainerStatuses[i] = cachedContainerStatus{Name: cs.Name, Ready: cs.Ready, RestartCount: cs.RestartCount, Started: copyBool(cs.Started)}
			cs.State.DeepCopyInto(&out.Status.ContainerStatuses[i].State)
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *cachedPodList) DeepCopyObject() runtime.Object {
	out := &cachedPodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]cachedPod, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].deepCopy()
		}
	}
	return out
}

// pod is the cached pod as a new *corev1.Pod (see podInto).
func (p *cachedPod) pod() *corev1.Pod {
	out := &corev1.Pod{}
	p.podInto(out)
	return out
}

// podInto writes the cached pod into out as a *corev1.Pod that shares
// nothing with p: the cache hands podReader its own objects (no deep copy
// first), and a caller may write to what it reads (a patch decodes the
// answer into it).
func (p *cachedPod) podInto(out *corev1.Pod) {
	*out = corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Labels, out.Annotations = p.labels.asMap(), p.annotations.asMap()
	out.Spec.NodeName = p.Spec.NodeName
	out.Spec.TerminationGracePeriodSeconds = copyInt64(p.Spec.TerminationGracePeriodSeconds)
	if len(p.Spec.Containers) > 0 {
		out.Spec.Containers = make([]corev1.Container, len(p.Spec.Containers))
		for i, ct := range p.Spec.Containers {
			out.Spec.Containers[i] = corev1.Container{Name: ct.Name, Env: copyEnv(ct.Env)}
		}
	}
	out.Status.Phase, out.Status.Reason, out.Status.StartTime = p.Status.Phase, p.Status.Reason, p.Status.StartTime.DeepCopy()
	if len(p.Status.Conditions) > 0 {
		out.Status.Conditions = make([]corev1.PodCondition, len(p.Status.Conditions))
		for i, cond := range p.Status.Conditions {
			out.Status.Conditions[i] = corev1.PodCondition{Type: cond.Type, Status: cond.Status, Reason: cond.Reason}
		}
	}
	if len(p.Status.ContainerStatuses) > 0 {
		out.Status.ContainerStatuses = make([]corev1.ContainerStatus, len(p.Status.ContainerStatuses))
		for i, cs := range p.Status.ContainerStatuses {
			st := &out.Status.ContainerStatuses[i]
			st.Name, st.Ready, st.RestartCount, st.Started = cs.Name, cs.Ready, cs.RestartCount, copyBool(cs.Started)
			cs.State.DeepCopyInto(&st.State)
		}
	}
}

// copyEnv is a deep copy of env (nil stays nil).
func copyEnv(env []corev1.EnvVar) []corev1.EnvVar {
	if env == nil {
		return nil
	}
	out := make([]corev1.EnvVar, len(env))
	for i := range env {
		env[i].DeepCopyInto(&out[i])
	}
	return out
}

func copyBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}

func copyInt64(i *int64) *int64 {
	if i == nil {
		return nil
	}
	v := *i
	return &v
}

// cacheScheme is the scheme of the controllers' cache: pods decode into
// cachedPod; Nodes are whole (few, and the drain reads their taints and
// conditions); PodDisruptionBudgets are whole (the job budgets' view of
// their namespace); EphemeralRunners are unstructured and need no entry.
func cacheScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	gv := corev1.SchemeGroupVersion
	s.AddKnownTypeWithName(gv.WithKind("Pod"), &cachedPod{})
	s.AddKnownTypeWithName(gv.WithKind("PodList"), &cachedPodList{})
	s.AddKnownTypes(gv, &corev1.Node{}, &corev1.NodeList{})
	metav1.AddToGroupVersion(s, gv)
	s.AddKnownTypes(policyv1.SchemeGroupVersion, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudgetList{})
	metav1.AddToGroupVersion(s, policyv1.SchemeGroupVersion)
	if err := metav1.AddMetaToScheme(s); err != nil {
		return nil, fmt.Errorf("cache scheme: %w", err)
	}
	return s, nil
}

// cacheConfig is cfg for the cache's watches: JSON, because controller-runtime
// asks for protobuf for every built-in kind, and protobuf decodes only into
// the generated corev1.Pod.
func cacheConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = runtime.ContentTypeJSON
	out.AcceptContentTypes = runtime.ContentTypeJSON
	return out
}

// podReader reads the cache as the controllers expect: a Get of a
// *corev1.Pod or a List of a *corev1.PodList reads the cached pods and
// converts them; anything else goes to the cache as it is.
type podReader struct{ cache client.Reader }

// Get implements client.Reader.
func (r podReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return r.cache.Get(ctx, key, obj, opts...)
	}
	var cp cachedPod // shares its slices with the cache's object (no deep copy)
	if err := r.cache.Get(ctx, key, &cp, opts...); err != nil {
		return err
	}
	cp.podInto(pod)
	return nil
}

// List implements client.Reader.
func (r podReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return r.cache.List(ctx, list, opts...)
	}
	var cl cachedPodList // shares its items' slices with the cache (no deep copy)
	if err := r.cache.List(ctx, &cl, opts...); err != nil {
		return err
	}
	pods.ListMeta = cl.ListMeta
	pods.Items = make([]corev1.Pod, len(cl.Items))
	for i := range cl.Items {
		cl.Items[i].podInto(&pods.Items[i])
	}
	return nil
}
