"""`tgi models pull|list|rm|show`: the models in huggingface_hub's cache, by the names `tgi launch --model-id`
takes (`owner/repo:TAG` for a GGUF file, `owner/repo` for safetensors), managed without starting a server.
The store is huggingface_hub's cache (`HF_HOME`, `HF_HUB_CACHE`, or `--huggingface-hub-cache`); `HF_TOKEN`,
`HF_ENDPOINT` and `HF_HUB_OFFLINE` apply as to `tgi launch`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator

from tgi.server.flags.launcher_actions import apply_hub_cache
from tgi.server.flags.parsers import env


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


@contextlib.contextmanager
def _progress_to_stderr() -> Iterator[None]:
    """The download's progress lines (core's loading logs them) on standard error, while the block runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    hub_log = logging.getLogger("tgi.core.loading")
    level = hub_log.level
    hub_log.addHandler(handler)
    hub_log.setLevel(logging.INFO)
    try:
        yield
    finally:
        hub_log.removeHandler(handler)
        hub_log.setLevel(level)


def _cmd_pull(args: argparse.Namespace) -> int:
    from tgi.core.loading import ModelNotFoundError, resolve_model
    from tgi.core.loading.resolve import looks_like_path

    if looks_like_path(args.name):
        print(
            f"error: {args.name!r} is a path: `tgi models pull` takes a hub name (owner/repo[:TAG])",
            file=sys.stderr,
        )
        return 2
    try:
        with _progress_to_stderr():
            source = resolve_model(args.name, args.revision)
    except ModelNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name}: {source.format} at {source.path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from tgi.core.loading.hub_cache import cached_models

    report = cached_models()
    rows = [("NAME", "QUANTIZATION", "SIZE")]
    rows += [(m.name, m.quantization, _size(m.size)) for m in report.models]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if report.incomplete_files:
        print(
            f"({report.incomplete_files} interrupted download(s), {_size(report.incomplete_bytes)}, in the cache's "
            "blobs/ as *.incomplete: never served; the next pull of that model downloads it whole)"
        )
    return 0


def _cmd_rm(args: argparse.Namespace) -> int:
    from tgi.core.loading import ModelNotFoundError
    from tgi.core.loading.hub_cache import remove_cached

    try:
        _model, freed = remove_cached(args.name)
    except (ModelNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"deleted {args.name} ({_size(freed)} freed)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from tgi.core.loading import ModelNotFoundError
    from tgi.core.loading.hub_cache import find_cached

    try:
        model = find_cached(args.name)
    except (ModelNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    lines = [
        ("name", model.name),
        ("repository", model.repo),
        ("format", model.format),
        ("quantization", model.quantization),
        ("size", f"{_size(model.size)} ({model.size} bytes)"),
        ("revision", ", ".join(model.revisions) + (f" ({', '.join(model.refs)})" if model.refs else "")),
    ]
    lines += [("file", f) for f in model.files]
    if model.format == "gguf" and model.files:
        lines += _gguf_facts(model.files[0])
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")
    return 0


def _gguf_facts(path: str) -> list[tuple[str, str]]:
    from tgi.core.loading.gguf_file import GGUFFile

    gguf = GGUFFile(path)
    meta = gguf.metadata
    arch = str(meta.get("general.architecture", "?"))
    params = 0
    for t in gguf.tensors:
        count = 1
        for d in t.shape:
            count *= int(d)
        params += count
    facts = [("architecture", arch), ("parameters", f"{params / 1e6:.0f}M")]
    if f"{arch}.context_length" in meta:
        facts.append(("context length", str(meta[f"{arch}.context_length"])))
    return facts


def add_models_command(sub) -> None:
    """`tgi models pull|list|rm|show` under the `tgi` command's subparsers `sub`."""
    p = sub.add_parser("models", help="pull, list, show and delete models in the Hugging Face cache")
    p.add_argument(
        "--huggingface-hub-cache",
        default=env("HUGGINGFACE_HUB_CACHE", "HF_HUB_CACHE"),
        help="the cache folder (default: huggingface_hub's, under HF_HOME) [env: HUGGINGFACE_HUB_CACHE, HF_HUB_CACHE]",
    )
    actions = p.add_subparsers(dest="models_command", required=True)
    pull = actions.add_parser("pull", help="download a model (owner/repo:TAG: only that GGUF file)")
    pull.add_argument("name", help="owner/repo[:TAG], as `tgi launch --model-id` takes it")
    pull.add_argument("--revision", default=env("REVISION"), help="a branch, tag or commit [env: REVISION]")
    pull.set_defaults(func=_with_cache(_cmd_pull))
    ls = actions.add_parser("list", help="the cached models: name, quantization, size")
    ls.set_defaults(func=_with_cache(_cmd_list))
    rm = actions.add_parser("rm", help="delete a cached model (owner/repo: every file of that repository)")
    rm.add_argument("name")
    rm.set_defaults(func=_with_cache(_cmd_rm))
    show = actions.add_parser("show", help="what the cache holds of a model: files, revision, size, metadata")
    show.add_argument("name")
    show.set_defaults(func=_with_cache(_cmd_show))


def _with_cache(action):
    """The action, after `--huggingface-hub-cache` has pointed huggingface_hub at its folder."""

    def run(args: argparse.Namespace) -> int:
        apply_hub_cache(args.huggingface_hub_cache)
        return action(args)

    return run
