"""The served model as Ollama describes its models (`/api/tags`, `/api/show`, `/api/ps`).

- `name` / `model`: the served name (`--model-id`'s, as `/v1/models` lists it) with Ollama's tag, `:latest`;
  each LoRA adapter after it.
- `size`: the bytes of the weights' files where they are local files (a `.gguf`, a folder's
  `*.safetensors`: a Hub model's are in its local snapshot); 0 where none is found.
- `digest`: the SHA-256 of the weights where they are one file (computed once, off the event loop); empty
  for several files, which have no one digest that Ollama would give (its digest is of its manifest).
- `details`: `format` (`gguf` or `safetensors`), `family` (the architecture, e.g. `llama` for
  `LlamaForCausalLM`), `parameter_size` (Ollama's `1.7B`, `134.52M`), `quantization_level` (the GGUF type the
  weights compute with, e.g. `Q4_1`, the quantization method, or the dtype: `F32`, `F16`, `BF16`).
- `/api/show`: `template` (the model's chat template: Jinja, not Ollama's Go templates), `model_info`
  (`general.architecture`, `general.parameter_count`, `<family>.context_length`, `<family>.vocab_size`),
  `capabilities` (`completion`; `tools` unless tools are off (`--disable-grammar-support` without a
  `--tool-call-parser`); `vision` for a model that takes images; `thinking` with a reasoning parser),
  `parameters` (the sampling defaults, `tgi.server.ollama.options.DEFAULTS`).
- `/api/ps`: the model is always loaded: `expires_at` is far in the future (it never unloads), `size_vram`
  the weights' size on an accelerator, 0 on the CPU; `context_length` is `--max-total-tokens`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tgi.core.loading.resolve import DEFAULT_MODEL_ID, default_model_path
from tgi.server.chat.parsers import resolve
from tgi.server.http.errors import ApiError
from tgi.server.images.sources import ImageRef
from tgi.server.lora.adapters import served_adapters
from tgi.server.ollama.inputs import tagged
from tgi.server.ollama.options import DEFAULTS

#: `/api/ps`' `expires_at` of a model that never unloads
NEVER = "9999-12-31T23:59:59Z"
_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_SUFFIX = re.compile(r"(ForCausalLM|ForConditionalGeneration|LMHeadModel|Model)$")
_digests: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 hex


def weight_files(model_id: str, tokenizer_path: str | None) -> list[Path]:
    """The local files the served model's weights were loaded from (module docstring); [] if none found."""
    candidates = [model_id, tokenizer_path or ""]
    if model_id == DEFAULT_MODEL_ID:
        with contextlib.suppress(Exception):  # the default model's package absent: no files to describe
            candidates.insert(0, default_model_path())
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate).expanduser()
        if path.is_file():
            return [path]
        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return ggufs
            shards = sorted(path.glob("*.safetensors"))
            if shards:
                return shards
    return []


def human_number(n: int) -> str:
    """A parameter count as Ollama writes it: `8B`, `1.7B`, `134.52M`, `12K`."""
    for unit, scale, digits in (("B", 1e9, 1), ("M", 1e6, 2), ("K", 1e3, 0)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.{digits}f}{unit}"
    return str(n)


def family(architecture: str) -> str:
    return _SUFFIX.sub("", architecture).lower() or architecture.lower()


def quantization_level(info: Any) -> str:
    q = info.quantization
    if q is not None:
        if q.weight_format.startswith("gguf-"):
            return q.weight_format[len("gguf-") :].split(",")[0].upper()
        return q.method.upper()
    return _DTYPES.get(info.dtype, info.dtype.upper())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


async def digest(files: list[Path]) -> str:
    """The weights' SHA-256 where they are one file (once per file, off the event loop), else empty."""
    if len(files) != 1:
        return ""
    stat = files[0].stat()
    key = (str(files[0]), stat.st_size, stat.st_mtime_ns)
    if key not in _digests:
        _digests[key] = await asyncio.to_thread(_sha256, files[0])
    return _digests[key]


def takes_images(service: Any) -> bool:
    """Whether the served model takes images (it has an image processor)."""
    try:
        service.image_token([ImageRef("", "images")])
    except ApiError:
        return False
    return True


def _template(chat_template: Any) -> str:
    if isinstance(chat_template, dict):
        return chat_template.get("default") or next(iter(chat_template.values()), "")
    return chat_template or ""


async def description(service: Any) -> dict:
    """What `/api/tags` and `/api/ps` list of the base model (module docstring)."""
    engine = service.engine
    info = engine.model_info
    files = weight_files(engine.model_id, engine.tokenizer.name_or_path)
    size = sum(f.stat().st_size for f in files)
    modified = max((f.stat().st_mtime for f in files), default=0.0)
    kind = ("gguf" if files[0].suffix == ".gguf" else "safetensors") if files else ""
    name = tagged(service.model_name)
    return {
        "name": name,
        "model": name,
        "modified_at": datetime.fromtimestamp(modified, UTC).isoformat().replace("+00:00", "Z"),
        "size": size,
        "digest": await digest(files),
        "details": {
            "parent_model": "",
            "format": kind,
            "family": family(info.architecture),
            "families": [family(info.architecture)],
            "parameter_size": human_number(info.num_parameters),
            "quantization_level": quantization_level(info),
        },
    }


async def listed(service: Any) -> list[dict]:
    """The base model, then each LoRA adapter (with the base model as its `parent_model`)."""
    base = await description(service)
    out = [base]
    for adapter in served_adapters(service):
        name = tagged(adapter)
        out.append(
            {
                **base,
                "name": name,
                "model": name,
                "details": {**base["details"], "parent_model": base["name"]},
            }
        )
    return out


async def every_listed(service: Any) -> list[dict]:
    """`listed` of each model a server of several serves (an unloaded one with what its name says: its
    size, digest and details are read once it is loaded), or of the one model."""
    if service.pool is None:
        return await listed(service)
    from tgi.server.served_models.selection import reading

    out = []
    for entry in service.pool.models.values():
        if entry.engine is None:
            out.append(_unloaded(entry.name))
            continue
        with reading(entry):
            out.extend(await listed(service))
    return out


def _unloaded(name: str) -> dict:
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    listed_name = tagged(name)
    gguf = name.lower().endswith(".gguf") or "gguf" in name.lower()
    return {
        "name": listed_name,
        "model": listed_name,
        "modified_at": datetime.fromtimestamp(0, UTC).isoformat().replace("+00:00", "Z"),
        "size": 0,
        "digest": "",
        "details": {
            "parent_model": "",
            "format": "gguf" if gguf else "",
            "family": "",
            "families": [],
            "parameter_size": "",
            "quantization_level": tag.upper(),
        },
    }


async def every_running(service: Any) -> list[dict]:
    """`/api/ps`' entries: the models loaded (each with when its keep-alive unloads it), or the one model."""
    if service.pool is None:
        return [running(service, e) for e in await listed(service)]
    from tgi.server.served_models.selection import reading

    out = []
    for entry in service.pool.loaded():
        expires = service.pool.expires_at(entry)
        with reading(entry):
            for item in await listed(service):
                shown = running(service, item)
                if expires is not None:
                    shown["expires_at"] = (
                        datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
                    )
                out.append(shown)
    return out


def capabilities(service: Any) -> list[str]:
    settings = service.settings
    parsers = resolve(
        settings.reasoning_parser, settings.tool_call_parser, service.engine.tokenizer.chat_template
    )
    out = ["completion"]
    if not settings.disable_grammar_support or parsers.tool_format is not None:
        out.append("tools")
    if takes_images(service):
        out.append("vision")
    if parsers.reasoning is not None:
        out.append("thinking")
    return out


async def show(service: Any, entry: dict) -> dict:
    """`/api/show`'s body for a listed model's `entry`."""
    engine = service.engine
    info, details = engine.model_info, entry["details"]
    arch = details["family"]
    parameters = "\n".join(f"{name:<30} {value}" for name, value in DEFAULTS.items())
    return {
        "modelfile": f"# served by tgi (no Modelfile: the model was loaded at launch)\nFROM {engine.model_id}\n",
        "parameters": parameters,
        "template": _template(engine.tokenizer.chat_template),
        "details": details,
        "model_info": {
            "general.architecture": arch,
            "general.parameter_count": info.num_parameters,
            f"{arch}.context_length": info.max_position_embeddings,
            f"{arch}.vocab_size": info.vocab_size,
        },
        "capabilities": capabilities(service),
        "modified_at": entry["modified_at"],
    }


def running(service: Any, entry: dict) -> dict:
    """`/api/ps`' entry for a listed model's `entry`."""
    on_device = service.engine.backend_name != "cpu"
    return {
        **{k: entry[k] for k in ("name", "model", "size", "digest", "details")},
        "expires_at": NEVER,
        "size_vram": entry["size"] if on_device else 0,
        "context_length": service.engine.config.max_total_tokens,
    }
