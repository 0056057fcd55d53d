"""The serving benchmark's made model, on a tiny shape with the real vocabulary: tgi's own writer always; with
llama.cpp's own tools (convert_hf_to_gguf.py, llama-quantize) where a llama.cpp build is found; the cache
keyed by shape, seed and format; the bfloat16 safetensors folder loading in transformers with the values
drawn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from llama_cpp_build import NO_TOOLS, TINY, llama_cpp_tools

from tgi.benchmarks.bench_model import LLAMA_CPP, TGI_WRITER, cache_folder, prepare
from tgi.benchmarks.make_model import LLAMA_1B, ModelShape, random_tensors


def _types(path: str) -> dict[str, str]:
    """Each tensor's GGML type, read by the project's own header reader (25 ms; gguf's `GGUFReader` takes
    ~10 s on the 49k-token vocabulary): these tests are about what the writers wrote, not about that reader."""
    from tgi.core.loading.gguf_file import GGUFFile

    return {t.name: t.tensor_type.name for t in GGUFFile(path).tensors}


def test_cache_folder_is_keyed_by_shape_and_seed(tmp_path):
    one = cache_folder(tmp_path, "1b", LLAMA_1B, 0)
    assert one == cache_folder(tmp_path, "1b", ModelShape(), 0)
    assert len({one, cache_folder(tmp_path, "1b", LLAMA_1B, 1), cache_folder(tmp_path, "1b", TINY, 0)}) == 3


def test_tgi_writer_without_llama_cpp_says_so_and_caches(tmp_path):
    notes = []
    made = prepare("Q8_0", NO_TOOLS, tmp_path, "tiny", TINY, log=notes.append)
    assert made.made_by == TGI_WRITER and made.ours == made.gguf and Path(made.gguf).name == "tgi-Q8_0.gguf"
    assert any("not found" in n and "tgi's own writer" in n for n in notes)
    types = _types(made.gguf)
    assert types["blk.1.ffn_down.weight"] == "Q8_0" and "output.weight" not in types  # tied head
    stamp = os.stat(made.gguf).st_mtime_ns
    assert prepare("Q8_0", NO_TOOLS, tmp_path, "tiny", TINY, log=notes.append) == made
    assert os.stat(made.gguf).st_mtime_ns == stamp
    with pytest.raises(ValueError, match="unknown model format 'Q5_K'"):
        prepare("Q5_K", NO_TOOLS, tmp_path, "tiny", TINY)


def test_safetensors_folder_holds_the_drawn_values(tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    made = prepare("safetensors", NO_TOOLS, tmp_path, "tiny", TINY, log=lambda _: None)
    folder = Path(made.ours)
    config = AutoConfig.from_pretrained(folder)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (256, 2, 49152)
    drawn = dict(random_tensors(TINY, 0))
    got = load_file(str(folder / "model-layer-001.safetensors"))["model.layers.1.mlp.down_proj.weight"]
    assert torch.equal(got, torch.from_numpy(drawn["blk.1.ffn_down.weight"]).to(torch.bfloat16))
    assert made.gguf.endswith("tgi-bf16.gguf")  # llama.cpp's side: the bf16 GGUF


def test_llama_cpp_tools_convert_and_quantize(tmp_path):
    tools = llama_cpp_tools()
    if tools.missing("convert", "quantize"):
        pytest.skip(f"llama.cpp's {', '.join(tools.missing('convert', 'quantize'))} not found "
                    "(set TGI_LLAMA_CPP_DIR to a llama.cpp build)")  # fmt: skip
    made = prepare("Q4_K_M", tools, tmp_path, "tiny", TINY, log=lambda _: None)
    assert made.made_by == LLAMA_CPP and Path(made.gguf).name == "llama.cpp-Q4_K_M.gguf"
    types = _types(made.gguf)
    assert types["blk.0.attn_q.weight"] == "Q4_K" and types["blk.1.ffn_down.weight"] == "Q6_K"
    bf16 = Path(made.gguf).with_name("llama.cpp-bf16.gguf")
    assert _types(str(bf16))["blk.0.attn_q.weight"] == "BF16"
    q8 = prepare("Q8_0", tools, tmp_path, "tiny", TINY, log=lambda _: None)  # from the same bf16 file
    assert _types(q8.gguf)["blk.1.ffn_up.weight"] == "Q8_0"


def test_serving_refuses_a_made_model_beside_model_id_or_without_started_peers(capsys):
    from tgi.server.cli.main import main

    assert main(["benchmark", "serving", "--start", "ours", "--model-shape", "1b", "--model-id", "x"]) == 2
    assert "give one of --model-shape and --model-id" in capsys.readouterr().err
    assert main(["benchmark", "serving", "--server", "a=http://127.0.0.1:9", "--model-shape", "8b"]) == 2
    assert "--model-shape: it is for --start peers" in capsys.readouterr().err
