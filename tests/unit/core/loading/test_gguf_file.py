"""`tgi.core.loading.gguf_file.GGUFFile` reads what `gguf.GGUFReader` reads (every metadata value type, the
tensors' views of the map, byte for byte), and refuses what is no readable GGUF by name."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.quants import quantize  # noqa: E402

from tgi.core.loading.gguf_file import GGUFFile, GGUFStrings  # noqa: E402
from tgi.core.loading.resolve import default_model_path  # noqa: E402


def _same_as_reader(path) -> GGUFFile:
    """GGUFFile(path), checked against GGUFReader: keys in order, values and their Python types, tensors."""
    got = GGUFFile(str(path))
    reader = gguf.GGUFReader(str(path))
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert list(got.metadata) == keys
    for key in keys:
        expected, value = reader.fields[key].contents(), got.metadata[key]
        if isinstance(value, GGUFStrings):
            value = list(value)
        assert value == expected and type(value) is type(expected), key
    assert [t.name for t in got.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(got.tensors, reader.tensors, strict=True):
        assert mine.tensor_type == theirs.tensor_type and mine.shape == tuple(int(d) for d in theirs.shape)
        assert mine.data.dtype == theirs.data.dtype and mine.data.shape == theirs.data.shape, mine.name
        assert mine.data.tobytes() == theirs.data.tobytes(), mine.name
        assert not mine.data.flags.writeable  # a view of the read-only map
    return got


def test_every_value_type_and_tensor_kind_reads_as_gguf_reader_reads_it(tmp_path):
    path = tmp_path / "kinds.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2**40)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_array("t.strs", ["a", "", "ü", "Ġthe"])
    w.add_array("t.empty", [])
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 64)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 32)).astype(np.float16))
    q8 = quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got = _same_as_reader(path)
    strs = got.metadata["t.strs"]
    assert len(strs) == 4 and strs[3] == "Ġthe" and strs[1:3] == ["", "ü"]


def test_the_default_model_reads_as_gguf_reader_reads_it():
    got = _same_as_reader(default_model_path())
    assert len(got.metadata["tokenizer.ggml.tokens"]) == 49152


def test_files_that_are_no_readable_gguf_are_refused(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ValueError, match="not a GGUF file"):
        GGUFFile(str(bad))
    big_endian = tmp_path / "be.gguf"
    big_endian.write_bytes(b"GGUF" + (3).to_bytes(4, "big") + bytes(16))
    with pytest.raises(ValueError, match="big-endian GGUF file is not supported"):
        GGUFFile(str(big_endian))
    src = tmp_path / "ok.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_tensor("f32", np.ones((64, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(src.read_bytes()[:-100])
    with pytest.raises(ValueError, match="runs past the end of the file"):
        GGUFFile(str(truncated))
