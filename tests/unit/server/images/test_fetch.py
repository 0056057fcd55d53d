"""Image URLs fetched against a real HTTP server on loopback (a thread of `http.server`)."""

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from image_files import data_url, image_bytes

from tgi.server.images.fetch import MediaPolicy
from tgi.server.images.fetch import image_bytes as fetch
from tgi.server.images.limits import ImageError

PNG = image_bytes(4, 4)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path == "/cat.png":
            self._send(200, PNG)
        elif self.path == "/big.png":
            self._send(200, b"\0" * 5000)
        elif self.path == "/slow.png":
            time.sleep(1.5)
            self._send(200, PNG)
        elif self.path == "/missing.png":
            self._send(404, b"no")
        elif self.path == "/to-localhost":
            self._redirect(f"http://localhost:{port}/cat.png")
        elif self.path == "/to-cat":
            self._redirect("/cat.png")
        elif self.path == "/loop":
            self._redirect("/loop")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # gave up (the timeout test)
            self.wfile.write(body)

    def _redirect(self, where: str) -> None:
        self.send_response(302)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


LOOPBACK = MediaPolicy(allowed_domains=("127.0.0.1",), timeout_s=1.0)


def test_a_loopback_address_is_refused_unless_its_host_is_allowed(base):
    with pytest.raises(ImageError, match=r"resolves to a non-public address \(127.0.0.1\)") as caught:
        fetch(f"{base}/cat.png", MediaPolicy(), 10_000, "messages[0].content[0].image_url.url")
    assert caught.value.field == "messages[0].content[0].image_url.url"
    assert fetch(f"{base}/cat.png", LOOPBACK, 10_000) == (PNG, "image/png")


def test_localhost_is_refused_as_its_addresses_are_loopback(base):
    port = base.rsplit(":", 1)[1]
    with pytest.raises(ImageError, match="`localhost` resolves to a non-public address"):
        fetch(f"http://localhost:{port}/cat.png", MediaPolicy(), 10_000)


def test_each_redirect_is_checked_again_and_bounded(base):
    assert fetch(f"{base}/to-cat", LOOPBACK, 10_000) == (PNG, "image/png")
    with pytest.raises(ImageError, match="only name the hosts of --allowed-media-domains, not `localhost`"):
        fetch(f"{base}/to-localhost", LOOPBACK, 10_000)
    with pytest.raises(ImageError, match="redirects more than 3 times"):
        fetch(f"{base}/loop", LOOPBACK, 10_000)


def test_size_timeout_and_status_are_refused_with_the_reason(base):
    with pytest.raises(ImageError, match="has 5000 bytes; the limit is 1000"):
        fetch(f"{base}/big.png", LOOPBACK, 1000)
    with pytest.raises(ImageError, match="took more than 1s"):
        fetch(f"{base}/slow.png", LOOPBACK, 10_000)
    with pytest.raises(ImageError, match="HTTP 404"):
        fetch(f"{base}/missing.png", LOOPBACK, 10_000)


def test_file_urls_are_read_only_under_the_allowed_folder(tmp_path):
    inside = tmp_path / "media"
    inside.mkdir()
    (inside / "cat.png").write_bytes(PNG)
    (tmp_path / "secret.png").write_bytes(PNG)
    with pytest.raises(ImageError, match="no --allowed-local-media-path"):
        fetch(f"file://{inside}/cat.png", MediaPolicy(), 10_000)
    policy = MediaPolicy(local_root=str(inside))
    assert fetch(f"file://{inside}/cat.png", policy, 10_000) == (PNG, None)
    with pytest.raises(ImageError, match="must lie under --allowed-local-media-path"):
        fetch(f"file://{inside}/../secret.png", policy, 10_000)


def test_data_urls_and_other_schemes():
    assert fetch(data_url(PNG), MediaPolicy(), 10_000) == (PNG, "image/png")
    with pytest.raises(ImageError, match="base64 is not valid"):
        fetch("data:image/png;base64,@@@not-base64", MediaPolicy(), 10_000)
    with pytest.raises(ImageError, match="must be `data:<mimetype>;base64,<data>`"):
        fetch("data:image/png,raw", MediaPolicy(), 10_000)
    with pytest.raises(ImageError, match="must be a data:, http\\(s\\): or file: URL"):
        fetch("ftp://example.com/cat.png", MediaPolicy(), 10_000)
