"""M-RoPE positions (`tgi.core.models.mrope_positions`) against transformers' `get_rope_index`, the step tensors
the runner gets from them (chunks, decodes, a mixed batch), and `MRotaryEmbedding` against transformers'
Qwen2-VL rotary embedding."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tgi.core.interfaces.batch import ScheduledSequence  # noqa: E402
from tgi.core.models.mrope_positions import RequestPositions, prompt_positions  # noqa: E402
from tgi.core.models.rotary import MRotaryEmbedding  # noqa: E402
from tgi.core.request import ImageInput  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402

IMAGE = 9  # the placeholder token id of these prompts


def _image(offset: int, t: int, h: int, w: int, merge: int = 2) -> ImageInput:
    grid = np.array([[t, h, w]])
    return ImageInput(np.zeros((t * h * w, 4)), offset, t * h * w // merge**2, b"x", {"image_grid_thw": grid})


def _prompt() -> tuple[list[int], tuple[ImageInput, ...]]:
    """Text, a 4 x 6 patch image (2 x 3 merged), text, a 6 x 4 one (3 x 2), text: 3 + 6 + 2 + 6 + 3 tokens."""
    images = (_image(3, 1, 4, 6), _image(11, 1, 6, 4))
    ids = [1, 2, 3] + [IMAGE] * 6 + [4, 5] + [IMAGE] * 6 + [6, 7, 8]
    return ids, images


def test_a_prompt_with_two_images_of_different_grids_has_transformers_positions():
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            vocab_size=16,
            bos_token_id=0,
            eos_token_id=1,
        ),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2),
        image_token_id=IMAGE,
    )
    model = transformers.Qwen2VLModel(config)
    ids, images = _prompt()
    input_ids = torch.tensor([ids])
    expected, delta = model.get_rope_index(
        input_ids,
        mm_token_type_ids=(input_ids == IMAGE).int(),
        image_grid_thw=torch.tensor(np.concatenate([im.extras["image_grid_thw"] for im in images])),
    )
    ours = prompt_positions(len(ids), images, spatial_merge_size=2)
    assert [list(row) for row in ours.rows] == expected[:, 0].tolist()
    assert ours.delta == int(delta) == -6  # each image: 6 tokens, max(h, w) = 3 positions
    assert ours.spans == ((3, 9), (11, 17))


def test_a_placeholder_count_other_than_the_grid_is_refused():
    with pytest.raises(ValueError, match="a 1x2x3 merged grid for 5 placeholder tokens"):
        prompt_positions(8, (ImageInput(None, 1, 5, b"x", {"image_grid_thw": [[1, 4, 6]]}),), 2)
    with pytest.raises(ValueError, match="image 0 has no `image_grid_thw`"):
        prompt_positions(8, (ImageInput(None, 1, 5, b"x"),), 2)


def _seq(rid: str, ids: list[int], start: int, n: int, images=(), prompt: int | None = None):
    prefill = start < (prompt or len(ids))
    return ScheduledSequence(
        rid, ids[start : start + n], start, [0] * 16, prefill, True, SamplingParams(), 0,
        prompt or len(ids), ids, images=images if prefill else (),
    )  # fmt: skip


def test_chunks_take_their_slice_and_decodes_continue_from_the_delta():
    ids, images = _prompt()
    full = prompt_positions(len(ids), images, 2)
    positions = RequestPositions(spatial_merge_size=2)
    # a text-only chunk of the image request: one row; then a chunk through the first image: three rows
    first = positions.build([_seq("a", ids, 0, 3, images)], None)
    assert first.tolist() == [0, 1, 2]
    second = positions.build([_seq("a", ids, 3, 10, images)], None)
    assert second.shape == (3, 10) and second.tolist() == [row[3:13] for row in full.rows]
    # the last chunk, with a text-only request's chunk beside it in the same step
    text = [11, 12, 13, 14]
    step = positions.build([_seq("a", ids, 13, 7, images), _seq("b", text, 0, 4)], None)
    assert step.tolist() == [[*row[13:20], 0, 1, 2, 3] for row in full.rows]
    # decodes: token 20 of "a" is at 20 + delta, "b"'s at its index
    ids.append(3)
    text.append(15)
    decode = positions.build([_seq("a", ids, 20, 1, prompt=20), _seq("b", text, 4, 1, prompt=4)], None)
    assert decode.tolist() == [20 + full.delta, 4]
    assert positions.num_kept_requests == 1
    # a recomputation after a preemption (its id dropped) computes the same positions again
    positions.drop(["a"])
    again = positions.build([_seq("a", ids, 0, 21, images, prompt=20)], None)
    assert again.tolist() == [[*row, 20 + full.delta] for row in full.rows]
    positions.drop(["a", "b"])
    assert positions.num_kept_requests == 0


def test_mrope_cos_sin_equal_transformers_sectioned_rotary():
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    config = transformers.Qwen2VLTextConfig(
        hidden_size=64, num_attention_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0, "mrope_section": [2, 3, 3]},
    )  # fmt: skip
    theirs = Qwen2VLRotaryEmbedding(config)
    ids, images = _prompt()
    rows = torch.tensor(prompt_positions(len(ids), images, 2).rows)  # [3, T]
    cos, sin = theirs(torch.zeros(1), rows[:, None, :])  # [1, T, head_dim]
    ours = MRotaryEmbedding(theirs.inv_freq, [2, 3, 3])
    our_cos, our_sin = ours.cos_sin(rows, torch.float32)  # [T, 1, head_dim // 2]
    torch.testing.assert_close(our_cos[:, 0], cos[0, :, :8])
    torch.testing.assert_close(our_sin[:, 0], sin[0, :, :8])
    # one position per token ([T]): plain RoPE, the same as three equal rows
    flat = torch.arange(5)
    torch.testing.assert_close(
        ours.cos_sin(flat, torch.float32)[0], ours.cos_sin(flat.expand(3, -1), torch.float32)[0]
    )
