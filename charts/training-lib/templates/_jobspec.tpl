{{/*
A job's training spec (`job.spec`): a ConfigMap <name>-spec holding spec.yaml, mounted read-only at /etc/training
on every pod of the job (ray-job and pytorch-job).
*/}}
{{- define "tlib.specConfigMap" -}}
{{- if .Values.job.spec }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "tlib.name" . }}-spec
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tlib.labels" . | nindent 4 }}
  annotations:
    {{- include "tlib.syncWave" "0" | nindent 4 }}
data:
  spec.yaml: |
    {{- toYaml .Values.job.spec | nindent 4 }}
{{- end }}
{{- end -}}

{{/* Add the spec volume and mount to a pod context dict (no-op without a spec). */}}
{{- define "tlib.addSpecVolume" -}}
{{- if .root.Values.job.spec -}}
{{- $_ := set . "extraVolumes" (list (dict "name" "training-spec" "configMap" (dict "name" (printf "%s-spec" (include "tlib.name" .root))))) -}}
{{- $_ := set . "extraVolumeMounts" (list (dict "name" "training-spec" "mountPath" "/etc/training" "readOnly" true)) -}}
{{- end -}}
{{- end -}}
