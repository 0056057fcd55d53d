"""Start and stop real `tgi launch` processes on free ports; the engine's own greedy text as reference."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import launch_zygote
from launch_zygote import launch_env

STARTUP_TIMEOUT_S = 300
# Small limits so that the KV pool is quickly sized and the 429 burst is cheap.
LAUNCH_ARGS = [
    "--max-batch-total-tokens",
    "8192",
    "--max-total-tokens",
    "1024",
    "--max-concurrent-requests",
    "4",
    "--enable-prefill-logprobs",  # TGI's opt-in for prompt logprobs (decoder_input_details, echo + logprobs)
]


#: the shared server's flags beside LAUNCH_ARGS: float32 with `--deterministic`'s batch-invariant kernels, so
#: that greedy texts compared with the in-process reference (`SHARED_REFERENCE`) rest on no bfloat16 near-tie
#: and are the same bits whatever the prefix cache, the chunking or the batch beside a request
#: (tests/e2e/conftest.py); requests may bring their own chat template (test_templates_e2e.py; no other test
#: sends one)
SHARED_FLAGS = ("--dtype", "float32", "--deterministic", "--trust-request-chat-template")
#: `reference_for`'s arguments for the shared server's settings
SHARED_REFERENCE = dict(dtype="float32", deterministic=True)

#: the reasoning server's chat template (tests/e2e/conftest.py): DeepSeek-R1's, which opens `<think>`, taught
#: Hermes tool calls when a request has tools (without tools: DeepSeek-R1's prompt, byte for byte)
REASONING_TEMPLATE = (
    "{% if tools %}You may call: {{ tools | tojson }}. Answer a call as "
    '<tool_call>{"name": <name>, "arguments": <object>}</tool_call>.{% endif %}'
    "{% for m in messages %}{% if m['role'] == 'user' %}<|User|>{{ m['content'] }}"
    "{% else %}<|Assistant|>{{ m['content'].split('</think>')[-1] }}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}"
)
#: its admin key (`--enable-model-swap`: test_reasoning_e2e.py asks for a swap that is refused)
REASONING_ADMIN_KEY = "reasoning-admin-key"

#: the keyed server's flags (tests/e2e/conftest.py) beside its `--api-key-file` of `TENANT_KEYS`: an inference
#: key, one running sequence (a second request queues), and a stream whose reader stalls this many seconds is
#: cancelled
KEY = "s3cret"
WRITE_TIMEOUT_S = 2
KEYED_FLAGS = ("--api-key", KEY, "--max-batch-size", "1", "--stream-write-timeout", str(WRITE_TIMEOUT_S))
#: its `--api-key-file`: two tenants (test_tenants_e2e.py)
TENANT_KEYS = "# two tenants\nkey-of-a team-a\nkey-of-b team-b\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen | launch_zygote.ZygoteProcess
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        return self.stdout.read_text() + "\n--- stderr ---\n" + self.stderr.read_text()[-5000:]


def run_command(tmp: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 300):
    """`tgi *argv` to its end (`env`: default `launch_env()`), as `subprocess.run(capture_output=True,
    text=True)` gives it: a fork of the launch zygote where it can be (tests/helpers/launch_zygote.py)."""
    return launch_zygote.run(list(argv), launch_env() if env is None else env, timeout, str(tmp))


def launch(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Server:
    """`tgi launch` with the e2e limits and `extra` flags; `env`: variables added to this process's."""
    port = free_port()
    out, err = tmp / f"server-{port}.out", tmp / f"server-{port}.err"
    argv = ["launch", "--hostname", "127.0.0.1", "--port", str(port), *LAUNCH_ARGS, *extra]
    # a fork of the launch zygote where the environment is its own, else a new interpreter
    proc = launch_zygote.start(argv, {**launch_env(), **(env or {})}, str(out), str(err))
    server = Server(f"http://127.0.0.1:{port}", proc, out, err)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{server.logs()}")
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop(server)
    raise RuntimeError(f"the server did not answer /health within {STARTUP_TIMEOUT_S}s:\n{server.logs()}")


def stop(server: Server, timeout: float = 60) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    return server.proc.returncode


_REFERENCES: dict = {}


def reference_for(dtype: str | None, deterministic: bool = False):
    """The engine's own greedy text for a prompt (text or token ids), in this process, in `dtype`
    (None: the backend's default, as the server uses without --dtype), with `--deterministic`'s kernels when
    `deterministic`. One engine per setting."""
    key = (dtype, deterministic)
    if key in _REFERENCES:
        return _REFERENCES[key]
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    engine = LLMEngine.from_config(
        EngineConfig(
            max_batch_total_tokens=8192, max_total_tokens=1024, dtype=dtype, deterministic=deterministic
        )
    )

    def greedy(prompt: str | list[int], max_new_tokens: int) -> str:
        [result] = engine.generate([prompt], SamplingParams(max_new_tokens=max_new_tokens))
        return result.generated_text

    greedy.tokenizer = engine.tokenizer
    _REFERENCES[key] = greedy
    return greedy
