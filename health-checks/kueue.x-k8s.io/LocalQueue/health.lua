-- Argo CD health assessment for kueue.x-k8s.io/LocalQueue (Kueue v0.17): Active when its ClusterQueue exists and
-- is active (else Degraded, e.g. ClusterQueueDoesNotExist), with its pending and admitted workloads.
return activeHealth(obj, "LocalQueue", queueCounts(obj.status))
