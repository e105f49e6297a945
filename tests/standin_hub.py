"""A stand-in for the Hugging Face hub on 127.0.0.1 that records every request, for tests that
show which commands use the network (none unless allowed) and that gated models, revisions and
tokens go through huggingface_hub as on huggingface.co."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "hf_standin_token"

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


def commit_of(revision: str) -> str:
    return hashlib.sha1(revision.encode()).hexdigest()


@dataclass
class StandinHub:
    """Repos by id: {"acme/tiny": {"main": config}}; `gated` repos answer only to TOKEN."""

    repos: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)   # (method, path, authorization)
    url: str = ""


def _handler(hub: StandinHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Authorization")))
            parts = self.path.split("?")[0].strip("/").split("/")
            # /{org}/{name}/resolve/{revision}/{file}
            if len(parts) != 5 or parts[2] != "resolve":
                return self._error(404, "RepoNotFound")
            repo, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], parts[4]
            if repo not in hub.repos:
                return self._error(401, "RepoNotFound")
            if repo in hub.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._error(401, "GatedRepo")
            revisions = hub.repos[repo]
            if revision not in revisions:
                return self._error(404, "RevisionNotFound")
            if filename != "config.json":
                return self._error(404, "EntryNotFound")
            data = json.dumps(revisions[revision]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", commit_of(revision))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _error(self, status: int, code: str) -> None:
            data = json.dumps({"error": code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

    return Handler


@contextmanager
def standin_hub(hub: StandinHub | None = None) -> Iterator[StandinHub]:
    hub = hub or StandinHub(repos={"acme/tiny": {"main": TINY}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def hub_env(hub: StandinHub, home: str, **extra: str) -> dict[str, str]:
    """The environment of a kvplan subprocess that talks to the stand-in (and to nothing else)."""
    return {"HF_ENDPOINT": hub.url, "HF_HOME": home, "PATH": "", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
            "HF_HUB_DISABLE_TELEMETRY": "1", **extra}
