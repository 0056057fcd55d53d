"""Tensor parallelism over two nodes, each a separate `tgi launch` process on this machine over loopback
(`--nnodes 2`, one rank each): the same greedy tokens as one process; the headless node binds no HTTP port;
a node killed mid-stream ends node 0 with a named cause and the stream with an error event; a node that does
not fit (another world size or model), that has no shared secret or another one, or that never comes, is
refused by name and node 0 exits 1; node 0 without the secret is refused at start. Every node is given the
group's secret (`--dist-secret-file`) unless a test says otherwise."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import launch_zygote
import psutil
import pytest

from tgi.core.testing.tiny_models import save_random_model

pytestmark = pytest.mark.e2e  # real server processes

LIMITS = [
    "--max-batch-total-tokens",
    "2048",
    "--max-total-tokens",
    "2048",
    "--max-batch-prefill-tokens",
    "64",
]
PROMPT = "a b c d e f g"


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


@dataclass
class Node:
    proc: subprocess.Popen | launch_zygote.ZygoteProcess
    log: Path
    port: int  # its --port (node 0 serves on it; a headless node must not)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        """The whole log, to search: a line written at start may sit before pages of c10d's retries."""
        return self.log.read_text()

    def logs(self) -> str:
        """The log's last 6,000 characters, for an assertion's message."""
        return self.log.read_text()[-6000:]

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("multi-node")
    return save_random_model(root / "llama", "llama", max_position_embeddings=2048, init_std=0.08)


def secret_file(folder: Path, name: str = "secret") -> Path:
    """A shared secret as `openssl rand -hex 32 > secret` makes one, readable by its owner only."""
    path = folder / name
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def start(tmp_path):
    """`start(node_rank, model, master_port, *extra, secret=...)`: `tgi launch` as node `node_rank` of two,
    with the group's shared secret unless `secret` names another file or is None; all are killed after the
    test."""
    nodes: list[Node] = []
    shared = secret_file(tmp_path)

    def launch(
        node_rank: int, model: Path, master_port: int, *extra: str, secret: Path | None = shared
    ) -> Node:
        port = free_port()
        extra = (*extra, *(["--dist-secret-file", str(secret)] if secret is not None else []))
        log = tmp_path / f"node{node_rank}-{port}.log"
        argv = [
            "launch", "--hostname", "127.0.0.1", "--port", str(port),
            "--model-id", str(model), "--backend", "cpu", "--dtype", "float32", *LIMITS,
            "--nnodes", "2", "--node-rank", str(node_rank), "--master-addr", "127.0.0.1",
            "--master-port", str(master_port), "--num-shard", "2", *(["--headless"] if node_rank else []), *extra,
        ]  # fmt: skip
        # the zygote's environment (launch_env: without HOSTNAME, PORT, ..., which a container sets and which
        # would make every node a new interpreter) without what would set a node's group by another way
        env = {
            k: v
            for k, v in launch_zygote.launch_env().items()
            if not k.startswith(("LWS_", "MASTER_", "NUM_SHARD", "TGI_DIST"))
        }
        # one log of both streams; a fork of the launch zygote where it can be
        proc = launch_zygote.start(argv, env, str(log), str(log))
        nodes.append(Node(proc, log, port))
        return nodes[-1]

    yield launch
    for node in nodes:
        node.stop(signal.SIGKILL, 10)


def wait_healthy(node: Node, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.proc.poll() is not None:
            pytest.fail(f"node 0 exited with {node.proc.returncode}:\n{node.logs()}")
        try:
            if httpx.get(node.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"node 0 not healthy within {timeout}s:\n{node.logs()}")


def listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def one_process(model: Path, prompts: list[str], n: int) -> list[tuple[list[int], list[float]]]:
    """One process, one rank: the engine's own greedy tokens and their logprobs, for every prompt (one batch)."""
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(model), dtype="float32", max_batch_total_tokens=2048, max_total_tokens=2048)
    )
    try:
        results = engine.generate(prompts, SamplingParams(max_new_tokens=n, logprobs=True))
    finally:
        engine.runner.shutdown()
    return [(list(r.token_ids), [e.logprob for e in r.events]) for r in results]


def greedy_ids(model: Path, n: int) -> list[int]:
    """One process, one rank: the engine's own greedy tokens for `PROMPT`."""
    return one_process(model, [PROMPT], n)[0][0]


def served(node: Node, prompt: str, n: int) -> tuple[list[int], list[float]]:
    """Node 0's greedy tokens for `prompt` over `/generate`, and their logprobs."""
    out = httpx.post(
        node.url + "/generate",
        json={"inputs": prompt, "parameters": {"max_new_tokens": n, "details": True}},
        timeout=60,
    ).json()
    tokens = out["details"]["tokens"]
    return [t["id"] for t in tokens], [t["logprob"] for t in tokens]


def test_two_nodes_give_one_process_tokens_and_the_headless_node_serves_nothing(model, start):
    master = free_port()
    worker = start(1, model, master)
    leader = start(0, model, master)
    reference = greedy_ids(model, 8)  # while the nodes start
    wait_healthy(leader)
    out = httpx.post(
        leader.url + "/generate",
        json={"inputs": PROMPT, "parameters": {"max_new_tokens": 8, "details": True}},
        timeout=60,
    ).json()
    assert [t["id"] for t in out["details"]["tokens"]] == reference
    assert listening(worker.proc.pid) == set(), "the headless node's own process listens"
    with pytest.raises(httpx.HTTPError):
        httpx.get(worker.url + "/health", timeout=2)
    for child in psutil.Process(worker.proc.pid).children(recursive=True):  # its rank: gloo on loopback only
        assert all(ip.startswith("127.") for ip, _ in listening(child.pid)), listening(child.pid)
    assert leader.stop() == 0, leader.logs()
    assert worker.proc.wait(20) == 0, worker.logs()  # node 0's stop ends the group
    assert "node 0 stopped the group" in worker.text()


def test_killing_the_headless_node_mid_stream_ends_node_0_naming_it(model, start):
    master = free_port()
    worker = start(1, model, master)
    leader = start(0, model, master)
    wait_healthy(leader)
    events: list[dict] = []
    body = {"model": "tgi", "prompt": PROMPT, "max_tokens": 1900, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", leader.url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[5:]))
            if len(events) == 3:
                killed = time.monotonic()
                worker.proc.send_signal(signal.SIGKILL)
    assert "error" in events[-1], events[-3:]
    # a liveness bound: node 0 names the node once its heartbeat has been still for HEARTBEAT_TIMEOUT_S (4 s);
    # the log line below, not a clock, says that the heartbeat is how it noticed
    assert leader.proc.wait(60) == 1, leader.logs()
    assert time.monotonic() - killed < 60
    assert "node 1 (" in leader.text() and "no heartbeat" in leader.text(), leader.logs()


def test_a_rank_killed_on_the_headless_node_is_named_by_it_in_node_0s_log(model, start):
    master = free_port()
    worker = start(1, model, master)
    leader = start(0, model, master)
    wait_healthy(leader)
    # the whole log: the line is written at join, and the rank's own start may write pages after it
    pid = int(re.search(r"ranks started \(pids (\d+)\)", worker.text()).group(1))
    rank = psutil.Process(pid)  # a child of the node's fork server
    rank.kill()
    assert worker.proc.wait(15) == 1, worker.logs()
    assert leader.proc.wait(15) == 1, leader.logs()
    named = f"node 1 ({socket.gethostname()}, pid {worker.proc.pid}): shard rank 1 (pid {rank.pid} on node 1) died"
    assert named in leader.text() and "SIGKILL" in leader.text(), leader.logs()


def test_a_node_that_does_not_fit_is_refused_at_join_in_both_logs(model, start, tmp_path):
    """One mismatch end to end (another checkpoint: each node's record carries its own model's fingerprint):
    the refusal reaches both logs. Every compared field (--num-shard, --nnodes, version, backend, model) goes
    through the same comparison, checked one by one in tests/unit/core/parallel/test_node_join.py."""
    master = free_port()
    other = save_random_model(tmp_path / "other", "llama", num_layers=3)
    worker = start(1, other, master)
    why = "its model is"
    leader = start(0, model, master)
    assert leader.proc.wait(90) == 1, leader.logs()
    assert worker.proc.wait(30) == 1, worker.logs()
    assert f"node 1 ({socket.gethostname()}, pid {worker.proc.pid}) refused at join: {why}" in leader.text()
    assert f"refused at join by node 0: {why}" in worker.text()


@pytest.mark.parametrize("secret", ["none", "another"])
def test_a_node_without_the_shared_secret_is_refused_at_start_in_both_logs(model, start, tmp_path, secret):
    master = free_port()
    worker = start(1, model, master, secret=None if secret == "none" else secret_file(tmp_path, "other"))
    leader = start(0, model, master)
    assert leader.proc.wait(90) == 1, leader.logs()
    assert worker.proc.wait(30) == 1, worker.logs()
    named = f"node 1 ({socket.gethostname()}, pid {worker.proc.pid}) refused at join: "
    if secret == "none":
        assert (
            "refused at start: --nnodes 2: the nodes of a group over several hosts must share a secret"
            in worker.text()
        )
        assert "--dist-secret-file PATH or TGI_DIST_SECRET" in worker.text()
        assert named + "it has no shared secret" in leader.text(), leader.logs()
    else:
        assert named + "its join record failed its HMAC check" in leader.text(), leader.logs()
        assert "refused at join: node 0's answer failed its HMAC check" in worker.text(), worker.logs()
    assert "Traceback" not in worker.text()


def test_node_0_without_the_shared_secret_is_refused_at_start(model, start):
    leader = start(0, model, free_port(), secret=None)
    assert leader.proc.wait(90) == 2, leader.logs()  # as any setting refused at start
    assert (
        "must share a secret, and none was given: --dist-secret-file PATH or TGI_DIST_SECRET" in leader.text()
    )


def test_a_node_that_never_joins_is_named_and_node_0_exits(model, start):
    leader = start(0, model, free_port(), "--dist-timeout", "0.5")
    assert leader.proc.wait(90) == 1, leader.logs()
    assert "node(s) 1 did not join within 0.5 s (--dist-timeout)" in leader.text()


def test_the_headless_node_exits_when_node_0_dies(model, start):
    master = free_port()
    worker = start(1, model, master)
    leader = start(0, model, master)
    deadline = time.monotonic() + 90
    while "admitted; ranks started" not in worker.text():  # node 0 dies as the group forms
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.logs()
        time.sleep(0.2)
    leader.proc.send_signal(signal.SIGKILL)
    assert worker.proc.wait(15) == 1, worker.logs()
    assert "node 0 is gone" in worker.text()
