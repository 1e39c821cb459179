"""The HTTP(S) server behind ``/metrics`` (and the daemon's ``/healthz``, ``/readyz`` and ``/status``).

Plain HTTP is prometheus-client's own server. For HTTPS, prometheus-client wraps the *listening*
socket, so every TLS handshake runs in its one accept loop: a client that connects and sends nothing
stalls every scrape and the readiness probe. Here each accepted connection is wrapped as it is, and
its handshake runs in that connection's own thread, bounded by a timeout.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

__all__ = ["HANDSHAKE_TIMEOUT_S", "serve_http", "serve_https", "routed"]

HANDSHAKE_TIMEOUT_S = 10.0  # a connection silent this long (handshake or request) is dropped


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: no access log
        pass


class _TLSServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        return self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.do_handshake()  # in this connection's thread, not the accept loop
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a failed handshake (plain HTTP, a port scanner) or a dropped client is not our error


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve_http(app: Any, host: str, port: int) -> Any:
    """Serve the WSGI ``app`` over plain HTTP from a background thread; returns the server."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_Server):
        address_family = family

    server = make_server(host, port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


# A route answers (HTTP status, content type, body).
Route = Callable[[], tuple[int, str, bytes]]


def routed(fallback: Any, routes: Mapping[str, Route]) -> Any:
    """A WSGI app serving ``routes`` by exact path, and every other path from ``fallback`` (the
    metrics app). A route that raises answers 500 with the error's first line."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        route = routes.get(environ.get("PATH_INFO", ""))
        if route is None:
            return fallback(environ, start_response)
        try:
            status, content_type, body = route()
        except Exception as exc:
            status, content_type, body = 500, "text/plain; charset=utf-8", (str(exc).splitlines() or [type(exc).__name__])[0].encode()
        start_response(f"{status} {HTTPStatus(status).phrase}", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    return app


def serve_https(app: Any, host: str, port: int, certfile: str, keyfile: str) -> Any:
    """Serve the WSGI ``app`` over HTTPS only, from a background thread; returns the server
    (``server_port``, ``shutdown()``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_TLSServer):
        address_family = family
        ssl_context = context

    server = make_server(host, port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-https", daemon=True).start()
    return server
