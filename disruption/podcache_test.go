package disruption

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// fullRunnerPod is a legacy runner pod with much that the cache must drop.
func fullRunnerPod(name, node string) *corev1.Pod {
	full := fixture.MakeLegacyRunnerPod("ci", name).Org("acme").RunnerID(7).Node(node).
		Annotation(AnnotationDoNotDisrupt, "true").Running().Obj()
	full.Spec.Volumes = []corev1.Volume{{Name: "work"}}
	full.Spec.Containers[0].Image = "runner:1"
	full.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
	full.Status.ContainerStatuses[0].Image = "runner:1"
	full.Status.Conditions = append(full.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "evicted"})
	full.Status.Reason = "Evicted"
	return full
}

// decodeCached decodes pod's JSON as the cache's informer does.
func decodeCached(t *testing.T, pod *corev1.Pod) *cachedPod {
	t.Helper()
	scheme, err := cacheScheme()
	if err != nil {
		t.Fatal(err)
	}
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(scheme).UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatalf("decode a pod with the cache's scheme: %v", err)
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		t.Fatalf("the cache's scheme decodes a pod into %T, want *cachedPod", obj)
	}
	return cp
}

// The cached pod keeps what the controllers and the resolver read, and drops
// the rest of the spec and status.
func TestCachedPodKeepsWhatTheControllersRead(t *testing.T) {
	full := fullRunnerPod("runner-1", "n1")
	cached := decodeCached(t, full)
	pod := cached.pod()
	for what, same := range map[string]bool{
		"maps held as pairs": cached.ObjectMeta.Labels == nil && cached.ObjectMeta.Annotations == nil &&
			len(cached.labels) == 2*len(full.Labels) && len(cached.annotations) == 2*len(full.Annotations),
		"one annotation read": cached.annotation(AnnotationDoNotDisrupt) == "true" && cached.annotation("absent") == "",
		"name and uid":        pod.Name == full.Name && pod.Namespace == full.Namespace && pod.UID == full.UID,
		"labels":              equality.Semantic.DeepEqual(pod.Labels, full.Labels),
		"annotations":         equality.Semantic.DeepEqual(pod.Annotations, full.Annotations),
		"owners":              equality.Semantic.DeepEqual(pod.OwnerReferences, full.OwnerReferences),
		"node":                pod.Spec.NodeName == "n1",
		"container env":       len(pod.Spec.Containers) == 1 && equality.Semantic.DeepEqual(pod.Spec.Containers[0].Env, full.Spec.Containers[0].Env),
		"container state":     len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].State.Running != nil && pod.Status.ContainerStatuses[0].Ready,
		"phase and start":     pod.Status.Phase == corev1.PodRunning && pod.Status.StartTime.Unix() == full.Status.StartTime.Unix(),
		"status reason":       pod.Status.Reason == "Evicted",
		"conditions":          len(pod.Status.Conditions) == len(full.Status.Conditions) && podReadyCondition(pod) && pod.Status.Conditions[len(pod.Status.Conditions)-1].Type == corev1.DisruptionTarget,
		"volumes dropped":     pod.Spec.Volumes == nil,
		"image dropped":       pod.Spec.Containers[0].Image == "" && pod.Status.ContainerStatuses[0].Image == "",
		"tolerations gone":    pod.Spec.Tolerations == nil,
		"messages gone":       pod.Status.Conditions[len(pod.Status.Conditions)-1].Message == "",
		"disruption reason":   pod.Status.Conditions[len(pod.Status.Conditions)-1].Reason == "EvictionByEvictionAPI",
	} {
		if !same {
			t.Errorf("%s: not as the controllers need it", what)
		}
	}
}

func podReadyCondition(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// A JSON round trip (a fake client's, a patch's) keeps the labels and
// annotations the cached pod holds as pairs.
func TestCachedPodJSONRoundTripKeepsItsMaps(t *testing.T) {
	orig := decodeCached(t, fullRunnerPod("runner-1", "n1"))
	raw, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var back cachedPod
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(back.pod(), orig.pod()) {
		t.Errorf("after a JSON round trip:\n got %+v\nwant %+v", back.pod().ObjectMeta, orig.pod().ObjectMeta)
	}
	back.SetLabels(map[string]string{"b": "2", "a": "1"})
	if got := back.GetLabels(); len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Errorf("SetLabels then GetLabels: %v", got)
	}
}

// Neither a deep copy the cache hands out nor the *corev1.Pod podReader
// makes shares anything with the cached pod: the cache gives podReader its
// own objects, and a caller may write to what it read (a patch decodes the
// answer into it).
func TestCachedPodCopiesShareNothing(t *testing.T) {
	for name, write := range map[string]func(*cachedPod){
		"a deep copy": func(c *cachedPod) {
			cp := c.DeepCopyObject().(*cachedPod)
			cp.labels[1], cp.annotations[1] = "changed", "changed"
			cp.OwnerReferences[0].Name, cp.Finalizers[0] = "changed", "changed"
			cp.Spec.Containers[0].Env[0].Value = "changed"
			cp.Status.Conditions[0].Status = corev1.ConditionFalse
			cp.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.Now()
			cp.Status.StartTime.Time = cp.Status.StartTime.Add(1)
		},
		"the converted pod": func(c *cachedPod) {
			out := c.pod()
			out.Labels["x"], out.Annotations[AnnotationDoNotDisrupt] = "y", "false"
			out.OwnerReferences[0].Name, out.Finalizers[0] = "changed", "changed"
			out.Spec.Containers[0].Env[0].Value = "changed"
			out.Status.Conditions[0].Status = corev1.ConditionFalse
			out.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.Now()
			out.Status.StartTime.Time = out.Status.StartTime.Add(1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			full := fullRunnerPod("runner-1", "n1")
			full.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ReplicaSet", Name: "rs", UID: "u1"}}
			full.Finalizers = []string{"example.com/f"}
			cached := decodeCached(t, full)
			before := cached.pod().DeepCopy()
			write(cached)
			if after := cached.pod(); !equality.Semantic.DeepEqual(after, before) {
				t.Errorf("writing to %s changed the cached pod:\nbefore %+v\nafter  %+v", name, before, after)
			}
		})
	}
}

// podReader hands the controllers *corev1.Pod from the cached pods, by key
// and by the node index, and leaves other kinds to the cache.
func TestPodReaderConvertsPods(t *testing.T) {
	scheme, err := cacheScheme()
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(node, decodeCached(t, fullRunnerPod("a", "n1")), decodeCached(t, fullRunnerPod("b", "n1")), decodeCached(t, fullRunnerPod("c", "n2"))).
		WithIndex(&cachedPod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*cachedPod).Spec.NodeName} }).Build()
	r := podReader{cache: c}
	ctx := context.Background()

	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: "ci", Name: "a"}, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Name != "a" || pod.Spec.NodeName != "n1" || len(pod.Spec.Containers) != 1 {
		t.Errorf("Get: %+v", pod)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{podNodeNameIndex: "n1"}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pods.Items {
		names[p.Name] = true
	}
	if len(names) != 2 || !names["a"] || !names["b"] {
		t.Errorf("List on node n1: %v, want a and b", names)
	}
	// A label selector reads the labels the cached pods hold as pairs.
	if err := r.List(ctx, &pods, client.MatchingLabels{"runner-deployment-name": "rd"}); err != nil || len(pods.Items) != 3 {
		t.Errorf("List by a label all three carry: %d pods, %v", len(pods.Items), err)
	}
	if err := r.List(ctx, &pods, client.MatchingLabels{"runner-deployment-name": "other"}); err != nil || len(pods.Items) != 0 {
		t.Errorf("List by a label none carries: %d pods, %v", len(pods.Items), err)
	}
	got := &corev1.Node{}
	if err := r.Get(ctx, client.ObjectKey{Name: "n1"}, got); err != nil || !got.Spec.Unschedulable {
		t.Errorf("Get of a Node through podReader: %v %+v", err, got.Spec)
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: "ci", Name: "gone"}, &corev1.Pod{}); err == nil {
		t.Error("Get of a pod the cache lacks: no error")
	}
}

// The cache's watches ask for JSON: controller-runtime would ask for
// protobuf, which decodes only into corev1.Pod.
func TestCacheConfigAsksForJSON(t *testing.T) {
	in := &rest.Config{Host: "https://example.test", ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}}
	out := cacheConfig(in)
	if out.ContentType != runtime.ContentTypeJSON || out.AcceptContentTypes != runtime.ContentTypeJSON {
		t.Errorf("cache config content type %q accept %q, want JSON", out.ContentType, out.AcceptContentTypes)
	}
	if in.ContentType != runtime.ContentTypeProtobuf {
		t.Error("cacheConfig changed the manager's config")
	}
}

// The lost-job watch hears of each guarded pod deleted, also one whose
// deletion the watch missed, and of no other pod.
func TestPodDeletesHandsOverGuardedPods(t *testing.T) {
	guarded := decodeCached(t, fullRunnerPod("runner-1", "n1"))
	other := decodeCached(t, fullRunnerPod("app-1", "n1"))
	isRunner := func(cp *cachedPod) bool { return cp.Name != "app-1" }
	tests := map[string]struct {
		obj  any
		want string
	}{
		"a guarded pod":                    {obj: guarded, want: "runner-1"},
		"a deletion the watch missed":      {obj: toolscache.DeletedFinalStateUnknown{Key: "ci/runner-1", Obj: guarded}, want: "runner-1"},
		"another pod":                      {obj: other},
		"a missed deletion of another pod": {obj: toolscache.DeletedFinalStateUnknown{Key: "ci/app-1", Obj: other}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []*corev1.Pod
			h := podDeletes(context.Background(), isRunner, func(_ context.Context, p *corev1.Pod) { got = append(got, p) })
			h.OnDelete(tc.obj)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("handed over %s, want nothing", got[0].Name)
			case tc.want != "" && (len(got) != 1 || got[0].Name != tc.want || got[0].Spec.NodeName != "n1"):
				t.Errorf("handed over %v, want pod %s on its node", got, tc.want)
			}
		})
	}
}
