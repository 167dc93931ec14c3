-- Argo CD health assessment for kubeflow.org/PyTorchJob (Kubeflow training-operator v1.9).
--
-- Reads status.conditions (types Created, Running, Restarting, Succeeded, Suspended, Failed) and
-- spec.runPolicy.suspend. The PyTorchJob status has no observedGeneration, so a suspend request that the
-- operator has not acted on yet is recognised by comparing spec.runPolicy.suspend with the Suspended
-- condition. The operator's condition messages already name the job and its state
-- ("PyTorchJob ns/name is failed because 1 Worker replica(s) failed."), so they are shown as they are.
--
-- Uses the shared prelude (health-checks/prelude.lua: result, nonempty, describe, conditionsByType, anyTrue,
-- generationBehind), which the generator puts in front of it in argocd-cm.

local statusConditions = nil
if obj.status ~= nil then
  statusConditions = obj.status.conditions
end
local conditions, any = conditionsByType(statusConditions)

local function isTrue(conditionType)
  return anyTrue(conditions, conditionType)
end

-- The condition's own message, or a fallback when the operator left it empty.
local function messageOf(conditionType, fallback)
  local condition = conditions[conditionType]
  if condition ~= nil and nonempty(condition.message) then
    return condition.message
  end
  return fallback
end

local specSuspend = obj.spec ~= nil and obj.spec.runPolicy ~= nil and obj.spec.runPolicy.suspend == true

-- Kueue: a PyTorchJob labelled with a queue is created suspended and resumed when Kueue admits it, so a suspended
-- queued job is waiting for quota, not paused by a person.
local labels = {}
if obj.metadata ~= nil and obj.metadata.labels ~= nil then
  labels = obj.metadata.labels
end
local queue = labels["kueue.x-k8s.io/queue-name"]
local waitingForQuota = nonempty(queue) and specSuspend
if waitingForQuota and not isTrue("Failed") and not isTrue("Succeeded") then
  return result("Progressing", "Waiting for quota in LocalQueue " .. queue ..
    ": Kueue starts the PyTorchJob (spec.runPolicy.suspend false) when its ClusterQueue has room")
end

if not any then
  if specSuspend then
    return result("Progressing", "Waiting for the training-operator to suspend the PyTorchJob")
  end
  return result("Progressing", "Waiting for the training-operator to create the PyTorchJob's Pods")
end

-- Terminal conditions win: a finished job stays finished whatever else is reported.
if isTrue("Failed") then
  return result("Degraded", messageOf("Failed", "PyTorchJob failed"))
end
if isTrue("Succeeded") then
  return result("Healthy", messageOf("Succeeded", "PyTorchJob succeeded"))
end

if isTrue("Suspended") then
  if specSuspend then
    return result("Suspended", messageOf("Suspended", "PyTorchJob is suspended"))
  end
  return result("Progressing", "Resuming the suspended PyTorchJob (spec.runPolicy.suspend is no longer true)")
end
if specSuspend then
  return result("Progressing", "Waiting for the training-operator to suspend the PyTorchJob")
end

if isTrue("Restarting") then
  return result("Progressing", messageOf("Restarting", "PyTorchJob is restarting failed replicas"))
end
if isTrue("Running") then
  return result("Progressing", messageOf("Running", "PyTorchJob is running"))
end
if isTrue("Created") then
  return result("Progressing", messageOf("Created", "PyTorchJob is created; waiting for its Pods to start"))
end
return result("Progressing", "Waiting for the training-operator to start the PyTorchJob")
