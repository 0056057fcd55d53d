"""`--models-dir`: which files and folders of a folder are models, and the names they are served by."""

from __future__ import annotations

import pytest

from tgi.server.served_models.folder import models_in


def test_gguf_files_and_checkpoint_folders_are_models_named_as_llama_server_names_them(tmp_path):
    for name in (
        "SmolLM2-135M-Instruct-Q4_K_M.gguf",
        "Big-00001-of-00002.gguf",
        "Big-00002-of-00002.gguf",
        "mmproj-Vision-f16.gguf",
        "notes.txt",
    ):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "qwen3-embedding").mkdir()
    (tmp_path / "qwen3-embedding" / "config.json").write_text("{}")
    (tmp_path / "empty-folder").mkdir()
    assert models_in(str(tmp_path)) == [
        ("Big", str(tmp_path / "Big-00001-of-00002.gguf")),  # a split model: its first part
        ("SmolLM2-135M-Instruct-Q4_K_M", str(tmp_path / "SmolLM2-135M-Instruct-Q4_K_M.gguf")),
        ("qwen3-embedding", str(tmp_path / "qwen3-embedding")),
    ]


def test_a_path_that_is_no_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(NotADirectoryError, match=r"--models-dir .*not a folder"):
        models_in(str(tmp_path / "missing"))
