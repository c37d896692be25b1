{{- define "ctsync.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ctsync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ctsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ctsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ctsync.labels" -}}
{{ include "ctsync.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ctsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "ctsync.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret the chart creates for values given inline. */}}
{{- define "ctsync.secretName" -}}
{{- printf "%s-secrets" (include "ctsync.fullname" .) -}}
{{- end -}}

{{/*
The API tokens, as a YAML list: apiAuth.tokens, or else (generateToken)
the generated "admin" write token, or none.
*/}}
{{- define "ctsync.apiTokens" -}}
{{- if .Values.apiAuth.tokens -}}
{{- toYaml .Values.apiAuth.tokens -}}
{{- else if .Values.apiAuth.generateToken -}}
{{- list (dict "name" "admin" "access" "write" "value" (include "ctsync.generatedSecret" .)) | toYaml -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/*
The generated token's secret: the one the release's Secret holds already
(an upgrade keeps it), else a new random one. Kept in .Values for the rest
of the rendering, so that the Secret and its checksum agree.
*/}}
{{- define "ctsync.generatedSecret" -}}
{{- if not (hasKey .Values.apiAuth "_generatedSecret") -}}
{{- $old := "" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "ctsync.secretName" .) -}}
{{- if $existing -}}
{{- $old = dig "data" "api-token-admin" "" $existing | b64dec -}}
{{- end -}}
{{- $_ := set .Values.apiAuth "_generatedSecret" ($old | default (randAlphaNum 40)) -}}
{{- end -}}
{{- index .Values.apiAuth "_generatedSecret" -}}
{{- end -}}

{{/* Whether the chart has inline secret values to store. */}}
{{- define "ctsync.hasInlineSecrets" -}}
{{- $has := and (not .Values.consul.token.existingSecret) .Values.consul.token.value -}}
{{- range (include "ctsync.apiTokens" . | fromYamlArray) -}}
{{- if and (not .existingSecret) .value -}}{{- $has = true -}}{{- end -}}
{{- end -}}
{{- if $has -}}true{{- end -}}
{{- end -}}

{{/* Checks values that would render a broken or unsafe release. */}}
{{- define "ctsync.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.highAvailability.enabled) -}}
{{- fail "replicaCount > 1 needs highAvailability.enabled=true: without it every instance would apply every task" -}}
{{- end -}}
{{- if and .Values.persistence.enabled .Values.persistence.existingClaim (gt (int .Values.replicaCount) 1) -}}
{{- fail "persistence.existingClaim is one volume for one instance: with replicaCount > 1 leave it empty (each instance gets a claim of its own)" -}}
{{- end -}}
{{- if not (has .Values.highAvailability.mode (list "leader" "spread")) -}}
{{- fail (printf "highAvailability.mode must be \"leader\" or \"spread\", not %q" .Values.highAvailability.mode) -}}
{{- end -}}
{{- range (include "ctsync.apiTokens" . | fromYamlArray) -}}
{{- if not .name -}}{{- fail "apiAuth.tokens: every token needs a name" -}}{{- end -}}
{{- if not (has .access (list "read" "write")) -}}
{{- fail (printf "apiAuth.tokens[%s].access must be \"read\" or \"write\"" .name) -}}
{{- end -}}
{{- if not (or .existingSecret .value) -}}
{{- fail (printf "apiAuth.tokens[%s]: set existingSecret or value" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
