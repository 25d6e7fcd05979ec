{{/* The release's base name for its objects. */}}
{{- define "sandgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sandgate.selectorLabels" -}}
app.kubernetes.io/name: sandgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "sandgate.labels" -}}
app.kubernetes.io/name: sandgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sandgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "sandgate.keysSecret" -}}
{{- default (printf "%s-keys" (include "sandgate.fullname" .)) .Values.keys.existingSecret -}}
{{- end -}}

{{- define "sandgate.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecret }}{{- else -}}{{ printf "%s-database" (include "sandgate.fullname" .) }}{{- end -}}
{{- end -}}

{{/* The key files of the data directory, each a 32-byte key the replicas share. */}}
{{- define "sandgate.keyFiles" -}}
pii.key upstream.key web.key provider-keys.key history.key replicas.key
{{- end -}}
