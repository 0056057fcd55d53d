import hashlib
import io

import pytest
from image_files import image_bytes
from PIL import Image

from tgi.server.images.decode import decode_image
from tgi.server.images.limits import ImageError, ImageLimits

LIMITS = ImageLimits(max_images=2, max_pixels=64 * 64, max_bytes=100_000)


def test_an_image_is_decoded_to_rgb_with_the_hash_of_its_bytes():
    data = image_bytes(10, 6, "JPEG")
    got = decode_image(data, "image/jpeg", LIMITS)
    assert got.image.mode == "RGB" and got.image.size == (10, 6)
    assert got.content_hash == hashlib.sha256(data).digest()
    assert decode_image(data, None, LIMITS).content_hash == got.content_hash  # no mimetype: any served


@pytest.mark.parametrize(
    ("data", "mimetype", "why"),
    [
        (image_bytes(), "image/jpeg", "declared `image/jpeg` but its bytes are PNG"),
        (image_bytes(), "image/tiff", "unsupported image type `image/tiff`"),
        (b"not an image at all", "image/png", "not an image of a served type"),
        (image_bytes(40, 40)[:-30], "image/png", "truncated or corrupt"),
        (image_bytes(65, 64), "image/png", "65x64 pixels is over --max-image-pixels (4096)"),
        (b"\0" * 100_001, "image/png", "--payload-limit allows 100000"),
    ],
)
def test_bad_images_are_refused_with_the_reason(data, mimetype, why):
    with pytest.raises(ImageError) as caught:
        decode_image(data, mimetype, LIMITS, "inputs")
    assert why in str(caught.value) and caught.value.field == "inputs"


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded():
    # a small file whose header claims 20000 x 20000 pixels: refused from the header
    out = io.BytesIO()
    Image.new("1", (20000, 20000)).save(out, format="PNG")
    assert len(out.getvalue()) < 100_000
    with pytest.raises(ImageError, match=r"is over --max-image-pixels \(4096\)"):
        decode_image(out.getvalue(), "image/png", LIMITS)
