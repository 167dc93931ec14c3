-- Argo CD health assessment for kueue.x-k8s.io/AdmissionCheck (Kueue v0.17): Active when its controller (e.g.
-- MultiKueue) accepts its parameters; else Degraded with the controller's reason.
return activeHealth(obj, "AdmissionCheck", nil)
