"""llama.cpp's tools: found in a source root, its bin/ folder or beside llama-server; a folder that is not
there is refused by the flag's name; llama-perplexity's final estimate read from its log; and, where a
llama.cpp build is found, llama-perplexity and our engine agreeing on the same file and windows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from llama_cpp_build import TINY, llama_cpp_tools

from tgi.benchmarks.bench_model import prepare
from tgi.benchmarks.llama_cpp_tools import find_tools, llama_perplexity, parse_perplexity_output
from tgi.benchmarks.perplexity_cli import DEFAULT_TEXT, text_token_ids

LOG = """perplexity: tokenizing the input ..
perplexity: calculating perplexity over 9 chunks, n_ctx=512, batch_size=512, n_seq=1
[1]38.1,[2]40.2,[3]41.0,[4]42.1,[5]42.6,[6]42.9,[7]42.5,[8]42.7,[9]42.6760,
Final estimate: PPL = 42.6760 +/- 1.23456
"""


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_tools_are_found_in_the_source_root_its_bin_or_beside_llama_server(tmp_path):
    root = tmp_path / "llama.cpp"
    (root / "convert_hf_to_gguf.py").parent.mkdir(parents=True)
    (root / "convert_hf_to_gguf.py").write_text("")
    server = _executable(root / "build" / "bin" / "llama-server")
    _executable(root / "build" / "bin" / "llama-quantize")
    for tools in (find_tools(str(root)), find_tools(None, str(server))):
        assert tools.convert == str(root / "convert_hf_to_gguf.py")
        assert tools.quantize == str(root / "build" / "bin" / "llama-quantize")
        assert tools.perplexity is None and tools.missing("convert", "perplexity") == ["perplexity"]
    with pytest.raises(FileNotFoundError, match="--llama-cpp-dir"):
        find_tools(str(tmp_path / "absent"))


def test_the_final_estimate_is_read_with_its_windows():
    result = parse_perplexity_output(LOG)
    assert result.perplexity == 42.676 and result.num_windows == 9 and result.n_ctx == 512
    assert result.num_scored == 9 * 255 and result.mean_nll == pytest.approx(math.log(42.676))
    with pytest.raises(RuntimeError, match="no final estimate"):
        parse_perplexity_output("perplexity: you need at least 1024 tokens")


def test_ours_and_llama_perplexity_agree_on_the_same_file(tmp_path):
    from tgi.benchmarks.perplexity import engine_perplexity, perplexity_engine_config
    from tgi.core.engine import LLMEngine

    tools = llama_cpp_tools()
    if tools.missing("convert", "quantize", "perplexity"):
        pytest.skip(f"llama.cpp's {', '.join(tools.missing('convert', 'quantize', 'perplexity'))} not found "
                    "(set TGI_LLAMA_CPP_DIR to a llama.cpp build)")  # fmt: skip
    made = prepare("Q8_0", tools, tmp_path, "tiny", TINY, log=lambda _: None)
    text = tmp_path / "text.txt"
    text.write_text(DEFAULT_TEXT.read_text()[:3000])  # ~850 tokens: 6 windows of 128
    ids, bos = text_token_ids(text.read_text(), made.gguf)
    peer = llama_perplexity(tools, made.gguf, str(text), 128)
    engine = LLMEngine.from_config(perplexity_engine_config(made.gguf, 128, "float32", None))
    try:
        ours = engine_perplexity(engine, ids, 128, bos)
    finally:
        engine.close()
    assert (ours.num_windows, ours.num_scored) == (peer.num_windows, peer.num_scored)
    assert ours.perplexity == pytest.approx(peer.perplexity, rel=0.01)
