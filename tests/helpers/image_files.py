"""Image bytes and URLs for tests of image requests: real encoded images made with PIL."""

from __future__ import annotations

import base64
import contextlib
import io
import threading
from collections.abc import Iterator


def image_bytes(width: int = 8, height: int = 8, fmt: str = "PNG", color=(200, 30, 60)) -> bytes:
    """An image of one `color`, encoded in `fmt`."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format=fmt)
    return out.getvalue()


def data_url(data: bytes, mimetype: str = "image/png") -> str:
    return f"data:{mimetype};base64,{base64.b64encode(data).decode()}"


@contextlib.contextmanager
def served_image(data: bytes, mimetype: str = "image/png") -> Iterator[str]:
    """An HTTP server on the loopback that answers every GET with `data`; yields an image URL on it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Image(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", mimetype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Image)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cat.png"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def loopback_fetchable() -> Iterator[None]:
    """Image URLs on the loopback fetched while this lasts, when their host is on --allowed-media-domains:
    the server refuses loopback addresses for every host (`tgi.server.images.addresses`), and the servers of
    these tests listen nowhere else. Every other check stays as it is."""
    from unittest import mock

    from tgi.server.images import fetch

    real = fetch.address_refusal

    def refusal(ip, allowed_host: bool = False) -> str | None:
        return None if allowed_host and ip.is_loopback else real(ip, allowed_host)

    with mock.patch.object(fetch, "address_refusal", refusal):
        yield
