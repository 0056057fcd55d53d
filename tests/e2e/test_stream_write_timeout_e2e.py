"""A client that stops reading a stream does not keep its slot: past `--stream-write-timeout` the server
cancels the request, and its concurrency slot and KV blocks are back."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

from e2e_server import KEY, WRITE_TIMEOUT_S


def _stalled_stream(url: str, body: dict) -> socket.socket:
    """A raw connection with a small receive buffer that sends a streamed request and never reads."""
    u = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # before connect: a small window, and small segments, so that the server's send buffer (sized from the
    # segment size) stays small as well
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    sock.connect((u.hostname, u.port))
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def test_stalled_reader_is_cancelled_and_frees_its_slot(keyed_server, get_metrics):
    """On the session's keyed server (`--stream-write-timeout 2`, `--api-key`)."""
    server, auth = keyed_server, {"Authorization": f"Bearer {KEY}"}

    def metrics():
        return get_metrics(server.url, auth)

    total = metrics()["tgi_kv_total_blocks"]
    # ignore_eos and five logprobs per token: far more than the socket buffers hold
    body = {
        "prompt": "Once upon a time",
        "max_tokens": 900,
        "ignore_eos": True,
        "logprobs": 5,
        "stream": True,
        "temperature": 0,
    }
    sock = _stalled_stream(server.url, body)
    try:
        deadline = time.monotonic() + 60
        while metrics()["tgi_request_in_flight"] != 1:
            assert time.monotonic() < deadline, "the streamed request was never admitted"
            time.sleep(0.1)
        # the reader stalls from the first byte: once the socket buffers are full (a hundred-odd tokens),
        # within the deadline plus a few engine steps the request is gone, though the socket is still open (a
        # liveness bound, generous: on a loaded machine a token may take half a second)
        deadline = time.monotonic() + WRITE_TIMEOUT_S + 120
        while time.monotonic() < deadline:
            m = metrics()
            if m["tgi_request_in_flight"] == 0 and m["tgi_kv_free_blocks"] == total:
                break
            time.sleep(0.2)
        assert m["tgi_request_in_flight"] == 0, m
        assert m["tgi_kv_free_blocks"] == total, m
        assert m["tgi_batch_current_size"] == 0, m
    finally:
        sock.close()
    assert "--stream-write-timeout" in server.logs()
