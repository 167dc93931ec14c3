-- Argo CD health assessment for ray.io/RayCluster (KubeRay v1.7).
--
-- Reads status.conditions (RayClusterProvisioned, HeadPodReady, ReplicaFailure, RayClusterSuspending,
-- RayClusterSuspended), the deprecated status.state (ready / suspended / failed) for operators running
-- without the RayClusterStatusConditions feature gate, status.observedGeneration and the worker counts.
--
-- Uses the shared prelude (health-checks/prelude.lua: result, nonempty, describe, conditionsByType, anyTrue,
-- generationBehind), which the generator puts in front of it in argocd-cm.

local function count(v)
  local n = tonumber(v)
  if n == nil then
    return 0
  end
  return n
end

local status = obj.status
if status == nil or next(status) == nil then
  return result("Progressing", "Waiting for the KubeRay operator to report the RayCluster's status")
end

local conditions = conditionsByType(status.conditions)

local function isTrue(conditionType)
  return anyTrue(conditions, conditionType)
end

local state = status.state or ""

-- RayClusterProvisioned becomes True once all Pods were ready for the first time and stays True;
-- state "ready" is the equivalent when the conditions feature gate is off.
local provisioned = isTrue("RayClusterProvisioned") or state == "ready"

-- Generation lag counts only until the cluster is first provisioned: KubeRay writes the status only when a
-- compared field changes (utils.InconsistentRayClusterStatus ignores observedGeneration), so after a spec edit
-- that changes no pod or count, observedGeneration stays behind for good (KubeRay v1.7.0
-- ray-operator/controllers/ray/utils/consistency.go).
local generation, observed = generationBehind(obj)
if not provisioned and generation ~= nil then
  return result("Progressing", "Waiting for KubeRay to observe generation " .. generation ..
    " of the RayCluster (observed " .. observed .. ")")
end
if state ~= "" and state ~= "ready" and state ~= "suspended" and state ~= "failed" then
  return result("Unknown", "Unrecognized RayCluster state: " .. state)
end

-- Pods that KubeRay failed to create or delete (quota, admission webhooks, bad pod template).
-- KubeRay removes this condition again after the next successful reconcile.
if isTrue("ReplicaFailure") then
  local condition = conditions["ReplicaFailure"]
  return result("Degraded", describe("RayCluster Pods could not be reconciled", condition.reason, condition.message))
end

local specSuspend = obj.spec ~= nil and obj.spec.suspend == true

if isTrue("RayClusterSuspending") then
  return result("Progressing", "Suspending the RayCluster: deleting its Pods")
end
if isTrue("RayClusterSuspended") or state == "suspended" then
  if specSuspend then
    return result("Suspended", "RayCluster is suspended (spec.suspend is true); all its Pods are deleted")
  end
  return result("Progressing", "Resuming the suspended RayCluster: recreating its Pods")
end
if specSuspend then
  return result("Progressing", "Suspending the RayCluster: deleting its Pods")
end

-- Deprecated state that older operators set; kept so that such a status is not shown as healthy.
if state == "failed" then
  return result("Degraded", describe("RayCluster failed", nil, status.reason))
end

local workers = count(status.readyWorkerReplicas) .. "/" .. count(status.desiredWorkerReplicas) ..
  " worker replicas ready"

-- A head Pod that is gone or still starting (KubeRay's HeadPodReady reason, from the Pod or its container's
-- waiting reason) is a Pod being (re)created: after a spec change with upgradeStrategy Recreate, KubeRay deletes
-- every Pod and creates them anew. Any other reason (ErrImagePull, CrashLoopBackOff, ...) is a failure.
local startingReasons = { HeadPodNotFound = true, Unknown = true, ContainerCreating = true,
  PodInitializing = true }

if provisioned then
  local head = conditions["HeadPodReady"]
  if head ~= nil and head.status ~= "True" then
    if startingReasons[head.reason or ""] then
      return result("Progressing", describe("Head Pod is being created", head.reason, head.message))
    end
    return result("Degraded", describe("Head Pod is not ready", head.reason, head.message))
  end
  return result("Healthy", "RayCluster is ready: " .. workers)
end

local provisioned = conditions["RayClusterProvisioned"]
if provisioned ~= nil and nonempty(provisioned.message) then
  return result("Progressing", "Provisioning the RayCluster (" .. workers .. "): " .. provisioned.message)
end
return result("Progressing", "Provisioning the RayCluster (" .. workers .. ")")
