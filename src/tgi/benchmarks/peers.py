"""Peers to measure side by side: our own `tgi launch`, llama.cpp's `llama-server` (when its binary is
found), each on a free loopback port and waited for on its health route; and `transformers` itself, offline,
with static batches (what a user without a server would run).

Servers started here are this process's children: `stop()` ends exactly that process (by its id).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tgi.benchmarks.client import RequestResult
from tgi.benchmarks.prompts import BenchPrompt

#: PEERS.md's llama-server settings: 2 threads, 32 slots of 1,024 tokens, continuous batching (default on)
LLAMA_THREADS, LLAMA_CONTEXT, LLAMA_SLOTS = 2, 32768, 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_gguf() -> str:
    """The default model's GGUF (SmolLM2-135M-Instruct, Q4_1), as `tgi launch` would load it."""
    from tgi.core.loading.resolve import default_model_path

    return default_model_path()


@dataclass
class ManagedServer:
    """A server process started by this benchmark, its loopback URL, and where its output goes."""

    name: str
    url: str
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (graceful), then SIGKILL after `timeout` seconds; only this process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def wait_healthy(server: ManagedServer, timeout: float, health: str = "/health") -> None:
    """Poll `GET {url}{health}` until it answers 200; raise with the log's tail if the process exits or
    `timeout` seconds pass."""
    import httpx

    deadline = time.monotonic() + timeout
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise RuntimeError(
                    f"{server.name} exited with status {server.proc.returncode} while starting:\n"
                    f"{server.log_tail()}"
                )
            try:
                if client.get(server.url + health).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"{server.name} was not healthy after {timeout:.0f}s:\n{server.log_tail()}")


def _spawn(name: str, cmd: Sequence[str], port: int, log_dir: str | None) -> ManagedServer:
    folder = Path(log_dir or tempfile.mkdtemp(prefix="tgi-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{name.replace('/', '_')}-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return ManagedServer(name, f"http://127.0.0.1:{port}", proc, log_path)


def start_ours(
    model_id: str | None = None,
    extra_args: Sequence[str] = (),
    port: int | None = None,
    log_dir: str | None = None,
    timeout: float = 600.0,
    name: str = "ours",
) -> ManagedServer:
    """`tgi launch` on 127.0.0.1 and a free port, waited for until `/health` answers 200."""
    port = port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "tgi.server.cli.main",
        "launch",
        "--hostname",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if model_id:
        cmd += ["--model-id", model_id]
    server = _spawn(name, [*cmd, *extra_args], port, log_dir)
    wait_healthy(server, timeout)
    return server


def find_llama_server(path: str | None = None) -> str | None:
    """The `llama-server` binary: `path` if given (must exist), else the one on PATH, else None."""
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"--llama-server {path!r} is not an executable file")
        return path
    return shutil.which("llama-server")


def start_llama_server(
    binary: str,
    gguf: str,
    threads: int = LLAMA_THREADS,
    context: int = LLAMA_CONTEXT,
    slots: int = LLAMA_SLOTS,
    extra_args: Sequence[str] = (),
    port: int | None = None,
    log_dir: str | None = None,
    timeout: float = 600.0,
    name: str = "llama.cpp",
) -> ManagedServer:
    """`llama-server -m GGUF -t 2 -c 32768 -np 32 --host 127.0.0.1 --port P` (PEERS.md), waited for on
    `/health` (503 while loading, 200 when ready)."""
    port = port or free_port()
    cmd = [binary, "-m", gguf, "-t", str(threads), "-c", str(context), "-np", str(slots)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *extra_args]
    server = _spawn(name, cmd, port, log_dir)
    wait_healthy(server, timeout)
    return server


class _StepClock:
    """A `generate` streamer that only notes when each step's tokens are ready (the first `put` is the
    prompt itself)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


class TransformersPeer:
    """`transformers` static batching, offline: `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...,
    dtype=bfloat16)`, left-padded batches of the level's concurrency, `generate(max_new_tokens=N,
    min_new_tokens=N, do_sample=False)`. TTFT is the batch's prefill (its first step); every request of a
    batch ends when the batch does."""

    name = "transformers"

    def __init__(self, gguf: str, dtype: str = "bfloat16", threads: int | None = None) -> None:
        self.gguf = gguf
        self.dtype = dtype
        self.threads = threads
        self.model = None
        self.tokenizer = None

    def load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.threads:
            torch.set_num_threads(self.threads)
        folder, file = os.path.split(os.path.abspath(self.gguf))
        self.tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = getattr(torch, self.dtype)
        kwargs = {}
        try:  # transformers >= 5 keeps GGUF weights quantized unless asked to unpack them into a dense model
            from transformers import GgufConfig

            kwargs["quantization_config"] = GgufConfig(gguf_file=file, dequantize=True)
        except ImportError:  # older transformers always dequantize GGUF weights
            pass
        self.model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=file, dtype=dtype, **kwargs
        ).eval()

    def run(
        self,
        prompts: Sequence[BenchPrompt],
        batch_size: int,
        on_done: Callable[[RequestResult], None] | None = None,
    ) -> tuple[list[RequestResult], float]:
        """Static batches of `batch_size`, one after another; returns the results and the wall time."""
        import torch

        if self.model is None:
            self.load()
        results: list[RequestResult] = []
        t_level = time.perf_counter()
        for i in range(0, len(prompts), batch_size):
            batch = prompts[i : i + batch_size]
            enc = self.tokenizer([p.text for p in batch], return_tensors="pt", padding=True)
            n = max(p.max_tokens for p in batch)  # a static batch runs as long as its longest request
            clock = _StepClock()
            t0 = time.perf_counter()
            try:
                with torch.inference_mode():
                    self.model.generate(
                        **enc,
                        max_new_tokens=n,
                        min_new_tokens=n,
                        do_sample=False,
                        streamer=clock,
                        pad_token_id=self.tokenizer.pad_token_id,
                    )
                error = None
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            t1 = time.perf_counter()
            for row, p in enumerate(batch):
                r = RequestResult(ok=error is None and bool(clock.times), start=t0, end=t1, error=error)
                if r.ok:
                    steps = clock.times[: p.max_tokens]
                    r.ttft = steps[0] - t0
                    r.itls = [b - a for a, b in itertools.pairwise(steps)]
                    r.prompt_tokens = int(enc["attention_mask"][row].sum())
                    r.completion_tokens = len(steps)
                results.append(r)
                if on_done:
                    on_done(r)
        return results, time.perf_counter() - t_level


def main(argv: list[str] | None = None) -> int:
    """`python src/tgi/benchmarks/peers.py ours|llama.cpp`: start a peer server on a free loopback port, print its
    URL, and keep it up until Ctrl-C. To benchmark peers, prefer `tgi benchmark serving --start ours
    --start llama.cpp --start transformers`, which starts and stops them."""
    import argparse
    import shlex

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("peer", choices=("ours", "llama.cpp"))
    p.add_argument("--model-id", default=None, help="model (llama.cpp: a GGUF; default: the default model's)")
    p.add_argument("--llama-server", default=None, help="llama-server binary (default: from PATH)")
    p.add_argument("--threads", type=int, default=LLAMA_THREADS)
    p.add_argument("--args", default="", help="extra arguments for the server (one string)")
    args = p.parse_args(argv)
    extra = shlex.split(args.args)
    if args.peer == "ours":
        server = start_ours(args.model_id, extra)
    else:
        binary = find_llama_server(args.llama_server)
        if binary is None:
            print("llama-server not found (PATH or --llama-server)", file=sys.stderr)
            return 2
        gguf = args.model_id or default_gguf()
        server = start_llama_server(binary, gguf, threads=args.threads, extra_args=extra)
    print(f"{server.name} ready on {server.url} (log: {server.log_path}); Ctrl-C stops it", flush=True)
    try:
        while server.proc.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
