"""GGUF blocks read for the block kernels (`iter_block_weights`, then `BlockWeight.concat` for fused q/k/v and
gate/up): for every block type, the same bytes and the same packed layout as the former path (`GGUFReader`,
a copy of each tensor with Q/K rows un-permuted, then the parts concatenated), with the tensors that need no
un-permutation read from the file's memory map without a copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
from gguf.quants import quantize  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

from tgi.backends.cpu import native  # noqa: E402
from tgi.core.loading.block_weights import BLOCK_BYTES, BlockWeight, iter_block_weights  # noqa: E402
from tgi.core.loading.gguf_loader import hf_tensor_name, open_reader  # noqa: E402
from tgi.core.loading.source import ModelSource  # noqa: E402
from tgi.core.testing.kquants import K_QUANTS, quantize_k  # noqa: E402

HIDDEN, FFN, HEADS, KV_HEADS = 256, 512, 4, 2
#: llama.cpp name -> (Hugging Face name, rows); every weight [rows, HIDDEN] but ffn_down [HIDDEN, FFN]
_TENSORS = {
    "attn_q": ("self_attn.q_proj", HIDDEN),
    "attn_k": ("self_attn.k_proj", HIDDEN // HEADS * KV_HEADS),
    "attn_v": ("self_attn.v_proj", HIDDEN // HEADS * KV_HEADS),
    "attn_output": ("self_attn.o_proj", HIDDEN),
    "ffn_gate": ("mlp.gate_proj", FFN),
    "ffn_up": ("mlp.up_proj", FFN),
    "ffn_down": ("mlp.down_proj", HIDDEN),
}


def _stored(w: np.ndarray, qtype: str) -> np.ndarray:
    if qtype in K_QUANTS:
        return quantize_k(w, qtype)
    return quantize(w, gguf.GGMLQuantizationType[qtype])


def _write(path, qtype: str) -> None:
    rng = np.random.default_rng(3)
    w = gguf.GGUFWriter(str(path), "llama")
    for name in _TENSORS:
        rows, cols = (HIDDEN, FFN) if name == "ffn_down" else (_TENSORS[name][1], HIDDEN)
        weight = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        w.add_tensor(
            f"blk.0.{name}.weight", _stored(weight, qtype), raw_dtype=gguf.GGMLQuantizationType[qtype]
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _former_path(path, config) -> dict[str, torch.Tensor]:
    """The bytes of each weight as the loader made them before: GGUFReader, a copy with Q/K un-permuted."""
    from tgi.core.loading.gguf_loader import _unpermute_projection

    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        name = hf_tensor_name(t.name)
        raw = np.asarray(t.data).view(np.uint8).reshape(int(t.shape[1]), -1)
        out[name] = torch.from_numpy(np.array(_unpermute_projection(name, raw, config)))
    return out


@pytest.mark.parametrize("qtype", sorted(BLOCK_BYTES))
def test_blocks_and_fused_blocks_are_the_former_bytes(tmp_path, qtype):
    path = tmp_path / f"{qtype}.gguf"
    _write(path, qtype)
    config = LlamaConfig(
        hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS
    )
    source = ModelSource(model_id="t", format="gguf", path=str(path), tokenizer_path=str(path))
    got = dict(iter_block_weights(source, config, [qtype]))
    former = _former_path(path, config)
    assert sorted(got) == sorted(former)
    mapped = {hf_tensor_name(t.name): t.data.ctypes.data for t in open_reader(str(path)).tensors}
    for name, block in got.items():
        assert block.qtype == qtype and torch.equal(block.data, former[name]), name
        if "q_proj" not in name and "k_proj" not in name:  # no row permutation: the map itself, no copy
            assert block.data.data_ptr() == mapped[name], name
    prefix = "model.layers.0."
    for parts in (
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        ("mlp.gate_proj", "mlp.up_proj"),
    ):
        fused = BlockWeight.concat(got[f"{prefix}{p}.weight"] for p in parts)
        expected = torch.cat([former[f"{prefix}{p}.weight"] for p in parts])
        assert torch.equal(fused.data, expected)
        if native.compiler_found() and qtype in native.BLOCK_TYPES:
            packed = native.block_pack(fused.data, qtype, fused.rows, fused.cols)
            assert torch.equal(packed, native.block_pack(expected, qtype, fused.rows, fused.cols))
