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
