"""Real HTTP servers on loopback for the submit tests.

``ScriptedServer``: a small ingest server (http.server in a thread) that verifies the DSSE
envelope with ``specschema.verify_envelope``, parses the payload strictly, is idempotent by
submission id like the real one (same bytes -> 200 with the first receipt, other bytes ->
409) and can be scripted to answer the next POSTs with given statuses (503, 429 with
Retry-After, 422 ...). It counts every POST and every stored submission.

``RealServer``: the actual ``specserver`` app (``create_app``) under uvicorn on a free
port with its own DuckDB file.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specschema import SpecSchemaError, parse_submission, verify_envelope
from tests.support.ports import free_port


@dataclass
class Scripted:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


class ScriptedServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.script: list[Scripted] = []
        self.posts: list[bytes] = []
        self.stored: dict[str, bytes] = {}
        self.receipts: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        # GET /healthz answers like specserver's: 200 {"status": "ok", ...}, or this status
        # with the error shape (503: store down), or a plain-text page (not a specatlas server).
        self.health_status = 200
        self.health_plain_text = False
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ---------------------------------------------------------------------
    def then(self, status: int, body: dict[str, Any] | None = None, **headers: str) -> None:
        self.script.append(Scripted(status, body, {k.replace("_", "-"): v
                                                   for k, v in headers.items()}))

    # -- handling ----------------------------------------------------------------------
    def handle(self, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.posts.append(body)
            if self.script:
                step = self.script.pop(0)
                return step.status, step.body or error_body("scripted", f"HTTP {step.status}"), \
                    step.headers
            try:
                verified = verify_envelope(json.loads(body))
                submission = parse_submission(verified.payload)
            except SpecSchemaError as exc:
                status = 401 if exc.code == "bad_signature" else 400
                return status, error_body(exc.code, exc.message), {}
            except ValueError as exc:
                return 400, error_body("bad_json", str(exc)), {}
            submission_id = str(submission.submission_id)
            if submission_id in self.stored:
                if self.stored[submission_id] != verified.payload:
                    return 409, error_body("conflict", "same id, other bytes"), {}
                return 200, self.receipts[submission_id], {}
            self.stored[submission_id] = verified.payload
            receipt = {"submission_id": submission_id, "key_id": verified.key_id,
                       "url": f"{self.url}/submissions/{submission_id}"}
            self.receipts[submission_id] = receipt
            return 201, receipt, {}

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ScriptedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if self.path != "/v1/submissions":
                    status, payload, headers = 404, error_body("not_found", self.path), {}
                else:
                    status, payload, headers = server.handle(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                status = server.health_status if self.path == "/healthz" else 404
                if server.health_plain_text:
                    data, kind = b"<html>hello</html>", "text/html"
                elif status == 200:
                    data = json.dumps({"status": "ok", "store": "duckdb"}).encode()
                    kind = "application/json"
                else:
                    data = json.dumps(error_body("unavailable", f"HTTP {status}")).encode()
                    kind = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class RealServer:
    """specserver's create_app under uvicorn in a thread, on a DuckDB file in tmp."""

    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        import uvicorn

        from specserver.http.app import create_app
        from specserver.settings import ServerSettings

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # its own log key: a key file shared between tests is bound to another test's
        # origin (the URL's port), and its log would answer 500
        settings = ServerSettings(database_url=str(tmp_path / "server.duckdb"),
                                  public_base_url=self.url,
                                  **{"log_key_file": str(tmp_path / "log-key"), **overrides})
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> RealServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("specserver did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
