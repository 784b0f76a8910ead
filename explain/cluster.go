package explain

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// Cluster reads with the user's own credentials.
type Cluster struct {
	Kube kubernetes.Interface
	// Client reads ARC's objects for the webhook's resolver.
	Client client.Client
}

// Request names the pod and where runner-guard is installed.
type Request struct {
	Namespace, Pod string
	// GuardNamespace is runner-guard's namespace; its Deployment is found
	// there by the label app.kubernetes.io/name=runner-guard.
	GuardNamespace string
	// ConfigMap names runner-guard's config; "" takes the one its Deployment
	// mounts, else "runner-guard-config".
	ConfigMap string
	// ConfigFile, when set, is a local --config file read instead.
	ConfigFile []byte
	Now        func() time.Time
}

// DefaultConfigMap is the config's name in manifests/base.
const DefaultConfigMap = "runner-guard-config"

// Explain gathers what the user may read about the pod and renders each line.
// Only a pod that cannot be read is an error: everything else the user may
// not read becomes an unknown line.
func Explain(ctx context.Context, c Cluster, req Request) (Report, error) {
	if req.Now == nil {
		req.Now = time.Now
	}
	pod, err := c.Kube.CoreV1().Pods(req.Namespace).Get(ctx, req.Pod, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return Report{}, fmt.Errorf("cannot read pod %s/%s: needs %s", req.Namespace, req.Pod, needs("get", "pods", req.Namespace))
	case err != nil:
		return Report{}, fmt.Errorf("read pod %s/%s: %w", req.Namespace, req.Pod, err)
	}
	r := Report{Pod: req.Namespace + "/" + req.Pod}

	dep, inst := findDeployment(ctx, c.Kube, req.GuardNamespace)
	cfg, mode, installLine := readConfig(ctx, c.Kube, req, dep, inst)
	r.Install = installLine

	var githubBase string
	if dep != nil {
		// As the binary: a runner of another GitHub than --github-url's is not asked.
		if githubBase = flagValue(dep, "github-url"); githubBase == "" {
			githubBase = ghclient.DefaultBaseURL
		}
	}
	h, err := webhook.NewHandler(webhook.Options{
		Config: cfg, GitHub: events.NoGitHub{Err: errNeverAsked}, Pods: c.Client, GitHubBaseURL: githubBase,
		// The user's own reads, without the Secret: explain names
		// credentials, it never reads them.
		Runners: arc.NewResolver(arc.Options{Reader: c.Client}),
	})
	if err != nil {
		return Report{}, fmt.Errorf("runner-guard's config: %w", err)
	}
	ex := h.Explain(ctx, pod)
	erNeeds, arcSecret := readOwner(ctx, c.Client, pod)
	r.Runner = runnerLine(ex, erNeeds)
	r.AnnotatedJob = annotatedJob(ctx, c.Kube, pod, dep, inst, req, ex.NotGuarded)
	r.Binding = bindingLine(ex, h.ScopesOpen())
	r.Credentials = credsLine(ex, mode, inst, arcSecret)
	r.Hints = hintsLine(pod)
	pdbs, pdbNeeds := coveringPDBs(ctx, c.Kube, pod)
	r.Budget = budgetLine(cfg.GitHubBudget, pdbs, pdbNeeds)

	evs, err := c.Kube.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Pod", "involvedObject.name": pod.Name}.String()})
	switch {
	case apierrors.IsForbidden(err):
		r.LastDecision = DecisionLine{Status: unknown(needs("list", "events", pod.Namespace))}
	case err != nil:
		r.LastDecision = DecisionLine{Status: Status{Text: "unknown: " + err.Error(), Unknown: true}}
	default:
		r.LastDecision = decisionLine(evs.Items, req.Now())
	}

	r.Delete, r.Evict = dryRuns(ctx, c.Kube, pod)
	return r, nil
}

// annotatedJob is the line of pod's runner-guard.io/job annotation, nil
// when it carries none. Only then are the webhook secrets read, to verify
// it: never shown.
func annotatedJob(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, dep *appsv1.Deployment, inst Install, req Request, notGuarded string) *JobLine {
	if !jobannotation.Found(pod) {
		return nil
	}
	secrets := readWebhookSecrets(ctx, kube, dep, inst, req.GuardNamespace, req.Now)
	return jobLine(pod, secrets, notGuarded, req.Now())
}

// dryRuns asks the API server what a delete and an eviction of pod would get
// now, as server-side dry runs. Each is asked once: client-go would retry a
// 429 with Retry-After (a refused eviction) until it is let through, and the
// answer wanted is the first one.
func dryRuns(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) (del, evict DryRunLine) {
	dry := []string{metav1.DryRunAll}
	err := kube.CoreV1().RESTClient().Delete().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
		MaxRetries(0).Body(&metav1.DeleteOptions{DryRun: dry}).Do(ctx).Error()
	del = dryRunLine(err, needs("delete", "pods", pod.Namespace))
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{DryRun: dry},
	}
	err = kube.PolicyV1().RESTClient().Post().AbsPath("/api/v1").Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("eviction").
		MaxRetries(0).Body(eviction).Do(ctx).Error()
	evict = dryRunLine(err, needs("create", "pods/eviction", pod.Namespace))
	return del, evict
}

// errNeverAsked answers the resolver's GitHub calls: explain's resolver never
// asks GitHub, so a call is a bug.
var errNeverAsked = errors.New("explain does not ask GitHub")

// installLabel finds runner-guard's Deployment in the chart and manifests/base.
const installLabel = "app.kubernetes.io/name=runner-guard"

// findDeployment reads runner-guard's Deployment and the Secrets its GitHub
// flags read. The Deployment is nil when it cannot be read (inst says why).
func findDeployment(ctx context.Context, kube kubernetes.Interface, ns string) (*appsv1.Deployment, Install) {
	list, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: installLabel})
	switch {
	case apierrors.IsForbidden(err):
		return nil, Install{Needs: needs("list", "deployments", ns)}
	case err != nil:
		return nil, Install{}
	}
	// The chart's events Deployment carries the same label: the webhook's
	// is the one that decides.
	i := slices.IndexFunc(list.Items, func(d appsv1.Deployment) bool { return !eventsOnly(&d) })
	if i < 0 {
		return nil, Install{}
	}
	dep := &list.Items[i]
	inst := Install{Deployment: ns + "/" + dep.Name, CredentialsMode: flagValue(dep, "credentials-mode")}
	inst.Secrets = githubSecrets(dep)
	return dep, inst
}

// webhookContainer is the runner-guard container of its Deployment: the one
// whose args name --webhook-configuration-name or --config, else the first.
func webhookContainer(dep *appsv1.Deployment) *corev1.Container {
	cs := dep.Spec.Template.Spec.Containers
	for i := range cs {
		for _, a := range append(slices.Clone(cs[i].Command), cs[i].Args...) {
			if strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "--github-") {
				return &cs[i]
			}
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

// eventsOnly reports whether dep runs only GitHub's events endpoint
// (--events-only, the chart's <fullname>-events).
func eventsOnly(dep *appsv1.Deployment) bool {
	if dep.Labels["app.kubernetes.io/component"] == "events" {
		return true
	}
	c := webhookContainer(dep)
	return c != nil && slices.ContainsFunc(append(slices.Clone(c.Command), c.Args...), func(a string) bool {
		return a == "--events-only" || a == "-events-only" || strings.HasPrefix(a, "--events-only=") || strings.HasPrefix(a, "-events-only=")
	})
}

// flagValue is the value of the string flag name in the webhook container's
// command and args, as Go's flag package reads them: --name=value,
// -name=value, --name value or -name value, the last one winning.
func flagValue(dep *appsv1.Deployment, name string) string {
	c := webhookContainer(dep)
	if c == nil {
		return ""
	}
	args := append(slices.Clone(c.Command), c.Args...)
	value := ""
	for i, a := range args {
		rest, ok := strings.CutPrefix(a, "--"+name)
		if !ok {
			rest, ok = strings.CutPrefix(a, "-"+name)
		}
		switch {
		case !ok:
		case strings.HasPrefix(rest, "="):
			value = rest[1:]
		case rest == "" && i+1 < len(args):
			value = args[i+1]
		}
	}
	return value
}

// mountedVolume is the volume mounted at the directory holding file.
func mountedVolume(dep *appsv1.Deployment, file string) *corev1.Volume {
	c := webhookContainer(dep)
	if c == nil || file == "" {
		return nil
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			for i, v := range dep.Spec.Template.Spec.Volumes {
				if v.Name == m.Name {
					return &dep.Spec.Template.Spec.Volumes[i]
				}
			}
		}
	}
	return nil
}

// githubSecrets names the Secrets behind the GitHub flags: the volumes the
// token or private-key files are read from, and env from Secrets (the App ID).
func githubSecrets(dep *appsv1.Deployment) []string {
	var out []string
	add := func(name string) {
		if s := dep.Namespace + "/" + name; name != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, f := range []string{"github-token-file", "github-app-private-key-file"} {
		v := mountedVolume(dep, flagValue(dep, f))
		if v == nil {
			continue
		}
		if v.Secret != nil {
			add(v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					add(s.Secret.Name)
				}
			}
		}
	}
	if c := webhookContainer(dep); c != nil {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "GITHUB_") {
				add(e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	return out
}

// readConfig reads runner-guard's --config: a local file, or the ConfigMap
// its Deployment mounts. Defaults stand in for one that cannot be read, and
// the install line says so. The Deployment's --credentials-mode overrides
// the config's, as in the binary.
func readConfig(ctx context.Context, kube kubernetes.Interface, req Request, dep *appsv1.Deployment, inst Install) (webhook.Config, webhook.CredentialsMode, InstallLine) {
	l := InstallLine{Deployment: inst.Deployment}
	var where []string
	switch {
	case inst.Needs != "":
		where = append(where, "Deployment unknown: needs "+inst.Needs)
		l.Unknown, l.Needs = true, inst.Needs
	case inst.Deployment == "":
		where = append(where, fmt.Sprintf("no runner-guard Deployment (label %s) in namespace %s", installLabel, req.GuardNamespace))
	default:
		where = append(where, "Deployment "+inst.Deployment)
	}
	data, source, err := configData(ctx, kube, req, dep)
	cfg := webhook.DefaultConfig()
	switch {
	case err != nil && apierrors.IsForbidden(err):
		l.Defaults, l.ConfigMap = true, source
		need := needs("get", "configmaps", req.GuardNamespace)
		where = append(where, fmt.Sprintf("%s unknown: needs %s; built-in defaults assumed", source, need))
		l.Unknown, l.Needs = true, joinNeeds(l.Needs, need)
	case err != nil:
		l.Defaults, l.ConfigMap = true, source
		where = append(where, fmt.Sprintf("config %s: %v; built-in defaults assumed", source, err))
	case data == nil:
		l.Defaults = true
		where = append(where, "no --config: built-in defaults")
	default:
		l.ConfigMap = source
		parsed, perr := webhook.ParseConfig(data)
		if perr != nil {
			l.Defaults = true
			where = append(where, fmt.Sprintf("config %s does not parse (%v); built-in defaults assumed", source, perr))
		} else {
			cfg = parsed
			where = append(where, "config "+source)
		}
	}
	mode := cfg.CredentialsMode
	if inst.CredentialsMode != "" {
		mode = webhook.CredentialsMode(inst.CredentialsMode)
	}
	l.Text = strings.Join(where, "; ")
	return cfg, mode, l
}

func joinNeeds(a, b string) string {
	if a == "" {
		return b
	}
	return a + " and " + b
}

// configData returns the config's YAML and where it came from; nil data
// with a nil error means the install runs without --config.
func configData(ctx context.Context, kube kubernetes.Interface, req Request, dep *appsv1.Deployment) ([]byte, string, error) {
	if req.ConfigFile != nil {
		return req.ConfigFile, "file given with --config", nil
	}
	name, key := req.ConfigMap, "config.yaml"
	if name == "" && dep != nil {
		file := flagValue(dep, "config")
		if file == "" {
			return nil, "", nil
		}
		if v := mountedVolume(dep, file); v != nil && v.ConfigMap != nil {
			name, key = v.ConfigMap.Name, path.Base(file)
		}
	}
	if name == "" {
		name = DefaultConfigMap
	}
	source := "ConfigMap " + req.GuardNamespace + "/" + name
	cm, err := kube.CoreV1().ConfigMaps(req.GuardNamespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && dep == nil:
		return nil, source, fmt.Errorf("not found")
	case err != nil:
		return nil, source, err
	}
	data, ok := cm.Data[key]
	if !ok {
		return nil, source, fmt.Errorf("has no key %q", key)
	}
	return []byte(data), source + " (" + key + ")", nil
}

// readOwner reads ARC's object controlling the pod, as the user: the
// permission it takes when the user may not, and the EphemeralRunner's
// githubConfigSecret. Of the Secret only the metadata is asked for: whether
// it exists, never its data.
func readOwner(ctx context.Context, c client.Client, pod *corev1.Pod) (need string, secret ARCSecret) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return "", ARCSecret{}
	}
	var gvk = arc.GroupVersionKind()
	var resource = arc.GroupResource().String()
	switch {
	case owner.Kind == arc.Kind && strings.HasPrefix(owner.APIVersion, arc.Group+"/"):
	case owner.Kind == arc.LegacyKind && strings.HasPrefix(owner.APIVersion, arc.LegacyGroup+"/"):
		gvk, resource = arc.LegacyGroupVersionKind(), arc.LegacyGroupResource().String()
	default:
		return "", ARCSecret{}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, u)
	if apierrors.IsForbidden(err) {
		return needs("get", resource, pod.Namespace), ARCSecret{}
	}
	secret.Name, _, _ = unstructured.NestedString(u.Object, "spec", "githubConfigSecret")
	if secret.Name == "" {
		return "", secret
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	switch err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: secret.Name}, meta); {
	case apierrors.IsNotFound(err):
		secret.Missing = true
	case apierrors.IsForbidden(err):
		secret.Needs = needs("get", "secrets", pod.Namespace)
	}
	return "", secret
}

// coveringPDBs names the PodDisruptionBudgets whose selector matches the pod,
// with the disruptions each allows now.
func coveringPDBs(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) ([]string, string) {
	list, err := kube.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, needs("list", "poddisruptionbudgets.policy", pod.Namespace)
	case err != nil:
		return nil, err.Error()
	}
	var out []string
	for _, p := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%d disruptions allowed now)", p.Name, p.Status.DisruptionsAllowed))
	}
	return out, ""
}
