-- Shared prelude of the health checks: the generator puts it in front of every health-checks/<group>/<Kind>/health.lua
-- when it builds argocd-cm (generator/argocd.py), and the Lua tests run each check the same way.
--
-- Written for Argo CD's sandbox for argocd-cm customizations: Lua 5.1 (gopher-lua) with only the base, table,
-- package and a safe os library loaded. No string, math or io library is used, so no
-- resource.customizations.useOpenLibs entry is needed.

local hs = {}

-- The health Argo CD shows: one of Healthy, Progressing, Degraded, Suspended, Missing, Unknown, and a message.
local function result(status, message)
  hs.status = status
  hs.message = message
  return hs
end

local function nonempty(v)
  return v ~= nil and v ~= ""
end

-- "<prefix> (<reason>): <detail>", leaving out whatever is empty.
local function describe(prefix, reason, detail)
  local m = prefix
  if nonempty(reason) then
    m = m .. " (" .. reason .. ")"
  end
  if nonempty(detail) then
    m = m .. ": " .. detail
  end
  return m
end

-- status.conditions as a table by type, and whether there was any.
local function conditionsByType(list)
  local byType = {}
  local any = false
  if list ~= nil then
    for _, condition in ipairs(list) do
      if condition.type ~= nil then
        byType[condition.type] = condition
        any = true
      end
    end
  end
  return byType, any
end

-- True when any of the named conditions is "True".
local function anyTrue(byType, ...)
  for _, conditionType in ipairs({ ... }) do
    local condition = byType[conditionType]
    if condition ~= nil and condition.status == "True" then
      return true
    end
  end
  return false
end

-- metadata.generation and status.observedGeneration when the operator has not yet observed the newest spec, else nil.
local function generationBehind(resource)
  if resource.metadata == nil or resource.status == nil then
    return nil
  end
  local generation = tonumber(resource.metadata.generation)
  local observed = tonumber(resource.status.observedGeneration)
  if generation ~= nil and observed ~= nil and observed < generation then
    return generation, observed
  end
  return nil
end

-- Kueue's objects (ClusterQueue, LocalQueue, AdmissionCheck, MultiKueueCluster) all report one condition, Active
-- (sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2): True when the object can do its work, False with a reason
-- (FlavorNotFound, ClusterQueueDoesNotExist, ClientConnectionFailed...) when it cannot. `detail` is appended to a
-- healthy message (the queue's counts).
local function activeHealth(resource, what, detail)
  local status = resource.status
  local byType = conditionsByType(status and status.conditions or nil)
  local active = byType["Active"]
  if active == nil then
    return result("Progressing", "Waiting for Kueue to activate the " .. what)
  end
  if active.status == "True" then
    local m = what .. " is active"
    if nonempty(detail) then
      m = m .. ": " .. detail
    end
    return result("Healthy", m)
  end
  return result("Degraded", describe(what .. " is not active", active.reason, active.message))
end

-- "<pending> pending, <admitted> admitted" from a queue's status.
local function queueCounts(status)
  if status == nil then
    return nil
  end
  return (tonumber(status.pendingWorkloads) or 0) .. " pending, " .. (tonumber(status.admittedWorkloads) or 0) ..
    " admitted"
end
