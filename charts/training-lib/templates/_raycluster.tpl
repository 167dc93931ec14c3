{{/*
A group's `ray start` parameters (rayStartParams), as strings. num-gpus is not rendered: KubeRay derives it from the
container's nvidia.com/gpu limit.
*/}}
{{- define "tlib.rayStartParams" -}}
{{- $params := deepCopy (.group.rayStartParams | default dict) -}}
{{- range $k, $v := $params }}
{{ $k }}: {{ toString $v | quote }}
{{- end }}
{{- end -}}

{{/*
Ray's Kubernetes token auth (auth.kubernetesTokens), checked: the ServiceAccount the Ray pods run as (the cluster's
name unless serviceAccountName), or empty when it is off. Ray's own validator (Ray 2.60 src/ray/rpc/authentication
k8s_util.cc) calls the API server with the pod's service-account token at the in-cluster path, so every Ray pod
mounts it; the account holds only what the platform chart grants it (TokenReview, SubjectAccessReview, ray:write on
this cluster), which is why it cannot be the autoscaler's (KubeRay gives that one patch rights on the cluster and
its pods). Only a standing RayCluster: KubeRay v1.6.2 drives a RayJob through the dashboard with the token of a
Secret named like the cluster (ray-operator/controllers/ray/utils/util.go 973-990), which this mode does not have.
*/}}
{{- define "tlib.kubernetesTokens" -}}
{{- $vals := .root.Values -}}
{{- if $vals.auth.kubernetesTokens -}}
{{- if ne $vals.auth.mode "token" }}{{ fail "auth.kubernetesTokens needs auth.mode token (KubeRay refuses enableK8sTokenAuth otherwise)" }}{{ end -}}
{{- if $vals.auth.secretName }}{{ fail "auth.kubernetesTokens and auth.secretName exclude each other (KubeRay refuses both: the token is the caller's own Kubernetes token)" }}{{ end -}}
{{- if $vals.autoscaler.enabled }}{{ fail "auth.kubernetesTokens with autoscaler.enabled: the Ray container would hold the autoscaler's service-account token, which may resize the cluster and patch its pods; turn one off" }}{{ end -}}
{{- if not .standalone }}{{ fail "auth.kubernetesTokens is for the standing RayCluster (the ray-cluster chart): KubeRay v1.6.2 drives a RayJob's cluster with a Secret's token, which this mode has not" }}{{ end -}}
{{- default (include "tlib.name" .root) $vals.serviceAccountName -}}
{{- end -}}
{{- end -}}

{{/*
The spec of a RayCluster (also embedded as a RayJob's rayClusterSpec). Takes a dict:
  root: the chart's top-level context (cluster values at .Values)
  extraVolumes, extraVolumeMounts: added to every Ray pod (e.g. the job's spec ConfigMap)
  standalone: a RayCluster of its own (the ray-cluster chart), not a RayJob's
*/}}
{{- define "tlib.rayClusterSpec" -}}
{{- $root := .root -}}
{{- $vals := $root.Values -}}
{{- $extraVolumes := .extraVolumes | default list -}}
{{- $extraVolumeMounts := .extraVolumeMounts | default list -}}
rayVersion: {{ $vals.rayVersion | quote }}
{{- $kubeTokens := include "tlib.kubernetesTokens" . }}
authOptions:
  mode: {{ $vals.auth.mode }}
  {{- if $kubeTokens }}
  enableK8sTokenAuth: true
  {{- else if eq $vals.auth.mode "token" }}
  {{- if not $vals.auth.secretName }}
  {{- fail "auth.mode token needs auth.secretName (the Secret holding the Ray auth token), or auth.kubernetesTokens on the standing RayCluster" }}
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
  {{- with $vals.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $autoscalerFields := include "tlib.scratchContainerFields" (dict "root" $root) | fromYaml }}
  {{- with $autoscalerFields.env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- with $autoscalerFields.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    - {{- include "tlib.autoscalerTokenMount" . | nindent 6 }}
{{- end }}
headGroupSpec:
  serviceType: {{ $vals.head.serviceType }}
  {{- /* the service-account token only in the autoscaler's container: the head pod mounts none, its volumes hold
       a projected token the autoscaler alone mounts (a job submitted to the cluster cannot patch its pods) */ -}}
  {{- $headVolumes := $extraVolumes }}
  {{- if $vals.autoscaler.enabled }}
  {{- $headVolumes = append $extraVolumes (include "tlib.autoscalerTokenVolume" . | fromYaml) }}
  {{- end }}
  {{- $headCtx := dict "root" $root "group" $vals.head "containerName" "ray-head" "extraVolumes" $headVolumes "extraVolumeMounts" $extraVolumeMounts }}
  {{- if $kubeTokens }}{{ $_ := set $headCtx "apiAccess" true }}{{ $_ := set $headCtx "serviceAccountName" $kubeTokens }}{{ end }}
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
{{- if $kubeTokens }}{{ $_ := set $ctx "apiAccess" true }}{{ $_ := set $ctx "serviceAccountName" $kubeTokens }}{{ end }}
{{- $min := hasKey $group "minReplicas" | ternary $group.minReplicas $group.replicas }}
{{- $replicas := hasKey $group "replicas" | ternary $group.replicas $min }}
{{- if $vals.autoscaler.enabled }}
{{- /* The autoscaler owns replicas. workerGroupSpecs is an atomic list, so whatever is applied from git replaces
       the live value: render the group's minimum, where the autoscaler starts from anyway. */}}
{{- if and (hasKey $group "replicas") (ne (int $group.replicas) (int $min)) }}
{{- fail (printf "workerGroups.%s.replicas: with the autoscaler on, the autoscaler sets replicas; leave replicas out (the group starts at minReplicas %v)" $groupName $min) }}
{{- end }}
{{- $replicas = $min }}
{{- end }}
  - groupName: {{ $groupName }}
    replicas: {{ $replicas }}
    minReplicas: {{ $min }}
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


{{/*
The Kubernetes API credentials of KubeRay's autoscaler sidecar, and only its: what the kubelet's kube-api-access
volume holds (a bound service-account token, the cluster CA, the namespace), projected into the head pod and
mounted by the autoscaler container alone (autoscalerOptions.volumeMounts) where the Kubernetes client looks.
*/}}
{{- define "tlib.autoscalerTokenVolume" -}}
name: autoscaler-api-access
projected:
  defaultMode: 420
  sources:
    - serviceAccountToken:
        path: token
        expirationSeconds: 3607
    - configMap:
        name: kube-root-ca.crt
        items:
          - {key: ca.crt, path: ca.crt}
    - downwardAPI:
        items:
          - path: namespace
            fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}
{{- end -}}

{{/* Where the autoscaler container mounts that volume: the Kubernetes client's in-cluster path. */}}
{{- define "tlib.autoscalerTokenMount" -}}
name: autoscaler-api-access
mountPath: /var/run/secrets/kubernetes.io/serviceaccount
readOnly: true
{{- end -}}
