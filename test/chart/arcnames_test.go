package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/test/render"
)

// deployment renders the default values plus set (--set pairs) and returns
// the webhook Deployment.
func deployment(t *testing.T, set ...string) (*appsv1.Deployment, render.Objects) {
	t.Helper()
	args := []string{"--values", selfManagedValues}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objs := render.MustTemplate(t, args...)
	return render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook"), objs
}

func envOf(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return out
}

// TestARCValueNames: each of ARC's value names renders what the chart's
// older name renders (which still works), and the values ARC users expect
// (imagePullSecrets, serviceAccount.create, topologySpreadConstraints,
// hostNetwork, logLevel/logFormat, extraArgs/extraEnv, health.port) reach
// the Deployment.
func TestARCValueNames(t *testing.T) {
	type check func(t *testing.T, d *appsv1.Deployment, objs render.Objects)
	wantEnv := func(want map[string]string) check {
		return func(t *testing.T, d *appsv1.Deployment, _ render.Objects) {
			got := envOf(d)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("env %s = %q, want %q", k, got[k], v)
				}
			}
		}
	}
	wantArgs := func(want ...string) check {
		return func(t *testing.T, d *appsv1.Deployment, _ render.Objects) {
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, a := range want {
				if !slices.Contains(args, a) {
					t.Errorf("args %v lack %s", args, a)
				}
			}
		}
	}
	caBundle := func(t *testing.T, d *appsv1.Deployment, _ render.Objects) {
		wantArgs("--github-ca-bundle=/etc/runner-guard/github-ca/tls-ca.pem")(t, d, nil)
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "github-ca" && (v.ConfigMap == nil || v.ConfigMap.Name != "ghes-ca") {
				t.Errorf("github-ca volume %+v, want ConfigMap ghes-ca", v.VolumeSource)
			}
		}
	}
	pullSecrets := func(want ...string) check {
		return func(t *testing.T, d *appsv1.Deployment, _ render.Objects) {
			var got []string
			for _, s := range d.Spec.Template.Spec.ImagePullSecrets {
				got = append(got, s.Name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("imagePullSecrets %v, want %v", got, want)
			}
		}
	}
	proxyAuth := wantEnv(map[string]string{
		"HTTPS_PROXY": "http://$(PROXY_USERNAME):$(PROXY_PASSWORD)@proxy.corp:3128", "PROXY_USERNAME": "secret:proxy-auth/username",
	})
	for name, tc := range map[string]struct {
		set   []string
		check check
	}{
		"proxy.https.url":                                 {[]string{"proxy.https.url=http://proxy.corp:3128"}, wantEnv(map[string]string{"HTTPS_PROXY": "http://proxy.corp:3128"})},
		"proxy.https as a string":                         {[]string{"proxy.https=http://proxy.corp:3128"}, wantEnv(map[string]string{"HTTPS_PROXY": "http://proxy.corp:3128"})},
		"proxy.http.url":                                  {[]string{"proxy.http.url=http://proxy.corp:8080", "github.allowHTTP=true"}, wantEnv(map[string]string{"HTTP_PROXY": "http://proxy.corp:8080"})},
		"proxy.noProxy":                                   {[]string{"proxy.https.url=http://proxy.corp:3128", "proxy.noProxy={ghe.corp}"}, wantEnv(map[string]string{"NO_PROXY": "$(KUBERNETES_SERVICE_HOST),kubernetes.default.svc,.svc,.cluster.local,ghe.corp"})},
		"proxy.https.credentialSecretRef":                 {[]string{"proxy.https.url=http://proxy.corp:3128", "proxy.https.credentialSecretRef=proxy-auth"}, proxyAuth},
		"proxy.credentialsSecret (older)":                 {[]string{"proxy.https=http://proxy.corp:3128", "proxy.credentialsSecret=proxy-auth"}, proxyAuth},
		"a second proxy's own credentials":                {[]string{"proxy.https.url=http://a:1", "proxy.https.credentialSecretRef=a", "proxy.http.url=http://b:2", "proxy.http.credentialSecretRef=b"}, wantEnv(map[string]string{"HTTP_PROXY": "http://$(HTTP_PROXY_USERNAME):$(HTTP_PROXY_PASSWORD)@b:2", "HTTP_PROXY_USERNAME": "secret:b/username", "PROXY_USERNAME": "secret:a/username"})},
		"githubServerTLS.certificateFrom.configMapKeyRef": {[]string{"githubServerTLS.certificateFrom.configMapKeyRef.name=ghes-ca", "githubServerTLS.certificateFrom.configMapKeyRef.key=tls-ca.pem"}, caBundle},
		"github.caBundle.configMapRef (older)":            {[]string{"github.caBundle.configMapRef.name=ghes-ca", "github.caBundle.configMapRef.key=tls-ca.pem"}, caBundle},
		"imagePullSecrets":                                {[]string{"imagePullSecrets[0].name=regcred"}, pullSecrets("regcred")},
		"image.pullSecrets (older)":                       {[]string{"image.pullSecrets={regcred}"}, pullSecrets("regcred")},
		"imagePullSecrets and the older":                  {[]string{"imagePullSecrets[0].name=a", "image.pullSecrets={b,a}"}, pullSecrets("a", "b")},
		"serviceAccount.create false": {[]string{"serviceAccount.create=false", "serviceAccount.name=platform-sa"}, func(t *testing.T, d *appsv1.Deployment, objs render.Objects) {
			if len(objs.OfKind("ServiceAccount")) > 0 {
				t.Error("a ServiceAccount rendered with serviceAccount.create=false")
			}
			if d.Spec.Template.Spec.ServiceAccountName != "platform-sa" {
				t.Errorf("serviceAccountName %q, want platform-sa", d.Spec.Template.Spec.ServiceAccountName)
			}
		}},
		"topologySpreadConstraints": {[]string{"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway"}, func(t *testing.T, d *appsv1.Deployment, _ render.Objects) {
			c := d.Spec.Template.Spec.TopologySpreadConstraints
			if len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" || c[0].MaxSkew != 1 {
				t.Errorf("topologySpreadConstraints %+v", c)
			}
		}},
		"hostNetwork with its own ports": {[]string{"hostNetwork=true", "webhook.port=10250", "metrics.port=10251", "health.port=10252"}, func(t *testing.T, d *appsv1.Deployment, objs render.Objects) {
			spec := d.Spec.Template.Spec
			if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork %v dnsPolicy %q, want true and ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
			}
			wantArgs("--webhook-port=10250", "--metrics-bind-address=:10251", "--health-probe-bind-address=:10252")(t, d, objs)
			ports := map[string]int32{}
			for _, p := range spec.Containers[0].Ports {
				ports[p.Name] = p.ContainerPort
			}
			if ports["webhook"] != 10250 || ports["metrics"] != 10251 || ports["health"] != 10252 {
				t.Errorf("container ports %v", ports)
			}
		}},
		"health.port":    {[]string{"health.port=9090"}, wantArgs("--health-probe-bind-address=:9090")},
		"logLevel debug": {[]string{"logLevel=debug"}, wantArgs("--zap-log-level=debug")},
		"logFormat text": {[]string{"logFormat=text"}, wantArgs("--zap-encoder=console")},
		"extraArgs":      {[]string{"extraArgs={--enable-http2}"}, wantArgs("--enable-http2")},
		"extraEnv":       {[]string{"extraEnv[0].name=GODEBUG", "extraEnv[0].value=http2debug=1"}, wantEnv(map[string]string{"GODEBUG": "http2debug=1"})},
	} {
		t.Run(name, func(t *testing.T) {
			d, objs := deployment(t, tc.set...)
			tc.check(t, d, objs)
		})
	}
	// The defaults pass none of these flags: the default args stay those of
	// dist/install.yaml.
	d, _ := deployment(t)
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--zap-") {
			t.Errorf("default args pass %s", a)
		}
	}
}

// TestDeprecatedValueNamesInNotes: each older name in use is a NOTES line
// naming ARC's; none without them.
func TestDeprecatedValueNamesInNotes(t *testing.T) {
	notes := func(set ...string) string {
		args := []string{"install", "rg", render.ChartDir(t), "--namespace", "rg", "--dry-run=client", "--values", selfManagedValues}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := render.Helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if out := notes(); strings.Contains(out, "DEPRECATED") {
		t.Errorf("NOTES without older names say DEPRECATED:\n%s", out)
	}
	out := notes("proxy.https=http://p:1", "proxy.credentialsSecret=s", "github.caBundle.configMapRef.name=c", "image.pullSecrets={r}")
	for _, want := range []string{"use proxy.https.url", "use proxy.https.credentialSecretRef", "use githubServerTLS.certificateFrom.configMapKeyRef", "use imagePullSecrets"} {
		if !strings.Contains(out, want) {
			t.Errorf("NOTES lack %q:\n%s", want, out)
		}
	}
}
