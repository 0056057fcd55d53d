"""`--models-dir`: the models a folder holds, each named as llama-server's router mode and Ollama's users
expect to call it.

- each `.gguf` file is a model named by its file name without `.gguf`; a split file's first part
  (`X-00001-of-00003.gguf`) is model `X` (served as `--model-id` serves that path), the other parts are
  not models; a side file (a vision projector `mmproj*.gguf`, an importance matrix, ...) is no model;
- each sub-folder with a `config.json` (a transformers checkpoint) is a model named by the folder's name.

Anything else is left out. The folder is read once, at start.
"""

from __future__ import annotations

from pathlib import Path

from tgi.core.loading.gguf_tags import is_model_file, split_info


def models_in(folder: str) -> list[tuple[str, str]]:
    """(name, model id) of each model in `folder`, by name; `NotADirectoryError` when it is not a folder."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise NotADirectoryError(f"--models-dir {folder}: not a folder")
    found: dict[str, str] = {}
    for path in sorted(root.iterdir()):
        name = _model_name(path)
        if name is not None:
            found.setdefault(name, str(path))
    return sorted(found.items())


def _model_name(path: Path) -> str | None:
    if path.is_dir():
        return path.name if (path / "config.json").is_file() else None
    split = split_info(path.name)
    if split is None or not is_model_file(path.name) or split.index != 1:
        return None  # no .gguf, a side file (a vision projector, ...), or a split file's later part
    return split.prefix
