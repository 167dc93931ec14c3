"""Processes of the e2e cluster: started with their output in a log file, restarted with a backoff when they exit
(as a kubelet restarts a container), stopped together. Every pid is also written to the run directory, so
`python -m e2e down` can stop what a dead supervisor left behind."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout: float, interval: float = 0.25, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - polled until the deadline, the last one is reported
            last_error = exc
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    env: dict | None = None
    cwd: Path | None = None
    restart: bool = True
    popen: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    stopped: bool = False
    started_at: float = field(default=0.0)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Supervisor:
    """Starts processes, restarts the ones that exit (backoff 1 s doubling to 30 s), stops them all."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.pid_dir = run_dir / "pids"
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        # a file here named like a process holds it down: once it exits it is not restarted until the file goes
        # (a scenario stops a component, e.g. a worker cluster's API server, and brings it back: hold / release)
        self.held_dir = held_dir(run_dir)
        self.processes: dict[str, Process] = {}
        self.lock = threading.RLock()

    def start(self, name: str, argv: list[str], *, env: dict | None = None, cwd: Path | None = None,
              restart: bool = True) -> Process:
        with self.lock:
            if name in self.processes and self.processes[name].alive():
                raise RuntimeError(f"process {name} already runs")
            proc = Process(name, [str(a) for a in argv], self.run_dir / "logs" / f"{name}.log", env=env, cwd=cwd,
                           restart=restart)
            self.processes[name] = proc
            self._spawn(proc)
            return proc

    def _spawn(self, proc: Process) -> None:
        proc.log.parent.mkdir(parents=True, exist_ok=True)
        with open(proc.log, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(proc.argv)}\n".encode())
            log.flush()
            proc.popen = subprocess.Popen(proc.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=proc.env, cwd=proc.cwd)
        proc.started_at = time.monotonic()
        (self.pid_dir / f"{proc.name}.pid").write_text(str(proc.popen.pid))

    def stop(self, name: str, timeout: float = 10) -> None:
        with self.lock:
            proc = self.processes.pop(name, None)
        if proc is None:
            return
        proc.stopped = True
        _terminate(proc.popen, timeout)
        (self.pid_dir / f"{name}.pid").unlink(missing_ok=True)

    def stop_all(self, timeout: float = 10) -> None:
        # reverse start order: controllers before the API servers, the API servers before etcd
        for name in reversed(list(self.processes)):
            self.stop(name, timeout)

    def check(self) -> list[str]:
        """Restart what exited; returns the lines worth logging."""
        notes = []
        now = time.monotonic()
        with self.lock:
            for proc in list(self.processes.values()):
                if proc.stopped or proc.alive() or not proc.restart:
                    continue
                if (self.held_dir / proc.name).exists():
                    if proc.next_start != -1.0:
                        notes.append(f"{proc.name} exited and is held down ({self.held_dir / proc.name})")
                    proc.next_start = -1.0
                    continue
                if proc.next_start == -1.0:  # released: start again now
                    proc.next_start = now
                if proc.next_start == 0.0:
                    code = proc.popen.returncode if proc.popen else None
                    ran = now - proc.started_at
                    delay = 1.0 if ran > 60 else min(30.0, 2.0 ** min(proc.restarts, 5))
                    proc.next_start = now + delay
                    notes.append(f"{proc.name} exited with {code} after {ran:.0f} s; restarting in {delay:.0f} s "
                                 f"(log: {proc.log})")
                elif now >= proc.next_start:
                    proc.restarts += 1
                    proc.next_start = 0.0
                    self._spawn(proc)
        return notes

    def pids(self) -> list[int]:
        with self.lock:
            return [p.popen.pid for p in self.processes.values() if p.alive()]


def held_dir(run_dir: Path) -> Path:
    return run_dir / "held"


def hold(run_dir: Path, name: str, timeout: float = 10) -> None:
    """Stop the supervised process `name` and keep it down (until release): what a crashed component looks like
    to its clients, connection refused."""
    held = held_dir(run_dir)
    held.mkdir(parents=True, exist_ok=True)
    (held / name).write_text(str(time.time()))
    try:
        pid = int((run_dir / "pids" / f"{name}.pid").read_text())
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return  # not running now (between restarts): held, it will not start again
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def release(run_dir: Path, name: str) -> None:
    """Let the supervisor start `name` again (within its next check, about a second)."""
    (held_dir(run_dir) / name).unlink(missing_ok=True)


def _terminate(popen: subprocess.Popen | None, timeout: float) -> None:
    if popen is None or popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(5)


def kill_recorded(pid_dir: Path, timeout: float = 10) -> list[str]:
    """Stop every process whose pid file is under pid_dir (what a dead supervisor left). Returns their names."""
    names = []
    if not pid_dir.is_dir():
        return names
    entries = []
    for pid_file in sorted(pid_dir.glob("*.pid")):
        try:
            entries.append((pid_file, int(pid_file.read_text().strip())))
        except ValueError:
            pid_file.unlink(missing_ok=True)
    for pid_file, pid in entries:
        if _alive(pid):
            names.append(pid_file.stem)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for pid_file, pid in entries:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pid_file.unlink(missing_ok=True)
    return names


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes (and their children), from /proc."""
    total = 0
    seen = set()
    stack = list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{pid}/task/{pid}/children") as children:
                stack.extend(int(c) for c in children.read().split())
        except (OSError, ValueError):
            continue
    return total


def in_mount_namespace(argv: list[str], binds: list[tuple[str, str]]) -> list[str]:
    """argv run in a private mount namespace with each (host dir, path) bind-mounted, as a container sees its
    volumes. Needs root, or unprivileged user namespaces (then it runs as root inside one)."""
    script = " && ".join(f'mkdir -p "{path}" && mount --bind "{host}" "{path}"' for host, path in binds)
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    return [*unshare, "/bin/sh", "-c", f'{script + " && " if script else ""}exec "$0" "$@"', *argv]
