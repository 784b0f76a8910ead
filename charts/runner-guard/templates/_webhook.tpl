{{/*
The DELETE entries as JSON [{name, selector}]: ARC's two kinds of runner pod,
or one per policy.runnerPods entry, so the API server sends only runner pods'
deletions whatever the webhook is configured to recognize.
*/}}
{{- define "runner-guard.deleteWebhooks" -}}
{{- $out := list }}
{{- if .Values.policy.runnerPods }}
{{- range .Values.policy.runnerPods }}
{{- $out = append $out (dict "name" (printf "%s-runner-pods.runner-guard.io" .name) "selector" .selector) }}
{{- end }}
{{- else }}
{{- $out = append $out (dict "name" "legacy-runner-pods.runner-guard.io" "selector" (dict "matchExpressions" (list (dict "key" "actions-runner" "operator" "Exists")))) }}
{{- $out = append $out (dict "name" "ephemeral-runner-pods.runner-guard.io" "selector" (dict "matchExpressions" (list (dict "key" "actions-ephemeral-runner" "operator" "In" "values" (list "True"))))) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* clientConfig: the in-cluster Service, or webhook.url; caBundle unless cert-manager injects it. */}}
{{- define "runner-guard.clientConfig" -}}
{{- $root := .root }}
clientConfig:
  {{- if $root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) (include "runner-guard.webhookPath" $root) }}
  {{- else }}
  service:
    name: {{ include "runner-guard.webhookName" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ include "runner-guard.webhookPath" $root }}
    port: 443
  {{- end }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}

{{/* The label a namespace carries to have its evictions guarded when policy.guardedNamespaces is empty. */}}
{{- define "runner-guard.guardLabelKey" -}}runner-guard.io/guard{{- end }}
{{- define "runner-guard.guardLabelValue" -}}enabled{{- end }}

{{/* The failurePolicy of the DELETE entries: policy.deletesFailurePolicy, else policy.failurePolicy. */}}
{{- define "runner-guard.deletesFailurePolicy" -}}
{{- .Values.policy.deletesFailurePolicy | default .Values.policy.failurePolicy }}
{{- end }}

{{/*
The failurePolicy of the evictions entry: policy.evictionsFailurePolicy; else
Ignore when the entry covers namespaces nobody named
(policy.evictionsInAllNamespaces), so an outage never blocks the drain of a
node running other teams' pods; else policy.failurePolicy (Fail), whatever
the job budgets. A budget holds only a job the leader learnt before the
outage: a job that starts while no replica is ready has none (no listing is
taken, no delivery applied, no scale-set budget made), so with Ignore its
eviction would be admitted and the job lost.
*/}}
{{- define "runner-guard.evictionsFailurePolicy" -}}
{{- $p := .Values.policy }}
{{- if $p.evictionsFailurePolicy }}{{ $p.evictionsFailurePolicy }}
{{- else if and $p.evictionsInAllNamespaces (not $p.guardedNamespaces) }}Ignore
{{- else }}{{ $p.failurePolicy }}
{{- end }}
{{- end }}

{{/*
Which namespaces the evictions entry covers, in words (NOTES.txt):
policy.guardedNamespaces, else those labelled runner-guard.io/guard=enabled,
else (policy.evictionsInAllNamespaces) all but the exempt ones.
*/}}
{{- define "runner-guard.evictionsNamespaces" -}}
{{- $p := .Values.policy }}
{{- if $p.guardedNamespaces }}{{ join ", " $p.guardedNamespaces }}
{{- else if $p.evictionsInAllNamespaces }}all but {{ include "runner-guard.exemptNamespaces" . | fromJsonArray | join ", " }}
{{- else }}namespaces labelled {{ include "runner-guard.guardLabelKey" . }}={{ include "runner-guard.guardLabelValue" . }} (except {{ include "runner-guard.exemptNamespaces" . | fromJsonArray | join ", " }})
{{- end }}
{{- end }}

{{/*
Settings shared by every entry; see manifests/base/webhook. .root is the
chart's context, .evictions true for the evictions entry. The DELETE entries
select runner pods by label, so they may cover every namespace; an Eviction
has no labels, so that entry covers only namespaces the user named: listed in
policy.guardedNamespaces or labelled runner-guard.io/guard=enabled.
*/}}
{{- define "runner-guard.webhookCommon" -}}
{{- $root := .root }}
{{- $p := $root.Values.policy }}
namespaceSelector:
  {{- if and .evictions (not $p.guardedNamespaces) (not $p.evictionsInAllNamespaces) }}
  matchLabels:
    {{ include "runner-guard.guardLabelKey" $root }}: {{ include "runner-guard.guardLabelValue" $root | quote }}
  {{- end }}
  matchExpressions:
    - key: kubernetes.io/metadata.name
      {{- if $p.guardedNamespaces }}
      operator: In
      values: {{ toJson $p.guardedNamespaces }}
      {{- else }}
      operator: NotIn
      values: {{ include "runner-guard.exemptNamespaces" $root }}
      {{- end }}
admissionReviewVersions: ["v1"]
sideEffects: NoneOnDryRun
{{- /* Ignore until a replica serves a certificate this entry's caBundle
verifies; it then sets the configuration's runner-guard.io/*-failure-policy
annotation (webhook.yaml, package webhook/activation). An upgrade keeps the
live value (runner-guard.installedFailurePolicy). */}}
failurePolicy: {{ include "runner-guard.installedFailurePolicy" . }}
matchPolicy: Equivalent
timeoutSeconds: {{ $p.timeoutSeconds }}
{{- end }}

{{/*
The failurePolicy an entry is rendered with: Ignore on a fresh install (and
under helm template, where lookup finds nothing); on an upgrade, the entry's
live value (.live: the configuration as lookup returns it, .name: the entry).
After activation the activation's field manager owns failurePolicy: a
server-side apply (Helm 4) that set another value would conflict with it, and
a client-side one (Helm 3) would put the entry back to Ignore until a replica
raised it again. Applying the live value is neither. See docs/DESIGN.md, "The
install window".
*/}}
{{- define "runner-guard.installedFailurePolicy" -}}
{{- $policy := "Ignore" }}
{{- range (dig "webhooks" list (.live | default dict)) }}
{{- if and (eq .name $.name) .failurePolicy }}{{ $policy = .failurePolicy }}{{ end }}
{{- end }}
{{- $policy }}
{{- end }}

{{/*
A pod already terminating, or not running (pending, succeeded, failed) has no
job to lose: the API server decides that itself and never calls the webhook, so
an outage cannot block those deletes. A Failed pod with a DisruptionTarget
condition (pod GC after a node went away) still goes to the webhook, which asks
GitHub whether its runner is still busy. Evictions cannot have these: an
Eviction carries no pod fields.
*/}}
{{- define "runner-guard.deleteMatchConditions" -}}
matchConditions:
  - name: not-terminating
    expression: "!has(oldObject.metadata.deletionTimestamp)"
  - name: running-or-disrupted
    expression: >-
      has(oldObject.status) && has(oldObject.status.phase) &&
      (oldObject.status.phase == 'Running' ||
      (oldObject.status.phase == 'Failed' && has(oldObject.status.conditions) &&
      oldObject.status.conditions.exists(c, c.type == 'DisruptionTarget' && c.status == 'True')))
{{- end }}

{{/*
certificates.mode generate: the Secret from an earlier install when there is
one (an upgrade keeps the CA the API server trusts), else a new CA and serving
certificate. YAML of base64 tls.crt, tls.key, ca.crt.
*/}}
{{- define "runner-guard.generatedCert" -}}
{{- $name := include "runner-guard.tlsSecretName" . }}
{{- $old := lookup "v1" "Secret" .Release.Namespace $name }}
{{- if and $old (index $old "data") (index $old.data "ca.crt") (index $old.data "tls.crt") (index $old.data "tls.key") }}
tls.crt: {{ index $old.data "tls.crt" }}
tls.key: {{ index $old.data "tls.key" }}
ca.crt: {{ index $old.data "ca.crt" }}
{{- else }}
{{- $days := int .Values.certificates.generate.validityDays }}
{{- $svc := include "runner-guard.webhookName" . }}
{{- $dns := list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) }}
{{- $ips := list }}
{{- with .Values.webhook.url }}
{{- $host := (urlParse .).hostname }}
{{- if regexMatch "^[0-9.]+$|:" $host }}{{ $ips = append $ips $host }}{{ else }}{{ $dns = append $dns $host }}{{ end }}
{{- end }}
{{- $ca := genCA (printf "%s-ca" (include "runner-guard.fullname" .)) $days }}
{{- $cert := genSignedCert (first $dns) $ips $dns $days $ca }}
tls.crt: {{ $cert.Cert | b64enc }}
tls.key: {{ $cert.Key | b64enc }}
ca.crt: {{ $ca.Cert | b64enc }}
{{- end }}
{{- end }}
