package explain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
)

const guardNS = "rg"

// guardDeployment is runner-guard's Deployment as the chart renders it:
// args, volumes and mounts of its webhook container.
func guardDeployment(name string, args []string, mounts []corev1.VolumeMount, volumes []corev1.Volume) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: guardNS, Name: name, Labels: map[string]string{"app.kubernetes.io/name": "runner-guard"}}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "webhook", Args: append([]string{"--config=/etc/runner-guard/config/config.yaml"}, args...), VolumeMounts: mounts}}
	d.Spec.Template.Spec.Volumes = volumes
	return d
}

func secretVolume(name, secret string, items ...corev1.KeyToPath) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, Items: items}}}
}

func secretObject(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: guardNS, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// chartSingle passes one secret (events.secret): --github-webhook-secret-file.
func chartSingle() *appsv1.Deployment {
	return guardDeployment("runner-guard", []string{"--github-webhook-secret-file=/etc/runner-guard/events/webhook-secret"},
		[]corev1.VolumeMount{{Name: "events-secret", MountPath: "/etc/runner-guard/events", ReadOnly: true}},
		[]corev1.Volume{secretVolume("events-secret", "runner-guard-events", corev1.KeyToPath{Key: "token", Path: "webhook-secret"})})
}

// chartSecrets passes events.secrets[] (--github-webhook-secrets): the
// mapping file by subPath of a ConfigMap, each Secret in a directory of its
// entry's name, org-a rotating.
func chartSecrets() *appsv1.Deployment {
	return guardDeployment("runner-guard", []string{"--github-webhook-secrets", "/etc/runner-guard/webhook-secrets.yaml"},
		[]corev1.VolumeMount{
			{Name: "config", MountPath: "/etc/runner-guard/config"},
			{Name: "webhook-secrets", MountPath: "/etc/runner-guard/webhook-secrets.yaml", SubPath: "webhook-secrets.yaml"},
			{Name: "webhook-secret-0", MountPath: "/etc/runner-guard/webhook-secrets/org-a"},
			{Name: "webhook-secret-1", MountPath: "/etc/runner-guard/webhook-secrets/org-b"},
		},
		[]corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "runner-guard-config"}}}},
			{Name: "webhook-secrets", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "runner-guard-webhook-secrets"}}}},
			secretVolume("webhook-secret-0", "org-a-webhook", corev1.KeyToPath{Key: "webhook-secret", Path: "secret"}, corev1.KeyToPath{Key: "previous", Path: "previous"}),
			secretVolume("webhook-secret-1", "org-b-webhook", corev1.KeyToPath{Key: "webhook-secret", Path: "secret"}),
		})
}

const mappingFile = `secrets:
- name: org-a
  secretFile: /etc/runner-guard/webhook-secrets/org-a/secret
  scopes: ["org:org-a"]
  previousSecretFile: /etc/runner-guard/webhook-secrets/org-a/previous
  previousUntil: "2026-12-04T21:00:00Z"
- name: org-b
  secretFile: /etc/runner-guard/webhook-secrets/org-b/secret
  scopes: ["org:org-b"]
`

func mappingObjects() []runtime.Object {
	return []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: guardNS, Name: "runner-guard-webhook-secrets"}, Data: map[string]string{"webhook-secrets.yaml": mappingFile}},
		secretObject("org-a-webhook", map[string]string{"webhook-secret": "a-new\n", "previous": "a-old\n"}),
		secretObject("org-b-webhook", map[string]string{"webhook-secret": "b"}),
	}
}

// eventsDeployment is the chart's events Deployment: the same name label,
// and it sorts first; explain reads the webhook's.
func eventsDeployment() *appsv1.Deployment {
	d := guardDeployment("a-runner-guard-events", []string{"--events-only", "--github-webhook-secret-file=/nowhere"}, nil, nil)
	d.Labels["app.kubernetes.io/component"] = "events"
	return d
}

// forbid makes get of the named object of resource forbidden.
func forbid(resource, name string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetResource().Resource == resource && g.GetName() == name {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, name, errors.New("RBAC: no"))
		}
		return false, nil, nil
	}
}

// TestAnnotatedJobFromTheCluster reads the webhook secrets as explain does,
// from a fake API server holding the chart's objects, and renders the line.
func TestAnnotatedJobFromTheCluster(t *testing.T) {
	single := jobannotation.Secret{Value: []byte("one")}
	orgA := jobannotation.Secret{Name: "org-a", Value: []byte("a-new")}
	orgAOld := jobannotation.Secret{Name: "org-a", Value: []byte("a-old")}
	orgB := jobannotation.Secret{Name: "org-b", Value: []byte("b")}
	cases := map[string]struct {
		objects []runtime.Object
		forbid  []k8stesting.ReactionFunc
		// record is the annotation; "" none.
		record                                    string
		wantNil, wantVerified, wantHolds, wantOff bool
		wantNeeds, wantIn                         string
		wantReads                                 int // Secrets and ConfigMaps read
	}{
		"no annotation: nothing is read": {
			objects: []runtime.Object{chartSingle(), secretObject("runner-guard-events", map[string]string{"token": "one"})}, wantNil: true,
		},
		"the single secret verifies": {
			objects: []runtime.Object{chartSingle(), secretObject("runner-guard-events", map[string]string{"token": "one\n"})},
			record:  signedRecord(t, jobannotation.StateInProgress, single), wantVerified: true, wantHolds: true, wantReads: 1,
			wantIn: "signed under the single webhook secret (--github-webhook-secret-file); verifies: runner-guard refuses",
		},
		"the single secret: another secret signed it": {
			objects: []runtime.Object{chartSingle(), secretObject("runner-guard-events", map[string]string{"token": "two"})},
			record:  signedRecord(t, jobannotation.StateInProgress, single), wantReads: 1,
			wantIn: "does not verify, so it holds nothing: runner-guard.io/job: its MAC does not verify",
		},
		"the single secret unreadable": {
			objects: []runtime.Object{chartSingle(), secretObject("runner-guard-events", map[string]string{"token": "one"})},
			forbid:  []k8stesting.ReactionFunc{forbid("secrets", "runner-guard-events")},
			record:  signedRecord(t, jobannotation.StateInProgress, single), wantReads: 1,
			wantNeeds: "get secrets in namespace rg (runner-guard-events)",
			wantIn:    "cannot be verified here: --github-webhook-secret-file=/etc/runner-guard/events/webhook-secret: Secret rg/runner-guard-events unknown: needs get secrets in namespace rg (runner-guard-events)",
		},
		"the mapping file: org-b verifies": {
			objects: append(mappingObjects(), chartSecrets()), record: signedRecord(t, jobannotation.StateInProgress, orgB),
			wantVerified: true, wantHolds: true, wantReads: 3, wantIn: `signed under webhook secret "org-b"; verifies`,
		},
		"the mapping file: org-a's previous value, inside its window": {
			objects: append(mappingObjects(), chartSecrets()), record: signedRecord(t, jobannotation.StateInProgress, orgAOld),
			wantVerified: true, wantHolds: true, wantReads: 3, wantIn: `verifies (under webhook secret "org-a"'s previous value, accepted until 2026-12-04T21:00:00Z)`,
		},
		"the mapping file: completed under org-a": {
			objects: append(mappingObjects(), chartSecrets()), record: signedRecord(t, jobannotation.StateCompleted, orgA),
			wantVerified: true, wantReads: 3, wantIn: "tombstone",
		},
		"the mapping file: a secret it does not name": {
			objects: append(mappingObjects(), chartSecrets()), record: signedRecord(t, jobannotation.StateInProgress, jobannotation.Secret{Name: "org-c", Value: []byte("c")}),
			wantReads: 3, wantIn: `webhook secret "org-c", which is not configured`,
		},
		"the mapping file unreadable": {
			objects: append(mappingObjects(), chartSecrets()), forbid: []k8stesting.ReactionFunc{forbid("configmaps", "runner-guard-webhook-secrets")},
			record: signedRecord(t, jobannotation.StateInProgress, orgB), wantReads: 1,
			wantNeeds: "get configmaps in namespace rg (runner-guard-webhook-secrets)",
			wantIn:    "cannot be verified here: --github-webhook-secrets=/etc/runner-guard/webhook-secrets.yaml: ConfigMap rg/runner-guard-webhook-secrets unknown",
		},
		"org-a's Secret unreadable, the record org-a's": {
			objects: append(mappingObjects(), chartSecrets()), forbid: []k8stesting.ReactionFunc{forbid("secrets", "org-a-webhook")},
			record: signedRecord(t, jobannotation.StateInProgress, orgA), wantReads: 3,
			wantNeeds: "get secrets in namespace rg (org-a-webhook)",
			wantIn:    `cannot be verified here: webhook secret "org-a": secretFile /etc/runner-guard/webhook-secrets/org-a/secret: Secret rg/org-a-webhook unknown: needs get secrets in namespace rg (org-a-webhook)`,
		},
		"org-a's Secret unreadable, the record org-b's": {
			objects: append(mappingObjects(), chartSecrets()), forbid: []k8stesting.ReactionFunc{forbid("secrets", "org-a-webhook")},
			record: signedRecord(t, jobannotation.StateInProgress, orgB), wantVerified: true, wantHolds: true, wantReads: 3, wantIn: "verifies",
		},
		"events off": {
			objects: []runtime.Object{guardDeployment("runner-guard", nil, nil, nil)},
			record:  signedRecord(t, jobannotation.StateInProgress, single), wantOff: true, wantIn: "events are off",
		},
		"no Deployment": {
			record: signedRecord(t, jobannotation.StateInProgress, single), wantIn: "cannot be verified here: no runner-guard Deployment",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset(append([]runtime.Object{eventsDeployment()}, tc.objects...)...)
			for _, f := range tc.forbid {
				kube.PrependReactor("get", "*", f)
			}
			ctx := context.Background()
			dep, inst := findDeployment(ctx, kube, guardNS)
			kube.ClearActions()
			req := Request{GuardNamespace: guardNS, Now: func() time.Time { return now }}
			l := annotatedJob(ctx, kube, annotatedPod(tc.record), dep, inst, req, "")
			reads := 0
			for _, a := range kube.Actions() {
				if a.Matches("get", "secrets") || a.Matches("get", "configmaps") {
					reads++
				}
			}
			if reads != tc.wantReads {
				t.Errorf("%d Secrets and ConfigMaps read, want %d: %v", reads, tc.wantReads, kube.Actions())
			}
			if tc.wantNil {
				if l != nil {
					t.Errorf("line = %+v, want none", *l)
				}
				return
			}
			if l == nil {
				t.Fatal("no line")
			}
			if l.Verified != tc.wantVerified || l.Holds != tc.wantHolds || l.EventsOff != tc.wantOff || l.Needs != tc.wantNeeds || l.Unknown != (tc.wantNeeds != "") {
				t.Errorf("line = %+v", *l)
			}
			if !strings.Contains(l.Text, tc.wantIn) {
				t.Errorf("text\n %s\nlacks\n %s", l.Text, tc.wantIn)
			}
			for _, v := range []string{"a-new", "a-old", "one\n"} {
				if strings.Contains(l.Text, v) {
					t.Errorf("text %q shows a secret's value", l.Text)
				}
			}
		})
	}
}

func TestMountedFrom(t *testing.T) {
	projected := guardDeployment("rg", nil, []corev1.VolumeMount{{Name: "p", MountPath: "/p"}, {Name: "dir", MountPath: "/etc/maps/"}, {Name: "deep", MountPath: "/etc/maps/deep"}},
		[]corev1.Volume{
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "listed"}, Items: []corev1.KeyToPath{{Key: "k", Path: "sub/file"}}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "whole"}}},
			}}}},
			{Name: "dir", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "maps"}}}},
			secretVolume("deep", "deep-secret"),
		})
	cases := map[string]struct {
		dep     *appsv1.Deployment
		file    string
		want    string // Kind/Name/Key, comma-separated
		wantErr string
	}{
		"a Secret's item":                  {dep: chartSingle(), file: "/etc/runner-guard/events/webhook-secret", want: "Secret/runner-guard-events/token"},
		"a Secret's unlisted path":         {dep: chartSingle(), file: "/etc/runner-guard/events/other", wantErr: `lists no item at path "other"`},
		"a ConfigMap's key by subPath":     {dep: chartSecrets(), file: "/etc/runner-guard/webhook-secrets.yaml", want: "ConfigMap/runner-guard-webhook-secrets/webhook-secrets.yaml"},
		"the deepest mount":                {dep: projected, file: "/etc/maps/deep/key", want: "Secret/deep-secret/key"},
		"a whole ConfigMap as a directory": {dep: projected, file: "/etc/maps", want: "ConfigMap/maps/"},
		"a projected source's item":        {dep: projected, file: "/p/sub/file", want: "Secret/listed/k"},
		"projected sources without items":  {dep: projected, file: "/p/key", want: "ConfigMap/cm/key,Secret/whole/key"},
		"not on a volume":                  {dep: chartSingle(), file: "/etc/elsewhere/secret", wantErr: "on no volume of container webhook"},
		"a path no key makes":              {dep: projected, file: "/etc/maps/a/b", wantErr: "a key holds no directory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			keys, err := mountedFrom(tc.dep, tc.file)
			if fixture.CheckErr(t, err, tc.wantErr) {
				return
			}
			var got []string
			for _, k := range keys {
				got = append(got, k.Kind+"/"+k.Name+"/"+k.Key)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("mountedFrom = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestFlagValue(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"--name=value":         {args: []string{"--github-webhook-secrets=/a"}, want: "/a"},
		"-name=value":          {args: []string{"-github-webhook-secrets=/a"}, want: "/a"},
		"--name value":         {args: []string{"--github-webhook-secrets", "/a", "--x=y"}, want: "/a"},
		"the last one wins":    {args: []string{"--github-webhook-secrets=/a", "-github-webhook-secrets", "/b"}, want: "/b"},
		"a longer flag's name": {args: []string{"--github-webhook-secrets-dir=/a"}, want: ""},
		"unset":                {args: []string{"--config=/c"}, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := flagValue(guardDeployment("rg", tc.args, nil, nil), "github-webhook-secrets"); got != tc.want {
				t.Errorf("flagValue = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFindDeploymentSkipsTheEventsDeployment(t *testing.T) {
	kube := fake.NewClientset(eventsDeployment(), chartSingle())
	dep, inst := findDeployment(context.Background(), kube, guardNS)
	if dep == nil || dep.Name != "runner-guard" || inst.Deployment != guardNS+"/runner-guard" {
		t.Errorf("findDeployment = %v, %+v; want the webhook's Deployment rg/runner-guard", dep, inst)
	}
}
