{{/* Names and labels. */}}
{{- define "runner-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "runner-guard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "runner-guard.webhookName" -}}
{{- include "runner-guard.fullname" . }}-webhook
{{- end }}

{{- define "runner-guard.serviceAccountName" -}}
{{- default (include "runner-guard.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "runner-guard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "runner-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "runner-guard.imageTag" . | quote }}
app.kubernetes.io/part-of: runner-guard
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The webhook pods: the Deployment's selector, the Service, PDB, NetworkPolicy. */}}
{{- define "runner-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runner-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "runner-guard.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* Secrets and paths. */}}
{{- define "runner-guard.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "provided" }}
{{- .Values.certificates.provided.existingSecret }}
{{- else }}
{{- include "runner-guard.webhookName" . }}-cert
{{- end }}
{{- end }}

{{- define "runner-guard.caSecretName" -}}
{{- include "runner-guard.fullname" . }}-ca
{{- end }}

{{- define "runner-guard.servingCertName" -}}
{{- include "runner-guard.fullname" . }}-serving-cert
{{- end }}

{{/* token, app, or none (credentials only from ARC). */}}
{{- define "runner-guard.authType" -}}
{{- $c := .Values.github.credentials }}
{{- if $c.existingSecret }}{{ $c.existingSecretType }}
{{- else if $c.app.id }}app
{{- else if $c.token }}token
{{- else }}none
{{- end }}
{{- end }}

{{- define "runner-guard.githubSecretName" -}}
{{- default (printf "%s-github" (include "runner-guard.fullname" .)) .Values.github.credentials.existingSecret }}
{{- end }}

{{- define "runner-guard.certDir" -}}/tmp/k8s-webhook-server/serving-certs{{- end }}
{{- define "runner-guard.githubDir" -}}/etc/runner-guard/github{{- end }}
{{- define "runner-guard.configDir" -}}/etc/runner-guard/config{{- end }}
{{- define "runner-guard.clientCADir" -}}/etc/runner-guard/client-ca{{- end }}
{{- define "runner-guard.eventsDir" -}}/etc/runner-guard/events{{- end }}
{{/* The Secret holding the GitHub webhook's secret. */}}
{{- define "runner-guard.eventsSecretName" -}}
{{- .Values.events.existingSecret | default (printf "%s-events" (include "runner-guard.fullname" .)) }}
{{- end }}

{{/* The events endpoint's Deployment, Service, NetworkPolicy and RBAC. */}}
{{- define "runner-guard.eventsName" -}}
{{- include "runner-guard.fullname" . }}-events
{{- end }}

{{/* The events pods: not the webhook's (another component), so neither's
Deployment, Service, PodDisruptionBudget or NetworkPolicy selects the other's. */}}
{{- define "runner-guard.eventsSelectorLabels" -}}
app.kubernetes.io/name: {{ include "runner-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: events
{{- end }}

{{- define "runner-guard.eventsServiceAccountName" -}}
{{- default (include "runner-guard.eventsName" .) .Values.events.serviceAccount.name }}
{{- end }}

{{/* events.secrets[]: each Secret under this directory, in a directory of
its entry's name; the mapping file --github-webhook-secrets reads. */}}
{{- define "runner-guard.webhookSecretsDir" -}}/etc/runner-guard/webhook-secrets{{- end }}
{{- define "runner-guard.webhookSecretsFile" -}}/etc/runner-guard/webhook-secrets.yaml{{- end }}
{{- define "runner-guard.webhookSecretsConfigMap" -}}
{{- include "runner-guard.fullname" . }}-webhook-secrets
{{- end }}

{{/* The webhook secret flag(s), for both Deployments (the endpoint signs
the job annotations, the webhook verifies them). */}}
{{- define "runner-guard.webhookSecretArgs" -}}
{{- if .Values.events.secrets }}
- --github-webhook-secrets={{ include "runner-guard.webhookSecretsFile" . }}
{{- else }}
- --github-webhook-secret-file={{ include "runner-guard.eventsDir" . }}/webhook-secret
{{- end }}
{{- end }}

{{/* Their volumeMounts. */}}
{{- define "runner-guard.webhookSecretMounts" -}}
{{- if .Values.events.secrets }}
- name: webhook-secrets
  mountPath: {{ include "runner-guard.webhookSecretsFile" . }}
  subPath: webhook-secrets.yaml
  readOnly: true
{{- range $i, $s := .Values.events.secrets }}
- name: webhook-secret-{{ $i }}
  mountPath: {{ include "runner-guard.webhookSecretsDir" $ }}/{{ $s.name }}
  readOnly: true
{{- end }}
{{- else }}
- name: events-secret
  mountPath: {{ include "runner-guard.eventsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Their volumes. */}}
{{- define "runner-guard.webhookSecretVolumes" -}}
{{- if .Values.events.secrets }}
- name: webhook-secrets
  configMap:
    name: {{ include "runner-guard.webhookSecretsConfigMap" . }}
{{- range $i, $s := .Values.events.secrets }}
- name: webhook-secret-{{ $i }}
  secret:
    secretName: {{ $s.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $s.key | default "webhook-secret" }}
        path: secret
      {{- with $s.previousKey }}
      - key: {{ . }}
        path: previous
      {{- end }}
{{- end }}
{{- else }}
- name: events-secret
  secret:
    secretName: {{ include "runner-guard.eventsSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.events.existingSecretKey }}
        path: webhook-secret
{{- end }}
{{- end }}

{{/* The mapping file of events.secrets[] (--github-webhook-secrets). */}}
{{- define "runner-guard.webhookSecretsYAML" -}}
secrets:
{{- range .Values.events.secrets }}
- name: {{ .name }}
  secretFile: {{ include "runner-guard.webhookSecretsDir" $ }}/{{ .name }}/secret
  scopes: {{ toJson .scopes }}
  {{- if .previousKey }}
  previousSecretFile: {{ include "runner-guard.webhookSecretsDir" $ }}/{{ .name }}/previous
  previousUntil: {{ .previousUntil | quote }}
  {{- end }}
{{- end }}
{{- end }}

{{/* GOMEMLIMIT of the events container: 90 % of events.resources.limits.memory. */}}
{{- define "runner-guard.eventsGoMemLimit" -}}
{{- $bytes := include "runner-guard.memoryLimitBytes" (dict "Values" (dict "resources" .Values.events.resources)) }}
{{- if eq $bytes "?" }}
{{- fail (printf "events.resources.limits.memory: %v is not a whole number of bytes, Ki, Mi, Gi, Ti, k, M, G or T, so the chart cannot derive the events container's GOMEMLIMIT (90 %% of it)" .Values.events.resources.limits.memory) }}
{{- else if $bytes }}
{{- $limit := div (mul (int64 $bytes) 9) 10 }}
{{- if ge $limit 1048576 }}{{ div $limit 1048576 }}MiB{{ else }}{{ $limit }}B{{ end }}
{{- end }}
{{- end }}

{{/* The exempt namespaces, the release namespace included. */}}
{{- define "runner-guard.exemptNamespaces" -}}
{{- $ns := list }}
{{- range .Values.policy.exemptNamespaces }}{{ $ns = append $ns . }}{{ end }}
{{- if not (has .Release.Namespace $ns) }}{{ $ns = append $ns .Release.Namespace }}{{ end }}
{{- toJson $ns }}
{{- end }}

{{/* A duration like 5s, 4500ms or 1m in milliseconds (the schema allows only these forms). */}}
{{- define "runner-guard.durationMillis" -}}
{{- $n := regexFind "^[0-9]+" . | atoi }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- if eq $unit "ms" }}{{ $n }}
{{- else if eq $unit "s" }}{{ mul $n 1000 }}
{{- else if eq $unit "m" }}{{ mul $n 60000 }}
{{- else }}{{ fail (printf "duration %q: want a whole number of ms, s or m" .) }}
{{- end }}
{{- end }}

{{/* The webhook's path on its server. */}}
{{- define "runner-guard.webhookPath" -}}/validate-runner-pods{{- end }}

{{/*
The PodDisruptionBudget's minAvailable or maxUnavailable line, empty for no
PodDisruptionBudget: minAvailable empty and maxUnavailable empty mean 1 with
two or more replicas and none with one (a budget that keeps the only pod
would block its node's drain forever).
*/}}
{{- define "runner-guard.pdbSpec" -}}
{{- $pdb := .Values.podDisruptionBudget }}
{{- $min := include "runner-guard.intOrString" $pdb.minAvailable }}
{{- $max := include "runner-guard.intOrString" $pdb.maxUnavailable }}
{{- if ne $max "" }}
maxUnavailable: {{ if hasSuffix "%" $max }}{{ quote $max }}{{ else }}{{ $max }}{{ end }}
{{- else if ne $min "" }}
minAvailable: {{ if hasSuffix "%" $min }}{{ quote $min }}{{ else }}{{ $min }}{{ end }}
{{- else if gt (int .Values.replicaCount) 1 }}
minAvailable: 1
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT: goMemLimit, else 90 % of resources.limits.memory in MiB (bytes
below 1 MiB), else empty (no limit, no GOMEMLIMIT).
*/}}
{{- define "runner-guard.goMemLimit" -}}
{{- if .Values.goMemLimit }}{{ .Values.goMemLimit }}
{{- else }}
{{- $bytes := include "runner-guard.memoryLimitBytes" . }}
{{- if eq $bytes "?" }}
{{- fail (printf "resources.limits.memory: %v is not a whole number of bytes, Ki, Mi, Gi, Ti, k, M, G or T, so the chart cannot derive GOMEMLIMIT (90 %% of it); set goMemLimit, e.g. goMemLimit: 460MiB" .Values.resources.limits.memory) }}
{{- else if $bytes }}
{{- $limit := div (mul (int64 $bytes) 9) 10 }}
{{- if ge $limit 1048576 }}{{ div $limit 1048576 }}MiB{{ else }}{{ $limit }}B{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{/* resources.limits.memory in bytes, empty without a limit, ? for a quantity it cannot read. */}}
{{- define "runner-guard.memoryLimitBytes" -}}
{{- $raw := dig "limits" "memory" "" (.Values.resources | default dict) }}
{{- $q := toString $raw }}
{{- if kindIs "float64" $raw }}{{ $q = toString (int64 $raw) }}{{ end }}
{{- if $q }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q) }}?
{{- else }}
{{- $unit := regexReplaceAll "^[0-9]+" $q "" }}
{{- $n := int64 (regexFind "^[0-9]+" $q) }}
{{- $mult := get (dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000) $unit }}
{{- mul $n (int64 $mult) }}
{{- end }}
{{- end }}
{{- end }}

{{/* An int-or-string value as a string: "" when unset, 0 kept. */}}
{{- define "runner-guard.intOrString" -}}
{{- if kindIs "string" . }}{{ . }}
{{- else if not (kindIs "invalid" .) }}{{ int64 . }}
{{- end }}
{{- end }}
