"""make logs: the driver's output of a RayJob (its submitter pod streams `ray job logs`) or the output of a
PyTorchJob's master and worker pods, each line prefixed by its pod; with --follow, across new pods (a submitter
Job's retry, a recreated worker) and container restarts, until the run has ended and every stream has."""
from __future__ import annotations

import sys
import threading
import time

from . import jobs as jobs_mod
from .targets import Clients, Target

ROLES = {"RayJob": ("submitter",), "PyTorchJob": ("master", "worker")}


def _containers(pod) -> list[str]:
    return [c.name for c in pod.spec.containers]


def _restarts(pod, container: str) -> int:
    for status in pod.status.container_statuses or []:
        if status.name == container:
            return status.restart_count
    return 0


def _started(pod) -> bool:
    return (pod.status.phase or "Pending") != "Pending"


def print_logs(clients: Clients, target: Target, job: str, out=sys.stdout, tail: int | None = None) -> int:
    """Everything the run's pods have logged so far; returns the number of lines."""
    core = clients.core(target.context)
    run = jobs_mod.find(clients, target, job)
    lines = 0
    for role in ROLES[run.kind]:
        for pod in run.pods.get(role) or []:
            if not _started(pod):
                continue
            for container in _containers(pod):
                prefix = _prefix(pod, container)
                runs = [True, False] if _restarts(pod, container) else [False]
                for previous in runs:
                    tag = "(before its restart) " if previous else ""
                    try:
                        text = core.read_namespaced_pod_log(pod.metadata.name, target.namespace, container=container,
                                                            tail_lines=tail, previous=previous, _request_timeout=30)
                    except Exception as exc:  # noqa: BLE001 - a 400 is the kubelet's answer for this container
                        if getattr(exc, "status", None) != 400:
                            raise
                        # no log yet (waiting to start, or none kept): the kubelet's own words, then the next one
                        print(f"{prefix}{tag}(no log: {_api_message(exc)})", file=out)
                        continue
                    for line in text.splitlines():
                        print(f"{prefix}{tag}{line}", file=out)
                        lines += 1
    return lines


def _api_message(exc) -> str:
    """The `message` of an API error's Status body, else its reason."""
    import json
    try:
        return json.loads(getattr(exc, "body", "") or "{}").get("message") or str(exc.reason)
    except ValueError:
        return str(getattr(exc, "reason", exc))


def _prefix(pod, container: str) -> str:
    return f"[{pod.metadata.name}] " if len(pod.spec.containers) == 1 else f"[{pod.metadata.name}/{container}] "


class Follower:
    """Streams every pod of a run, starting a stream for each new pod or container restart, until the run ended
    and all streams finished (or `stop` is set). A stream of a container that ended (its pod Succeeded or Failed,
    restarted or gone, or the run ended) is closed after `grace` seconds if the server keeps it open."""

    def __init__(self, clients: Clients, target: Target, job: str, out=sys.stdout, poll: float = 2.0,
                 grace: float = 5.0):
        self.clients, self.target, self.job, self.out, self.poll, self.grace = clients, target, job, out, poll, grace
        self.lock = threading.Lock()
        self.streams: dict[tuple, threading.Thread] = {}
        self.responses: dict[tuple, object] = {}
        self.ended: dict[tuple, float] = {}
        self.closed: set[tuple] = set()
        self.stop = threading.Event()
        self.lines = 0

    def emit(self, line: str) -> None:
        with self.lock:
            print(line, file=self.out, flush=True)
            self.lines += 1

    def _stream(self, key: tuple, pod, container: str) -> None:
        core = self.clients.core(self.target.context)
        prefix = _prefix(pod, container)
        try:
            response = core.read_namespaced_pod_log(pod.metadata.name, self.target.namespace, container=container,
                                                    follow=True, _preload_content=False)
            self.responses[key] = response
            buffer = b""
            for chunk in response.stream(4096):
                if self.stop.is_set():
                    break
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    self.emit(prefix + raw.decode(errors="replace"))
            if buffer:
                self.emit(prefix + buffer.decode(errors="replace"))
            response.release_conn()
        except Exception as exc:  # noqa: BLE001 - a pod that went away ends its stream; say so, keep following
            if key not in self.ended:
                self.emit(f"{prefix}(log stream ended: {getattr(exc, 'reason', None) or exc})")

    def _close(self, key: tuple) -> None:
        """End a stream another thread is reading: urllib3's shutdown() (shuts the socket for reading, which wakes
        the reader). Not close(): from this thread it waits for the reader's lock, which a stream the server keeps
        open never releases (the e2e hung there)."""
        response = self.responses.pop(key, None)
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - a stream that already ended or broke
                pass

    def _scan(self, run: jobs_mod.Run) -> None:
        now = time.monotonic()
        current = set()
        for role in ROLES[run.kind]:
            for pod in run.pods.get(role) or []:
                if not _started(pod):
                    continue
                for container in _containers(pod):
                    key = (pod.metadata.uid, container, _restarts(pod, container))
                    current.add(key)
                    if key not in self.streams:
                        thread = threading.Thread(target=self._stream, args=(key, pod, container), daemon=True)
                        self.streams[key] = thread
                        thread.start()
                    if pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp:
                        self.ended.setdefault(key, now)
        for key in self.streams:
            if key not in current:  # restarted (a new key took its place) or the pod is gone
                self.ended.setdefault(key, now)
        if run.finished:  # the run's end ends every stream, also of pods still Running (a cluster kept after it)
            for key in self.streams:
                self.ended.setdefault(key, now)
        for key, since in self.ended.items():
            if now - since >= self.grace:
                self._close(key)
                self.closed.add(key)

    def run(self, timeout: float | None = None) -> jobs_mod.Run:
        deadline = None if timeout is None else time.monotonic() + timeout
        run = jobs_mod.find(self.clients, self.target, self.job)
        while not self.stop.is_set():
            self._scan(run)
            # A closed stream counts as done even if its reader is still blocked on a server that keeps it open.
            alive = [k for k, t in self.streams.items() if t.is_alive() and k not in self.closed]
            if run.finished and not alive:
                return run
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(self.poll)
            current = jobs_mod.find_current(self.clients, self.target, self.job)
            if current is None:  # pruned (a retry replaced it) before we saw it end: nothing more to follow
                self.emit(f"(run {run.name} is gone)")
                break
            run = current
        self.stop.set()
        for key in list(self.responses):
            self._close(key)
        return run
