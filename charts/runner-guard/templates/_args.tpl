{{/*
The webhook's command line. Flags at their binary default are left out, so the
default install's args are those of dist/install.yaml plus --config.
*/}}
{{- define "runner-guard.args" -}}
{{- $authType := include "runner-guard.authType" . }}
{{- $dir := include "runner-guard.githubDir" . }}
{{- if eq .Values.certificates.mode "selfManaged" }}
- --self-managed-cert-secret={{ include "runner-guard.tlsSecretName" . }}
{{- with .Values.certificates.selfManaged }}
{{- if ne .validity "2160h" }}
- --self-managed-cert-validity={{ .validity }}
{{- end }}
{{- if ne .caValidity "17520h" }}
- --self-managed-ca-validity={{ .caValidity }}
{{- end }}
{{- end }}
{{- else }}
- --cert-dir={{ include "runner-guard.certDir" . }}
{{- end }}
{{- if eq $authType "token" }}
- --github-token-file={{ $dir }}/github_token
{{- else if eq $authType "app" }}
- --github-app-id=$(GITHUB_APP_ID)
- --github-app-installation-id=$(GITHUB_APP_INSTALLATION_ID)
- --github-app-private-key-file={{ $dir }}/github_app_private_key
{{- end }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
- --health-probe-bind-address=:{{ .Values.health.port }}
{{- if ne (int .Values.webhook.port) 9443 }}
- --webhook-port={{ .Values.webhook.port }}
{{- end }}
{{- if ne .Values.github.url "https://api.github.com/" }}
- --github-url={{ .Values.github.url }}
{{- end }}
{{- if .Values.github.allowHTTP }}
- --github-allow-http
{{- end }}
{{- with include "runner-guard.caBundleFile" . }}
- --github-ca-bundle={{ . }}
{{- end }}
{{- if and .Values.metrics.enabled (not .Values.metrics.secure) }}
- --metrics-secure=false
{{- end }}
{{- if .Values.github.credentials.fromARC.enabled }}
- --credentials-mode=arc
{{- end }}
{{- if not .Values.policy.retireEphemeralRunners }}
- --retire-ephemeral-runners=false
{{- end }}
{{- if not .Values.disruption.doNotDisrupt }}
- --hint-do-not-disrupt=false
{{- end }}
{{- if not .Values.disruption.safeToEvict }}
- --hint-safe-to-evict=false
{{- end }}
{{- if not .Values.disruption.deletionCost }}
- --hint-deletion-cost=false
{{- end }}
{{- if not .Values.disruption.budgets }}
- --disruption-budgets=false
{{- end }}
{{- if .Values.disruption.hintsFromListing }}
- --hint-from-listing
{{- end }}
{{- if not .Values.disruption.drainRunners }}
- --drain-runners=false
{{- end }}
{{- if not .Values.disruption.honorNodeDeadlines }}
- --honor-node-deadlines=false
{{- end }}
{{- if .Values.events.enabled }}
{{- /* The endpoint runs in the events Deployment; the webhook verifies the
job annotations it writes. */}}
{{- include "runner-guard.webhookSecretArgs" . }}
{{- end }}
{{- if .Values.rerun.enabled }}
- --rerun-lost-jobs
{{- end }}
{{- if ne (int .Values.rerun.maxPerRun) 3 }}
- --rerun-max-per-run={{ .Values.rerun.maxPerRun }}
{{- end }}
{{- with .Values.rerun.exclude }}
- --rerun-exclude={{ join "," . }}
{{- end }}
{{- if .Values.webhook.clientCAConfigMap }}
- --client-ca-file={{ include "runner-guard.clientCADir" . }}/ca.crt
{{- end }}
- --webhook-configuration-name={{ include "runner-guard.fullname" . }}
- --config={{ include "runner-guard.configDir" . }}/config.yaml
{{- if and .Values.logLevel (ne .Values.logLevel "info") }}
- --zap-log-level={{ .Values.logLevel }}
{{- end }}
{{- if eq .Values.logFormat "text" }}
- --zap-encoder=console
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/*
The events Deployment's command line (--events-only): the endpoint, the
secret flag(s), the --config it resolves pods with, metrics and probes. No
serving certificate, no GitHub credentials.
*/}}
{{- define "runner-guard.eventsArgs" -}}
- --events-only
- --events-bind-address=:{{ .Values.events.port }}
{{- include "runner-guard.webhookSecretArgs" . }}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
{{- if and .Values.metrics.enabled (not .Values.metrics.secure) }}
- --metrics-secure=false
{{- end }}
- --health-probe-bind-address=:{{ .Values.health.port }}
- --config={{ include "runner-guard.configDir" . }}/config.yaml
{{- if and .Values.logLevel (ne .Values.logLevel "info") }}
- --zap-log-level={{ .Values.logLevel }}
{{- end }}
{{- if eq .Values.logFormat "text" }}
- --zap-encoder=console
{{- end }}
{{- range .Values.events.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}
