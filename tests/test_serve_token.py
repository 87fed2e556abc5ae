"""The served UI's URL is its key: without the token, every request and the websocket get
403 before any UI process starts; with it, the page, its files and the websocket work."""

from __future__ import annotations

import base64
import http.client
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backstep.process.notebook_cell import browser_url
from backstep.process.served import ServedUI, serve_address, ui_command

TRACE = str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")


def get(ui: ServedUI, path: str, websocket: bool = False) -> int:
    headers = {}
    if websocket:
        headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()}
    connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def ui_processes(ui: ServedUI) -> list[str]:
    """Every process the server has started and that still runs (a UI, or its shell)."""
    assert ui.process is not None
    rows = [line.split(None, 2) for line in subprocess.run(
        ["ps", "-e", "-o", "ppid=,pid=,args="], capture_output=True, text=True,
        check=True).stdout.splitlines()]
    found, parents = [], {str(ui.process.pid)}
    while True:
        more = [row for row in rows if row[0] in parents and row[1] not in parents]
        if not more:
            return found
        found += [row[2] for row in more]
        parents |= {row[1] for row in more}


def test_the_url_is_unguessable_and_on_loopback(served: ServedUI) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{32}/", served.url)
    assert served.exposure() is None
    assert ServedUI(["x"]).token != served.token


@pytest.mark.parametrize("path", ["/", "/ws", "/static/js/textual.js", "/favicon.ico",
                                  "/download/x", "/{wrong}/", "/{wrong}/ws", "/{short}/",
                                  "/{token}x/", "/x/../{token}/"])
def test_without_the_token_everything_is_refused(served: ServedUI, path: str) -> None:
    wrong = "A" * len(served.token)
    path = path.format(wrong=wrong, short=served.token[:-1], token=served.token)
    assert get(served, path) == 403
    assert get(served, path, websocket=True) == 403  # no websocket, no UI process
    assert ui_processes(served) == []


def test_with_the_token_the_page_files_and_websocket_work(served: ServedUI) -> None:
    token = served.token
    assert get(served, f"/{token}/") == 200
    assert get(served, f"/{token}/static/js/textual.js") == 200
    assert get(served, f"/{token}") == 302  # to the page, relatively (right behind a proxy)
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    connection.request("GET", f"/{token}/ws?width=80&height=24", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()})
    assert connection.getresponse().status == 101  # the check above is not vacuous
    connection.close()


def test_the_page_uses_relative_urls(served: ServedUI) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    connection.request("GET", f"/{served.token}/")
    page = connection.getresponse().read().decode()
    connection.close()
    assert 'src="static/js/textual.js"' in page
    assert "127.0.0.1" not in page and served.token not in page  # nothing absolute to leak


def test_the_server_ends_with_whoever_started_it() -> None:
    ui = ServedUI(ui_command(["show", TRACE]))
    ui.start()
    assert ui.process is not None and ui.process.stdin is not None
    ui.process.stdin.close()  # what the death of its parent looks like to it
    assert ui.process.wait(15) == 0
    ui.stop()


def test_a_missing_token_is_refused_at_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != "BACKSTEP_SERVE_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "backstep.process.serve", '["true"]'],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "BACKSTEP_SERVE_TOKEN" in done.stderr


def test_where_the_browser_finds_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BACKSTEP_SERVE_URL", raising=False)
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    assert browser_url(8123, "/T/") == "http://127.0.0.1:8123/T/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    assert browser_url(8123, "/T/") == "/user/ada/proxy/8123/T/"  # jupyter-server-proxy
    monkeypatch.setenv("BACKSTEP_SERVE_URL", "http://localhost:9000/")
    assert browser_url(8123, "/T/") == "http://localhost:9000/T/"


def test_serve_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BACKSTEP_SERVE", raising=False)
    assert serve_address(None) == ("127.0.0.1", 0)
    assert serve_address("0.0.0.0:8765") == ("0.0.0.0", 8765)
    assert ServedUI(["x"], ("0.0.0.0", 8765)).exposure() is not None
    with pytest.raises(ValueError):
        serve_address("nowhere")


def test_the_page_escapes_its_title() -> None:
    ui = ServedUI(ui_command(["show", TRACE]), title="<script>alert(1)</script>")
    ui.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
        connection.request("GET", ui.path)
        page = connection.getresponse().read().decode()
        connection.close()
    finally:
        ui.stop()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
