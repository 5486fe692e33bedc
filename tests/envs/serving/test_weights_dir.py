"""Full weights to servers through a folder they can read (``rollout.weights_dir``), against scripted vLLM
control routes over real HTTP: the file is written where the run says, it exists while each server loads
it and is gone after, and every server is paused, reloaded, reset, stamped and resumed in that order."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envs.backends.base import OneProcessWeights  # noqa: E402
from envs.backends.vllm import VllmBackend  # noqa: E402


class ControlRoutes:
    """A scripted vLLM server's weight-update routes: records each call (route, and for a reload the file
    and whether it existed then)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        routes = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                route = self.path.split("?")[0]
                answer: Any = None
                if route == "/collective_rpc":
                    path = body["args"][0]
                    routes.calls.append((route, (path, Path(path).is_file())))
                    answer = {"results": [{"seconds": 0.01}]}
                else:
                    routes.calls.append((route, body))
                data = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_each_server_loads_the_weights_from_the_folder_the_run_names(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    shared = tmp_path / "shared"  # stands in for a filesystem the servers' machines mount
    shared.mkdir()
    servers = [ControlRoutes(), ControlRoutes()]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = VllmBackend([s.url for s in servers], str(tiny_model_dir), weights_dir=str(shared))
    try:
        await backend.sync_weights(OneProcessWeights(model), 3)
    finally:
        await backend.close()
        for s in servers:
            s.close()
    for server in servers:
        routes = [route for route, _ in server.calls]
        order = ["/pause", "/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/resume"]
        assert routes == order
        (path, existed) = dict(server.calls)["/collective_rpc"]
        assert Path(path).is_relative_to(shared) and existed  # written there, read while it was there
        assert dict(server.calls)["/update_weight_version"] == {"new_version": "step-3"}
    assert list(shared.iterdir()) == []  # removed once every server loaded it
    assert backend.sync_stats["sync/bytes"] > 0 and backend.weight_version == 3
