"""The e2e cluster: a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), kwok for nodes and pods, the KubeRay operator, the training-operator and Argo CD, built from their
Go modules at pinned versions and run as plain processes on loopback, so the repository can be tested against the
software its users run. `python -m e2e --help`; docs/e2e.md."""
