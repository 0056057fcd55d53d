"""LoRA adapters on the HTTP surface: `--lora-adapters` parsed, and the adapter a request names.

- TGI's routes: `parameters.adapter_id` is a loaded adapter's id, or the base model's name (or absent) for
  none; any other value is a 422 naming the loaded ones.
- OpenAI's routes: `model` is a loaded adapter's id, or the base model's name or `tgi` for none; when the
  server serves adapters (or may load them: `--allow-runtime-lora-updating`), any other name is OpenAI's 404
  `model_not_found` (a server without adapters answers whatever `model` says, as TGI does). `/v1/models`
  lists the base model, then each adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tgi.core.config import ConfigError
from tgi.server.http.errors import ApiError, validation_error

if TYPE_CHECKING:
    from tgi.server.service.inference import InferenceService

#: the name OpenAI clients of this server may always send for the base model
BASE_ALIAS = "tgi"


def parse_lora_adapters(value: str | None) -> tuple[tuple[str, str], ...]:
    """`id=path,id2=path2` (a bare `path` is its own id, as TGI names it) -> ((id, path), ...). Paths are
    local PEFT adapter folders: hub ids are not downloaded."""
    if not value:
        return ()
    pairs = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        name, _, path = entry.partition("=") if "=" in entry else (entry, "", entry)
        name, path = name.strip(), path.strip()
        if not name or not path:
            raise ConfigError(f"--lora-adapters: '{entry}' is not id=path")
        if not Path(path).is_dir():
            raise ConfigError(
                f"--lora-adapters: adapter '{name}': {path} is not a local folder (hub ids are not "
                "downloaded: fetch the adapter first, e.g. with `hf download`)"
            )
        pairs.append((name, path))
    return tuple(pairs)


def served_adapters(service: InferenceService) -> tuple[str, ...]:
    """Ids of the adapters the engine serving this request loaded."""
    return service.engine.model_info.lora_adapters


def _loaded(adapters: tuple[str, ...]) -> str:
    return ", ".join(f"`{a}`" for a in adapters) or "none"


def tgi_adapter(service: InferenceService, adapter_id: str | None) -> str | None:
    """The adapter `parameters.adapter_id` names (None: the base model), or a 422."""
    if adapter_id is None or adapter_id == service.model_name:
        return None
    adapters = served_adapters(service)
    if adapter_id not in adapters:
        raise validation_error(
            f"`parameters.adapter_id` `{adapter_id}` is not a loaded LoRA adapter (loaded: {_loaded(adapters)})",
            "adapter_id",
        )
    return adapter_id


def openai_adapter(service: InferenceService, model: str | None) -> str | None:
    """The adapter OpenAI's `model` names (None: the base model), or a 404 `model_not_found`."""
    adapters = served_adapters(service)
    if model in adapters:
        return model
    runtime = service.settings.allow_runtime_lora_updating
    if model is None or model in (service.model_name, BASE_ALIAS) or not (adapters or runtime):
        return None
    raise ApiError(
        404,
        f"The model `{model}` does not exist: this server serves `{service.model_name}` and the LoRA "
        f"adapters {_loaded(adapters)}",
        "model_not_found",
        param="model",
        code="model_not_found",
    )


def model_list(service: InferenceService) -> list[dict]:
    """`/v1/models`' entries: the base model, then each adapter (with the base model as its `parent`); on a
    server of several models, each model (a loaded one's adapters after it)."""
    if service.pool is None:
        return _model_entries(service)
    from tgi.server.served_models.selection import reading

    entries = []
    for entry in service.pool.models.values():
        if entry.engine is None:
            entries.append({"id": entry.name, "object": "model", "created": 0, "owned_by": "tgi"})
            continue
        with reading(entry):
            entries.extend(_model_entries(service))
    return entries


def _model_entries(service: InferenceService) -> list[dict]:
    base = service.model_name
    entries = [{"id": base, "object": "model", "created": 0, "owned_by": "tgi"}]
    for adapter in served_adapters(service):
        entries.append(
            {
                "id": adapter,
                "object": "model",
                "created": 0,
                "owned_by": "tgi",
                "root": adapter,
                "parent": base,
            }
        )
    return entries
