"""A stand-in for the Hugging Face Hub's HTTP API on loopback, answering what huggingface_hub asks (read in its
source: `HfApi.model_info`, `list_repo_tree`, `hf_hub_download`'s HEAD then GET with `Range`), so that
`HF_ENDPOINT=hub.url` downloads through huggingface_hub's own code and cache:

- `GET /api/models/{repo}[/revision/{rev}]`: the model's info, `sha` and `siblings` (with sizes);
- `GET /api/models/{repo}/tree/{rev}`: its files (snapshot_download's listing);
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: the file, with `X-Repo-Commit`, `ETag` (its sha256, as the hub's
  LFS files), `Content-Length` and `Accept-Ranges`; a `Range: bytes=N-` is answered 206.

Unknown repositories, revisions and files are 404s with the `X-Error-Code` the hub sends. `cut[path] = n`
makes every GET of that file stop at byte `n` with its full length announced, then close the connection (a
download cut short). Every request is kept in `requests` as (method, path).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 20


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, Path]]) -> None:
        self.repos = repos  # repo id -> {path in the repo: local file with its bytes}
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.requests: list[tuple[str, str]] = []
        self.cut: dict[str, int] = {}
        self._etags: dict[Path, str] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self, method: str = "GET") -> list[str]:
        """The files fetched (`GET`) or asked about (`HEAD`), in order: 'repo/path'."""
        out = []
        for m, path in self.requests:
            found = re.match(r"^/(.+?/.+?)/resolve/[^/]+/(.+)$", path)
            if m == method and found:
                out.append(f"{found.group(1)}/{found.group(2)}")
        return out

    # -- answers
    def _etag(self, path: Path) -> str:
        if path not in self._etags:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(CHUNK), b""):
                    digest.update(block)
            self._etags[path] = digest.hexdigest()
        return self._etags[path]

    def _json(self, h: BaseHTTPRequestHandler, body: object, status: int = 200) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _missing(self, h: BaseHTTPRequestHandler, code: str, body: bool) -> None:
        data = json.dumps({"error": code}).encode() if body else b""
        h.send_response(404)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        self.requests.append((h.command, path))
        api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+))?$", path)
        if api:
            repo, kind, rev = api.groups()
            if repo not in self.repos:
                return self._missing(h, "RepoNotFound", body)
            if rev not in (None, "main", self.commits[repo]):
                return self._missing(h, "RevisionNotFound", body)
            files = self.repos[repo]
            if kind == "tree":
                tree = [
                    {"type": "file", "path": p, "size": f.stat().st_size, "oid": "0" * 40}
                    for p, f in files.items()
                ]
                return self._json(h, tree)
            siblings = [{"rfilename": p, "size": f.stat().st_size} for p, f in files.items()]
            return self._json(h, {"id": repo, "sha": self.commits[repo], "siblings": siblings})
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if not resolve:
            return self._missing(h, "RepoNotFound", body)
        repo, rev, name = resolve.groups()
        if repo not in self.repos:
            return self._missing(h, "RepoNotFound", body)
        if rev not in ("main", self.commits[repo]):
            return self._missing(h, "RevisionNotFound", body)
        if name not in self.repos[repo]:
            return self._missing(h, "EntryNotFound", body)
        self._file(h, repo, name, body)

    def _file(self, h: BaseHTTPRequestHandler, repo: str, name: str, body: bool) -> None:
        local = self.repos[repo][name]
        size = local.stat().st_size
        start = 0
        ranged = re.match(r"^bytes=(\d+)-$", h.headers.get("Range", ""))
        if ranged and body:
            start = int(ranged.group(1))
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", self.commits[repo])
        h.send_header("ETag", f'"{self._etag(local)}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(size - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        h.end_headers()
        if not body:
            return
        stop = min(size, self.cut.get(name, size))
        with open(local, "rb") as f:
            f.seek(start)
            at = start
            while at < stop:
                block = f.read(min(CHUNK, stop - at))
                h.wfile.write(block)
                at += len(block)
        if stop < size:  # cut short: what was announced never comes
            h.wfile.flush()
            h.close_connection = True


def point_huggingface_hub(monkeypatch, url: str, cache: Path, offline: bool = False) -> None:
    """Point this process's huggingface_hub at `url` and the cache folder `cache` (what `HF_ENDPOINT` and
    `HF_HUB_CACHE` do for a new process: its constants are read at import), online or offline."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HUGGINGFACE_HUB_CACHE", str(cache))
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)


def write_tiny_gguf(path: Path, qtype: str) -> Path:
    """A small GGUF file whose one weight (256 x 256) is stored as `qtype` (F32, Q8_0, Q4_0, or Q4_K with
    `core.testing.kquants`), written by the `gguf` package: an honest file of that quantization, not a model
    that loads."""
    import gguf
    import numpy as np
    from gguf.quants import quantize

    from tgi.core.testing.kquants import quantize_k

    weight = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tiny {qtype}")
    if qtype == "F32":
        writer.add_tensor("token_embd.weight", weight)
    else:
        kind = gguf.GGMLQuantizationType[qtype]
        data = quantize_k(weight, qtype) if qtype == "Q4_K" else quantize(weight, kind)
        writer.add_tensor("token_embd.weight", data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
