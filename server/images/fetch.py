"""An image URL's bytes: `data:` URLs decoded, `http(s)` URLs fetched SSRF-safely, `file:` URLs read only
under `--allowed-local-media-path`. Blocking: the server calls it off the event loop.

Fetching: every address the host resolves to must be a public one (no private, loopback, link-local,
multicast, reserved or unspecified address) unless `--allowed-media-domains` names the host; the
connection goes to the address that was checked (a second lookup cannot swap in another); each redirect
is checked again, at most `max_redirects` of them; the whole fetch has `timeout_s` and at most `max_bytes`
are read."""

from __future__ import annotations

import base64
import binascii
import http.client
import ipaddress
import os
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

from tgi.server.images.limits import ImageError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class MediaPolicy:
    """Where image URLs may point. `allowed_domains`: empty, any host whose addresses are all public;
    else only these hosts, whatever they resolve to (vLLM's --allowed-media-domains). `local_root`: the
    folder `file:` URLs must lie in (--allowed-local-media-path); None: `file:` URLs are refused."""

    allowed_domains: tuple[str, ...] = ()
    local_root: str | None = None
    timeout_s: float = 10.0
    max_redirects: int = 3


def image_bytes(url: str, policy: MediaPolicy, max_bytes: int, field: str | None = None):
    """(bytes, mimetype or None) of the image at `url`, or `ImageError` saying why it cannot be had."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "data":
        return data_url_bytes(url, field)
    if scheme in ("http", "https"):
        return _fetched(url, policy, max_bytes, field)
    if scheme == "file":
        return _local_file(url, policy, max_bytes, field), None
    raise ImageError(f"an image URL must be a data:, http(s): or file: URL, not `{_shown(url)}`", field)


def data_url_bytes(url: str, field: str | None = None) -> tuple[bytes, str | None]:
    """A `data:<mimetype>;base64,<data>` URL's bytes and mimetype (None when it gives none)."""
    head, comma, payload = url[5:].partition(",")
    if not comma or not head.endswith(";base64"):
        raise ImageError("an image data URL must be `data:<mimetype>;base64,<data>`", field)
    mimetype = head[: -len(";base64")].split(";")[0].strip() or None
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image's base64 is not valid", field) from None
    return data, mimetype


def _local_file(url: str, policy: MediaPolicy, max_bytes: int, field: str | None) -> bytes:
    if policy.local_root is None:
        raise ImageError("file: image URLs are refused (the server has no --allowed-local-media-path)", field)
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ImageError("a file: image URL must name a local path", field)
    root = os.path.realpath(policy.local_root)
    path = os.path.realpath(unquote(parts.path))
    if os.path.commonpath([root, path]) != root:
        raise ImageError("a file: image URL must lie under --allowed-local-media-path", field)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError:
        raise ImageError("the file: image URL cannot be read", field) from None
    if len(data) > max_bytes:
        raise ImageError(f"an image has more than {max_bytes} bytes (--payload-limit)", field)
    return data


def checked_address(host: str, port: int, policy: MediaPolicy, field: str | None = None) -> str:
    """The address to connect to for `host`: every address it resolves to checked (module docstring)."""
    allowed = {d.lower() for d in policy.allowed_domains}
    if allowed and host.lower() not in allowed:
        raise ImageError(
            f"image URLs may only name the hosts of --allowed-media-domains, not `{host}`", field
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise ImageError(f"the image URL's host `{host}` does not resolve", field) from None
    addresses = [info[4][0] for info in infos]
    if not allowed:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not ip.is_global or ip.is_multicast:
                raise ImageError(
                    f"the image URL's host `{host}` resolves to a non-public address ({ip}); "
                    "--allowed-media-domains can allow it",
                    field,
                )
    return addresses[0]


class _PinnedHTTP(http.client.HTTPConnection):
    """A connection to `address`, sending `host` as the Host header."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """As `_PinnedHTTP`, over TLS with the certificate checked for `host`."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _fetched(url: str, policy: MediaPolicy, max_bytes: int, field: str | None) -> tuple[bytes, str | None]:
    deadline = time.monotonic() + policy.timeout_s
    for _ in range(policy.max_redirects + 1):
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ImageError(f"an image URL must be an http(s) URL with a host, not `{_shown(url)}`", field)
        https = parts.scheme.lower() == "https"
        port = parts.port or (443 if https else 80)
        address = checked_address(parts.hostname, port, policy, field)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        connection = (_PinnedHTTPS if https else _PinnedHTTP)(parts.hostname, address, port, left)
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request("GET", target, headers={"Accept": "image/*", "User-Agent": "tgi"})
            response = connection.getresponse()
            if response.status in _REDIRECTS and response.getheader("Location"):
                url = urljoin(url, response.getheader("Location"))
                continue
            if response.status != 200:
                raise ImageError(f"fetching the image URL failed: HTTP {response.status}", field)
            length = response.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise ImageError(f"the image URL's image has {length} bytes; the limit is {max_bytes}", field)
            data = bytearray()
            while chunk := response.read(65536):
                data += chunk
                if len(data) > max_bytes:
                    raise ImageError(f"the image URL's image has more than {max_bytes} bytes", field)
                if time.monotonic() > deadline:
                    raise TimeoutError
            kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
            return bytes(data), kind if kind.startswith("image/") else None
        except TimeoutError:
            raise ImageError(f"fetching the image URL took more than {policy.timeout_s:g}s", field) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ImageError(f"fetching the image URL failed: {type(exc).__name__}", field) from None
        finally:
            connection.close()
    else:
        raise ImageError(f"the image URL redirects more than {policy.max_redirects} times", field)
    raise ImageError(f"fetching the image URL took more than {policy.timeout_s:g}s", field)


def _shown(url: str) -> str:
    return url if len(url) <= 60 else url[:57] + "..."
