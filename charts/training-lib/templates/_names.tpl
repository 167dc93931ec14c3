{{/*
Names and labels.
*/}}
{{- define "tlib.name" -}}
{{- default .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tlib.labels" -}}
app.kubernetes.io/name: {{ include "tlib.name" . }}
app.kubernetes.io/part-of: ray-gitops
app.kubernetes.io/component: {{ .Chart.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tlib.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{/* Argo CD sync wave of a resource: platform (-1) < RayClusters and job specs (0) < jobs (1). */}}
{{- define "tlib.syncWave" -}}
argocd.argoproj.io/sync-wave: {{ . | quote }}
{{- end -}}
