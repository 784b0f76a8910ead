package arc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

const ns = "runners"

// newFakeClient serves objs; funcs, when set, intercept calls.
func newFakeClient(funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

// scaleSetPod is the pod ARC makes for er: same name, controlled by it.
func scaleSetPod(er *fixture.EphemeralRunnerWrapper) *corev1.Pod {
	return fixture.MakeScaleSetRunnerPod(er.GetNamespace(), er.GetName()).OwnedByEphemeralRunner(er).Running().Obj()
}

// mustScope panics on an invalid scope: test tables hold only valid ones.
func mustScope(s ghclient.Scope, err error) ghclient.Scope {
	if err != nil {
		panic(err)
	}
	return s
}

func TestResolveReadsEphemeralRunner(t *testing.T) {
	repo70 := strings.Repeat("r", 70)
	cases := map[string]struct {
		er        *fixture.EphemeralRunnerWrapper
		wantScope ghclient.Scope
		wantName  string
		wantID    int64
		wantBase  string // "" means https://api.github.com/
	}{
		"org on github.com": {
			er:        fixture.MakeEphemeralRunner(ns, "set-abc-runner-x1").ConfigURL("https://github.com/acme").RunnerID(42).RunnerName("set-abc-runner-x1"),
			wantScope: mustScope(ghclient.OrgScope("acme")),
			wantName:  "set-abc-runner-x1", wantID: 42,
		},
		"repository": {
			er:        fixture.MakeEphemeralRunner(ns, "r1").ConfigURL("https://github.com/acme/app").RunnerID(7).RunnerName("r1"),
			wantScope: mustScope(ghclient.RepoScope("acme/app")),
			wantName:  "r1", wantID: 7,
		},
		"repository name of 70 characters (ARC's label would be cut)": {
			er:        fixture.MakeEphemeralRunner(ns, "r2").ConfigURL("https://github.com/acme/" + repo70).RunnerID(8),
			wantScope: mustScope(ghclient.RepoScope("acme/" + repo70)),
			wantName:  "r2", wantID: 8,
		},
		".github repository (ARC's label would read github)": {
			er:        fixture.MakeEphemeralRunner(ns, "r3").ConfigURL("https://github.com/acme/.github").RunnerID(9),
			wantScope: mustScope(ghclient.RepoScope("acme/.github")),
			wantName:  "r3", wantID: 9,
		},
		"enterprise": {
			er:        fixture.MakeEphemeralRunner(ns, "r4").ConfigURL("https://github.com/enterprises/big").RunnerID(10),
			wantScope: mustScope(ghclient.EnterpriseScope("big")),
			wantName:  "r4", wantID: 10,
		},
		"GHES repository with a trailing slash": {
			er:        fixture.MakeEphemeralRunner(ns, "r5").ConfigURL("https://ghes.example.com/acme/app/").RunnerID(11),
			wantScope: mustScope(ghclient.RepoScope("acme/app")),
			wantName:  "r5", wantID: 11, wantBase: "https://ghes.example.com/api/v3/",
		},
		"GHE.com organization": {
			er:        fixture.MakeEphemeralRunner(ns, "r6").ConfigURL("https://acme.ghe.com/acme"),
			wantScope: mustScope(ghclient.OrgScope("acme")),
			wantName:  "r6", wantBase: "https://api.acme.ghe.com/",
		},
		"runnerName differs from the pod name": {
			er:        fixture.MakeEphemeralRunner(ns, "r7").RunnerName("registered-as").RunnerID(12),
			wantScope: mustScope(ghclient.OrgScope("org")),
			wantName:  "registered-as", wantID: 12,
		},
		"not yet registered: no runnerId, no runnerName": {
			er:        fixture.MakeEphemeralRunner(ns, "r8").Phase("Pending"),
			wantScope: mustScope(ghclient.OrgScope("org")),
			wantName:  "r8",
		},
		"runnerId decoded as a float": {
			er:        fixture.MakeEphemeralRunner(ns, "r9").Field(float64(1234), "status", "runnerId"),
			wantScope: mustScope(ghclient.OrgScope("org")),
			wantName:  "r9", wantID: 1234,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			er := tc.er.Obj()
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, er)})
			run, err := r.Resolve(context.Background(), scaleSetPod(tc.er))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if run == nil {
				t.Fatal("Resolve returned no runner")
			}
			if run.Scope != tc.wantScope || run.Name != tc.wantName || run.ID != tc.wantID {
				t.Errorf("got scope %v name %q ID %d, want %v %q %d", run.Scope, run.Name, run.ID, tc.wantScope, tc.wantName, tc.wantID)
			}
			if tc.wantBase == "" {
				tc.wantBase = ghclient.DefaultBaseURL
			}
			if run.BaseURL != tc.wantBase {
				t.Errorf("BaseURL = %q, want %q", run.BaseURL, tc.wantBase)
			}
			if want := (types.NamespacedName{Namespace: ns, Name: er.GetName()}); run.EphemeralRunner != want || run.UID != er.GetUID() {
				t.Errorf("got EphemeralRunner %s UID %s, want %s %s", run.EphemeralRunner, run.UID, want, er.GetUID())
			}
			if run.Creds != nil {
				t.Errorf("Creds = %+v outside ARC credentials mode, want nil", run.Creds)
			}
			if run.Removed != "" {
				t.Errorf("Removed = %q, want empty", run.Removed)
			}
		})
	}
}

func TestResolveRemoved(t *testing.T) {
	cases := map[string]struct {
		er          *fixture.EphemeralRunnerWrapper
		wantRemoved string // substring; "" means not removed
	}{
		"running":            {er: fixture.MakeEphemeralRunner(ns, "a")},
		"pending":            {er: fixture.MakeEphemeralRunner(ns, "a").Phase("Pending")},
		"running with a job": {er: fixture.MakeEphemeralRunner(ns, "a").JobID("99")},
		"deleting, registration finalizer present (ARC waits for the job)": {er: fixture.MakeEphemeralRunner(ns, "a").Deleting().Registered(true)},
		"deleting, registration finalizer gone": {
			er: fixture.MakeEphemeralRunner(ns, "a").Deleting().Registered(false), wantRemoved: "being deleted",
		},
		"phase Succeeded": {er: fixture.MakeEphemeralRunner(ns, "a").Phase("Succeeded"), wantRemoved: "phase Succeeded"},
		"phase Failed":    {er: fixture.MakeEphemeralRunner(ns, "a").Phase("Failed"), wantRemoved: "phase Failed"},
		"phase Outdated":  {er: fixture.MakeEphemeralRunner(ns, "a").Phase("Outdated"), wantRemoved: "phase Outdated"},
		"registration finalizer gone but not deleting": {er: fixture.MakeEphemeralRunner(ns, "a").Registered(false)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, tc.er.Obj())})
			run, err := r.Resolve(context.Background(), scaleSetPod(tc.er))
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			switch {
			case tc.wantRemoved == "" && run.Removed != "":
				t.Errorf("Removed = %q, want not removed", run.Removed)
			case tc.wantRemoved != "" && !strings.Contains(run.Removed, tc.wantRemoved):
				t.Errorf("Removed = %q, want it to mention %q", run.Removed, tc.wantRemoved)
			case tc.wantRemoved != "" && !strings.Contains(run.Removed, "runners/a"):
				t.Errorf("Removed = %q, want it to name the EphemeralRunner", run.Removed)
			}
		})
	}
}

func TestResolveNotAScaleSetPod(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a")
	cases := map[string]*corev1.Pod{
		"nil pod":  nil,
		"no owner": fixture.MakeScaleSetRunnerPod(ns, "a").Obj(),
		"owned by a ReplicaSet": fixture.MakePod(ns, "a").Owner(metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: ptr.To(true)}).Obj(),
		"EphemeralRunner owner that is not the controller": fixture.MakePod(ns, "a").Owner(metav1.OwnerReference{
			APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: "EphemeralRunner", Name: "a", UID: er.GetUID()}).Obj(),
		"EphemeralRunner of another group": fixture.MakePod(ns, "a").Owner(metav1.OwnerReference{
			APIVersion: "example.com/v1", Kind: "EphemeralRunner", Name: "a", UID: "u", Controller: ptr.To(true)}).Obj(),
		"legacy pod of a StatefulSet (RunnerSet)": fixture.MakeLegacyRunnerPod(ns, "a").Owner(metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: "set", UID: "u", Controller: ptr.To(true)}).Obj(),
		"Runner of another group": fixture.MakeLegacyRunnerPod(ns, "a").Owner(metav1.OwnerReference{
			APIVersion: "example.com/v1", Kind: "Runner", Name: "a", UID: "u", Controller: ptr.To(true)}).Obj(),
	}
	for name, pod := range cases {
		t.Run(name, func(t *testing.T) {
			c := newFakeClient(&interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				t.Error("Resolve read an object for a pod without an EphemeralRunner controller")
				return nil
			}}, er.Obj())
			run, err := arc.NewResolver(arc.Options{Reader: c}).Resolve(context.Background(), pod)
			if run != nil || err != nil {
				t.Errorf("Resolve = %+v, %v; want nil, nil", run, err)
			}
		})
	}
}

func TestResolveUnavailable(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a")
	gvk := arc.GroupVersionKind()
	failGet := func(err error) *interceptor.Funcs {
		return &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == gvk {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		}}
	}
	resourceGone := apierrors.NewNotFound(arc.GroupResource(), "")
	cases := map[string]struct {
		funcs      *interceptor.Funcs
		objs       []client.Object
		pod        *corev1.Pod
		wantReason arc.UnavailableReason
		wantName   string // of the EphemeralRunner named in the error, for cases with their own pod
	}{
		"CRD absent (no match for kind)": {
			funcs:      failGet(&meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}),
			wantReason: arc.UnavailableNoKind,
		},
		"CRD removed after discovery (404 on the resource)": {funcs: failGet(resourceGone), wantReason: arc.UnavailableNoKind},
		"RBAC forbidden": {
			funcs:      failGet(apierrors.NewForbidden(arc.GroupResource(), "a", errors.New(`cannot get resource "ephemeralrunners"`))),
			wantReason: arc.UnavailableForbidden,
		},
		"EphemeralRunner gone (finalizers removed by hand)": {wantReason: arc.UnavailableNotFound},
		"owner in a version runner-guard does not know": {
			pod: fixture.MakeScaleSetRunnerPod(ns, "a").Owner(metav1.OwnerReference{
				APIVersion: "actions.github.com/v1beta1", Kind: "EphemeralRunner", Name: "a", UID: "u", Controller: ptr.To(true)}).Obj(),
			wantReason: arc.UnavailableNoKind, wantName: "a",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := tc.objs
			if objs == nil && tc.funcs != nil {
				objs = []client.Object{er.Obj()}
			}
			pod := tc.pod
			if pod == nil {
				pod = scaleSetPod(er)
			}
			run, err := arc.NewResolver(arc.Options{Reader: newFakeClient(tc.funcs, objs...)}).Resolve(context.Background(), pod)
			var ue *arc.UnavailableError
			if !errors.As(err, &ue) {
				t.Fatalf("Resolve = %+v, %v; want an *UnavailableError", run, err)
			}
			if run != nil {
				t.Errorf("Resolve returned a runner with an error: %+v", run)
			}
			want := types.NamespacedName{Namespace: ns, Name: "a"}
			if tc.pod != nil {
				want.Name = tc.wantName
			}
			if ue.Reason != tc.wantReason || ue.EphemeralRunner != want {
				t.Errorf("got reason %s for %s, want %s for %s (%v)", ue.Reason, ue.EphemeralRunner, tc.wantReason, want, err)
			}
		})
	}
}

// A pod that claims an ARC object it does not match is not that object's
// runner: a sibling's name and UID are readable by anyone who can list them.
func TestResolveNotOwner(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a")
	sibling := fixture.MakeEphemeralRunner(ns, "sibling").Obj()
	cases := map[string]struct {
		objs    []client.Object
		pod     *corev1.Pod
		wantWhy string
	}{
		"another EphemeralRunner took the owner's name": {
			objs: []client.Object{fixture.MakeEphemeralRunner(ns, "a").UID("newer").Obj()},
			pod:  scaleSetPod(er), wantWhy: `UID "newer"`,
		},
		"a borrowed controller: the sibling's name and UID on another pod": {
			objs: []client.Object{sibling},
			pod: fixture.MakeScaleSetRunnerPod(ns, "attacker").Owner(metav1.OwnerReference{
				APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: "EphemeralRunner", Name: "sibling", UID: sibling.GetUID(), Controller: ptr.To(true)}).Obj(),
			wantWhy: `this pod is named "attacker"`,
		},
		"owner reference without a name": {
			pod: fixture.MakeScaleSetRunnerPod(ns, "a").Owner(metav1.OwnerReference{
				APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: "EphemeralRunner", UID: "u", Controller: ptr.To(true)}).Obj(),
			wantWhy: "names a runner pod after",
		},
		"a borrowed legacy Runner": {
			objs: []client.Object{legacyRunner("victim", "uid-victim", "acme")},
			pod: fixture.MakeLegacyRunnerPod(ns, "attacker").Owner(metav1.OwnerReference{
				APIVersion: arc.LegacyGroup + "/" + arc.LegacyVersion, Kind: arc.LegacyKind, Name: "victim", UID: "uid-victim", Controller: ptr.To(true)}).Obj(),
			wantWhy: `this pod is named "attacker"`,
		},
		"a legacy Runner with another UID": {
			objs: []client.Object{legacyRunner("r1", "uid-new", "acme")},
			pod: fixture.MakeLegacyRunnerPod(ns, "r1").Owner(metav1.OwnerReference{
				APIVersion: arc.LegacyGroup + "/" + arc.LegacyVersion, Kind: arc.LegacyKind, Name: "r1", UID: "uid-old", Controller: ptr.To(true)}).Obj(),
			wantWhy: `UID "uid-new"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run, err := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, tc.objs...)}).Resolve(context.Background(), tc.pod)
			var no *arc.NotOwnerError
			if !errors.As(err, &no) || run != nil {
				t.Fatalf("Resolve = %+v, %v; want a *NotOwnerError", run, err)
			}
			if !strings.Contains(err.Error(), tc.wantWhy) {
				t.Errorf("error %q does not say %q", err, tc.wantWhy)
			}
		})
	}
}

// legacyRunner is an ARC legacy Runner object in ns.
func legacyRunner(name string, uid types.UID, org string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(arc.LegacyGroupVersionKind())
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(uid)
	_ = unstructured.SetNestedField(u.Object, org, "spec", "organization")
	return u
}

func TestResolveLegacyRunner(t *testing.T) {
	owner := func(name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: arc.LegacyGroup + "/" + arc.LegacyVersion, Kind: arc.LegacyKind, Name: name, UID: uid, Controller: ptr.To(true)}
	}
	withRepo := legacyRunner("r2", "uid-2", "acme")
	_ = unstructured.SetNestedField(withRepo.Object, "acme/app", "spec", "repository")
	empty := legacyRunner("r3", "uid-3", "")
	unstructured.RemoveNestedField(empty.Object, "spec")
	cases := map[string]struct {
		obj       *unstructured.Unstructured
		pod       *corev1.Pod
		wantScope ghclient.Scope
		wantErr   string
	}{
		// The pod's env names another organisation: ARC's object wins.
		"scope from the Runner, not the pod's env": {
			obj: legacyRunner("r1", "uid-1", "acme"), pod: fixture.MakeLegacyRunnerPod(ns, "r1").Org("other-org").Owner(owner("r1", "uid-1")).Obj(),
			wantScope: fixture.Org("acme"),
		},
		"repository beats organization": {
			obj: withRepo, pod: fixture.MakeLegacyRunnerPod(ns, "r2").Owner(owner("r2", "uid-2")).Obj(),
			wantScope: mustScope(ghclient.RepoScope("acme/app")),
		},
		"no scope in the Runner": {
			obj: empty, pod: fixture.MakeLegacyRunnerPod(ns, "r3").Owner(owner("r3", "uid-3")).Obj(),
			wantErr: "none of spec.repository",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run, err := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, tc.obj)}).Resolve(context.Background(), tc.pod)
			if tc.wantErr != "" {
				var inv *arc.InvalidError
				if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve error = %v; want an *InvalidError saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || run == nil {
				t.Fatalf("Resolve = %+v, %v", run, err)
			}
			if run.Scope != tc.wantScope || run.Name != tc.pod.Name || run.Kind != arc.LegacyKind || run.UID != tc.obj.GetUID() {
				t.Errorf("runner %+v; want scope %s, name %s, kind Runner", run, tc.wantScope, tc.pod.Name)
			}
		})
	}
}

func TestResolveTransientErrorIsNotUnavailable(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a")
	c := newFakeClient(&interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewServiceUnavailable("etcd is sad")
	}}, er.Obj())
	_, err := arc.NewResolver(arc.Options{Reader: c}).Resolve(context.Background(), scaleSetPod(er))
	var ue *arc.UnavailableError
	if err == nil || errors.As(err, &ue) || !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Resolve error = %v; want the API error wrapped, not an *UnavailableError", err)
	}
}

func TestResolveInvalid(t *testing.T) {
	cases := map[string]struct {
		er        *fixture.EphemeralRunnerWrapper
		wantField string
		wantIn    []string
	}{
		"config URL without a scope": {
			er: fixture.MakeEphemeralRunner(ns, "a").ConfigURL("https://github.com/"), wantField: "spec.githubConfigUrl",
			wantIn: []string{"runners/a", "https://github.com/"},
		},
		"config URL with too many segments": {
			er: fixture.MakeEphemeralRunner(ns, "a").ConfigURL("https://github.com/a/b/c"), wantField: "spec.githubConfigUrl",
			wantIn: []string{"runners/a", "https://github.com/a/b/c"},
		},
		"config URL not a URL": {
			er: fixture.MakeEphemeralRunner(ns, "a").ConfigURL("github.com/acme"), wantField: "spec.githubConfigUrl",
			wantIn: []string{"runners/a", "github.com/acme"},
		},
		"config URL empty":        {er: fixture.MakeEphemeralRunner(ns, "a").ConfigURL(""), wantField: "spec.githubConfigUrl"},
		"config URL not a string": {er: fixture.MakeEphemeralRunner(ns, "a").Field(int64(3), "spec", "githubConfigUrl"), wantField: "spec.githubConfigUrl"},
		"runnerId a string":       {er: fixture.MakeEphemeralRunner(ns, "a").Field("12", "status", "runnerId"), wantField: "status.runnerId"},
		"runnerId negative":       {er: fixture.MakeEphemeralRunner(ns, "a").RunnerID(-1), wantField: "status.runnerId"},
		"runnerId fractional":     {er: fixture.MakeEphemeralRunner(ns, "a").Field(1.5, "status", "runnerId"), wantField: "status.runnerId"},
		"runnerName a number":     {er: fixture.MakeEphemeralRunner(ns, "a").Field(int64(1), "status", "runnerName"), wantField: "status.runnerName"},
		"status not an object":    {er: fixture.MakeEphemeralRunner(ns, "a").Field("odd", "status"), wantField: "status.runnerId"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, tc.er.Obj())})
			run, err := r.Resolve(context.Background(), scaleSetPod(tc.er))
			var ie *arc.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("Resolve = %+v, %v; want an *InvalidError", run, err)
			}
			if ie.Field != tc.wantField {
				t.Errorf("Field = %q, want %q (%v)", ie.Field, tc.wantField, err)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestRetire(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a")
	run := &arc.Runner{Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: ns, Name: "a"}, UID: er.GetUID()}
	cases := map[string]struct {
		objs    []client.Object
		err     error // returned by Delete instead of deleting
		wantErr bool
	}{
		"deletes the EphemeralRunner": {objs: []client.Object{er.Obj()}},
		"already gone":                {},
		"UID precondition failed: a newer object has the name": {
			objs: []client.Object{er.Obj()},
			err:  apierrors.NewConflict(arc.GroupResource(), "a", errors.New("Precondition failed: UID in precondition: x, UID in object meta: y")),
		},
		"forbidden": {
			objs: []client.Object{er.Obj()}, err: apierrors.NewForbidden(arc.GroupResource(), "a", errors.New("no")), wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got client.DeleteOptions
			deletes := 0
			c := newFakeClient(&interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				deletes++
				got.ApplyOptions(opts)
				if u, ok := obj.(*unstructured.Unstructured); !ok || u.GroupVersionKind() != arc.GroupVersionKind() {
					t.Errorf("deleted %T %v, want an unstructured %v", obj, obj.GetObjectKind().GroupVersionKind(), arc.GroupVersionKind())
				}
				if tc.err != nil {
					return tc.err
				}
				return c.Delete(ctx, obj, opts...)
			}}, tc.objs...)
			err := arc.NewResolver(arc.Options{Reader: c, Writer: c}).Retire(context.Background(), run)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Retire: %v, want error %v", err, tc.wantErr)
			}
			if deletes != 1 {
				t.Fatalf("Delete called %d times, want 1", deletes)
			}
			if got.Preconditions == nil || got.Preconditions.UID == nil || *got.Preconditions.UID != er.GetUID() {
				t.Errorf("Preconditions = %+v, want UID %s", got.Preconditions, er.GetUID())
			}
			if got.PropagationPolicy == nil || *got.PropagationPolicy != metav1.DeletePropagationBackground {
				t.Errorf("PropagationPolicy = %v, want Background", got.PropagationPolicy)
			}
			if tc.err == nil {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(arc.GroupVersionKind())
				// ARC's finalizers keep it until ARC has cleaned up; it must at least be deleting.
				err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "a"}, u)
				if !apierrors.IsNotFound(err) && (err != nil || u.GetDeletionTimestamp() == nil) {
					t.Errorf("EphemeralRunner not deleted by Retire: %v, deletionTimestamp %v", err, u.GetDeletionTimestamp())
				}
			}
		})
	}
}

func TestRetireDisabled(t *testing.T) {
	r := arc.NewResolver(arc.Options{Reader: newFakeClient(nil)})
	err := r.Retire(context.Background(), &arc.Runner{EphemeralRunner: types.NamespacedName{Namespace: ns, Name: "a"}})
	if !errors.Is(err, arc.ErrRetireDisabled) {
		t.Errorf("Retire without a Writer: %v, want ErrRetireDisabled", err)
	}
}

// A Resolver resolves, then retires, the same runner: the names agree.
func TestResolveThenRetire(t *testing.T) {
	er := fixture.MakeEphemeralRunner(ns, "a").RunnerID(5)
	c := newFakeClient(nil, er.Obj())
	r := arc.NewResolver(arc.Options{Reader: c, Writer: c})
	run, err := r.Resolve(context.Background(), scaleSetPod(er))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Retire(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	// ARC's finalizers keep it, being deleted, until ARC has removed the runner.
	run, err = r.Resolve(context.Background(), scaleSetPod(er))
	if err != nil {
		t.Fatal(err)
	}
	if run.Removed != "" {
		t.Errorf("Removed = %q while the registration finalizer is present", run.Removed)
	}
}
