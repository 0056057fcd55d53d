"""Models by name against a stand-in of the hub on loopback (`fakes.fake_hub`), through huggingface_hub's own
downloads and cache: only the file the tag names is fetched, offline serves the cache, a download cut short
leaves nothing that a start would take as whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_hub import FakeHub, point_huggingface_hub, write_tiny_gguf

from tgi.core.loading import ModelNotFoundError, resolve_model

REPO = "tgi-test/Tiny-GGUF"
SPLIT_REPO = "tgi-test/Big-GGUF"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, dict[str, Path]]:
    d = tmp_path_factory.mktemp("repo")
    q8, q4k, f32 = (write_tiny_gguf(d / f"{t}.gguf", t) for t in ("Q8_0", "Q4_K", "F32"))
    readme = d / "README.md"
    readme.write_text("# tiny\n")
    return {
        REPO: {
            "README.md": readme,
            "Tiny-F32.gguf": f32,
            "Tiny-Q4_K_M.gguf": q4k,
            "Tiny-Q8_0.gguf": q8,
            "mmproj-Tiny-F32.gguf": f32,
        },
        SPLIT_REPO: {"Big-Q8_0-00001-of-00002.gguf": q8, "Big-Q8_0-00002-of-00002.gguf": q8},
    }


@pytest.fixture
def hub(files, monkeypatch, tmp_path):
    with FakeHub(files) as hub:
        point_huggingface_hub(monkeypatch, hub.url, tmp_path / "hub")
        yield hub


def _snapshot(cache: Path, repo: str) -> Path:
    return cache / f"models--{repo.replace('/', '--')}" / "snapshots"


def test_a_tag_downloads_only_its_file(hub, files, tmp_path):
    source = resolve_model(f"{REPO}:q8_0")
    assert source.format == "gguf" and source.model_id == f"{REPO}:q8_0"
    assert Path(source.path).name == "Tiny-Q8_0.gguf"
    assert Path(source.path).read_bytes() == files[REPO]["Tiny-Q8_0.gguf"].read_bytes()
    assert str(tmp_path / "hub") in source.path  # huggingface_hub's cache, no store of ours
    assert hub.downloads("GET") == [f"{REPO}/Tiny-Q8_0.gguf"]


def test_no_tag_is_q4_k_m_and_never_the_projector(hub):
    assert Path(resolve_model(REPO).path).name == "Tiny-Q4_K_M.gguf"
    assert hub.downloads("GET") == [f"{REPO}/Tiny-Q4_K_M.gguf"]


def test_an_unknown_tag_lists_the_tags_and_downloads_nothing(hub):
    with pytest.raises(
        ModelNotFoundError, match=r"no GGUF file of quantization 'Q5_K_M'; its tags: F32, Q4_K_M, Q8_0"
    ):
        resolve_model(f"{REPO}:Q5_K_M")
    assert hub.downloads("GET") == [] and hub.downloads("HEAD") == []


def test_a_split_model_is_refused_by_name_before_any_download(hub):
    with pytest.raises(
        ModelNotFoundError, match=r"split in 2 files .* reads one file: merge them with llama"
    ):
        resolve_model(f"{SPLIT_REPO}:Q8_0")
    assert hub.downloads("GET") == []


def test_a_revision_reaches_the_hub(hub):
    assert Path(resolve_model(f"{REPO}:F32", revision="main").path).name == "Tiny-F32.gguf"
    with pytest.raises(ModelNotFoundError, match="revision 'v9' not found"):
        resolve_model(f"{REPO}:F32", revision="v9")
    with pytest.raises(ModelNotFoundError, match=r"no such \(accessible\) model"):
        resolve_model("tgi-test/nothing-here:Q8_0")


def test_offline_serves_the_cache_and_asks_the_hub_nothing(hub, monkeypatch, tmp_path):
    online = resolve_model(f"{REPO}:Q8_0").path
    asked = len(hub.requests)
    point_huggingface_hub(monkeypatch, hub.url, tmp_path / "hub", offline=True)
    assert resolve_model(f"{REPO}:Q8_0").path == online
    assert resolve_model(REPO).path == online  # the default tag among what the cache holds
    with pytest.raises(ModelNotFoundError, match=r"its tags: Q8_0"):  # the cache's tags
        resolve_model(f"{REPO}:Q4_K_M")
    assert len(hub.requests) == asked


def test_a_download_cut_short_leaves_nothing_a_start_would_use(hub, files, tmp_path):
    name = "Tiny-Q4_K_M.gguf"
    size = files[REPO][name].stat().st_size
    hub.cut[name] = size // 2
    with pytest.raises(ModelNotFoundError, match="RemoteProtocolError"):  # after huggingface_hub's retries
        resolve_model(f"{REPO}:Q4_K_M")
    cache = tmp_path / "hub"
    assert not list(_snapshot(cache, REPO).rglob(name))  # no link: nothing to start from
    blobs = [p for p in cache.rglob("blobs/*") if p.is_file()]
    assert all(p.stat().st_size < size or p.name.endswith(".incomplete") for p in blobs)
    del hub.cut[name]
    path = Path(resolve_model(f"{REPO}:Q4_K_M").path)
    assert path.read_bytes() == files[REPO][name].read_bytes()
