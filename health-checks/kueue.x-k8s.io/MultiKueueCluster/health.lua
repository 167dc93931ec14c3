-- Argo CD health assessment for kueue.x-k8s.io/MultiKueueCluster (Kueue v0.17): Active while the manager reaches
-- the worker cluster with its kubeconfig Secret; else Degraded (BadConfig, ClientConnectionFailed...), which is
-- what a platform team must see when a worker is gone or its credentials are.
return activeHealth(obj, "MultiKueueCluster", nil)
