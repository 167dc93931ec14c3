{{/*
Name of the resource: nameOverride, else the release name (a job's run name), at most 63 characters.
*/}}
{{- define "tlib.name" -}}
{{- default .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of the rendered resources: name = the chart, instance = the release (a job's run name carries its hash).
*/}}
{{- define "tlib.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{ include "tlib.podLabels" . }}
{{- end -}}

{{/*
Labels of the pods the operators create from our templates. KubeRay labels its pods itself
(app.kubernetes.io/name=kuberay, app.kubernetes.io/created-by=kuberay-operator, ray.io/...) and selects them by
those labels in the head Services; a template label with the same key overrides KubeRay's (KubeRay v1.7.0
common/pod.go labelPod), and the RayJob's <job>-head-svc then selects no pod. So pod templates never carry
those keys, not even from `labels`.
*/}}
{{- define "tlib.podLabels" -}}
app.kubernetes.io/instance: {{ include "tlib.name" . }}
app.kubernetes.io/part-of: ray-gitops
app.kubernetes.io/component: {{ .Chart.Name }}
app.kubernetes.io/managed-by: ray-gitops
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- range $k, $v := .Values.labels }}
{{- if not (or (hasPrefix "ray.io/" $k) (has $k (list "app.kubernetes.io/name" "app.kubernetes.io/created-by" "app.kubernetes.io/instance" "app.kubernetes.io/managed-by"))) }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Ray containers' image: <repository>:<tag>, with @<digest> when image.digest is set. */}}
{{- define "tlib.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* Argo CD sync wave of a resource: platform (-1) < RayClusters and job specs (0) < jobs (1). */}}
{{- define "tlib.syncWave" -}}
argocd.argoproj.io/sync-wave: {{ . | quote }}
{{- end -}}
