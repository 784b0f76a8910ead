{{/*
How the webhook reaches GitHub: a CA bundle to trust (github.caBundle) and an
egress proxy (proxy.*). README: "GitHub Enterprise Server, private CAs and
proxies".
*/}}
{{- define "runner-guard.caBundleDir" -}}/etc/runner-guard/github-ca{{- end }}

{{/* The CA bundle's source: "configMap", "secret" or "" for none. */}}
{{- define "runner-guard.caBundleSource" -}}
{{- $ca := .Values.github.caBundle }}
{{- if $ca.configMapRef.name }}configMap{{- else if $ca.secretRef.name }}secret{{- end }}
{{- end }}

{{/* The --github-ca-bundle flag's file, "" without a bundle. */}}
{{- define "runner-guard.caBundleFile" -}}
{{- $src := include "runner-guard.caBundleSource" . }}
{{- if eq $src "configMap" }}{{ include "runner-guard.caBundleDir" . }}/{{ .Values.github.caBundle.configMapRef.key }}
{{- else if eq $src "secret" }}{{ include "runner-guard.caBundleDir" . }}/{{ .Values.github.caBundle.secretRef.key }}
{{- end }}
{{- end }}

{{/* The CA bundle's volume (under the Deployment's volumes). */}}
{{- define "runner-guard.caBundleVolume" -}}
{{- $ca := .Values.github.caBundle }}
{{- $src := include "runner-guard.caBundleSource" . }}
{{- if eq $src "configMap" }}
- name: github-ca
  configMap:
    name: {{ $ca.configMapRef.name }}
    items:
      - key: {{ $ca.configMapRef.key }}
        path: {{ $ca.configMapRef.key }}
{{- else if eq $src "secret" }}
- name: github-ca
  secret:
    secretName: {{ $ca.secretRef.name }}
    defaultMode: 0440
    items:
      - key: {{ $ca.secretRef.key }}
        path: {{ $ca.secretRef.key }}
{{- end }}
{{- end }}

{{/* A proxy URL with the credentials Secret's $(PROXY_USERNAME):$(PROXY_PASSWORD). */}}
{{- define "runner-guard.proxyURL" -}}
{{- $url := index . 0 }}
{{- $withAuth := index . 1 }}
{{- if and $url $withAuth }}
{{- $u := urlParse $url }}
{{- printf "%s://$(PROXY_USERNAME):$(PROXY_PASSWORD)@%s%s" $u.scheme $u.host $u.path }}
{{- else }}
{{- $url }}
{{- end }}
{{- end }}

{{/* The proxy's env entries (under the container's env). */}}
{{- define "runner-guard.proxyEnv" -}}
{{- $p := .Values.proxy }}
{{- if or $p.https $p.http }}
{{- $auth := ne $p.credentialsSecret "" }}
{{- if $auth }}
# Expanded into the proxy URLs below (Kubernetes' $(VAR) syntax).
- name: PROXY_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $p.credentialsSecret }}
      key: username
- name: PROXY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $p.credentialsSecret }}
      key: password
{{- end }}
{{- with $p.https }}
- name: HTTPS_PROXY
  value: {{ include "runner-guard.proxyURL" (list . $auth) | quote }}
{{- end }}
{{- with $p.http }}
- name: HTTP_PROXY
  value: {{ include "runner-guard.proxyURL" (list . $auth) | quote }}
{{- end }}
{{- /* The Kubernetes API is always reached directly: client-go honours the
same variables, and an egress proxy rarely reaches the cluster's own API. */}}
- name: NO_PROXY
  value: {{ join "," (concat (list "$(KUBERNETES_SERVICE_HOST)" "kubernetes.default.svc" ".svc" ".cluster.local") ($p.noProxy | default list)) | quote }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateNetwork" -}}
{{- $ca := .Values.github.caBundle }}
{{- if and $ca.configMapRef.name $ca.secretRef.name }}
{{- fail "github.caBundle: set either configMapRef.name or secretRef.name, not both" }}
{{- end }}
{{- $p := .Values.proxy }}
{{- if and $p.credentialsSecret (not (or $p.https $p.http)) }}
{{- fail "proxy.credentialsSecret: set proxy.https (or proxy.http) too: the credentials belong to a proxy" }}
{{- end }}
{{- if and $p.noProxy (not (or $p.https $p.http)) }}
{{- fail "proxy.noProxy: set proxy.https (or proxy.http) too: noProxy only exempts hosts from a proxy" }}
{{- end }}
{{- range (list $p.https $p.http) }}
{{- if and . (contains "@" .) }}
{{- fail "proxy: put the proxy's username and password in proxy.credentialsSecret, not in the URL (it would be visible in the Deployment)" }}
{{- end }}
{{- end }}
{{- end }}
