"""Cluster DNS for a cluster with a real node: CoreDNS (built from its module, e2e.node_images) as the `kube-dns`
Service at the address the kubelet hands every pod, with the Corefile kubeadm and minikube ship. It listens on
1053 as a non-root user with no capabilities (the Service maps 53 to it)."""
from __future__ import annotations

from .node_images import COREDNS_IMAGE
from .real_node import CLUSTER_DOMAIN

COREFILE = f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}}
"""


def manifests(dns_ip: str) -> list[dict]:
    ns, name = "kube-system", "coredns"
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {
                 "serviceAccountName": name, "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical",
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{
                     "name": "coredns", "image": COREDNS_IMAGE, "imagePullPolicy": "IfNotPresent",
                     "args": ["-conf", "/etc/coredns/Corefile"],
                     "ports": [{"containerPort": 1053, "name": "dns", "protocol": "UDP"},
                               {"containerPort": 1053, "name": "dns-tcp", "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "170Mi"}},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                     "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 10},
                     "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                         "capabilities": {"drop": ["ALL"]}},
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}],
                 "volumes": [{"name": "config", "configMap": {"name": name}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": ns, "labels": {**labels, "kubernetes.io/name": "CoreDNS"}},
         "spec": {"selector": labels, "clusterIP": dns_ip,
                  "ports": [{"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]
