import hashlib

import numpy as np
import pytest
from image_files import image_bytes
from transformers import AutoProcessor

from tgi.core.testing.tiny_vlm import save_llava_processor
from tgi.server.images.decode import decode_image
from tgi.server.images.limits import ImageError, ImageLimits
from tgi.server.images.processor import ImagePreprocessor


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save_llava_processor(tmp_path_factory.mktemp("llava")))


def _decoded(color):
    return decode_image(image_bytes(30, 20, color=color), "image/png", ImageLimits())


def test_a_folder_without_a_processor_has_none(tmp_path):
    assert ImagePreprocessor.load(None) is None
    assert ImagePreprocessor.load(str(tmp_path)) is None


def test_each_image_is_its_placeholder_run_and_its_own_pixels(folder):
    pre = ImagePreprocessor.load(folder)
    assert pre is not None and pre.image_token == "<image>"
    red, blue = _decoded((255, 0, 0)), _decoded((0, 0, 255))
    text = "w5 <image> w6 w7 <image> w8"
    ids, images = pre.prepare(text, [red, blue], add_special_tokens=False)
    # the processor's own expansion, unchanged: 4 placeholders per 28x28 image (patches of 14)
    own = AutoProcessor.from_pretrained(folder)(
        text=[text], images=[red.image, blue.image], return_tensors="np", add_special_tokens=False
    )
    assert ids == own["input_ids"][0].tolist()
    assert [(x.offset, x.num_tokens) for x in images] == [(1, 4), (7, 4)]
    assert all(ids[x.offset : x.offset + x.num_tokens] == [pre.image_token_id] * 4 for x in images)
    assert images[0].content_hash == hashlib.sha256(image_bytes(30, 20, color=(255, 0, 0))).digest()
    np.testing.assert_array_equal(images[0].pixel_values, own["pixel_values"][0:1])
    np.testing.assert_array_equal(images[1].pixel_values, own["pixel_values"][1:2])


def test_placeholders_and_images_must_match(folder):
    pre = ImagePreprocessor.load(folder)
    with pytest.raises(ImageError, match=r"1 image placeholder\(s\) `<image>` for 2 image\(s\)"):
        pre.prepare("w5 <image>", [_decoded((1, 2, 3)), _decoded((4, 5, 6))], add_special_tokens=False)


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    from tgi.core.testing.tiny_qwen2_vl import save_qwen2_vl_processor

    return str(save_qwen2_vl_processor(tmp_path_factory.mktemp("qwen2-vl")))


def test_qwen2_vl_images_carry_their_patch_rows_and_grid(qwen_folder):
    # the processor loads without torchvision (its video processor needs it): images only
    pre = ImagePreprocessor.load(qwen_folder)
    assert pre is not None and pre.image_token == "<|image_pad|>"
    wide = decode_image(image_bytes(60, 40, color=(255, 0, 0)), "image/png", ImageLimits())
    tall = decode_image(image_bytes(40, 90, color=(0, 0, 255)), "image/png", ImageLimits())
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    ids, images = pre.prepare(f"w5 {vision} w6 {vision}", [wide, tall], add_special_tokens=False)
    own = pre.processor(
        text=[f"w5 {vision} w6 {vision}"], images=[wide.image, tall.image], return_tensors="np"
    )
    assert ids == own["input_ids"][0].tolist()
    assert [(x.offset, x.num_tokens) for x in images] == [(2, 6), (11, 6)]
    # each image's own flattened patches and [1, 3] grid; the per-token mm_token_type_ids stay out
    assert [x.extras["image_grid_thw"].tolist() for x in images] == [[[1, 4, 6]], [[1, 6, 4]]]
    assert all(set(x.extras) == {"image_grid_thw"} for x in images)
    np.testing.assert_array_equal(images[0].pixel_values, own["pixel_values"][:24])
    np.testing.assert_array_equal(images[1].pixel_values, own["pixel_values"][24:])


def test_idefics3_tiles_are_each_their_own_image_input(tmp_path):
    from tgi.core.testing.tiny_idefics3 import TOKENS_PER_TILE, save_idefics3_processor

    pre = ImagePreprocessor.load(str(save_idefics3_processor(tmp_path / "idefics3")))
    wide = decode_image(image_bytes(60, 40, color=(255, 0, 0)), "image/png", ImageLimits())
    tall = decode_image(image_bytes(40, 90, color=(0, 0, 255)), "image/png", ImageLimits())
    text = "w5 <image> w6 <image> w7"
    ids, tiles = pre.prepare(text, [wide, tall], add_special_tokens=False)
    own = pre.processor(text=[text], images=[wide.image, tall.image], return_tensors="np")
    assert ids == own["input_ids"][0].tolist()
    # 2 x 2 tiles and the whole image, then 2 x 1 and the whole image: one run of placeholders each, with
    # the processor's text (`<row_r_col_c>`, `<global-img>`, newlines) between them
    assert len(tiles) == 5 + 3 and all(x.num_tokens == TOKENS_PER_TILE for x in tiles)
    assert all(ids[x.offset : x.offset + x.num_tokens] == [pre.image_token_id] * 4 for x in tiles)
    for k, x in enumerate(tiles):  # each tile's own pixels and mask
        np.testing.assert_array_equal(x.pixel_values, own["pixel_values"][0, k : k + 1])
        np.testing.assert_array_equal(
            x.extras["pixel_attention_mask"], own["pixel_attention_mask"][0, k : k + 1]
        )
    # each tile its own key in the prefix cache, the same for the same image again
    assert len({x.content_hash for x in tiles}) == 8
    again = pre.prepare("w9 <image>", [wide], add_special_tokens=False)[1]
    assert [x.content_hash for x in again] == [x.content_hash for x in tiles[:5]]
    # an image the processor does not split is one tile, keyed by the image's own digest
    pre.processor.image_processor.do_image_splitting = False
    (whole,) = pre.prepare("w9 <image>", [wide], add_special_tokens=False)[1]
    assert whole.content_hash == hashlib.sha256(image_bytes(60, 40, color=(255, 0, 0))).digest()


def test_llava_next_images_are_each_one_input_with_their_crops_and_size(tmp_path):
    from tgi.core.testing.tiny_llava_next import save_llava_next_processor

    pre = ImagePreprocessor.load(str(save_llava_next_processor(tmp_path / "llava-next")))
    wide = decode_image(image_bytes(60, 40, color=(255, 0, 0)), "image/png", ImageLimits())
    square = decode_image(image_bytes(30, 30, color=(0, 0, 255)), "image/png", ImageLimits())
    text = "w5 <image> w6 <image> w7"
    ids, images = pre.prepare(text, [wide, square], add_special_tokens=False)
    own = pre.processor(text=[text], images=[wide.image, square.image], return_tensors="np")
    assert ids == own["input_ids"][0].tolist()
    # [images, crops, 3, H, W]: one input per image (not per crop), its placeholders as many as its size gives
    assert [(x.offset, x.num_tokens) for x in images] == [(1, 14), (16, 24)]
    for k, x in enumerate(images):
        np.testing.assert_array_equal(x.pixel_values, own["pixel_values"][k : k + 1])
        np.testing.assert_array_equal(x.extras["image_sizes"], own["image_sizes"][k : k + 1])


def test_gemma3_images_are_their_soft_token_runs_inside_start_and_end_of_image(tmp_path):
    from tgi.core.testing.tiny_gemma3 import BOI, TOKENS_PER_IMAGE, save_gemma3_processor

    pre = ImagePreprocessor.load(str(save_gemma3_processor(tmp_path / "gemma3")))
    text = f"w5 {BOI} w6 {BOI} w7"
    ids, images = pre.prepare(text, [_decoded((255, 0, 0)), _decoded((0, 0, 255))], add_special_tokens=False)
    # `<start_of_image>` is what a prompt holds; the processor expands it into a run of `<image_soft_token>`
    # between `<start_of_image>` and `<end_of_image>`: the run is the image's placeholders
    assert pre.image_token == BOI and pre.image_token_id == pre.processor.tokenizer.image_token_id
    assert [(x.offset, x.num_tokens) for x in images] == [(2, TOKENS_PER_IMAGE), (9, TOKENS_PER_IMAGE)]
    assert all(ids[x.offset - 1] == pre.processor.tokenizer.boi_token_id for x in images)
