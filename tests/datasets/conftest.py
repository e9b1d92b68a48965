"""Shared fixtures: a private data directory and a local HTTP server (no network)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$EQUIBENCH_DATA_DIR`` so tests never touch the user's cache."""
    path = tmp_path / "data"
    monkeypatch.setenv("EQUIBENCH_DATA_DIR", str(path))
    return path


@dataclass
class FileServer:
    """What the local server serves, and what it saw.

    ``files``: URL path -> bytes; ``cut_once``: paths whose next response stops halfway
    and closes the connection; ``ranges``: the Range header of each request (or None).
    """

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    cut_once: set[str] = field(default_factory=set)
    ranges: list[str | None] = field(default_factory=list)


def _handler(state: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """GET with ``Range: bytes=N-`` support (206 / 416), like a CDN."""

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

        def do_GET(self) -> None:
            state.ranges.append(self.headers.get("Range"))
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match:
                start = int(match[1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.path in state.cut_once:
                state.cut_once.discard(self.path)
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    """An HTTP server on 127.0.0.1 (random port) in a background thread."""
    state = FileServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
