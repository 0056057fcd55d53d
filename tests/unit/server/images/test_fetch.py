"""Image URLs fetched against real HTTP servers on loopback (a thread of `http.server`, and a raw socket that
drips its answer a byte at a time): the refusals, the one deadline of a whole fetch, its abandonment when the
client leaves, and what the client is told."""

import asyncio
import contextlib
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from image_files import data_url, image_bytes, loopback_fetchable

from tgi.server.images.deadline import FetchGuard
from tgi.server.images.fetch import MediaPolicy, images_fetched
from tgi.server.images.fetch import image_bytes as fetch
from tgi.server.images.limits import ImageError
from tgi.server.images.sources import ImageRef

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
        elif self.path == "/to-port-81":
            self._redirect("http://127.0.0.1:81/cat.png")

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


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _loopback(base: str, timeout_s: float = 1.0) -> MediaPolicy:
    """The policy of a server whose --allowed-media-domains names 127.0.0.1 and that allows `base`'s port."""
    return MediaPolicy(allowed_domains=("127.0.0.1",), timeout_s=timeout_s, allowed_ports=(_port(base),))


def test_a_loopback_address_is_refused_even_for_an_allowed_host_and_not_named(base):
    for policy in (MediaPolicy(allowed_ports=(_port(base),)), _loopback(base)):
        with pytest.raises(ImageError) as caught:
            fetch(f"{base}/cat.png", policy, 10_000, "messages[0].content[0].image_url.url")
        assert str(caught.value) == "the image URL's host is not allowed"
        assert caught.value.field == "messages[0].content[0].image_url.url"
    with loopback_fetchable():  # the seam the other tests fetch through
        assert fetch(f"{base}/cat.png", _loopback(base), 10_000) == (PNG, "image/png")


def test_localhost_is_refused_as_its_addresses_are_loopback(base):
    with pytest.raises(ImageError, match=r"^the image URL's host is not allowed$"):
        fetch(f"http://localhost:{_port(base)}/cat.png", MediaPolicy(allowed_ports=(_port(base),)), 10_000)


def test_only_ports_80_and_443_unless_more_are_allowed(base):
    with pytest.raises(ImageError, match="names port 8080; image URLs may use ports 80 and 443 "):
        fetch("http://images.example.com:8080/cat.png", MediaPolicy(), 10_000)
    with pytest.raises(ImageError, match=f"names port {_port(base)}; .* ports 80 and 443 and 8080 "):
        fetch(f"{base}/cat.png", MediaPolicy(allowed_domains=("127.0.0.1",), allowed_ports=(8080,)), 10_000)
    with loopback_fetchable(), pytest.raises(ImageError, match="redirects to a URL that names port 81"):
        fetch(f"{base}/to-port-81", _loopback(base), 10_000)


@pytest.mark.parametrize(
    "url",
    [
        "http://h:99999/",
        "http://h:abc/",
        "http://h\x00st/",
        "http://ho st/",
        "http://[::1/",
        "http://[zz::1]/",
    ],
)
def test_a_malformed_url_is_an_image_error_not_a_value_error(url):
    with pytest.raises(ImageError, match="not valid") as caught:  # an ImageError is a 422, not a 500
        fetch(url, MediaPolicy(), 10_000, "f")
    assert type(caught.value) is ImageError and caught.value.field == "f"


def test_each_redirect_is_checked_again_and_bounded(base):
    with loopback_fetchable():
        assert fetch(f"{base}/to-cat", _loopback(base), 10_000) == (PNG, "image/png")
        with pytest.raises(ImageError, match=r"^the image URL's host is not one of --allowed-media-domains$"):
            fetch(f"{base}/to-localhost", _loopback(base), 10_000)
        with pytest.raises(ImageError, match="redirects more than 3 times"):
            fetch(f"{base}/loop", _loopback(base), 10_000)


def test_size_timeout_and_status_are_refused_with_the_reason(base):
    with loopback_fetchable():
        with pytest.raises(ImageError, match="has 5000 bytes; the limit is 1000"):
            fetch(f"{base}/big.png", _loopback(base), 1000)
        with pytest.raises(ImageError, match="took more than 1s"):
            fetch(f"{base}/slow.png", _loopback(base), 10_000)
        with pytest.raises(ImageError, match="HTTP 404"):
            fetch(f"{base}/missing.png", _loopback(base), 10_000)


def test_a_failed_connection_is_told_without_its_exception(base):
    with socket.socket() as unused:  # a port nobody listens on: bound, never listening
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}"
        with loopback_fetchable(), pytest.raises(ImageError) as caught:
            fetch(f"{closed}/cat.png", _loopback(closed), 10_000)
    assert str(caught.value) == "could not fetch the image URL"


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


class _Drip:
    """A server on loopback that answers one GET with `head` at once, then drips `drip` one byte every 0.1 s
    (60 s of it): the client never waits long for a byte, and never gets all of them in time. `dripping` is set
    once its first byte went out; `finished`, once it sent them all; it stops when the client goes."""

    def __init__(self, head: bytes, drip: bytes = b"x" * 600) -> None:
        self.head, self.drip = head, drip
        self.dripping, self.finished = threading.Event(), threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection, contextlib.suppress(OSError):
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(4096)
            connection.sendall(self.head)
            for i in range(len(self.drip)):
                time.sleep(0.1)
                connection.sendall(self.drip[i : i + 1])
                self.dripping.set()
            self.finished.set()

    def close(self) -> None:
        self._thread.join(timeout=30)  # it stops at its next byte once the client has gone
        self._listener.close()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 600\r\n\r\n",  # the body drips
        b"HTTP/1.1 200 OK\r\nX-Slow: ",  # the headers drip
    ],
    ids=["body", "headers"],
)
def test_a_server_that_drips_bytes_is_cut_off_at_the_deadline(head):
    drip = _Drip(head)
    try:
        started = time.monotonic()
        with loopback_fetchable(), pytest.raises(ImageError) as caught:
            fetch(f"{drip.base}/cat.png", _loopback(drip.base, timeout_s=0.5), 10_000)
        took = time.monotonic() - started
        assert str(caught.value) == "fetching the image URL took more than 0.5s (--image-fetch-timeout)"
        assert drip.dripping.is_set() and not drip.finished.is_set()  # it was still sending when cut off
        assert took < 5.0  # liveness, 10x the deadline (dripping on, it would take 60 s)
    finally:
        drip.close()


def test_a_fetch_is_abandoned_when_its_client_leaves():
    """The awaiting task cancelled (the client left): the fetch's socket is shut down and its thread freed
    long before its 60 s deadline; the pool's one thread then runs the next job."""
    drip = _Drip(b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n")
    pool = ThreadPoolExecutor(1)
    try:

        async def leave() -> None:
            with loopback_fetchable():
                refs = [ImageRef(f"{drip.base}/cat.png", "f")]
                task = asyncio.create_task(images_fetched(pool, refs, _loopback(drip.base, 60.0), 10_000))
                await asyncio.get_running_loop().run_in_executor(None, drip.dripping.wait, 30)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        asyncio.run(leave())
        assert pool.submit(lambda: "free").result(timeout=30) == "free"  # within 30 s, not the 60 s deadline
        assert not drip.finished.is_set()
    finally:
        pool.shutdown(wait=False)
        drip.close()


def test_a_guard_cancelled_from_another_thread_ends_a_blocked_fetch():
    drip = _Drip(b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n")
    guard = FetchGuard(60.0)
    try:
        threading.Thread(target=lambda: drip.dripping.wait(30) and guard.cancel(), daemon=True).start()
        with loopback_fetchable(), pytest.raises(ImageError, match="abandoned"):
            fetch(f"{drip.base}/cat.png", _loopback(drip.base, 60.0), 10_000, guard=guard)
        assert not drip.finished.is_set()
    finally:
        drip.close()
