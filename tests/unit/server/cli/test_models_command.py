"""`tgi models pull|list|show|rm` on huggingface_hub's cache, filled from a stand-in of the hub on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_hub import FakeHub, point_huggingface_hub, write_tiny_gguf

from tgi.server.cli.main import main

REPO = "tgi-test/Tiny-GGUF"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, dict[str, Path]]:
    d = tmp_path_factory.mktemp("repo")
    return {
        REPO: {
            f"Tiny-{t if t != 'Q4_K' else 'Q4_K_M'}.gguf": write_tiny_gguf(d / f"{t}.gguf", t)
            for t in ("Q8_0", "Q4_K")
        }
    }


@pytest.fixture
def hub(files, monkeypatch, tmp_path):
    with FakeHub(files) as hub:
        point_huggingface_hub(monkeypatch, hub.url, tmp_path / "hub")
        yield hub


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_pull_list_show_rm(hub, files, capsys, tmp_path):
    code, out, err = _run(capsys, "pull", f"{REPO}:Q8_0")
    assert code == 0 and "Tiny-Q8_0.gguf" in out and "downloading Tiny-Q8_0.gguf" in err
    assert hub.downloads("GET") == [f"{REPO}/Tiny-Q8_0.gguf"]
    assert _run(capsys, "pull", REPO)[0] == 0  # the default tag: Q4_K_M

    code, out, _ = _run(capsys, "list")
    size = files[REPO]["Tiny-Q8_0.gguf"].stat().st_size
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "QUANTIZATION", "SIZE"]
    assert [f"{REPO}:Q8_0", "Q8_0", f"{size / 1000:.1f}", "KB"] in rows
    assert [r[:2] for r in rows[1:]] == [[f"{REPO}:Q4_K_M", "Q4_K_M"], [f"{REPO}:Q8_0", "Q8_0"]]

    code, out, _ = _run(capsys, "show", f"{REPO}:q8_0")  # as the tag is matched: any case
    fields = dict(line.split(None, 1) for line in out.splitlines() if not line.startswith("context"))
    assert code == 0 and fields["name"] == f"{REPO}:Q8_0" and fields["architecture"] == "llama"
    assert fields["size"].endswith(f"({size} bytes)") and "(main)" in fields["revision"]
    assert Path(fields["file"]).name == "Tiny-Q8_0.gguf" and str(tmp_path / "hub") in fields["file"]

    code, out, _ = _run(capsys, "rm", f"{REPO}:Q8_0")
    assert code == 0 and out.startswith(f"deleted {REPO}:Q8_0")
    code, out, _ = _run(capsys, "list")
    assert f"{REPO}:Q8_0" not in out and f"{REPO}:Q4_K_M" in out

    code, _, err = _run(capsys, "show", f"{REPO}:Q8_0")
    assert code == 1 and f"is not in the Hugging Face cache (cached: {REPO}:Q4_K_M)" in err
    code, out, _ = _run(capsys, "rm", REPO)  # the whole repository
    assert code == 0 and _run(capsys, "list")[1].splitlines() == ["NAME  QUANTIZATION  SIZE"]


def test_pull_refuses_what_it_cannot_fetch(hub, capsys):
    code, _, err = _run(capsys, "pull", f"{REPO}:Q2_K")
    assert code == 1 and "its tags: Q8_0, Q4_K_M" in err
    code, _, err = _run(capsys, "pull", "./models/local.gguf")
    assert code == 2 and "is a path" in err
    assert hub.downloads("GET") == []


def test_an_empty_cache_lists_nothing(monkeypatch, tmp_path, capsys):
    point_huggingface_hub(monkeypatch, "http://127.0.0.1:9", tmp_path / "none")
    assert _run(capsys, "list") == (0, "NAME  QUANTIZATION  SIZE\n", "")
