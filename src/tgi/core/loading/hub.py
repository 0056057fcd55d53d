"""A model id resolved on the Hugging Face Hub, through huggingface_hub only: its cache (`HF_HOME`,
`HF_HUB_CACHE`), its token (`HF_TOKEN`), its endpoint (`HF_ENDPOINT`), its offline mode (`HF_HUB_OFFLINE`),
its resumable downloads, and revisions.

- `owner/repo`: config, safetensors and tokenizer files, as a snapshot; a repository without them that holds
  GGUF files is read as `owner/repo:` with the default tag (see `gguf_tags`).
- `owner/repo:TAG`: the one GGUF file of that quantization (`gguf_tags.choose` says which), and nothing
  else. A download interrupted leaves no file a later start would take as complete: huggingface_hub writes
  into a `*.incomplete` file in `blobs/` and links it into the snapshot only once whole and of the announced
  size.

Importing this module imports neither huggingface_hub nor torch: it imports no framework itself (its
functions import huggingface_hub, and `resolve` for a snapshot's folder).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from tgi.core.loading.gguf_tags import GGUFChoice, GGUFTagError, choose, split_name
from tgi.core.loading.source import ModelSource

log = logging.getLogger(__name__)

# What a snapshot fetches: config, weights (safetensors only) and every tokenizer file transformers reads.
HUB_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    # a sentence-transformers folder: its modules and their configs say it is a pooling model, and how it pools
    "modules.json",
    "config_sentence_transformers.json",
    "sentence_bert_config.json",
    "*_Pooling/config.json",
    "*_Normalize/config.json",
]


class ModelNotFoundError(FileNotFoundError):
    """The model id is neither a usable local path nor a model the Hugging Face Hub could provide."""


class _NoModelInSnapshot(ModelNotFoundError):
    """The snapshot holds no safetensors model (the repository may hold GGUF files)."""


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` (or transformers' `TRANSFORMERS_OFFLINE`): serve from the cache, ask the hub nothing."""
    from huggingface_hub import constants

    offline = _truthy_env("HF_HUB_OFFLINE") or _truthy_env("TRANSFORMERS_OFFLINE")
    return offline or bool(getattr(constants, "HF_HUB_OFFLINE", False))


@contextlib.contextmanager
def hub_errors(model_id: str, revision: str | None, offline: bool) -> Iterator[None]:
    """huggingface_hub's errors as `ModelNotFoundError`, each saying what was tried."""
    from huggingface_hub import errors as hub_errors

    unreachable = f"{model_id!r} is not a local path and the Hugging Face Hub could not be reached"
    try:
        yield
    except (hub_errors.RepositoryNotFoundError, hub_errors.GatedRepoError) as e:
        # Order matters: these subclass HfHubHTTPError.
        raise ModelNotFoundError(
            f"{model_id!r} is not a local path, and the Hugging Face Hub has no such (accessible) model: {e}"
        ) from e
    except hub_errors.RevisionNotFoundError as e:
        raise ModelNotFoundError(
            f"{model_id!r}: revision {revision!r} not found on the Hugging Face Hub"
        ) from e
    except hub_errors.HFValidationError as e:
        raise ModelNotFoundError(
            f"{model_id!r} is neither an existing local path nor a valid Hugging Face Hub repo id: {e}"
        ) from e
    except (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError) as e:
        reason = "offline mode is on (HF_HUB_OFFLINE=1) and the model is not in the local cache"
        if not offline:
            cause = e.__cause__ or e.__context__
            if cause is not None:
                reason = f"{type(cause).__name__}: {cause}"
            else:
                reason = str(e).splitlines()[0].removeprefix("Got: ") if str(e) else type(e).__name__
        raise ModelNotFoundError(f"{unreachable}: {reason}") from e
    except (OSError, hub_errors.HfHubHTTPError) as e:
        # Connection errors, timeouts, a download cut short (huggingface_hub's consistency check).
        raise ModelNotFoundError(f"{unreachable}: {type(e).__name__}: {e}") from e
    except Exception as e:
        # httpx errors do not subclass OSError; keep the message uniform.
        if type(e).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise ModelNotFoundError(f"{unreachable}: {type(e).__name__}: {e}") from e
        raise


def resolve_hub(model_id: str, revision: str | None, trust_remote_code: bool = False) -> ModelSource:
    """`owner/repo` (safetensors, else its default GGUF) or `owner/repo:TAG` (that GGUF) as local files."""
    try:
        _repo, tag = split_name(model_id)
    except ValueError as e:
        raise ModelNotFoundError(str(e)) from None
    if tag is not None:
        return resolve_gguf(model_id, revision)
    try:
        source = _resolve_snapshot(model_id, revision, trust_remote_code)
        if source.format == "safetensors":
            return source
        # GGUF files cached from this repository: which one the name means is the tag rules' choice
        raise _NoModelInSnapshot(f"{model_id!r}: no safetensors in the snapshot")
    except _NoModelInSnapshot as no_safetensors:
        try:
            return resolve_gguf(model_id, revision)
        except ModelNotFoundError as e:
            if isinstance(e.__cause__, GGUFTagError):  # no GGUF either: the snapshot's reason
                raise no_safetensors from None
            raise


def _resolve_snapshot(model_id: str, revision: str | None, trust_remote_code: bool) -> ModelSource:
    import huggingface_hub

    from tgi.core.loading.resolve import resolve_folder

    offline = hub_offline()
    with hub_errors(model_id, revision, offline):
        folder = huggingface_hub.snapshot_download(
            repo_id=model_id,
            revision=revision,
            # the checkpoint's own code (auto_map) only when it may run
            allow_patterns=HUB_ALLOW_PATTERNS + (["*.py"] if trust_remote_code else []),
            local_files_only=offline,
        )
    try:
        return resolve_folder(model_id, Path(folder))
    except ModelNotFoundError as e:
        raise _NoModelInSnapshot(
            f"{e} (downloaded from the Hugging Face Hub: tgi fetches only config.json, *.safetensors and "
            f"tokenizer files, or one GGUF file: name its quantization as {model_id}:Q4_K_M)"
        ) from None


def repo_listing(repo: str, revision: str | None, offline: bool) -> tuple[list[str], dict[str, int], bool]:
    """(the repository's file paths, their sizes where the hub says them, whether they come from the cache).
    Online, the hub's listing; offline, or with the hub out of reach (as snapshot_download falls back), the
    cached snapshot's files. A repository or revision the hub says does not exist is not looked up."""
    import huggingface_hub
    from huggingface_hub import errors

    online_error: ModelNotFoundError | None = None
    if not offline:
        try:
            with hub_errors(repo, revision, offline):
                info = huggingface_hub.HfApi().model_info(repo, revision=revision, files_metadata=True)
            siblings = info.siblings or []
            return [s.rfilename for s in siblings], {s.rfilename: s.size for s in siblings if s.size}, False
        except ModelNotFoundError as e:
            final = (errors.RevisionNotFoundError, errors.RepositoryNotFoundError, errors.HFValidationError)
            if isinstance(e.__cause__, final):
                raise
            online_error = e
            log.warning("%s; looking in the local cache", e)
    try:
        with hub_errors(repo, revision, True):
            folder = Path(huggingface_hub.snapshot_download(repo, revision=revision, local_files_only=True))
    except ModelNotFoundError:
        if online_error is not None:
            raise online_error from None
        raise
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return files, {f: (folder / f).stat().st_size for f in files}, True


def resolve_gguf(model_id: str, revision: str | None) -> ModelSource:
    """The GGUF file `model_id` (`owner/repo[:TAG]`) names, downloaded unless cached."""
    import huggingface_hub

    repo, tag = split_name(model_id)
    offline = hub_offline()
    files, sizes, cached = repo_listing(repo, revision, offline)
    choice = choose_gguf(model_id, files, tag)
    if choice.mmproj is not None:
        log.warning(
            "%s: the vision projector %s is not downloaded: tgi serves a GGUF model as text only",
            model_id,
            choice.mmproj,
        )
    if len(choice.files) > 1:
        raise ModelNotFoundError(
            f"{model_id!r}: the {choice.tag} model is split in {len(choice.files)} files ({', '.join(choice.files)}) "
            f"and tgi's GGUF loader reads one file: merge them with llama.cpp's `llama-gguf-split --merge "
            f"{choice.primary} merged.gguf` and pass the merged file, or name another quantization"
        )
    filename = choice.primary
    # cached already: huggingface_hub still asks the hub (HEAD) whether the revision moved, unless offline
    hit = isinstance(huggingface_hub.try_to_load_from_cache(repo, filename, revision=revision), str)
    local_only = offline or cached
    size = sizes.get(filename)
    if not hit and not local_only:
        log.info("downloading %s from %s%s", filename, repo, f" ({size / 1e6:.1f} MB)" if size else "")
    t0 = time.perf_counter()
    with hub_errors(model_id, revision, offline):
        path = huggingface_hub.hf_hub_download(
            repo,
            filename,
            revision=revision,
            local_files_only=local_only,
            tqdm_class=_logging_tqdm(filename),
        )
    if not hit and not local_only:
        log.info("downloaded %s in %.1fs", filename, time.perf_counter() - t0)
    return ModelSource(model_id=model_id, format="gguf", path=path, tokenizer_path=path)


def choose_gguf(model_id: str, files: list[str], tag: str | None) -> GGUFChoice:
    """`gguf_tags.choose`, its refusal as `ModelNotFoundError` naming the tags the repository has."""
    repo = split_name(model_id)[0]
    try:
        return choose(files, tag, repo)
    except GGUFTagError as e:
        raise ModelNotFoundError(f"{model_id!r}: {e}") from e


def _logging_tqdm(filename: str):
    """huggingface_hub's progress bar (on the terminal), which also logs each tenth of the file."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    class LoggingTqdm(hub_tqdm):
        def update(self, n=1):
            self._tgi_done = getattr(self, "_tgi_done", 0) + (n or 0)
            total = self.total or 0
            step = int(10 * self._tgi_done / total) if total else 0
            if step > getattr(self, "_tgi_step", 0):
                self._tgi_step = step
                log.info("%s: %d%% of %.1f MB", filename, 10 * step, total / 1e6)
            return super().update(n)

    return LoggingTqdm
