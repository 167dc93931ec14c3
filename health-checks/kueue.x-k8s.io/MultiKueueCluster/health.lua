-- Argo CD health assessment for kueue.x-k8s.io/MultiKueueCluster (Kueue v0.17): Active while the manager reaches
-- the worker cluster with its kubeconfig Secret; else Degraded (ClientConnectionFailed, InsecureKubeConfig...),
-- which is what a platform team must see when a worker is gone or its credentials are. One exception: Kueue cannot
-- read a kubeconfig from the Secret (reason BadKubeConfig: the Secret, or its key, does not exist yet). `make
-- bootstrap` makes it out of git once Argo CD has synced the worker's ServiceAccount (ops/multikueue.py): until
-- then the cluster is Progressing, so a first sync waits for it instead of failing (a Degraded resource fails its
-- sync wave). Kueue's message says which (Argo CD's Lua has no string library to tell them apart here).
local status = obj.status
local byType = conditionsByType(status and status.conditions or nil)
local active = byType["Active"]
if active ~= nil and active.status ~= "True" and active.reason == "BadKubeConfig" then
  return result("Progressing", "Waiting for its kubeconfig Secret, made out of git by make bootstrap: " ..
    (active.message or ""))
end
return activeHealth(obj, "MultiKueueCluster", nil)
