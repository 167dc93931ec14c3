"""A stand-in for Ray's job REST API, the one call the KubeRay operator makes to a Ray head for a RayJob:
`GET /api/jobs/<submission id>` on the head Service's dashboard port (8265).

There are no Ray processes in the e2e cluster (kwok runs no containers), so without this KubeRay can never learn
how a job ended: a RayJob whose submitter finished would fail after its grace period. The stand-in answers as Ray
would for the job the submitter pod submitted, from that pod's state, because `ray job submit` (what the
submitter runs) waits for the job and exits 0 exactly when it SUCCEEDED:

  submitter pod Pending -> PENDING;  Running -> RUNNING;  Succeeded -> SUCCEEDED;
  Failed -> FAILED, with the container's termination message (kwok: e2e.ray-gitops.io/message);
  no RayJob with that submission id -> 404, as Ray answers for an unknown job;
  a cluster with Ray token auth (authOptions.mode token) answers only a request carrying its token
  (x-ray-authorization: Bearer <auth_token of the Secret>): 401 without one, 403 with a wrong one, as Ray's.

Scenarios end a job by ending its submitter pod (e2e.kwok_stages); everything after that is KubeRay's own logic.
"""
from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from datetime import datetime

from .procs import free_port

DASHBOARD_PORT = 8265


def _millis(value) -> int:
    if not value:
        return 0
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return int(value.timestamp() * 1000)


def job_info(rayjob: dict, pods: list) -> dict:
    """Ray's JobDetails for the job a RayJob's submitter submitted, from the submitter pods."""
    submission_id = (rayjob.get("status") or {}).get("jobId", "")
    info = {"job_id": submission_id, "submission_id": submission_id, "type": "SUBMISSION",
            "entrypoint": rayjob.get("spec", {}).get("entrypoint", ""), "metadata": {}, "runtime_env": {}}
    pods = sorted(pods, key=lambda p: p.metadata.creation_timestamp)
    phases = [p.status.phase for p in pods]
    if not pods or all(ph == "Pending" for ph in phases):
        return {**info, "status": "PENDING", "message": "Job has not started yet."}
    started = min((p.status.start_time for p in pods if p.status.start_time), default=None)
    info["start_time"] = _millis(started)
    done = [p for p in pods if p.status.phase == "Succeeded"]
    if done:
        return {**info, "status": "SUCCEEDED", "message": "Job finished successfully.",
                "end_time": _millis(_finished(done[-1]))}
    if "Running" in phases or "Pending" in phases:
        return {**info, "status": "RUNNING", "message": "Job is currently running."}
    last = pods[-1]
    terminated = _terminated(last)
    message = (terminated.message if terminated and terminated.message else
               f"Job entrypoint command failed with exit code {terminated.exit_code if terminated else 1}")
    return {**info, "status": "FAILED", "message": message, "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
            "end_time": _millis(_finished(last))}


def _terminated(pod):
    for status in pod.status.container_statuses or []:
        if status.state and status.state.terminated:
            return status.state.terminated
    return None


def _finished(pod):
    terminated = _terminated(pod)
    return terminated.finished_at if terminated else None


class RayJobAPI:
    def __init__(self, env: str, api_client, log: Callable[[str], None]):
        from kubernetes import client
        self.env, self.log = env, log
        self.core, self.custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        self.port = free_port()
        self.server: http.server.ThreadingHTTPServer | None = None

    def route(self, namespace: str, service: str, port: int) -> int | None:
        """ServiceRoutes fallback: a Ray head Service's dashboard port -> this stand-in."""
        return self.port if port == DASHBOARD_PORT and service.endswith("-head-svc") else None

    def start(self) -> None:
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server interface
                status, body = api.answer(self.path, self.headers.get("x-ray-authorization", ""))
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(body, bytes)
                                 else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, name=f"ray-job-api-{self.env}", daemon=True).start()

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()

    def answer(self, path: str, authorization: str = "") -> tuple[int, object]:
        path = path.split("?", 1)[0]
        if path == "/api/gcs_healthz":
            return 200, b"success"
        if not path.startswith("/api/jobs/"):
            return 404, b"not found"
        submission_id = path[len("/api/jobs/"):].strip("/")
        rayjobs = self.custom.list_cluster_custom_object("ray.io", "v1", "rayjobs")["items"]
        if not submission_id:
            return 200, [self._info(j) for j in rayjobs if (j.get("status") or {}).get("jobId")]
        for rayjob in rayjobs:
            if (rayjob.get("status") or {}).get("jobId") == submission_id:
                refused = self._auth_refused(rayjob, authorization)
                if refused:
                    status, body, why = refused
                    self.log(f"ray job api {self.env}: {submission_id} -> {status} ({why})")
                    return status, body.encode()
                info = self._info(rayjob)
                self.log(f"ray job api {self.env}: {submission_id} -> {info['status']}")
                return 200, info
        return 404, f"Job {submission_id} does not exist".encode()

    def _auth_refused(self, rayjob: dict, authorization: str) -> tuple[int, str, str] | None:
        """Ray token auth of the job's cluster: None when the request may pass, else (status, body, why) as Ray
        2.60's dashboard answers (_private/authentication/http_token_authentication.py): 401 without a token,
        403 with a wrong one."""
        import base64

        from kubernetes.client.rest import ApiException
        auth = ((rayjob.get("spec") or {}).get("rayClusterSpec") or {}).get("authOptions") or {}
        if auth.get("mode") != "token":
            return None
        if not authorization:
            return 401, "Unauthorized: Missing authentication token", "no x-ray-authorization header"
        namespace = rayjob["metadata"]["namespace"]
        name = auth.get("secretName") or (rayjob.get("status") or {}).get("rayClusterName", "")
        try:
            data = self.core.read_namespaced_secret(name, namespace).data or {}
        except ApiException:
            return 403, "Forbidden: Invalid authentication token", f"the auth Secret {namespace}/{name} is gone"
        token = base64.b64decode(data.get("auth_token", "")).decode()
        if not token or authorization != f"Bearer {token}":
            return 403, "Forbidden: Invalid authentication token", "a wrong token"
        return None

    def _info(self, rayjob: dict) -> dict:
        meta = rayjob["metadata"]
        pods = self.core.list_namespaced_pod(meta["namespace"],
                                             label_selector=f"batch.kubernetes.io/job-name={meta['name']}").items
        return job_info(rayjob, pods)
