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
-- Healthy only once the Application has applied what git says: an Application whose sync is still running, or
-- that has not synced yet, reports the health of what is live so far (Argo CD v3.5 reports a platform app Healthy
-- before its first sync, with none of its resources there), and the root would start the next wave on it. Found
-- by the e2e: with Kueue's ClusterQueue making eks's platform sync longer, a job's pod was created before the
-- namespace's ResourceQuota existed.
--
-- OutOfSync counts only before the first sync (no operation on record). Once it has synced, an Application may stay
-- OutOfSync on purpose: a deny sync window holds the platform's changes, or an environment syncs by hand. Waiting
-- for it then would hold the root's sync operation, and with it every later change to argocd/managed, the window's
-- own removal included (the e2e's change-window scenario found that deadlock).
local running = obj.status.operationState ~= nil and obj.status.operationState.phase == "Running"
if health == "Healthy" and running then
  return result("Progressing", message .. "; a sync is running")
end
if health == "Healthy" and sync == "OutOfSync" and obj.status.operationState == nil then
  return result("Progressing", message .. "; waiting for its first sync")
end
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
