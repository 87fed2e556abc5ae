"""Serve the UI to a browser with textual-serve, behind an unguessable URL.

Run as its own process (``python -m backstep.process.serve``), never inside the user's one:
``ServedUI`` starts it. textual-serve starts one UI process per browser connection (the
``COMMAND`` given as JSON argv) and talks to it over pipes. textual-serve has no
authentication of its own, so every route lives under ``/TOKEN/`` and a middleware answers
anything else, the websocket included, with 403 before any handler (or app process) runs.
The token compares in constant time. The page is our copy of textual-serve's with relative
URLs, so it works unchanged behind a proxy (jupyter-server-proxy, an SSH tunnel).

The process prints one JSON line on stdout once it listens (``{"port": N, "path": "/T/"}``),
or ``{"missing": MODULE}`` when textual-serve cannot be imported,
and ends on SIGTERM, when its stdin reaches end of file (whoever started it is gone), or with
``--once`` (or after SIGUSR1) when the last browser session ends. The token comes in BACKSTEP_SERVE_TOKEN, out
of sight of ``ps``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

ENV_TOKEN = "BACKSTEP_SERVE_TOKEN"
PAGE = Path(__file__).with_name("serve_page")  # the template folder


ENV_ORIGINS = "BACKSTEP_SERVE_ORIGINS"  # more origins allowed to frame the page, space-separated
LOOPBACK_FRAMERS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*",
                    "https://127.0.0.1:*", "https://localhost:*", "https://[::1]:*")


def _origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an absolute http(s) URL, lowercased; None for anything else."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            return None
        return f"{parts.scheme.lower()}://{parts.netloc.lower().rsplit('@', 1)[-1]}"
    except ValueError:
        return None


def configured_origins(environ: Any = None) -> list[str]:
    """The browser origins the person named: that of BACKSTEP_SERVE_URL (the page behind a
    tunnel or proxy) and those in BACKSTEP_SERVE_ORIGINS (a notebook on another host)."""
    from backstep.process.notebook_cell import ENV_URL

    environ = os.environ if environ is None else environ
    named = [environ.get(ENV_URL, "").replace("{port}", "1")]
    named += environ.get(ENV_ORIGINS, "").split()
    found = [_origin_of(url) for url in named]
    return [origin for origin in found if origin]


def headers_for(configured: list[str]) -> dict[str, str]:
    """Sent with every answer: no page but our own, a notebook's on this machine and those
    configured may frame the page (a frame on a hostile page could be clicked through: the UI
    has a console); the URL, which carries the token, is never sent on as a referrer."""
    ancestors = " ".join(["'self'", *LOOPBACK_FRAMERS, *configured])
    return {"Content-Security-Policy": f"frame-ancestors {ancestors}",
            "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store"}


def websocket_origin_ok(request: Any, configured: list[str]) -> bool:
    """Whether the websocket comes from our page: a browser always names the page that opens
    one (``Origin``), and a page elsewhere that learnt the URL must not drive the console.
    Ours is the address the browser asked for (``Host``, or the ``X-Forwarded-Host`` a proxy
    in front of us names), or one configured. No Origin: not a browser (a script, a test)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    origin = origin.strip().lower()
    if origin in configured:
        return True
    own = {request.headers.get("Host", "")}
    own |= {h.strip() for h in request.headers.get("X-Forwarded-Host", "").split(",")}
    netloc = origin.split("://", 1)[-1] if origin.startswith(("http://", "https://")) else None
    return netloc is not None and netloc in {h.lower() for h in own if h}


def guard(token: str, configured: list[str] | None = None) -> Any:
    """The aiohttp middleware: 403 for any path not under ``/TOKEN/`` (and ``/TOKEN``), and for
    a websocket opened by a page not ours (``websocket_origin_ok``); every answer carries
    ``headers_for``."""
    from aiohttp import web

    expected = token.encode()
    configured = configured_origins() if configured is None else configured
    headers = headers_for(configured)

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.raw_path.split("?", 1)[0].split("/", 2)[1]  # "/T/x" -> "T"
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected):
            return web.Response(status=403, text="403: forbidden\n", headers=headers)
        if (request.headers.get("Upgrade", "").lower() == "websocket"
                and not websocket_origin_ok(request, configured)):
            return web.Response(status=403, text="403: not from this page\n", headers=headers)
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # a redirect, a 404: with the same headers
            exc.headers.update(headers)
            raise
        if not response.prepared:  # a websocket's answer went out already
            response.headers.update(headers)
        return response

    return check


def make_server(command: list[str], token: str, title: str, once: bool) -> Any:
    """A textual-serve ``Server`` for ``command`` with every route under ``/TOKEN/``."""
    import aiohttp_jinja2
    import jinja2
    from aiohttp import web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server, to_int

    class TokenServer(Server):
        def __init__(self) -> None:
            super().__init__(shlex.join(command), host="127.0.0.1", title=title)
            self.sessions = 0
            self.services: set[Any] = set()  # the UIs running: ended with the server
            self.once = once
            self.ended = asyncio.Event()

        def finish(self) -> None:
            """From now on, end when the last browser session ends (at once if none is on)."""
            self.once = True
            if self.sessions == 0:
                self.ended.set()

        async def _make_app(self) -> web.Application:
            app = web.Application(middlewares=[guard(token)])
            aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(PAGE), autoescape=True)
            prefix = f"/{token}"
            app.add_routes([
                web.get(prefix, self.to_slash),
                web.get(f"{prefix}/", self.handle_index, name="index"),
                web.get(f"{prefix}/ws", self.handle_websocket, name="websocket"),
                web.get(f"{prefix}/download/{{key}}", self.handle_download, name="download"),
                web.static(f"{prefix}/static", self.statics_path, name="static"),
            ])
            return app

        async def to_slash(self, request: web.Request) -> web.StreamResponse:
            raise web.HTTPFound(f"{token}/")  # relative: right behind any proxy prefix

        @aiohttp_jinja2.template("page.html")
        async def handle_index(self, request: web.Request) -> dict[str, Any]:
            return {"font_size": to_int(request.query.get("fontsize", "16"), 16),
                    "title": self.title}

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            """textual-serve's, with an app process that ends the page when it ends, whether
            or not it said goodbye (a UI refused before it started never does)."""
            websocket = web.WebSocketResponse(heartbeat=15)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            self.sessions += 1
            service = None
            try:
                await websocket.prepare(request)
                service = ClosingAppService(
                    self.command, write_bytes=websocket.send_bytes,
                    write_str=websocket.send_str, close=websocket.close,
                    download_manager=self.download_manager, debug=self.debug)
                self.services.add(service)
                await service.start(width, height)
                await self._process_messages(websocket, service)
            except asyncio.CancelledError:
                await websocket.close()
            except Exception:  # noqa: BLE001 - one broken session must not end the server
                logging.getLogger("backstep.serve").exception("a browser session failed")
            finally:
                if service is not None:
                    await service.stop()
                    self.services.discard(service)
                self.sessions -= 1
                if self.once and self.sessions == 0:
                    self.ended.set()
            return websocket

    class ClosingAppService(AppService):
        """textual-serve's, with the UI run without a shell in between (a shell would outlive
        it) and told who its server is (``process.leash``: it ends if the server dies), and a
        stop that ends the UI however busy or stuck it is."""

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            from backstep.process.leash import ENV_SERVED_BY

            environment = self._build_environment(width=width, height=height)
            environment[ENV_SERVED_BY] = str(os.getpid())
            self._process = process = await asyncio.create_subprocess_exec(
                *shlex.split(self.command), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=environment)
            assert process.stdin is not None
            self._stdin = process.stdin
            return process

        async def run(self) -> None:
            await super().run()
            await self.remote_close()

        async def stop(self) -> None:
            """Ask the UI to quit, as textual-serve does; if it has not ended QUIT_GRACE
            seconds later, SIGTERM, then SIGKILL."""
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(super().stop(), QUIT_GRACE)
            await end(self._process)

    return TokenServer()


QUIT_GRACE = 3.0  # seconds a UI has to quit when its browser goes, before SIGTERM
TERM_GRACE = 2.0  # then SIGKILL


async def end(process: Any) -> None:
    """End a UI process for good: a moment to end on its own, then SIGTERM, then SIGKILL."""
    if process is None:
        return
    for send, grace in ((None, 0.5), (process.terminate, TERM_GRACE), (process.kill, None)):
        if process.returncode is not None:
            return
        if send is not None:
            with contextlib.suppress(ProcessLookupError):
                send()
        try:
            await asyncio.wait_for(process.wait(), grace)
            return
        except asyncio.TimeoutError:
            continue


async def _serve(server: Any, sock: socket.socket, token: str) -> None:
    from aiohttp import web

    app = await server._make_app()
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, shutdown_timeout=2.0)
    await site.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, server.finish)
    loop.add_reader(0, lambda: stop.set() if not os.read(0, 4096) else None)
    print(json.dumps({"port": sock.getsockname()[1], "path": f"/{token}/"}), flush=True)
    os.dup2(2, 1)  # no one reads our stdout from now on: what an app leaves there goes to stderr
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.ended.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    await runner.cleanup()
    # a UI whose session did not wind down with the server's: no child outlives the server
    await asyncio.gather(*(end(service._process) for service in list(server.services)),
                         return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backstep-serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--title", default="backstep")
    parser.add_argument("--once", action="store_true",
                        help="end when the last browser session ends")
    parser.add_argument("command", help="the UI's argv, as a JSON list")
    args = parser.parse_args(argv)
    token = os.environ.pop(ENV_TOKEN, "")
    if len(token) < 16:
        print(f"backstep serve: {ENV_TOKEN} is not set", file=sys.stderr)
        return 2
    try:
        import aiohttp_jinja2  # noqa: F401 - what textual-serve needs, before we listen
        import textual_serve.server  # noqa: F401
    except ImportError as exc:  # the parent says it in one line (``served.MISSING``)
        print(json.dumps({"missing": exc.name or str(exc)}), flush=True)
        return 3
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.create_server((args.host, args.port), family=family)
    server = make_server(json.loads(args.command), token, args.title, args.once)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(server, sock, token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
