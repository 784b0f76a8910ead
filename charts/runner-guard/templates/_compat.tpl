{{/*
ARC's value names (gha-runner-scale-set-controller and gha-runner-scale-set)
and the chart's older ones, both accepted: these helpers read either and
runner-guard.deprecations names the old ones in NOTES.
*/}}

{{/*
The proxy as JSON {https, http, noProxy, httpsCredentials, httpCredentials}:
proxy.https / proxy.http are a URL (the older form) or ARC's {url,
credentialSecretRef}; the older proxy.credentialsSecret applies to both.
*/}}
{{- define "runner-guard.proxy" -}}
{{- $p := .Values.proxy }}
{{- $out := dict "noProxy" ($p.noProxy | default list) }}
{{- range $scheme := list "https" "http" }}
{{- $v := index $p $scheme }}
{{- $url := "" }}
{{- $cred := $p.credentialsSecret | default "" }}
{{- if kindIs "map" $v }}
{{- $url = $v.url | default "" }}
{{- $cred = $v.credentialSecretRef | default $cred }}
{{- else if $v }}
{{- $url = $v }}
{{- end }}
{{- $_ := set $out $scheme $url }}
{{- $_ := set $out (printf "%sCredentials" $scheme) (ternary $cred "" (ne $url "")) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* github.caBundle's ConfigMap reference, or ARC's githubServerTLS.certificateFrom.configMapKeyRef. */}}
{{- define "runner-guard.caConfigMapRef" -}}
{{- $arc := dig "certificateFrom" "configMapKeyRef" dict (.Values.githubServerTLS | default dict) }}
{{- if $arc.name }}
{{- toJson (dict "name" $arc.name "key" ($arc.key | default "ca.crt")) }}
{{- else }}
{{- toJson .Values.github.caBundle.configMapRef }}
{{- end }}
{{- end }}

{{/* Names of the image pull Secrets: ARC's imagePullSecrets [{name}] and image.pullSecrets [name]. */}}
{{- define "runner-guard.imagePullSecrets" -}}
{{- $names := list }}
{{- range .Values.imagePullSecrets }}{{ $names = append $names (kindIs "map" . | ternary (get . "name") .) }}{{ end }}
{{- range .Values.image.pullSecrets }}{{ $names = append $names . }}{{ end }}
{{- toJson ($names | uniq) }}
{{- end }}

{{/* The older value names in use, one NOTES line each. */}}
{{- define "runner-guard.deprecations" -}}
{{- $p := .Values.proxy }}
{{- if kindIs "string" $p.https }}{{ if $p.https }}
DEPRECATED value proxy.https as a URL: use proxy.https.url (ARC's name).
{{- end }}{{ end }}
{{- if kindIs "string" $p.http }}{{ if $p.http }}
DEPRECATED value proxy.http as a URL: use proxy.http.url (ARC's name).
{{- end }}{{ end }}
{{- if $p.credentialsSecret }}
DEPRECATED value proxy.credentialsSecret: use proxy.https.credentialSecretRef (and proxy.http.credentialSecretRef), ARC's names.
{{- end }}
{{- if .Values.github.caBundle.configMapRef.name }}
DEPRECATED value github.caBundle.configMapRef: use githubServerTLS.certificateFrom.configMapKeyRef (ARC's name).
{{- end }}
{{- if .Values.image.pullSecrets }}
DEPRECATED value image.pullSecrets: use imagePullSecrets (ARC's name, a list of {name: SECRET}).
{{- end }}
{{- end }}
