"""Where an environment lives: its cluster (kubectl context, namespace) and the Argo CD that syncs it, from the
environment as the generator composes it; and the Kubernetes clients for them, failing fast and clearly when a
cluster cannot be reached."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

EXIT_OK, EXIT_NOT_HEALTHY, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_TIMEOUT = 0, 1, 2, 3, 4
REACH_TIMEOUT_SECONDS = 5  # the default; RAY_GITOPS_REACH_TIMEOUT (seconds) sets another, for a slow link
REACH_TIMEOUT_VARIABLE = "RAY_GITOPS_REACH_TIMEOUT"


class OpsError(Exception):
    """A problem for a person: the message says what and what to do; exit_code says which kind."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Target:
    env: str
    context: str
    namespace: str
    argocd_context: str
    argocd_namespace: str
    kubeconfig: str | None
    doc: dict
    cluster: str | None = None  # on an environment of several clusters, the one these commands act on
    # where each value of `doc` was written (generator.layers.Layer: .locate(path) -> file:line), and the environment
    # as written, templates unresolved, with every cluster's entry (a Layer); None when the Target was made by hand
    layer: object | None = None
    written: object | None = None
    placement: object | None = None  # its part in where jobs run (generator.placement.Placement)

    def rendered(self, root: Path, pattern: str = "*.yaml") -> list[Path]:
        """The rendered files of this target's apps: apps/<env>/<app>/ and, on an environment of several clusters,
        its own apps/<env>/clusters/<cluster>/<app>/."""
        apps = root / "apps" / self.env
        own = sorted(apps.glob(f"clusters/{self.cluster}/*/{pattern}")) if self.cluster else []
        return sorted(apps.glob(f"*/{pattern}")) + own

    def app_folder(self, root: Path, app: str) -> str:
        """The repository path (with a trailing /) an app of this target is rendered in: its cluster's own
        apps/<env>/clusters/<cluster>/<app>/ when there is one, else the shared apps/<env>/<app>/."""
        own = f"apps/{self.env}/clusters/{self.cluster}/{app}/"
        return own if self.cluster and (root / own).is_dir() else f"apps/{self.env}/{app}/"


def kubeconfig_path(explicit: str | None = None) -> str | None:
    """--kubeconfig, else $KUBECONFIG (first file), else ~/.kube/config (None: the client's own default)."""
    if explicit:
        return explicit
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return env.split(os.pathsep)[0]
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def environment_names(root: Path) -> list[str]:
    from generator import environments
    return environments.names(root)


def target(root: Path, env: str, kubeconfig: str | None = None) -> Target:
    # An environment of several clusters: the day-two commands act on the cluster keyed like the environment (its
    # first, where Argo CD's Applications keep the environment's name), else the first listed. Argo CD's status
    # covers every cluster's Applications either way.
    members = fleet(root, env, kubeconfig)
    return next((m for m in members if m.cluster == env), members[0])


def fleet(root: Path, env: str, kubeconfig: str | None = None) -> list[Target]:
    """One Target per cluster of `env`, in the order of its `clusters:` (the environment itself when it has one)."""
    from generator import environments
    from generator.errors import RenderError
    try:
        loaded = environments.load(root, env)
        members = environments.members(loaded)
    except RenderError as exc:
        raise OpsError(str(exc)) from None
    out = []
    for member in members:
        doc = member.doc
        argocd = (doc.get("gitops") or {}).get("argocd") or {}
        out.append(Target(env=env, context=doc["target"].get("context") or env, namespace=doc["target"]["namespace"],
                          argocd_context=argocd.get("context") or doc["target"].get("context") or env,
                          argocd_namespace=argocd.get("namespace", "argocd"), kubeconfig=kubeconfig_path(kubeconfig),
                          doc=doc, cluster=member.cluster, layer=member.layer, written=loaded.raw,
                          placement=member.placement))
    return out


def reload(root: Path, tgt: Target) -> Target:
    """The environment as it is now in the checkout (after a commit of ours changed its file)."""
    return target(root, tgt.env, tgt.kubeconfig)


def reach_timeout() -> float:
    """Seconds to wait for an API server's first answer: $RAY_GITOPS_REACH_TIMEOUT, else REACH_TIMEOUT_SECONDS."""
    text = os.environ.get(REACH_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return REACH_TIMEOUT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0
    if not 0 < seconds <= 600:
        raise OpsError(f"{REACH_TIMEOUT_VARIABLE}={text!r}: expected a number of seconds above 0 and at most 600 "
                       f"(unset, it is {REACH_TIMEOUT_SECONDS})")
    return seconds


def api_client(kubeconfig: str | None, context: str):
    """A client for `context`, after checking the context exists and the API server answers within seconds."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError) as exc:
        raise OpsError(f"no usable kubeconfig ({kubeconfig or 'default location'}): {exc}") from None
    names = sorted(c["name"] for c in contexts)
    if context not in names:
        raise OpsError(f"unknown kubectl context {context!r} in {kubeconfig or 'the default kubeconfig'}; known "
                       f"contexts: {', '.join(names) or 'none'} (an environment's target.context names it)")
    api = config.new_client_from_config(config_file=kubeconfig, context=context)
    probe_config = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=probe_config,
                            persist_config=False)
    probe_config.retries = False  # one try: urllib3's default retries would wait the reach timeout four times
    timeout = reach_timeout()
    try:
        client.VersionApi(client.ApiClient(probe_config)).get_code(_request_timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server is the same fact for a person
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0][:200]
        raise OpsError(f"cannot reach the cluster of context {context!r} ({api.configuration.host}): {reason}",
                       EXIT_UNREACHABLE) from None
    return api


class Clients:
    """Kubernetes clients per context, made once (each checked for reachability when first made)."""

    def __init__(self, kubeconfig: str | None):
        self.kubeconfig = kubeconfig
        self._made: dict[str, object] = {}

    def api(self, context: str):
        if context not in self._made:
            self._made[context] = api_client(self.kubeconfig, context)
        return self._made[context]

    def core(self, context: str):
        from kubernetes import client
        return client.CoreV1Api(self.api(context))

    def custom(self, context: str):
        from kubernetes import client
        return client.CustomObjectsApi(self.api(context))

    def apps(self, context: str):
        from kubernetes import client
        return client.AppsV1Api(self.api(context))

    def extensions(self, context: str):
        from kubernetes import client
        return client.ApiextensionsV1Api(self.api(context))
