{{/*
How the webhook reaches GitHub: a CA bundle to trust (github.caBundle) and an
egress proxy (proxy.*). README: "GitHub Enterprise Server, private CAs and
proxies".
*/}}
{{- define "runner-guard.caBundleDir" -}}/etc/runner-guard/github-ca{{- end }}

{{/* The CA bundle's source: "configMap", "secret" or "" for none. */}}
{{- define "runner-guard.caBundleSource" -}}
{{- $cm := include "runner-guard.caConfigMapRef" . | fromJson }}
{{- if $cm.name }}configMap{{- else if .Values.github.caBundle.secretRef.name }}secret{{- end }}
{{- end }}

{{/* The --github-ca-bundle flag's file, "" without a bundle. */}}
{{- define "runner-guard.caBundleFile" -}}
{{- $src := include "runner-guard.caBundleSource" . }}
{{- if eq $src "configMap" }}{{ include "runner-guard.caBundleDir" . }}/{{ (include "runner-guard.caConfigMapRef" . | fromJson).key }}
{{- else if eq $src "secret" }}{{ include "runner-guard.caBundleDir" . }}/{{ .Values.github.caBundle.secretRef.key }}
{{- end }}
{{- end }}

{{/* The CA bundle's volume (under the Deployment's volumes). */}}
{{- define "runner-guard.caBundleVolume" -}}
{{- $ca := .Values.github.caBundle }}
{{- $src := include "runner-guard.caBundleSource" . }}
{{- if eq $src "configMap" }}
{{- $cm := include "runner-guard.caConfigMapRef" . | fromJson }}
- name: github-ca
  configMap:
    name: {{ $cm.name }}
    items:
      - key: {{ $cm.key }}
        path: {{ $cm.key }}
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

{{/* A proxy URL with $(PREFIX_USERNAME):$(PREFIX_PASSWORD) from its credentials Secret; prefix "" for none. */}}
{{- define "runner-guard.proxyURL" -}}
{{- $url := index . 0 }}
{{- $prefix := index . 1 }}
{{- if and $url $prefix }}
{{- $u := urlParse $url }}
{{- printf "%s://$(%s_USERNAME):$(%s_PASSWORD)@%s%s" $u.scheme $prefix $prefix $u.host $u.path }}
{{- else }}
{{- $url }}
{{- end }}
{{- end }}

{{/* The proxy's env entries (under the container's env). */}}
{{- define "runner-guard.proxyEnv" -}}
{{- $p := include "runner-guard.proxy" . | fromJson }}
{{- if or $p.https $p.http }}
{{- /* One basic-auth Secret per proxy: PROXY_* for https's, HTTP_PROXY_*
for http's when it names another. */}}
{{- $vars := dict }}
{{- range $i, $scheme := list "https" "http" }}
{{- $cred := index $p (printf "%sCredentials" $scheme) }}
{{- if $cred }}
{{- $prefix := ternary "PROXY" "HTTP_PROXY" (or (eq $scheme "https") (eq $cred $p.httpsCredentials)) }}
{{- if not (hasKey $vars $prefix) }}
{{- $_ := set $vars $prefix $cred }}
# Expanded into the proxy URLs below (Kubernetes' $(VAR) syntax).
- name: {{ $prefix }}_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $cred }}
      key: username
- name: {{ $prefix }}_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $cred }}
      key: password
{{- end }}
{{- end }}
{{- end }}
{{- with $p.https }}
- name: HTTPS_PROXY
  value: {{ include "runner-guard.proxyURL" (list . (ternary "PROXY" "" (ne $p.httpsCredentials ""))) | quote }}
{{- end }}
{{- with $p.http }}
- name: HTTP_PROXY
  value: {{ include "runner-guard.proxyURL" (list . (ternary (ternary "PROXY" "HTTP_PROXY" (eq $p.httpCredentials $p.httpsCredentials)) "" (ne $p.httpCredentials ""))) | quote }}
{{- end }}
{{- /* The Kubernetes API is always reached directly: client-go honours the
same variables, and an egress proxy rarely reaches the cluster's own API. */}}
- name: NO_PROXY
  value: {{ join "," (concat (list "$(KUBERNETES_SERVICE_HOST)" "kubernetes.default.svc" ".svc" ".cluster.local") $p.noProxy) | quote }}
{{- end }}
{{- end }}

{{- define "runner-guard.validateNetwork" -}}
{{- $ca := .Values.github.caBundle }}
{{- if and (include "runner-guard.caConfigMapRef" . | fromJson).name $ca.secretRef.name }}
{{- fail "github.caBundle: set either a ConfigMap (githubServerTLS.certificateFrom.configMapKeyRef, or the deprecated github.caBundle.configMapRef) or secretRef.name, not both" }}
{{- end }}
{{- $p := include "runner-guard.proxy" . | fromJson }}
{{- $p = merge $p (dict "credentialsSecret" .Values.proxy.credentialsSecret) }}
{{- if and $p.credentialsSecret (not (or $p.https $p.http)) }}
{{- fail "proxy.credentialsSecret: set proxy.https (or proxy.http) too: the credentials belong to a proxy" }}
{{- end }}
{{- if and $p.noProxy (not (or $p.https $p.http)) }}
{{- fail "proxy.noProxy: set proxy.https (or proxy.http) too: noProxy only exempts hosts from a proxy" }}
{{- end }}
{{- range (list $p.https $p.http) }}
{{- if and . (contains "@" .) }}
{{- fail "proxy: put the proxy's username and password in a Secret (proxy.https.credentialSecretRef, or the deprecated proxy.credentialsSecret), not in the URL (it would be visible in the Deployment)" }}
{{- end }}
{{- end }}
{{- end }}
