package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/runner-guard/runner-guard/webhook/activation"
)

// Objects are the documents of a render, in order.
type Objects []*unstructured.Unstructured

// Parse decodes a multi-document YAML (or JSON) stream, skipping empty
// documents.
func Parse(data []byte) (Objects, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs Objects
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

// MustParse is Parse, failing t on an error.
func MustParse(t testing.TB, data []byte) Objects {
	t.Helper()
	objs, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// Find is the object of that kind and name, or nil.
func (objs Objects) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Where keeps the objects keep is true for.
func (objs Objects) Where(keep func(*unstructured.Unstructured) bool) Objects {
	var out Objects
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

// OfKind keeps the objects of one kind.
func (objs Objects) OfKind(kind string) Objects {
	return objs.Where(func(o *unstructured.Unstructured) bool { return o.GetKind() == kind })
}

// InNamespace keeps the objects of one namespace ("" for cluster-scoped ones).
func (objs Objects) InNamespace(ns string) Objects {
	return objs.Where(func(o *unstructured.Unstructured) bool { return o.GetNamespace() == ns })
}

// Names are the objects' Kind/name, sorted.
func (objs Objects) Names() []string {
	ns := make([]string, 0, len(objs))
	for _, o := range objs {
		ns = append(ns, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ns)
	return ns
}

// Typed converts an object into a typed one, rejecting unknown fields.
func Typed[T any](u *unstructured.Unstructured) (*T, error) {
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return &out, nil
}

// Get is the named object as a typed one; it fails t when the render lacks
// it or it has a field T does not.
func Get[T any](t testing.TB, objs Objects, kind, name string) *T {
	t.Helper()
	u := objs.Find(kind, name)
	if u == nil {
		t.Fatalf("no %s %q among %v", kind, name, objs.Names())
	}
	out, err := Typed[T](u)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ActivatedPolicy checks a rendered entry ships with failurePolicy Ignore
// (nothing fails before a replica serves) and returns the policy a serving
// replica sets it to, as package activation reads the configuration's
// annotations.
func ActivatedPolicy(t testing.TB, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, wh admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.FailurePolicyType {
	t.Helper()
	var shipped admissionregistrationv1.FailurePolicyType
	if wh.FailurePolicy != nil {
		shipped = *wh.FailurePolicy
	}
	if shipped != admissionregistrationv1.Ignore {
		t.Errorf("%s is rendered with failurePolicy %q, want Ignore until a replica serves", wh.Name, shipped)
	}
	wanted, err := activation.Wanted(vwc)
	if err != nil {
		t.Fatal(err)
	}
	kind := activation.KindOf(wh)
	p, ok := wanted[kind]
	if !ok {
		t.Fatalf("%s (%q) has no wanted failurePolicy annotation", wh.Name, kind)
	}
	return p
}

// JSON is v's JSON form, for comparing rendered and typed values and for
// showing them in a failure.
func JSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// EqualJSON compares two values by their JSON form.
func EqualJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
