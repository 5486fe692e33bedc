"""A real, fault-injecting OpenAI chat-completions server on 127.0.0.1, for judge tests and the benchmark.

``JudgeServer`` runs a stdlib ``ThreadingHTTPServer`` in a background thread on a free port. Each request to
``POST /v1/chat/completions`` takes the next fault from ``faults`` (a queue; empty means answer normally):

- ``"429"``, ``"500"``, ``"503"``: that HTTP status with an OpenAI-style error body;
- ``"slow"``: sleep ``slow_s`` (longer than the client's timeout) and then answer;
- ``"malformed"``: a reply that is not JSON; ``"truncated"``: JSON cut in the middle (finish ``length``);
- ``"fenced"``: the verdict wrapped in a ```json code fence with prose around it (valid once recovered);
- ``"wrong_value"``: valid JSON whose answer is outside every option;
- ``"reject_schema"``: a 400 for requests that carry ``response_format`` (servers without structured output).

The normal verdict comes from ``responder(request_body) -> str``; ``delay_s`` adds latency to every answer.
``fault_for(request_body) -> fault | None`` (optional) picks a fault from the request itself when the queue
is empty: faults that follow the content, not the arrival order of concurrent requests.
Every request body is kept in ``requests``; ``max_in_flight`` is the most requests it was answering at once.
An answer carries a ``usage`` block (``usage=False``: none) counting whitespace-separated words as tokens:
``prompt_tokens`` over the request's message contents, ``completion_tokens`` over the reply
(``token_count``). Run as a script (``python -m tests.support.judge_server
--delay 0.05``) to serve from a separate process; it prints the port on its first line.

A judge that dies and comes back: ``JudgeProcess`` serves from a child process on a port that stays the same
across restarts. ``exit_after(k)`` (``POST /v1/control {"exit_after": k}``) makes that process exit at once
after its next ``k`` answers (``k`` 0: on the next request, unanswered): every request then in flight is
dropped and the port stops listening, as when a judge server is killed mid-step.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_VERDICT = '{"reasoning": "The response satisfies the requirement.", "answer": 1.0}'

Responder = Callable[[dict[str, Any]], str]
FaultPicker = Callable[[dict[str, Any]], str | None]


def default_responder(body: dict[str, Any]) -> str:
    """A positive verdict in the shape the request's JSON schema asks for (binary yes by default)."""
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    properties = schema.get("properties", {})
    if "criterion_status" in properties:
        return '{"explanation": "The criterion holds.", "criterion_status": "MET"}'
    if "overall_score" in properties:
        return '{"explanation": "Good.", "overall_score": 100}'
    return DEFAULT_VERDICT


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # silence the per-request log
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        if self.path.endswith("/control"):
            self._control(owner, body)
            return
        fault = owner.record(body, self.headers.get("Authorization"))
        owner.count_down(answered=False)
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                self._answer(owner, body, fault)
        finally:
            owner.finished()
        owner.count_down(answered=True)

    def _control(self, owner: JudgeServer, body: dict[str, Any]) -> None:
        """``{"exit_after": k}``: exit after the next ``k`` answers (a served process only)."""
        answers = body.get("exit_after")
        if owner.exit_process is None or not isinstance(answers, int) or answers < 0:
            self._send(400, {"error": {"message": "exit_after needs a served process and a count >= 0"}})
            return
        owner.exit_after = answers
        self._send(200, {"exit_after": answers})

    def _answer(self, owner: JudgeServer, body: dict[str, Any], fault: str | None) -> None:
        if fault in ("429", "500", "503"):
            self._send(
                int(fault), {"error": {"message": f"injected {fault}", "type": "injected", "code": fault}}
            )
            return
        if fault == "reject_schema" and "response_format" in body:
            self._send(400, {"error": {"message": "response_format is not supported", "type": "invalid"}})
            return
        if fault == "slow":
            time.sleep(owner.slow_s)
        if owner.delay_s:
            time.sleep(owner.delay_s)
        content = owner.responder(body)
        finish = "stop"
        if fault == "malformed":
            content = "I think the answer is probably yes."
        elif fault == "truncated":
            content, finish = content[: max(1, len(content) // 2)], "length"
        elif fault == "fenced":
            content = f"Here is my verdict:\n```json\n{content}\n```\nThanks."
        elif fault == "wrong_value":
            content = '{"reasoning": "out of the options", "answer": 7.5}'
        usage = (
            {"prompt_tokens": prompt_tokens(body), "completion_tokens": token_count(content)}
            if owner.usage
            else None
        )
        self._send(200, _completion(body.get("model", "judge"), content, finish, usage))

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def token_count(text: str) -> int:
    """The server's tokens: whitespace-separated words."""
    return len(text.split())


def prompt_tokens(body: dict[str, Any]) -> int:
    """``prompt_tokens`` of a request: the words of every message's content."""
    return sum(token_count(str(m.get("content") or "")) for m in body.get("messages", []))


def _completion(model: str, content: str, finish: str, usage: dict[str, int] | None) -> dict[str, Any]:
    completion: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
    }
    if usage is not None:
        completion["usage"] = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return completion


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    owner: JudgeServer


class JudgeServer:
    """The fault-injecting server; use as a context manager (``with JudgeServer() as server:``)."""

    def __init__(
        self,
        responder: Responder = default_responder,
        delay_s: float = 0.0,
        slow_s: float = 2.0,
        fault_for: FaultPicker | None = None,
        usage: bool = True,
        port: int = 0,
    ):
        self.responder = responder
        """Builds the normal verdict text from a request body."""
        self.delay_s = delay_s
        """Latency added to every answer."""
        self.slow_s = slow_s
        """Extra sleep of a ``slow`` fault."""
        self.fault_for = fault_for
        """Picks a fault from a request body when the queue is empty (None: no fault)."""
        self.usage = usage
        """Whether answers carry a ``usage`` block."""
        self.faults: collections.deque[str] = collections.deque()
        """Faults to inject, one per request, in order."""
        self.requests: list[dict[str, Any]] = []
        """Every request body received."""
        self.authorizations: list[str | None] = []
        """The ``Authorization`` header of each request."""
        self.fault_log: list[str | None] = []
        """The fault applied to each request (None: answered normally)."""
        self.exit_after: int | None = None
        """Answers left before the process exits (0: at the next request; None: never)."""
        self.exit_process: Callable[[], None] | None = None
        """Ends the process at once (set only when serving as a script: ``main``)."""
        self.in_flight = 0
        """Requests received and not yet answered."""
        self.max_in_flight = 0
        """The most requests in flight at once since the start."""
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        """The port bound on 127.0.0.1."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as an OpenAI client's ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(self, *faults: str) -> None:
        """Queue faults for the next requests."""
        with self._lock:
            self.faults.extend(faults)

    def record(self, body: dict[str, Any], authorization: str | None = None) -> str | None:
        """Keep a request, count it in flight and pop the fault it gets."""
        with self._lock:
            self.requests.append(body)
            self.authorizations.append(authorization)
            if self.faults:
                fault: str | None = self.faults.popleft()
            else:
                fault = self.fault_for(body) if self.fault_for is not None else None
            self.fault_log.append(fault)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return fault

    def finished(self) -> None:
        """One request answered (or given up by the client)."""
        with self._lock:
            self.in_flight -= 1

    def count_down(self, answered: bool) -> None:
        """After an answer (``answered``), one fewer left before exiting; exit once none is left."""
        with self._lock:
            if self.exit_after is None or self.exit_process is None:
                return
            if answered:
                self.exit_after = max(0, self.exit_after - 1)
            if self.exit_after == 0:
                self.exit_process()

    def start(self) -> JudgeServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class JudgeProcess:
    """``python -m tests.support.judge_server`` in a child process, on one port across restarts: killed, it
    really stops listening; restarted, it listens again where it did. A context manager that kills it."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        """Latency added to every answer."""
        self.port = 0
        """The port it listens on (chosen by its first start)."""
        self.process: subprocess.Popen[str] | None = None
        """The serving process of the latest start."""

    @property
    def base_url(self) -> str:
        """What to pass as an OpenAI client's ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> JudgeProcess:
        """Start serving (on the port of the first start); returns once it listens."""
        command = [sys.executable, "-m", "tests.support.judge_server", "--delay", str(self.delay_s)]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)],
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.kill()
            raise RuntimeError(f"the judge server did not start on port {self.port} (it printed {line!r})")
        self.port = int(line)
        return self

    def exit_after(self, answers: int) -> None:
        """Make the process exit after its next ``answers`` answers (0: at its next request)."""
        request = urllib.request.Request(
            f"{self.base_url}/control", data=json.dumps({"exit_after": answers}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def kill(self) -> None:
        """Kill the process (if it still runs) and wait until it has exited."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            if self.process.stdout is not None:
                self.process.stdout.close()

    def restart(self) -> None:
        """Kill it if it still runs, then serve again on the same port."""
        self.kill()
        self.start()

    def __enter__(self) -> JudgeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def main() -> None:
    """Serve from this process until killed (or told to exit); the first line printed is the port."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--port", type=int, default=0, help="the port to listen on (0: a free one)")
    args = parser.parse_args()
    server = JudgeServer(delay_s=args.delay, port=args.port)
    server.exit_process = lambda: os._exit(0)  # at once: the answers in flight are dropped, as by a kill
    print(server.port, flush=True)
    server._httpd.serve_forever()


if __name__ == "__main__":
    main()
