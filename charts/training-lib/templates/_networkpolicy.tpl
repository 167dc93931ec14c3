{{/*
A NetworkPolicy around one cluster of pods: a Ray cluster (the standing RayCluster, or a RayJob's cluster with its
submitter) or a PyTorchJob's master and workers. Every port (Ray: GCS 6379, dashboard 8265, client 10001, the object
and node managers, the workers' ports; torchrun: the rendezvous and NCCL's sockets) accepts only the cluster's own
pods (they carry the same app.kubernetes.io/instance: the release, a job's run name). For a Ray cluster, also: the
KubeRay operator's namespace reaches the dashboard (8265: KubeRay polls a RayJob's status through the dashboard's job
API), and the peers an environment lists (networkPolicy.dashboardFrom: an ingress namespace, or any address where the
dashboard is exposed on a NodePort) reach the dashboard and the Ray client (10001), and the peers of
networkPolicy.metricsFrom (a Prometheus's namespace) reach Ray's metrics on every Ray pod (8080: KubeRay sets
--metrics-export-port=8080 and the container port `metrics`). Ingress only: egress stays open
(image pulls, checkpoints, datasets).
*/}}
{{- define "tlib.networkPolicy" -}}
{{- $vals := .Values -}}
{{- if $vals.networkPolicy.enabled -}}
{{- $selector := dict "app.kubernetes.io/instance" (include "tlib.name" .) "app.kubernetes.io/part-of" "ray-gitops" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "tlib.name" . }}-ingress
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tlib.labels" . | nindent 4 }}
  annotations:
    {{- include "tlib.syncWave" "0" | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector:
            matchLabels:
              {{- toYaml $selector | nindent 14 }}
    {{- if ne .Chart.Name "pytorch-job" }}
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ $vals.networkPolicy.operatorNamespace }}
      ports:
        - {port: 8265, protocol: TCP}
    {{- with $vals.networkPolicy.dashboardFrom }}
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - {port: 8265, protocol: TCP}
        - {port: 10001, protocol: TCP}
    {{- end }}
    {{- with $vals.networkPolicy.metricsFrom }}
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - {port: 8080, protocol: TCP}
    {{- end }}
    {{- end }}
{{- end -}}
{{- end -}}
