package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/render"
)

// valid are the values every bad-values case starts from, so each case fails
// for its own reason only: credentials and a scope binding.
var valid = []string{"--set", "github.credentials.existingSecret=runner-guard-github",
	"--set", "policy.scopeBindings[0].namespaces={arc-runners}", "--set", "policy.scopeBindings[0].scopes={org:acme}"}

// noBinding drops valid's scope binding (null deletes a value in Helm).
var noBinding = []string{"--set", "policy.scopeBindings=null"}

// TestBadValuesFail checks values the chart must refuse make `helm template`
// fail with a message that names the value.
func TestBadValuesFail(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string // all must appear in the error
	}{
		"wrong type":           {args: []string{"--set-string", "policy.timeoutSeconds=ten"}, want: []string{"timeoutSeconds", "integer"}},
		"wrong type in a list": {args: []string{"--set", "policy.guardedNamespaces[0]=true"}, want: []string{"guardedNamespaces"}},
		"unknown key":          {args: []string{"--set", "github.tokn=ghp_x"}, want: []string{"tokn", "github"}},
		"CA bundle from both a ConfigMap and a Secret": {args: []string{"--set", "github.caBundle.configMapRef.name=ca", "--set", "github.caBundle.secretRef.name=ca"},
			want: []string{"github.caBundle", "not both"}},
		"proxy credentials without a proxy": {args: []string{"--set", "proxy.credentialsSecret=corp-proxy"},
			want: []string{"proxy.credentialsSecret", "proxy.https"}},
		"proxy password in the URL": {args: []string{"--set", "proxy.https=http://u:p@proxy:3128"},
			want: []string{"proxy.credentialsSecret", "not in the URL"}},
		"proxy URL without a scheme": {args: []string{"--set", "proxy.https=proxy.corp:3128"}, want: []string{"proxy", "https"}},
		"unknown nested key":         {args: []string{"--set", "certificates.certManager.issuer=x"}, want: []string{"issuer", "certManager"}},
		"enum":                       {args: []string{"--set", "policy.onError=ignore"}, want: []string{"onError"}},
		"App credentials with an enterprise scope": {args: []string{"--set", "github.credentials.existingSecret=", "--set", "github.scope=enterprise",
			"--set", "github.credentials.app.id=1", "--set", "github.credentials.app.installationID=2",
			"--set", "github.credentials.app.privateKey=k"},
			want: []string{"github.credentials", "enterprise", "token"}},
		"existing App Secret with an enterprise scope": {args: []string{"--set", "github.credentials.existingSecretType=app", "--set", "github.scope=enterprise"},
			want: []string{"github.credentials", "enterprise"}},
		"GitHub timeout past the webhook timeout less 2s": {args: []string{"--set", "policy.timeoutSeconds=10", "--set", "policy.githubTimeout=9s"},
			want: []string{"policy.githubTimeout", "policy.timeoutSeconds", "9s"}},
		"GitHub timeout in ms past the webhook timeout less 2s": {args: []string{"--set", "policy.timeoutSeconds=5", "--set", "policy.githubTimeout=3001ms"},
			want: []string{"policy.githubTimeout"}},
		"GitHub timeout past GitHub's own limit": {args: []string{"--set", "policy.timeoutSeconds=30", "--set", "policy.githubTimeout=11s"},
			want: []string{"policy.githubTimeout", "10s"}},
		"GitHub timeout not a duration": {args: []string{"--set", "policy.githubTimeout=5 seconds"}, want: []string{"githubTimeout"}},
		"no credentials": {args: []string{"--set", "github.credentials.existingSecret="},
			want: []string{"github.credentials", "no GitHub credentials"}},
		"token and existing Secret": {args: []string{"--set", "github.credentials.token=ghp_x"},
			want: []string{"github.credentials", "existingSecret"}},
		"incomplete App": {args: []string{"--set", "github.credentials.existingSecret=", "--set", "github.credentials.app.id=1"},
			want: []string{"github.credentials.app.installationID"}},
		"credentials from ARC without namespaces": {args: []string{"--set", "github.credentials.fromARC.enabled=true"},
			want: []string{"github.credentials.fromARC.namespaces"}},
		"plain HTTP GitHub": {args: []string{"--set", "github.url=http://ghes.internal/api/v3/"},
			want: []string{"github.url", "github.allowHTTP"}},
		"provided certificate without a CA": {args: []string{"--set", "certificates.mode=provided", "--set", "certificates.provided.existingSecret=tls"},
			want: []string{"certificates.provided.caBundle"}},
		"guarding an exempt namespace": {args: []string{"--set", "policy.guardedNamespaces={ci,kube-system}"},
			want: []string{"policy.guardedNamespaces", "kube-system"}},
		"guarding its own namespace": {args: []string{"--set", "policy.guardedNamespaces={" + namespace + "}"},
			want: []string{"policy.guardedNamespaces", namespace}},
		"webhook URL without TLS": {args: []string{"--set", "webhook.url=http://127.0.0.1:9443", "--set", "certificates.mode=generate"},
			want: []string{"webhook.url", "https"}},
		"no scope binding": {args: noBinding,
			want: []string{"policy.scopeBindings", "policy.allowAnyScope",
				"--set 'policy.scopeBindings[0].namespaces={arc-runners}' --set 'policy.scopeBindings[0].scopes={org:acme}'"}},
		"any scope allowed and scope bindings": {args: []string{"--set", "policy.allowAnyScope=true"},
			want: []string{"policy.allowAnyScope", "policy.scopeBindings"}},
		"scope binding without scopes": {args: []string{"--set", "policy.scopeBindings[0].scopes=null"},
			want: []string{"scopeBindings", "scopes"}},
		"scope without a kind": {args: []string{"--set", "policy.scopeBindings[0].scopes={acme}"},
			want: []string{"scopeBindings", "scopes"}},
		"unknown key in a scope binding": {args: []string{"--set", "policy.scopeBindings[0].namespace=ci"},
			want: []string{"namespace", "scopeBindings"}},
		"scope binding naming an unknown runner pod spec": {args: []string{"--set", "policy.scopeBindings[0].runnerPods={scaleset}"},
			want: []string{"policy.scopeBindings[0].runnerPods", "scaleset", "legacy, scale-set"}},
		"webhook source that is no NetworkPolicy peer": {args: []string{"--set", "networkPolicy.webhookSources[0].cidr=10.0.0.0/8"},
			want: []string{"webhookSources", "cidr"}},
		"budget keeping the only replica": {args: []string{"--set", "replicaCount=1", "--set", "podDisruptionBudget.minAvailable=1"},
			want: []string{"podDisruptionBudget.minAvailable", "replicaCount", "drain"}},
		"budget keeping every replica": {args: []string{"--set", "replicaCount=2", "--set", "podDisruptionBudget.minAvailable=2"},
			want: []string{"podDisruptionBudget.minAvailable", "replicaCount (2)"}},
		"budget keeping every replica by percentage": {args: []string{"--set", "replicaCount=3", "--set-string", "podDisruptionBudget.minAvailable=67%"},
			want: []string{"podDisruptionBudget.minAvailable", "67%", "replicaCount (3)"}},
		"budget allowing no disruption": {args: []string{"--set", "podDisruptionBudget.maxUnavailable=0"},
			want: []string{"podDisruptionBudget.maxUnavailable", "drain"}},
		"budget allowing no disruption by percentage": {args: []string{"--set-string", "podDisruptionBudget.maxUnavailable=0%"},
			want: []string{"podDisruptionBudget.maxUnavailable", "0%"}},
		"budget with minAvailable and maxUnavailable": {args: []string{"--set", "podDisruptionBudget.minAvailable=1", "--set", "podDisruptionBudget.maxUnavailable=1"},
			want: []string{"podDisruptionBudget", "minAvailable", "maxUnavailable", "not both"}},
		"budget as a string that is no percentage": {args: []string{"--set-string", "podDisruptionBudget.minAvailable=1"},
			want: []string{"minAvailable"}},
		"goMemLimit at the memory limit": {args: []string{"--set", "goMemLimit=256MiB"},
			want: []string{"goMemLimit", "resources.limits.memory", "256Mi"}},
		"goMemLimit not a Go memory limit": {args: []string{"--set", "goMemLimit=200Mi"}, want: []string{"goMemLimit"}},
		"memory limit GOMEMLIMIT cannot be derived from": {args: []string{"--set", "resources.limits.memory=0.5Gi"},
			want: []string{"resources.limits.memory", "0.5Gi", "goMemLimit"}},
		"evictions failurePolicy not a policy": {args: []string{"--set", "policy.evictionsFailurePolicy=fail"},
			want: []string{"evictionsFailurePolicy"}},
		"evictions in all namespaces and guarded namespaces": {args: []string{"--set", "policy.evictionsInAllNamespaces=true", "--set", "policy.guardedNamespaces={ci}"},
			want: []string{"policy.evictionsInAllNamespaces", "policy.guardedNamespaces"}},
		"no Deployment and no URL": {args: []string{"--set", "deployment.enabled=false"},
			want: []string{"deployment.enabled", "webhook.url"}},
		"events without a secret": {args: []string{"--set", "events.enabled=true"},
			want: []string{"events.enabled", "events.secret", "events.secrets"}},
		"events with one secret and secrets per scope": {args: slices.Concat(eventsSecret("org-a", "org:acme"), []string{"--set", "events.existingSecret=hook"}),
			want: []string{"events.secrets", "events.secret/events.existingSecret", "not both"}},
		"events secrets named twice": {args: slices.Concat(eventsSecret("org-a", "org:acme"),
			[]string{"--set", "events.secrets[1].name=org-a", "--set", "events.secrets[1].existingSecret=b", "--set", "events.secrets[1].scopes={org:b}"}),
			want: []string{"events.secrets[1].name", "org-a"}},
		"events secret name no DNS label": {args: eventsSecret("Org_A", "org:acme"), want: []string{"events.secrets", "name"}},
		"events secret without scopes": {args: slices.Concat(eventsSecret("org-a", "org:acme"), []string{"--set", "events.secrets[0].scopes=null"}),
			want: []string{"events.secrets", "scopes"}},
		"events secret scope of no kind": {args: eventsSecret("org-a", "organization:acme"), want: []string{"events.secrets", "scopes"}},
		"events secret without a Secret": {args: slices.Concat(eventsSecret("org-a", "org:acme"), []string{"--set", "events.secrets[0].existingSecret=null"}),
			want: []string{"events.secrets", "existingSecret"}},
		"events previous key without its deadline": {args: slices.Concat(eventsSecret("org-a", "org:acme"), []string{"--set", "events.secrets[0].previousKey=old"}),
			want: []string{"events.secrets", "previousUntil"}},
		"events previous deadline not RFC 3339": {args: slices.Concat(eventsSecret("org-a", "org:acme"),
			[]string{"--set", "events.secrets[0].previousKey=old", "--set-string", "events.secrets[0].previousUntil=next week"}),
			want: []string{"events.secrets", "previousUntil"}},
		"events port open to nobody": {args: []string{"--set", "events.enabled=true", "--set", "events.secret=x", "--set", "events.networkPolicy.from=null"},
			want: []string{"events.networkPolicy.from", "ipBlock"}},
		"events memory limit GOMEMLIMIT cannot be derived from": {args: []string{"--set", "events.enabled=true", "--set", "events.secret=x",
			"--set", "events.resources.limits.memory=0.5Gi"}, want: []string{"events.resources.limits.memory", "0.5Gi"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := render.Template(t, append(append([]string{}, valid...), c.args...)...)
			if err == nil {
				t.Fatalf("helm template %q succeeded, want an error naming %q; rendered %d bytes", c.args, c.want, len(out))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestBoundaryValuesPass guards against checks stricter than documented: the
// limits themselves are accepted.
func TestBoundaryValuesPass(t *testing.T) {
	cases := map[string][]string{
		"GitHub timeout exactly the webhook timeout less 2s": {"--set", "policy.timeoutSeconds=10", "--set", "policy.githubTimeout=8s"},
		"GitHub timeout in ms":                               {"--set", "policy.timeoutSeconds=5", "--set", "policy.githubTimeout=3000ms"},
		"App credentials with an organization scope":         {"--set", "github.credentials.existingSecretType=app", "--set", "github.scope=organization"},
		"token with an enterprise scope":                     {"--set", "github.scope=enterprise"},
		"plain HTTP GitHub on a trusted network":             {"--set", "github.url=http://ghes.internal/api/v3/", "--set", "github.allowHTTP=true"},
		"credentials only from ARC": {"--set", "github.credentials.existingSecret=", "--set", "github.credentials.fromARC.enabled=true",
			"--set", "github.credentials.fromARC.namespaces={arc-runners}"},
		"any scope allowed without scope bindings":           append(slices.Clone(noBinding), "--set", "policy.allowAnyScope=true"),
		"scope binding limited to a default runner pod spec": {"--set", "policy.scopeBindings[0].runnerPods={scale-set}"},
		"scope binding limited to a custom runner pod spec": {"--set", "policy.runnerPods[0].name=custom",
			"--set", "policy.runnerPods[0].selector.matchLabels.runner=yes", "--set", "policy.runnerPods[0].container=runner",
			"--set", "policy.runnerPods[0].scopeEnv.organization=ORG", "--set", "policy.scopeBindings[0].runnerPods={custom}"},
		"one replica with the default budget":       {"--set", "replicaCount=1"},
		"budget one below replicaCount":             {"--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=2"},
		"budget percentage rounding below replicas": {"--set", "replicaCount=3", "--set-string", "podDisruptionBudget.minAvailable=66%"},
		"budget maxUnavailable 1 of one replica":    {"--set", "replicaCount=1", "--set", "podDisruptionBudget.maxUnavailable=1"},
		"goMemLimit just below the memory limit":    {"--set", "goMemLimit=255MiB"},
		"odd memory limit with goMemLimit":          {"--set", "resources.limits.memory=0.5Gi", "--set", "goMemLimit=460MiB"},
		"events secrets per scope with a previous key": slices.Concat(eventsSecret("org-a", "org:acme"),
			[]string{"--set", "events.secrets[0].previousKey=old", "--set-string", "events.secrets[0].previousUntil=2027-01-01T00:00:00+02:00"}),
		"events open to every address without a NetworkPolicy": {"--set", "events.enabled=true", "--set", "events.secret=x",
			"--set", "events.networkPolicy.from=null", "--set", "networkPolicy.enabled=false"},
		"scope globs and kinds": {"--set", "policy.scopeBindings[0].namespaces={team-a,team-a-*}",
			"--set", "policy.scopeBindings[0].scopes={org:acme,repo:other/app-*,enterprise:big,organization:*,repository:a/b}"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := render.Template(t, append(append([]string{}, valid...), args...)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// eventsSecret turns events on with one events.secrets entry.
func eventsSecret(name, scope string) []string {
	return []string{"--set", "events.enabled=true", "--set", "events.secrets[0].name=" + name,
		"--set", "events.secrets[0].existingSecret=" + name + "-webhook", "--set", "events.secrets[0].scopes={" + scope + "}"}
}
