-- Argo CD health assessment for ray.io/RayJob (KubeRay v1.7).
--
-- Reads status.jobDeploymentStatus (KubeRay's lifecycle of the RayCluster and the job submission) and
-- status.jobStatus (the Ray job's own status from the Ray dashboard), plus status.reason / status.message.
--
-- Uses the shared prelude (health-checks/prelude.lua: result, nonempty, describe, conditionsByType, anyTrue,
-- generationBehind), which the generator puts in front of it in argocd-cm.

-- Kueue: a RayJob labelled with a queue is created suspended and unsuspended when Kueue admits it, so a suspended
-- queued RayJob is waiting for quota, not paused by a person. One that MultiKueue dispatches (spec.managedBy) is
-- run by a worker cluster's KubeRay and its status copied back, generation and all: the manager's own generation
-- is never "observed" there, so no generation gate applies to it.
local labels = (obj.metadata and obj.metadata.labels) or {}
local queue = labels["kueue.x-k8s.io/queue-name"]
local spec = obj.spec or {}
local dispatched = spec.managedBy == "kueue.x-k8s.io/multikueue"
local function waitingForQuota()
  return result("Progressing", "Waiting for quota in LocalQueue " .. queue ..
    ": Kueue starts the RayJob (spec.suspend false) when its ClusterQueue has room")
end

local status = obj.status
if status == nil or next(status) == nil then
  if dispatched then
    return result("Progressing", "Waiting for MultiKueue to place the RayJob on a worker cluster")
  end
  if nonempty(queue) and spec.suspend == true then
    return waitingForQuota()
  end
  return result("Progressing", "Waiting for the KubeRay operator to pick up the RayJob")
end

local deployment = status.jobDeploymentStatus or ""
local jobStatus = status.jobStatus or ""
local reason = status.reason
local message = status.message

-- Terminal states first: KubeRay does not act on spec changes once a RayJob has finished, so a
-- generation that is never observed again must not hide the final outcome.
if deployment == "Complete" then
  if jobStatus == "SUCCEEDED" then
    return result("Healthy", describe("Ray job succeeded", nil, message))
  end
  if jobStatus == "FAILED" then
    return result("Degraded", describe("Ray job failed", reason, message))
  end
  if jobStatus == "STOPPED" then
    return result("Degraded", describe("Ray job was stopped before it finished", reason, message))
  end
  local shown = jobStatus
  if shown == "" then
    shown = "unknown"
  end
  return result("Degraded", describe("RayJob completed without success, job status " .. shown, reason, message))
end
if deployment == "Failed" then
  return result("Degraded", describe("RayJob failed", reason, message))
end
if deployment == "ValidationFailed" then
  return result("Degraded", describe("RayJob spec is invalid", reason, message))
end

-- The spec changed (e.g. spec.suspend flipped) and KubeRay has not caught up yet.
local generation, observed = generationBehind(obj)
if generation ~= nil and not dispatched then
  return result("Progressing", "Waiting for KubeRay to observe generation " .. generation ..
    " of the RayJob (observed " .. observed .. ")")
end

local cluster = status.rayClusterName

if deployment == "" then
  return result("Progressing", "Waiting for the KubeRay operator to initialize the RayJob")
end
if deployment == "Initializing" then
  if nonempty(cluster) then
    return result("Progressing", "Waiting for RayCluster " .. cluster .. " to be ready")
  end
  return result("Progressing", "Waiting for the RayJob's RayCluster to be created")
end
if deployment == "Waiting" then
  return result("Progressing", describe("Waiting for the Ray job to be submitted", nil, message))
end
if deployment == "Running" then
  local m
  if nonempty(jobStatus) then
    m = "Ray job is " .. jobStatus
  else
    m = "Submitting the Ray job"
  end
  if nonempty(cluster) then
    m = m .. " on RayCluster " .. cluster
  end
  return result("Progressing", m)
end
if deployment == "Retrying" then
  local m = "Retrying the Ray job after a failed attempt"
  local failed = tonumber(status.failed)
  if failed ~= nil and failed > 0 then
    m = "Retrying the Ray job after " .. failed .. " failed attempt(s)"
  end
  return result("Progressing", describe(m, reason, message))
end
if deployment == "Suspending" then
  return result("Progressing", "Suspending the RayJob: deleting its RayCluster")
end
if deployment == "Suspended" then
  if nonempty(queue) then
    return waitingForQuota()
  end
  return result("Suspended", "RayJob is suspended (spec.suspend is true); no RayCluster is running for it")
end

return result("Unknown", "Unrecognized RayJob jobDeploymentStatus: " .. deployment)
