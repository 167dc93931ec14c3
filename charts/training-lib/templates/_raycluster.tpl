{{/*
The spec of a RayCluster (also embedded as a RayJob's rayClusterSpec). Takes a dict:
  root: the chart's top-level context (cluster values at .Values)
  extraVolumes, extraVolumeMounts: added to every Ray pod (e.g. the job's spec ConfigMap)
*/}}
{{- define "tlib.rayStartParams" -}}
{{- $params := deepCopy (.group.rayStartParams | default dict) -}}
{{- if include "tlib.usesGpu" . -}}
{{- $_ := set $params "num-gpus" (toString .group.gpus) -}}
{{- end -}}
{{- range $k, $v := $params }}
{{ $k }}: {{ toString $v | quote }}
{{- end }}
{{- end -}}

{{- define "tlib.rayClusterSpec" -}}
{{- $root := .root -}}
{{- $vals := $root.Values -}}
{{- $extraVolumes := .extraVolumes | default list -}}
{{- $extraVolumeMounts := .extraVolumeMounts | default list -}}
rayVersion: {{ $vals.rayVersion | quote }}
authOptions:
  mode: {{ $vals.auth.mode }}
  {{- if eq $vals.auth.mode "token" }}
  {{- if not $vals.auth.secretName }}
  {{- fail "auth.mode token needs auth.secretName (the Secret holding the Ray auth token)" }}
  {{- end }}
  secretName: {{ $vals.auth.secretName }}
  {{- end }}
{{- if $vals.autoscaler.enabled }}
enableInTreeAutoscaling: true
autoscalerOptions:
  idleTimeoutSeconds: {{ $vals.autoscaler.idleTimeoutSeconds }}
  upscalingMode: {{ $vals.autoscaler.upscalingMode }}
  resources:
    {{- toYaml $vals.autoscaler.resources | nindent 4 }}
{{- end }}
headGroupSpec:
  serviceType: {{ $vals.head.serviceType }}
  {{- $headCtx := dict "root" $root "group" $vals.head "containerName" "ray-head" "extraVolumes" $extraVolumes "extraVolumeMounts" $extraVolumeMounts }}
  {{- $_ := set $headCtx "ports" (list (dict "containerPort" 6379 "name" "gcs-server") (dict "containerPort" 8265 "name" "dashboard") (dict "containerPort" 10001 "name" "client")) }}
  {{- with include "tlib.rayStartParams" $headCtx }}
  rayStartParams:
    {{- . | indent 4 }}
  {{- else }}
  rayStartParams: {}
  {{- end }}
  template:
    {{- include "tlib.podTemplate" $headCtx | nindent 4 }}
workerGroupSpecs:
{{- range $groupName := keys $vals.workerGroups | sortAlpha }}
{{- $group := get $vals.workerGroups $groupName }}
{{- if $group }}
{{- $ctx := dict "root" $root "group" $group "containerName" "ray-worker" "extraVolumes" $extraVolumes "extraVolumeMounts" $extraVolumeMounts }}
  - groupName: {{ $groupName }}
    replicas: {{ $group.replicas }}
    minReplicas: {{ hasKey $group "minReplicas" | ternary $group.minReplicas $group.replicas }}
    maxReplicas: {{ hasKey $group "maxReplicas" | ternary $group.maxReplicas $group.replicas }}
    {{- with $group.idleTimeoutSeconds }}
    idleTimeoutSeconds: {{ . }}
    {{- end }}
    {{- with include "tlib.rayStartParams" $ctx }}
    rayStartParams:
      {{- . | indent 6 }}
    {{- else }}
    rayStartParams: {}
    {{- end }}
    template:
      {{- include "tlib.podTemplate" $ctx | nindent 6 }}
{{- end }}
{{- end }}
{{- end -}}
