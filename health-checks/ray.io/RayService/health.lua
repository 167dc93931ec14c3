-- Argo CD health assessment for ray.io/RayService (KubeRay v1.7).
--
-- Reads status.conditions (Ready, UpgradeInProgress and the suspend conditions), the Serve application
-- statuses of the active and pending RayClusters, status.numServeEndpoints, status.observedGeneration
-- and, when an operator reports no conditions, the deprecated status.serviceStatus ("Running").
--
-- Uses the shared prelude (health-checks/prelude.lua: result, nonempty, describe, conditionsByType, anyTrue,
-- generationBehind), which the generator puts in front of it in argocd-cm.

-- Serve applications of one side (active or pending) as a list sorted by name, so that messages do
-- not depend on table iteration order.
local function applications(side)
  local list = {}
  if side == nil or side.applicationStatuses == nil then
    return list
  end
  local names = {}
  for name, _ in pairs(side.applicationStatuses) do
    table.insert(names, name)
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local app = side.applicationStatuses[name]
    if app == nil then
      app = {}
    end
    table.insert(list, { name = name, status = app.status or "", message = app.message })
  end
  return list
end

local status = obj.status
if status == nil or next(status) == nil then
  return result("Progressing", "Waiting for the KubeRay operator to report the RayService's status")
end

local generation, observed = generationBehind(obj)
if generation ~= nil then
  return result("Progressing", "Waiting for KubeRay to observe generation " .. generation ..
    " of the RayService (observed " .. observed .. ")")
end

local conditions = conditionsByType(status.conditions)

local function isTrue(...)
  return anyTrue(conditions, ...)
end

local active = status.activeServiceStatus
local pending = status.pendingServiceStatus
local function clusterName(side)
  if side == nil then
    return nil
  end
  return side.rayClusterName
end

-- Suspend (spec.suspend): KubeRay deletes the RayClusters and reports Suspending, then Suspended.
-- Both spellings of the condition types are accepted; with neither, a suspended RayService is
-- recognised by having no RayCluster left.
local specSuspend = obj.spec ~= nil and obj.spec.suspend == true
local suspended = isTrue("Suspended", "RayServiceSuspended")
if isTrue("Suspending", "RayServiceSuspending") then
  return result("Progressing", "Suspending the RayService: deleting its RayClusters")
end
if specSuspend then
  if suspended or (not nonempty(clusterName(active)) and not nonempty(clusterName(pending))) then
    return result("Suspended", "RayService is suspended (spec.suspend is true); its RayClusters are deleted")
  end
  return result("Progressing", "Suspending the RayService: deleting its RayClusters")
end
if suspended then
  return result("Progressing", "Resuming the suspended RayService")
end

-- Serve applications that failed: on the serving (active) cluster any failure or unhealthiness,
-- on the cluster being prepared for an upgrade (pending) a failed deployment.
for _, app in ipairs(applications(active)) do
  if app.status == "DEPLOY_FAILED" or app.status == "UNHEALTHY" then
    return result("Degraded", describe("Serve application " .. app.name .. " is " .. app.status, nil, app.message))
  end
end
for _, app in ipairs(applications(pending)) do
  if app.status == "DEPLOY_FAILED" then
    return result("Degraded", describe("Serve application " .. app.name .. " is DEPLOY_FAILED on the pending RayCluster",
      nil, app.message))
  end
end

local ready = conditions["Ready"]
if ready == nil then
  -- Operator without conditions: serviceStatus "Running" is the same as Ready.
  if status.serviceStatus == "Running" then
    return result("Healthy", "RayService is running")
  end
  return result("Progressing", "Waiting for the RayService to become ready")
end

-- KubeRay v1.7.0 rayservice_controller.go: a spec that fails validation sets Ready=False, reason ValidationFailed;
-- nothing will change until the spec does.
if ready.status ~= "True" and ready.reason == "ValidationFailed" then
  return result("Degraded", describe("RayService spec is invalid", ready.reason, ready.message))
end

-- Rolling an incremental upgrade back to the original cluster: traffic is moving, not settled.
if isTrue("RollbackInProgress") then
  local rollback = conditions["RollbackInProgress"]
  return result("Progressing", describe("Rolling back the upgrade", rollback.reason, rollback.message))
end

if ready.status == "True" then
  if isTrue("UpgradeInProgress") then
    local upgrade = conditions["UpgradeInProgress"]
    return result("Progressing", describe("Zero-downtime upgrade in progress", upgrade.reason, upgrade.message))
  end
  for _, app in ipairs(applications(active)) do
    if app.status ~= "RUNNING" then
      return result("Progressing", describe("Serve application " .. app.name .. " is " .. app.status, nil, app.message))
    end
  end
  local endpoints = tonumber(status.numServeEndpoints)
  if endpoints == nil then
    endpoints = 0
  end
  return result("Healthy", "RayService is serving: " .. endpoints .. " serve endpoints")
end

-- Ready is False (or Unknown).
if ready.reason == "InitializingTimeout" or ready.reason == "ZeroServeEndpoints" then
  return result("Degraded", describe("RayService is not ready", ready.reason, ready.message))
end
return result("Progressing", describe("RayService is not ready yet", ready.reason, ready.message))
