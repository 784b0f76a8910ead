package chart

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/render"
)

// webhookNetwork is what scenarioChartNetwork adds to the webhook's start.
type webhookNetwork struct {
	args, env, wrap []string
}

// ghesChartHost names the fake GitHub Enterprise Server (.test resolves
// nowhere but in the scenario's hosts file: Go never proxies loopback).
const ghesChartHost = "ghes.chart.test"

// scenarioChartNetwork renders the Deployment with github.caBundle and
// proxy.* set, materializes its CA volume from the ConfigMap on the API
// server and its proxy env from the Secret, and runs the binary with that
// flag and env: the fake GitHub, served with a certificate of a private CA,
// is reached through tinyproxy (with basic auth) and trusted through the
// chart's bundle.
func (e *installEnv) scenarioChartNetwork(t *testing.T) {
	wrap, skip, err := framework.ProxyNetwork(t.TempDir(), ghesChartHost)
	if skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := framework.StartTLSServer(e.fake, ghesChartHost)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Addr)
	p, _ := strconv.Atoi(port)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	tp, err := framework.StartTinyproxy(ctx, framework.TinyproxyOptions{Dir: t.TempDir(), Wrap: wrap, ConnectPorts: []int{p}, User: "rg", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Stop() }()

	// What the user creates next to the release: the CA and the proxy's login.
	if _, err := e.env.Client.CoreV1().ConfigMaps(namespace).Create(e.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "corp-ca"}, Data: map[string]string{"ca-bundle.pem": string(srv.CAPEM)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.env.Client.CoreV1().Secrets(namespace).Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "corp-proxy"}, StringData: map[string]string{"username": "rg", "password": "s3cret"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := render.MustTemplate(t, "--values", "testdata/values/certmanager-token.yaml",
		"--set", "github.caBundle.configMapRef.name=corp-ca", "--set", "github.caBundle.configMapRef.key=ca-bundle.pem",
		"--set", "proxy.https="+tp.URL, "--set", "proxy.credentialsSecret=corp-proxy", "--set", "proxy.noProxy={kubernetes.default.svc}")
	deps := objs.OfKind("Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments rendered, want 1", len(deps))
	}
	dep := render.Get[appsv1.Deployment](t, objs, "Deployment", deps[0].GetName())
	c := dep.Spec.Template.Spec.Containers[0]
	e.net = webhookNetwork{
		args: []string{"--github-url=" + srv.URL + "/api/v3/", "--github-ca-bundle=" + e.materializeCA(t, dep, c)},
		env:  e.resolveProxyEnv(t, c),
		wrap: wrap,
	}
	// The webhook configuration is in effect already: a ready webhook is enough.
	defer func() {
		e.net = webhookNetwork{}
		e.stopWebhook()
		e.startWebhook()
	}()
	e.stopWebhook()
	e.startWebhook()

	connects, err := tp.Connects()
	if err != nil {
		t.Fatal(err)
	}
	accepted := srv.Accepted()
	scope, ns := e.scenario("ghes-net")
	e.runnerPod(ns, scope, "runner-busy", true)
	e.runnerPod(ns, scope, "runner-idle", false)
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-busy", "--wait=false"); err == nil || !strings.Contains(out, "runner busy") {
		t.Errorf("delete of a busy runner's pod: %v, output %q; want refused with runner busy", err, out)
	}
	if out, err := e.kubectl("-n", ns, "delete", "pod", "runner-idle", "--wait=false"); err != nil {
		t.Fatalf("delete of an idle runner's pod: %v %s", err, out)
	}
	if _, ok := e.fake.Runner(scope, "runner-idle"); ok {
		t.Error("the idle runner is still registered")
	}
	after, err := tp.Connects()
	if err != nil {
		t.Fatal(err)
	}
	after = after[len(connects):]
	want := strings.TrimPrefix(srv.URL, "https://")
	if n := srv.Accepted() - accepted; len(after) == 0 || int64(len(after)) != n {
		t.Errorf("tinyproxy CONNECTs %v, server accepted %d connections: want one CONNECT %s per connection", after, n, want)
	}
	for _, c := range after {
		if c != want {
			t.Errorf("tinyproxy CONNECT %s, want only %s", c, want)
		}
	}
}

// materializeCA writes the ConfigMap items of the rendered github-ca volume
// into a directory and returns where the rendered --github-ca-bundle points.
func (e *installEnv) materializeCA(t *testing.T, dep *appsv1.Deployment, c corev1.Container) string {
	t.Helper()
	var flag string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--github-ca-bundle="); ok {
			flag = v
		}
	}
	var mount string
	for _, m := range c.VolumeMounts {
		if m.Name == "github-ca" && m.ReadOnly {
			mount = m.MountPath
		}
	}
	if flag == "" || mount == "" || !strings.HasPrefix(flag, mount+"/") {
		t.Fatalf("rendered --github-ca-bundle %q and read-only mount %q do not fit together", flag, mount)
	}
	dir := t.TempDir()
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name != "github-ca" || v.ConfigMap == nil {
			continue
		}
		cm, err := e.env.Client.CoreV1().ConfigMaps(namespace).Get(e.ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the github-ca volume's ConfigMap: %v", err)
		}
		for _, item := range v.ConfigMap.Items {
			if err := os.WriteFile(filepath.Join(dir, item.Path), []byte(cm.Data[item.Key]), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return filepath.Join(dir, strings.TrimPrefix(flag, mount+"/"))
}

// resolveProxyEnv returns the container's proxy variables as the kubelet
// would set them: Secret references read from the API server, $(VAR)
// expanded from the variables before.
func (e *installEnv) resolveProxyEnv(t *testing.T, c corev1.Container) []string {
	t.Helper()
	vars := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var out []string
	for _, v := range c.Env {
		val := v.Value
		switch {
		case v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil:
			s, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, v.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", v.Name, err)
			}
			val = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
		case v.ValueFrom != nil:
			continue
		default:
			val = ref.ReplaceAllStringFunc(val, func(m string) string {
				if x, ok := vars[ref.FindStringSubmatch(m)[1]]; ok {
					return x
				}
				return m
			})
		}
		vars[v.Name] = val
		switch v.Name {
		case "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY":
			out = append(out, v.Name+"="+val)
		}
	}
	if len(out) == 0 || !strings.Contains(vars["HTTPS_PROXY"], "rg:s3cret@") {
		t.Fatalf("rendered proxy env %v lacks HTTPS_PROXY with the Secret's credentials", out)
	}
	return out
}
