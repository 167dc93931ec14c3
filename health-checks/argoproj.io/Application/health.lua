-- Argo CD health assessment for argoproj.io/Application: the health the child Application reports.
--
-- Argo CD removed its built-in Application health check in 1.8; without one, the root Application's sync waves
-- would not wait for the Applications it holds. With it, the root syncs the CRDs, then the operators, and only
-- when those are Healthy the ApplicationSets of the workloads (argocd/managed sync waves). This is the check the
-- Argo CD documentation gives for app-of-apps ordering (docs/operator-manual/health.md), with a message.
--
-- Uses the shared prelude (health-checks/prelude.lua: result, nonempty, describe, conditionsByType, anyTrue,
-- generationBehind), which the generator puts in front of it in argocd-cm.

if obj.status == nil or obj.status.health == nil or obj.status.health.status == nil then
  return result("Progressing", "Waiting for the application controller to assess the Application")
end

local sync = "Unknown"
if obj.status.sync ~= nil and obj.status.sync.status ~= nil then
  sync = obj.status.sync.status
end
local message = "Application is " .. sync .. " and " .. obj.status.health.status
if obj.status.health.message ~= nil and obj.status.health.message ~= "" then
  message = message .. ": " .. obj.status.health.message
end

local health = obj.status.health.status
if health == "Healthy" then
  return result("Healthy", message)
end
if health == "Degraded" then
  return result("Degraded", message)
end
if health == "Suspended" then
  return result("Suspended", message)
end
if health == "Missing" then
  return result("Missing", message)
end
if health == "Progressing" then
  return result("Progressing", message)
end
return result("Unknown", message)
