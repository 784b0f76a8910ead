{{/*
Checks across values that values.schema.json cannot express. Each failure
names the value to change.
*/}}
{{- define "runner-guard.validate" -}}
{{- include "runner-guard.validateTimeouts" . }}
{{- include "runner-guard.validateCredentials" . }}
{{- include "runner-guard.validateCertificates" . }}
{{- include "runner-guard.validateNamespaces" . }}
{{- include "runner-guard.validateScopeBindings" . }}
{{- include "runner-guard.validateEndpoint" . }}
{{- include "runner-guard.validateDisruptionBudget" . }}
{{- include "runner-guard.validateMemory" . }}
{{- include "runner-guard.validateEvictions" . }}
{{- include "runner-guard.validateNetwork" . }}
{{- include "runner-guard.validateEvents" . }}
{{- end }}

{{/* The API server gives up after timeoutSeconds; the GitHub call must end 2 s before. */}}
{{- define "runner-guard.validateTimeouts" -}}
{{- $p := .Values.policy }}
{{- $gh := include "runner-guard.durationMillis" $p.githubTimeout | atoi }}
{{- $limit := mul (sub (int $p.timeoutSeconds) 2) 1000 }}
{{- if gt $gh $limit }}
{{- fail (printf "policy.githubTimeout: %s is longer than policy.timeoutSeconds (%d) less 2s; lower policy.githubTimeout to at most %ds or raise policy.timeoutSeconds" $p.githubTimeout (int $p.timeoutSeconds) (sub (int $p.timeoutSeconds) 2)) }}
{{- end }}
{{- if gt $gh 10000 }}
{{- fail (printf "policy.githubTimeout: %s is longer than GitHub's own 10s request limit" $p.githubTimeout) }}
{{- end }}
{{- if le $gh 0 }}
{{- fail (printf "policy.githubTimeout: %s must be positive" $p.githubTimeout) }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateCredentials" -}}
{{- $c := .Values.github.credentials }}
{{- $inlineApp := or $c.app.id $c.app.installationID $c.app.privateKey }}
{{- if and $c.existingSecret (or $c.token $inlineApp) }}
{{- fail "github.credentials: set either existingSecret or the inline token/app values, not both" }}
{{- end }}
{{- if and $c.token $inlineApp }}
{{- fail "github.credentials: set either token or app.*, not both" }}
{{- end }}
{{- if $inlineApp }}
{{- range $k := list "id" "installationID" "privateKey" }}
{{- if not (get $c.app $k) }}
{{- fail (printf "github.credentials.app.%s: required with GitHub App credentials" $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- $type := include "runner-guard.authType" . }}
{{- if and (eq $type "none") (not $c.fromARC.enabled) }}
{{- fail "github.credentials: no GitHub credentials; set existingSecret, token, app.* or fromARC.enabled" }}
{{- end }}
{{- if and (eq $type "app") (eq .Values.github.scope "enterprise") }}
{{- fail "github.credentials: GitHub App credentials cannot manage enterprise runners (github.scope: enterprise); use a token (github.credentials.token or an existingSecret with github_token)" }}
{{- end }}
{{- if and $c.fromARC.enabled (not $c.fromARC.namespaces) }}
{{- fail "github.credentials.fromARC.namespaces: list the runner namespaces whose Secrets runner-guard may read" }}
{{- end }}
{{- if and (hasPrefix "http://" .Values.github.url) (not .Values.github.allowHTTP) }}
{{- fail (printf "github.url: %s is plain HTTP; use https:// or set github.allowHTTP for a trusted network" .Values.github.url) }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateCertificates" -}}
{{- $cert := .Values.certificates }}
{{- if eq $cert.mode "provided" }}
{{- if not $cert.provided.existingSecret }}
{{- fail "certificates.provided.existingSecret: required with certificates.mode provided (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- if not $cert.provided.caBundle }}
{{- fail "certificates.provided.caBundle: required with certificates.mode provided (base64 of the CA's PEM)" }}
{{- end }}
{{- end }}
{{- if and (eq $cert.mode "certManager") .Values.webhook.url }}
{{- fail "certificates.mode: certManager issues certificates for the in-cluster Service; with webhook.url use generate or provided" }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateNamespaces" -}}
{{- $exempt := include "runner-guard.exemptNamespaces" . | fromJsonArray }}
{{- range .Values.policy.guardedNamespaces }}
{{- if has . $exempt }}
{{- fail (printf "policy.guardedNamespaces: %q is exempt (policy.exemptNamespaces or the release namespace) and can never be guarded" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
runner-guard unregisters runners with its own credentials: a shared cluster
must say which scopes each namespace's runner pods may name, or say
explicitly that any scope is fine.
*/}}
{{- define "runner-guard.validateScopeBindings" -}}
{{- $p := .Values.policy }}
{{- if and (not $p.scopeBindings) (not $p.allowAnyScope) }}
{{- fail "policy.scopeBindings: no scope binding, so a runner pod in any guarded namespace could make runner-guard unregister runners of any GitHub scope its credentials reach; bind your runner namespaces to their scopes, e.g. --set 'policy.scopeBindings[0].namespaces={arc-runners}' --set 'policy.scopeBindings[0].scopes={org:acme}', or set policy.allowAnyScope=true if one team owns the cluster" }}
{{- end }}
{{- if and $p.scopeBindings $p.allowAnyScope }}
{{- fail "policy.allowAnyScope: true contradicts policy.scopeBindings (with bindings, a namespace no binding covers may name no scope); drop one of them" }}
{{- end }}
{{- $specs := list "legacy" "scale-set" }}
{{- with $p.runnerPods }}
{{- $specs = list }}
{{- range . }}{{ $specs = append $specs .name }}{{ end }}
{{- end }}
{{- range $i, $b := $p.scopeBindings }}
{{- range $b.runnerPods }}
{{- if not (has . $specs) }}
{{- fail (printf "policy.scopeBindings[%d].runnerPods: %q is not a runner pod spec (policy.runnerPods names %s)" $i . (join ", " $specs)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateEndpoint" -}}
{{- $url := .Values.webhook.url }}
{{- if and $url (not (hasPrefix "https://" $url)) }}
{{- fail (printf "webhook.url: %s must start with https:// (the API server calls webhooks over TLS)" $url) }}
{{- end }}
{{- if and (not .Values.deployment.enabled) (not $url) }}
{{- fail "deployment.enabled: false needs webhook.url (where the webhook is served instead)" }}
{{- end }}
{{- end }}

{{/*
A PodDisruptionBudget that allows no voluntary disruption of runner-guard's
own pods would block the drain of every node they run on, forever. The API
server rounds percentages up, for minAvailable and maxUnavailable alike.
*/}}
{{- define "runner-guard.validateDisruptionBudget" -}}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and .Values.deployment.enabled $pdb.enabled }}
{{- $replicas := int .Values.replicaCount }}
{{- $min := include "runner-guard.intOrString" $pdb.minAvailable }}
{{- $max := include "runner-guard.intOrString" $pdb.maxUnavailable }}
{{- if and (ne $min "") (ne $max "") }}
{{- fail (printf "podDisruptionBudget: set minAvailable (%s) or maxUnavailable (%s), not both" $min $max) }}
{{- end }}
{{- if ne $min "" }}
{{- $n := int (trimSuffix "%" $min) }}
{{- if hasSuffix "%" $min }}{{ $n = div (add (mul $n $replicas) 99) 100 }}{{ end }}
{{- if ge $n $replicas }}
{{- fail (printf "podDisruptionBudget.minAvailable: %s keeps all %d of replicaCount's pods, so no runner-guard pod could ever be evicted and a drain of its node would wait forever; set podDisruptionBudget.minAvailable below replicaCount (%d), raise replicaCount, or leave minAvailable empty (1 with two or more replicas, no PodDisruptionBudget with one)" $min $replicas $replicas) }}
{{- end }}
{{- end }}
{{- if ne $max "" }}
{{- $n := int (trimSuffix "%" $max) }}
{{- if hasSuffix "%" $max }}{{ $n = div (add (mul $n $replicas) 99) 100 }}{{ end }}
{{- if le $n 0 }}
{{- fail (printf "podDisruptionBudget.maxUnavailable: %s lets no runner-guard pod be evicted (replicaCount %d), so a drain of its node would wait forever; set it to at least 1 or leave it empty" $max $replicas) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* goMemLimit must leave the Go runtime room below the container's memory limit. */}}
{{- define "runner-guard.validateMemory" -}}
{{- $limit := include "runner-guard.memoryLimitBytes" . }}
{{- $set := .Values.goMemLimit }}
{{- if and $limit (ne $limit "?") $set (ne $set "off") }}
{{- $unit := regexReplaceAll "^[0-9]+" $set "" }}
{{- $mult := get (dict "" 1 "B" 1 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776) $unit }}
{{- $bytes := mul (int64 (regexFind "^[0-9]+" $set)) (int64 $mult) }}
{{- if ge $bytes (int64 $limit) }}
{{- fail (printf "goMemLimit: %s is not below resources.limits.memory (%v); the Go runtime needs room above GOMEMLIMIT, so set goMemLimit to about 90 %% of the limit or leave it empty" $set .Values.resources.limits.memory) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateEvictions" -}}
{{- if and .Values.policy.evictionsInAllNamespaces .Values.policy.guardedNamespaces }}
{{- fail "policy.evictionsInAllNamespaces: true contradicts policy.guardedNamespaces (listed, they are the only namespaces guarded); drop one of them" }}
{{- end }}
{{- end }}

{{/*
The events endpoint: one secret for every scope (secret or existingSecret)
or one per set of scopes (secrets[]), never both; entries named once, each
with its scopes, a previous key only with its deadline.
*/}}
{{- define "runner-guard.validateEvents" -}}
{{- $e := .Values.events }}
{{- if $e.enabled }}
{{- if and $e.secrets (or $e.secret $e.existingSecret) }}
{{- fail "events.secrets: set either events.secrets (one secret per set of scopes) or events.secret/events.existingSecret (one secret for every scope), not both" }}
{{- end }}
{{- if not (or $e.secrets $e.secret $e.existingSecret) }}
{{- fail "events.enabled: set events.secret, events.existingSecret or events.secrets (the GitHub webhook's secret)" }}
{{- end }}
{{- $names := list }}
{{- range $i, $s := $e.secrets }}
{{- if has $s.name $names }}
{{- fail (printf "events.secrets[%d].name: %q names another entry too; each entry is mounted in a directory of its name" $i $s.name) }}
{{- end }}
{{- $names = append $names $s.name }}
{{- if not $s.scopes }}
{{- fail (printf "events.secrets[%d].scopes: list the scopes its secret verifies, e.g. [\"org:acme\"]" $i) }}
{{- end }}
{{- range $s.scopes }}
{{- if not (regexMatch "^(org|repo|enterprise):[^\\s:]+$" .) }}
{{- fail (printf "events.secrets[%d].scopes: %q is not org:ORG, repo:OWNER/REPO or enterprise:SLUG" $i .) }}
{{- end }}
{{- end }}
{{- if and $s.previousKey (not $s.previousUntil) }}
{{- fail (printf "events.secrets[%d].previousUntil: required with previousKey (RFC 3339, when the previous secret stops being accepted)" $i) }}
{{- end }}
{{- if and $s.previousUntil (not $s.previousKey) }}
{{- fail (printf "events.secrets[%d].previousUntil: set previousKey too (the key of the previous secret)" $i) }}
{{- end }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not $e.networkPolicy.from) }}
{{- fail "events.networkPolicy.from: list who may reach the events port (the Ingress controller's namespace, or a load balancer's ranges as ipBlock entries); to admit every source, list ipBlock 0.0.0.0/0 and ::/0" }}
{{- end }}
{{- end }}
{{- end }}
