"""The endpoint an environment's notifications webhook points at (gitops.notifications), in the e2e world: it
records each POST Argo CD's notifications controller makes, one JSON line per request, in a file the scenarios
read. The Authorization header is kept only as its SHA-256 (a scenario compares it with the token it made), so no
credential lands in a file."""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from pathlib import Path

from .procs import free_port


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Receiver:
    def __init__(self, record: Path):
        self.record = record
        self.port = free_port()
        self.server: http.server.ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def start(self) -> None:
        receiver = self
        self.record.touch()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server interface
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode(errors="replace")
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed": raw}
                entry = {"time": time.time(), "path": self.path, "body": body,
                         "authorization_sha256": digest(self.headers.get("Authorization", ""))}
                with receiver.lock, open(receiver.record, "a") as out:
                    out.write(json.dumps(entry, sort_keys=True) + "\n")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, name="notifications-webhook", daemon=True).start()

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()


def received(record: Path) -> list[dict]:
    if not record.is_file():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
