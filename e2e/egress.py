"""The cluster network of the e2e cluster, as the API server and the operators see it.

A real API server reaches webhooks, aggregated APIs and kubelets over the pod network, and an operator pod reaches
Services by their DNS names. Here there is no pod network: each kube-apiserver sends that traffic ("cluster"
egress, EgressSelectorConfiguration) as HTTP CONNECT to this proxy, and the operator processes send plain HTTP to
it (HTTP_PROXY). The proxy maps a Service (by ClusterIP, or by its <name>.<namespace>.svc[.cluster.local] name)
and port to the local process serving it (the training-operator's webhook, the Ray job API stand-in), and loopback
addresses (kwok's kubelet endpoint) to themselves. Anything else is refused with 502, and logged.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

Resolver = Callable[[str, int], "tuple[str, int] | None"]


class ConnectProxy:
    """Listens on a Unix socket (the API server's egress: kube-apiserver v1.34 dials HTTP CONNECT over TCP only with
    TLS, over a Unix socket without) and on a loopback TCP port (HTTP_PROXY of the operator processes)."""

    def __init__(self, name: str, port: int, socket_path: str, resolve: Resolver, log: Callable[[str], None]):
        self.name, self.port, self.socket_path, self.resolve, self.log = name, port, socket_path, resolve, log
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"egress-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError(f"egress proxy {self.name} did not start")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        tcp = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        unix = self.loop.run_until_complete(asyncio.start_unix_server(self._handle, self.socket_path))
        self.ready.set()
        try:
            self.loop.run_forever()
        finally:
            tcp.close()
            unix.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            if method != "CONNECT":
                await self._forward_http(head, reader, writer)
                return
            host, _, port = target.rpartition(":")
            dest = await self.loop.run_in_executor(None, self.resolve, host.strip("[]"), int(port))
            if dest is None:
                self.log(f"egress {self.name}: {target} refused (no local process serves it)")
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            up_reader, up_writer = await asyncio.open_connection(*dest)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.log(f"egress {self.name}: connection failed: {exc}")
        finally:
            writer.close()


    async def _forward_http(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Plain HTTP through the proxy (absolute-form request line), one request at a time: a client may send
        requests for different hosts on one connection."""
        while head:
            request_line, _, rest = head.partition(b"\r\n")
            method, target, version = request_line.decode().split(" ", 2)
            url = urlsplit(target)
            dest = await self.loop.run_in_executor(None, self.resolve, url.hostname or "", url.port or 80)
            if dest is None:
                self.log(f"egress {self.name}: {method} {target} refused (no local process serves it)")
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
            else:
                length = 0
                for line in rest.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                headers = [h for h in rest.split(b"\r\n") if h and not h.lower().startswith(
                    (b"connection:", b"proxy-connection:"))]
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                up_reader, up_writer = await asyncio.open_connection(*dest)
                up_writer.write(f"{method} {path} {version}\r\n".encode() + b"\r\n".join(headers) +
                                b"\r\nConnection: close\r\n\r\n" + body)
                await up_writer.drain()
                writer.write(await up_reader.read())  # the upstream closes after one response
                await writer.drain()
                up_writer.close()
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            except (TimeoutError, asyncio.IncompleteReadError):
                return


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


class ServiceRoutes:
    """(namespace, service, port) -> local port, and ClusterIP -> service from the cluster (cached 5 s)."""

    def __init__(self, list_services: Callable[[], list],
                 fallback: Callable[[str, str, int], int | None] | None = None):
        self.list_services = list_services
        self.fallback = fallback  # (namespace, service, port) -> local port, for routes found on demand
        self.routes: dict[tuple[str, str, int], int] = {}
        self._by_ip: dict[str, tuple[str, str]] = {}
        self._fetched = 0.0
        self.lock = threading.Lock()

    def add(self, namespace: str, service: str, port: int, local_port: int) -> None:
        with self.lock:
            self.routes[(namespace, service, port)] = local_port

    def remove(self, namespace: str, service: str, port: int) -> None:
        with self.lock:
            self.routes.pop((namespace, service, port), None)

    def resolve(self, host: str, port: int):
        if host in ("127.0.0.1", "localhost", "::1"):
            return host, port
        service = self._service(host)
        if service is None:
            return None
        with self.lock:
            local = self.routes.get((*service, port))
        if local is None and self.fallback is not None:
            local = self.fallback(*service, port)
        return ("127.0.0.1", local) if local else None

    def _service(self, host: str) -> tuple[str, str] | None:
        """(namespace, name) of the Service a host names: a ClusterIP, or <name>.<namespace>[.svc[.cluster.local]]."""
        parts = host.split(".")
        if len(parts) >= 2 and not host.replace(".", "").isdigit():
            if parts[2:] in ([], ["svc"], ["svc", "cluster", "local"]):
                return parts[1], parts[0]
            return None
        if time.monotonic() - self._fetched > 5 or host not in self._by_ip:
            self._by_ip = {svc.spec.cluster_ip: (svc.metadata.namespace, svc.metadata.name)
                           for svc in self.list_services() if svc.spec.cluster_ip}
            self._fetched = time.monotonic()
        return self._by_ip.get(host)
