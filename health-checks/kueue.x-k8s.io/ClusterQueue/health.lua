-- Argo CD health assessment for kueue.x-k8s.io/ClusterQueue (Kueue v0.17): the Active condition, with the
-- queue's pending and admitted workloads. An inactive queue (a missing flavor or admission check, stopped)
-- admits nothing: Degraded, with Kueue's reason.
return activeHealth(obj, "ClusterQueue", queueCounts(obj.status))
