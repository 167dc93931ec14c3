"""argocd/managed/configmap-argocd-notifications-cm.yaml: what Argo CD's notifications controller tells people, from
each environment's `gitops.notifications` (the deployer's "SNS topic", the Argo CD way).

Three triggers, shared by every environment (Argo CD's trigger conditions, the expr language of
notifications-engine):
  on-job-succeeded   a job's Application (label ray-gitops/app job-*) is Synced and Healthy: its run succeeded
  on-job-degraded    a job's Application is Degraded: its run failed (the health message carries the reason)
  on-out-of-sync     any Application of the environment is OutOfSync and its last sync Failed or Errored: git and
                     the cluster disagree and Argo CD could not fix it (a plain OutOfSync is every push's first
                     second, not news)
each fires once per synced revision (a new run is a new revision). Per environment, one service named
ray-gitops-<env> (webhook, slack or awssqs: Argo CD v3.5.1's notifications-engine has no SNS service) and a default
subscription selecting the environment's Applications by label: no annotation on any Application. Credentials are
`$key` references into the Secret argocd-notifications-secret (which Argo CD's install creates empty); their values
never come from git (`make bootstrap` names a missing key).
"""
from __future__ import annotations

import yaml

from .environments import Environment

NAME = "argocd-notifications-cm"
SECRET = "argocd-notifications-secret"
ENV_LABEL = "ray-gitops/environment"
TRIGGERS = ("on-job-succeeded", "on-job-degraded", "on-out-of-sync")

_JOB = "app.metadata.labels['ray-gitops/app'] startsWith 'job-'"
CONDITIONS = {
    "on-job-succeeded": f"{_JOB} and app.status.sync.status == 'Synced' and app.status.health.status == 'Healthy'",
    "on-job-degraded": f"{_JOB} and app.status.health.status == 'Degraded'",
    "on-out-of-sync": "app.status.sync.status == 'OutOfSync' and app.status.operationState != nil and "
                      "app.status.operationState.phase in ['Error', 'Failed']",
}
TITLES = {
    "on-job-succeeded": "job succeeded",
    "on-job-degraded": "job failed",
    "on-out-of-sync": "out of sync: the last sync failed",
}


def service_name(env: Environment) -> str:
    return f"ray-gitops-{env.name}"


def settings(env: Environment) -> dict:
    return (env.doc.get("gitops") or {}).get("notifications") or {}


def enabled(envs: list[Environment]) -> list[Environment]:
    return [e for e in envs if settings(e).get("enabled")]


def _service(env: Environment) -> tuple[str, str]:
    """(ConfigMap key, service configuration)."""
    conf = settings(env)
    kind = conf.get("service", "webhook")
    options = conf.get(kind) or {}
    if kind == "webhook":
        body = {"url": options["url"]}
        if options.get("tokenKey"):
            body["headers"] = [{"name": "Authorization", "value": f"Bearer ${options['tokenKey']}"}]
    elif kind == "slack":
        body = {"token": f"${options.get('tokenKey', 'slack-token')}"}
        if options.get("apiURL"):
            body["apiURL"] = options["apiURL"]
    else:  # awssqs: static keys when named, else the controller's own AWS identity (IRSA)
        body = {"region": options["region"], "queue": options["queue"]}
        if options.get("accessKeyIdKey"):
            body["key"] = f"${options['accessKeyIdKey']}"
            body["secret"] = f"${options['secretAccessKeyKey']}"
    return f"service.{kind}.{service_name(env)}", yaml.safe_dump(body, sort_keys=True)


def secret_keys(env: Environment) -> list[str]:
    """The keys of argocd-notifications-secret the environment's service reads."""
    conf = settings(env)
    if not conf.get("enabled"):
        return []
    options = conf.get(conf.get("service", "webhook")) or {}
    keys = [options.get("tokenKey") or ("slack-token" if conf.get("service") == "slack" else None),
            options.get("accessKeyIdKey"), options.get("secretAccessKeyKey")]
    return [k for k in keys if k]


# Once per sync operation's revision (Argo CD's own catalog does so), not per app.status.sync.revision: that one
# moves to every new commit of the repository (argo-cd v3.5.1 controller/state.go 1044-1046), so each push to main
# would announce every finished job again.
ONCE_PER = "app.status.operationState?.syncResult?.revision"


def _recipient(env: Environment) -> str:
    conf = settings(env)
    if conf.get("service") == "slack":
        return f"{service_name(env)}:{conf['slack']['channel']}"
    return service_name(env)


def _template(trigger: str, envs: list[Environment]) -> str:
    title = TITLES[trigger]
    message = (f"[{{{{index .app.metadata.labels \"{ENV_LABEL}\"}}}}] {{{{.app.metadata.name}}}}: {title} "
               "({{.app.status.sync.status}}/{{.app.status.health.status}} at {{.app.status.sync.revision}})"
               "{{if .app.status.health.message}}: {{.app.status.health.message}}{{end}}")
    body = ('{"event": "' + trigger.removeprefix("on-") + '", '
            '"application": {{toJson .app.metadata.name}}, '
            f'"environment": {{{{toJson (index .app.metadata.labels "{ENV_LABEL}")}}}}, '
            '"sync": {{toJson .app.status.sync.status}}, "health": {{toJson .app.status.health.status}}, '
            '"revision": {{toJson .app.status.sync.revision}}, '
            '"syncedRevision": {{with .app.status.operationState}}{{toJson .syncResult.revision}}{{else}}null{{end}}, '
            '"message": {{toJson (.app.status.health.message | default "")}}}')
    doc: dict = {"message": message}
    webhooks = {service_name(e): {"method": "POST", "body": body}
                for e in envs if settings(e).get("service", "webhook") == "webhook"}
    if webhooks:
        doc["webhook"] = webhooks
    if any(settings(e).get("service") == "awssqs" for e in envs):
        doc["awssqs"] = {"messageAttributes": {"event": trigger.removeprefix("on-")}}
    return yaml.safe_dump(doc, sort_keys=True, width=1000)


def configmap(envs: list[Environment], meta: dict) -> dict:
    """The notifications ConfigMap: the triggers and templates always (an Application may also subscribe by
    annotation), a service and a default subscription per environment that enables notifications."""
    on = enabled(envs)
    data = {}
    for trigger in TRIGGERS:
        data[f"trigger.{trigger}"] = yaml.safe_dump(
            [{"when": CONDITIONS[trigger], "send": [trigger.removeprefix("on-")],
              "oncePer": ONCE_PER}], sort_keys=True, width=1000)
        data[f"template.{trigger.removeprefix('on-')}"] = _template(trigger, on)
    for env in on:
        key, value = _service(env)
        data[key] = value
    if on:
        data["subscriptions"] = yaml.safe_dump(
            [{"recipients": [_recipient(e)], "triggers": list(settings(e).get("triggers") or TRIGGERS),
              "selector": f"{ENV_LABEL}={e.name}"} for e in on], sort_keys=True, width=1000)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
