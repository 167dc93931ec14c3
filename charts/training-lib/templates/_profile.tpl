{{/*
The pod profile: everything a training pod carries, whatever runs in it (Ray head, Ray worker,
PyTorchJob master/worker). Each helper takes a dict:
  root:  the chart's top-level context
  group: the group's values (resources, gpus, nodeSelector, tolerations, affinity, env, volumes, volumeMounts)
*/}}

{{/* EFA per instance family, encoded once: RDMA-read support and EFA devices per instance. */}}
{{- define "tlib.efaFamilies" -}}
g5:   {rdma: "0", devices: 1}
g6:   {rdma: "0", devices: 1}
p4d:  {rdma: "1", devices: 4}
p5:   {rdma: "1", devices: 32}
{{- end -}}

{{/* Does this group's pod use GPUs? */}}
{{- define "tlib.usesGpu" -}}
{{- if gt (int (.group.gpus | default 0)) 0 }}true{{ end -}}
{{- end -}}

{{/* EFA applies to every GPU pod when efa.enabled. */}}
{{- define "tlib.usesEfa" -}}
{{- if and .root.Values.efa.enabled (include "tlib.usesGpu" .) }}true{{ end -}}
{{- end -}}

{{/* The EFA settings of this group's instance family (efa.instanceFamily): RDMA read and devices per pod. */}}
{{- define "tlib.efaSettings" -}}
{{- $families := include "tlib.efaFamilies" . | fromYaml -}}
{{- $family := .root.Values.efa.instanceFamily -}}
{{- if not (hasKey $families $family) -}}
{{- fail (printf "efa.instanceFamily %q is not one of: %s" $family (keys $families | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $f := get $families $family -}}
rdma: {{ $f.rdma | quote }}
devices: {{ .root.Values.efa.devicesPerPod | default $f.devices }}
{{- end -}}

{{/* Container resources: the group's requests/limits plus GPUs and EFA devices, in both. */}}
{{- define "tlib.resources" -}}
{{- $res := deepCopy (.group.resources | default dict) -}}
{{- $req := $res.requests | default dict -}}
{{- $lim := $res.limits | default dict -}}
{{- if include "tlib.usesGpu" . -}}
{{- $_ := set $req "nvidia.com/gpu" (toString .group.gpus) -}}
{{- $_ := set $lim "nvidia.com/gpu" (toString .group.gpus) -}}
{{- end -}}
{{- if include "tlib.usesEfa" . -}}
{{- $efa := include "tlib.efaSettings" . | fromYaml -}}
{{- $_ := set $req "vpc.amazonaws.com/efa" (toString $efa.devices) -}}
{{- $_ := set $lim "vpc.amazonaws.com/efa" (toString $efa.devices) -}}
{{- end -}}
{{- $_ := set $res "requests" $req -}}
{{- $_ := set $res "limits" $lim -}}
{{- toYaml $res -}}
{{- end -}}

{{/* Environment: EFA/libfabric, NCCL safeguards, scratch caches, shared env, group env, secret references, storage.
Sorted by name. */}}
{{- define "tlib.env" -}}
{{- $vals := .root.Values -}}
{{- $env := dict -}}
{{- if include "tlib.usesEfa" . -}}
{{- $efa := include "tlib.efaSettings" . | fromYaml -}}
{{- $_ := set $env "FI_PROVIDER" "efa" -}}
{{- $_ := set $env "FI_EFA_USE_DEVICE_RDMA" $efa.rdma -}}
{{- $_ := set $env "FI_EFA_FORK_SAFE" "1" -}}
{{- /* NCCL loads aws-ofi-nccl's libnccl-net-ofi.so and uses its network or fails: never a silent fallback to TCP
     sockets (aws-ofi-nccl v1.21.1 src/Makefile.am:131-139, src/nccl_ofi_interface_nvidia.cpp:662 names it
     "Libfabric"). NCCL_PROTO is the plugin's to set where it is needed (src/platform-aws.cpp:866-928). */ -}}
{{- $_ := set $env "NCCL_NET_PLUGIN" "ofi" -}}
{{- $_ := set $env "NCCL_NET" "Libfabric" -}}
{{- end -}}
{{- if $vals.nccl.enabled -}}
{{- range $k, $v := $vals.nccl.env }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $env $k (toString $v) }}{{ end }}{{ end -}}
{{- with $vals.nccl.collectiveTimeoutSeconds }}{{ $_ := set $env "TRAINING_COLLECTIVE_TIMEOUT_SECONDS" (toString .) }}{{ end -}}
{{- if and (include "tlib.checkpointVolume" .root) (hasKey $env "TORCH_NCCL_DUMP_ON_TIMEOUT") -}}
{{- $_ := set $env "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" (printf "%s/nccl-flight-recorder-%s-rank_" $vals.checkpoints.mountPath .root.Release.Name) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := include "tlib.scratchEnv" . | fromYaml }}{{ $_ := set $env $k $v }}{{ end -}}
{{- range $k, $v := $vals.env }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $env $k (toString $v) }}{{ end }}{{ end -}}
{{- range $k, $v := .group.env }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $env $k (toString $v) }}{{ end }}{{ end -}}
{{- range $k, $v := include "tlib.checkpointEnv" .root | fromYaml }}{{ $_ := set $env $k $v }}{{ end -}}
{{- $secretEnv := deepCopy ($vals.secretEnv | default dict) -}}
{{- range $k, $v := include "tlib.checkpointSecretEnv" .root | fromYaml }}{{ if not (hasKey $secretEnv $k) }}{{ $_ := set $secretEnv $k $v }}{{ end }}{{ end -}}
{{- range $name := keys $env | sortAlpha }}
- name: {{ $name }}
  value: {{ get $env $name | quote }}
{{- end }}
{{- range $name := keys $secretEnv | sortAlpha }}
{{- $ref := get $secretEnv $name }}
{{- if $ref }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretName }}
      key: {{ $ref.key }}
      {{- if hasKey $ref "optional" }}
      optional: {{ $ref.optional }}
      {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Checkpoint storage (values checkpoints): every pod of a cluster must reach the same storage (Ray Train refuses a
storage path only one pod sees). store volume: the ReadWriteMany claim, mounted on every pod; store s3: an
S3-compatible object store, reached through the environment pyarrow (Ray Train's filesystem) and boto3 read.
*/}}
{{/* "true" when checkpoints live on the claim mounted at checkpoints.mountPath. */}}
{{- define "tlib.checkpointVolume" -}}
{{- $c := .Values.checkpoints -}}
{{- if and $c.enabled (ne ($c.store | default "volume") "s3") -}}
{{- if not $c.claimName -}}
{{- fail "checkpoints.enabled with store volume needs checkpoints.claimName (the ReadWriteMany PersistentVolumeClaim every pod mounts), or store: s3 with checkpoints.s3.bucket" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The storage env (name: value): TRAINING_STORAGE_PATH, and for store s3 the endpoint and region. */}}
{{- define "tlib.checkpointEnv" -}}
{{- $c := .Values.checkpoints -}}
{{- if include "tlib.checkpointVolume" . }}
TRAINING_STORAGE_PATH: {{ $c.mountPath | quote }}
{{- else if $c.enabled }}
{{- $s3 := $c.s3 | default dict }}
{{- if not $s3.bucket }}
{{- fail "checkpoints.store s3 needs checkpoints.s3.bucket (the bucket checkpoints go to: s3://<bucket>/<prefix>)" }}
{{- end }}
TRAINING_STORAGE_PATH: {{ trimSuffix "/" (printf "s3://%s/%s" $s3.bucket (trimAll "/" ($s3.prefix | default ""))) | quote }}
{{- with $s3.endpoint }}
AWS_ENDPOINT_URL_S3: {{ trimSuffix "/" . | quote }}
{{- end }}
{{- with $s3.region }}
AWS_REGION: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* store s3 with credentialsSecret: the credentials as secretEnv entries (name: {secretName, key}). */}}
{{- define "tlib.checkpointSecretEnv" -}}
{{- $c := .Values.checkpoints -}}
{{- $s3 := $c.s3 | default dict -}}
{{- if and $c.enabled (eq ($c.store | default "volume") "s3") $s3.credentialsSecret }}
AWS_ACCESS_KEY_ID: {secretName: {{ $s3.credentialsSecret | quote }}, key: {{ $s3.accessKeyIdKey | default "accessKeyId" | quote }}}
AWS_SECRET_ACCESS_KEY: {secretName: {{ $s3.credentialsSecret | quote }}, key: {{ $s3.secretAccessKeyKey | default "secretAccessKey" | quote }}}
{{- end }}
{{- end -}}

{{/*
Container securityContext: the chart's. EFA adds no capability: the Ray process runs as uid 1000 with
allowPrivilegeEscalation false, so IPC_LOCK / SYS_RESOURCE would never be in its effective set. What EFA needs is
locked memory for its registered buffers: a non-root process may lock up to RLIMIT_MEMLOCK, which the node's
container runtime sets (unlimited on the EKS accelerated AMI); the training entrypoint checks it at start.
*/}}
{{- define "tlib.containerSecurityContext" -}}
{{- toYaml (.root.Values.containerSecurityContext | default dict) -}}
{{- end -}}

{{/*
The scratch space of a container with a read-only root filesystem (values scratch): its emptyDir volume. A
read-only root without it is refused: Ray cannot start.
*/}}
{{- define "tlib.scratchVolume" -}}
{{- $s := .root.Values.scratch | default dict -}}
{{- $ro := (.root.Values.containerSecurityContext | default dict).readOnlyRootFilesystem -}}
{{- if and $ro (not $s.enabled) -}}
{{- fail "containerSecurityContext.readOnlyRootFilesystem needs scratch.enabled: Ray writes its session directory under /tmp/ray" -}}
{{- end -}}
{{- if $s.enabled -}}
name: scratch
emptyDir:
  {{- with $s.sizeLimit }}
  sizeLimit: {{ . }}
  {{- else }} {}
  {{- end }}
{{- end -}}
{{- end -}}

{{/* The scratch volume's mount (scratch.mountPath), for every container of the chart's pods. */}}
{{- define "tlib.scratchMount" -}}
{{- with .root.Values.scratch }}{{ if .enabled -}}
name: scratch
mountPath: {{ .mountPath }}
{{- end }}{{ end -}}
{{- end -}}

{{/* The env that moves the libraries' caches into the scratch space (scratch.env), as a name: value map. */}}
{{- define "tlib.scratchEnv" -}}
{{- with .root.Values.scratch }}{{ if .enabled }}{{ range $k, $v := .env }}{{ if not (kindIs "invalid" $v) }}
{{ $k }}: {{ toString $v | quote }}
{{- end }}{{ end }}{{ end }}{{ end -}}
{{- end -}}

{{/*
The scratch env and mount of a container that tlib.podTemplate does not build (KubeRay's autoscaler sidecar through
autoscalerOptions, a RayJob's submitter): `env:` and `volumeMounts:` keys, each only when there is something in it.
*/}}
{{- define "tlib.scratchContainerFields" -}}
{{- with include "tlib.scratchEnv" . | fromYaml }}
{{- $scratchEnv := . }}
env:
  {{- range $k := keys $scratchEnv | sortAlpha }}
  - name: {{ $k }}
    value: {{ get $scratchEnv $k | quote }}
  {{- end }}
{{- end }}
{{- with include "tlib.scratchMount" . | fromYaml }}
volumeMounts:
  - {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{/* Volumes every pod gets: scratch, /dev/shm, checkpoints, shared and group volumes, extra volumes from the chart. */}}
{{- define "tlib.volumes" -}}
{{- $vals := .root.Values -}}
{{- $vols := list -}}
{{- with include "tlib.scratchVolume" . | fromYaml -}}
{{- $vols = append $vols . -}}
{{- end -}}
{{- if $vals.shm.enabled -}}
{{- $vols = append $vols (dict "name" "shm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $vals.shm.sizeLimit)) -}}
{{- end -}}
{{- if include "tlib.checkpointVolume" .root -}}
{{- $vols = append $vols (dict "name" "checkpoints" "persistentVolumeClaim" (dict "claimName" $vals.checkpoints.claimName)) -}}
{{- end -}}
{{- $vols = concat $vols ($vals.volumes | default list) (.group.volumes | default list) (.extraVolumes | default list) -}}
{{- if $vols }}{{ toYaml $vols }}{{ end -}}
{{- end -}}

{{/* Volume mounts every Ray container gets: scratch, /dev/shm, checkpoints, shared, group and extra mounts. */}}
{{- define "tlib.volumeMounts" -}}
{{- $vals := .root.Values -}}
{{- $mounts := list -}}
{{- with include "tlib.scratchMount" . | fromYaml -}}
{{- $mounts = append $mounts . -}}
{{- end -}}
{{- if $vals.shm.enabled -}}
{{- $mounts = append $mounts (dict "name" "shm" "mountPath" "/dev/shm") -}}
{{- end -}}
{{- if include "tlib.checkpointVolume" .root -}}
{{- $mounts = append $mounts (dict "name" "checkpoints" "mountPath" $vals.checkpoints.mountPath) -}}
{{- end -}}
{{- $mounts = concat $mounts ($vals.volumeMounts | default list) (.group.volumeMounts | default list) (.extraVolumeMounts | default list) -}}
{{- if $mounts }}{{ toYaml $mounts }}{{ end -}}
{{- end -}}

{{/*
The pod template of one group. Extra keys in the dict:
  containerName, ports (list), command/args (optional), extraVolumes, extraVolumeMounts,
  apiAccess (the pod calls the Kubernetes API: the Ray pods of a cluster with Kubernetes token auth; every other pod
  runs without a service-account token; KubeRay's autoscaler sidecar gets its own projected one),
  serviceAccountName (beside the values' own: the cluster's account for Kubernetes token auth)
*/}}
{{- define "tlib.podTemplate" -}}
{{- $vals := .root.Values -}}
metadata:
  labels:
    {{- include "tlib.podLabels" .root | nindent 4 }}
spec:
  {{- with (.serviceAccountName | default $vals.serviceAccountName) }}
  serviceAccountName: {{ . }}
  {{- end }}
  automountServiceAccountToken: {{ .apiAccess | default false }}
  {{- with $vals.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $vals.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .group.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .group.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .group.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .containerName }}
      image: {{ include "tlib.image" .root }}
      imagePullPolicy: {{ $vals.image.pullPolicy }}
      {{- with .command }}
      command:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with include "tlib.env" . }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with .ports }}
      ports:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- include "tlib.resources" . | nindent 8 }}
      {{- with include "tlib.containerSecurityContext" . | fromYaml }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with include "tlib.volumeMounts" . }}
      volumeMounts:
        {{- . | nindent 8 }}
      {{- end }}
  {{- with include "tlib.volumes" . }}
  volumes:
    {{- . | nindent 4 }}
  {{- end }}
{{- end -}}
