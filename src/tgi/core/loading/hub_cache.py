"""The models in huggingface_hub's cache (`HF_HOME`, `HF_HUB_CACHE`): the one store, read and pruned through
its cache API (`scan_cache_dir`, `delete_files`, `delete_revisions`), never a second store of ours.

A cached model is named as `tgi launch --model-id` takes it: `owner/repo:TAG` for each GGUF model file (a split
one counts once, with all its parts), `owner/repo` for a snapshot of safetensors weights. It imports no framework itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tgi.core.loading.gguf_tags import is_model_file, split_info, split_name
from tgi.core.loading.hub import ModelNotFoundError


@dataclass(frozen=True)
class CachedModel:
    name: str  # owner/repo:TAG (a GGUF file) or owner/repo (safetensors)
    repo: str
    format: str  # "gguf" | "safetensors"
    quantization: str  # the GGUF file's tag; "-" for safetensors (their dtype is the checkpoint's)
    size: int  # bytes on disk, each blob once
    files: tuple[str, ...]  # the snapshot paths (a split GGUF's parts in order)
    revisions: tuple[str, ...]  # the commits it is cached under
    refs: tuple[str, ...]  # the branches or tags pointing there (e.g. main)


@dataclass(frozen=True)
class CacheReport:
    models: list[CachedModel]
    incomplete_files: int  # downloads interrupted, left as `*.incomplete` in blobs/ (never used as a model)
    incomplete_bytes: int


def _scan():
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        # the cache folder as it is now: scan_cache_dir's own default is the one its module read when it was
        # first imported, so a process that points huggingface_hub at another cache later (a second
        # `--huggingface-hub-cache` in one process) would scan the first
        return scan_cache_dir(constants.HF_HUB_CACHE)
    except CacheNotFound:
        return None


def _entries(info) -> dict[str, tuple[CachedModel, list]]:
    """name -> (the model, huggingface_hub's CachedFileInfo of its files)."""
    groups: dict[str, dict] = {}
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for revision in sorted(repo.revisions, key=lambda r: r.commit_hash):
            for f in revision.files:
                rel = Path(f.file_path).relative_to(revision.snapshot_path).as_posix()
                split = split_info(rel)
                if split is not None and is_model_file(rel):
                    tag = split.tag or Path(split.prefix).name
                    name, fmt, quant = f"{repo.repo_id}:{tag}", "gguf", split.tag or "-"
                    order = (split.prefix, split.index)
                elif rel.endswith((".safetensors", "config.json")) or "tokenizer" in rel:
                    name, fmt, quant, order = repo.repo_id, "safetensors", "-", (rel, 0)
                else:
                    continue
                g = groups.setdefault(
                    name, {"repo": repo.repo_id, "format": fmt, "quant": quant, "files": [], "revs": {}}
                )
                g["files"].append((order, f))
                g["revs"][revision.commit_hash] = tuple(sorted(revision.refs))
    out = {}
    for name, g in groups.items():
        if g["format"] == "safetensors" and not any(
            f.file_name.endswith(".safetensors") for _, f in g["files"]
        ):
            continue  # a snapshot of tokenizer or config files only (e.g. what a GGUF repository offered)
        files = [f for _, f in sorted(g["files"], key=lambda item: item[0])]
        blobs = {f.blob_path: f.size_on_disk for f in files}
        model = CachedModel(
            name=name,
            repo=g["repo"],
            format=g["format"],
            quantization=g["quant"],
            size=sum(blobs.values()),
            files=tuple(
                str(f.file_path)
                for f in files
                if g["format"] == "gguf" or f.file_name.endswith(".safetensors")
            ),
            revisions=tuple(g["revs"]),
            refs=tuple(sorted({ref for refs in g["revs"].values() for ref in refs})),
        )
        out[name] = (model, files)
    return out


def cached_models() -> CacheReport:
    """Every model in the cache, sorted by name, and the interrupted downloads left there."""
    info = _scan()
    if info is None:
        return CacheReport([], 0, 0)
    incomplete = list(getattr(info, "incomplete_files", ()))
    models = sorted((model for model, _ in _entries(info).values()), key=lambda m: m.name)
    return CacheReport(models, len(incomplete), sum(f.size_on_disk for f in incomplete))


def find_cached(name: str) -> CachedModel:
    """The cached model `name`; `ModelNotFoundError` listing the cached names when there is none."""
    return _find(name)[0]


def _find(name: str):
    split_name(name)  # a malformed name says so
    info = _scan()
    entries = _entries(info) if info is not None else {}
    if name in entries:
        return entries[name][0], entries[name][1], info
    _repo, tag = split_name(name)
    matches = [e for n, e in entries.items() if tag is not None and n.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0][0], matches[0][1], info
    cached = ", ".join(sorted(entries)) or "none"
    raise ModelNotFoundError(f"{name!r} is not in the Hugging Face cache (cached: {cached})")


def remove_cached(name: str) -> tuple[CachedModel, int]:
    """Delete `owner/repo:TAG`'s files (`delete_files`: a blob another cached file shares stays), or all of
    `owner/repo`'s cached revisions (`delete_revisions`, every quantization of it with them). Returns the
    model and the bytes freed."""
    repo, tag = split_name(name)
    info = _scan()
    if tag is None and info is not None:
        revisions = [
            r.commit_hash
            for c in info.repos
            if c.repo_id == repo and c.repo_type == "model"
            for r in c.revisions
        ]
        if revisions:
            model = CachedModel(name, repo, "-", "-", 0, (), tuple(revisions), ())
            strategy = info.delete_revisions(*revisions)
            freed = strategy.expected_freed_size
            strategy.execute()
            return model, freed
    model, files, info = _find(name)
    strategy = info.delete_files(*files)
    freed = strategy.expected_freed_size
    strategy.execute()
    return model, freed
