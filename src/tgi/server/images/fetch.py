"""An image URL's bytes: `data:` URLs decoded, `http(s)` URLs fetched SSRF-safely, `file:` URLs read only
under `--allowed-local-media-path`. Blocking: the server calls it on its own small pool of fetch threads
(`FETCH_WORKERS`), never on asyncio's default executor, and abandons a fetch whose client left
(`FetchGuard.cancel`).

Fetching an http(s) URL:
- the URL is parsed first; a malformed one (a port that is no number or past 65535, a host with a space or a
  control character, a bad IPv6 literal) is an `ImageError` (a 422), never a `ValueError`;
- its port must be 80 or 443 (the scheme's default when none is given) or one of `--allowed-media-ports`;
- with `--allowed-media-domains` set, the host must be one of them;
- every address the host resolves to is checked (`tgi.server.images.addresses`): loopback, link-local,
  unspecified and multicast addresses are refused for every host; other non-public ones (site-local
  `fec0::/10` among them) unless `--allowed-media-domains` names the host. IPv4-mapped, NAT64
  (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses are judged by the IPv4 address they embed (so NAT64 or
  6to4 of a public IPv4 address is fetched, of a private one refused); local-use NAT64 `64:ff9b:1::/48` is
  refused as not public whatever it embeds;
- the connection goes to the address that was checked (a second lookup cannot swap in another); each
  redirect is checked again, at most `max_redirects` of them;
- the whole fetch (connect, TLS, headers, body, every redirect) has one deadline, `timeout_s` from when it
  was asked for (`FetchGuard`): each socket operation waits at most the time left, and a watchdog shuts the
  socket down when the deadline passes, so a server that drips a byte a second cannot hold the fetch past
  it. Name resolution is left to the system resolver's own timeouts; the deadline is checked after it;
- at most `max_bytes` are read.
What the client is told is generic ("the image URL's host is not allowed", "could not fetch the image URL"):
never an address its host resolved to nor an exception's type; the log says which and why."""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import ipaddress
import logging
import os
import re
import socket
import ssl
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from urllib.parse import quote, unquote, urljoin, urlsplit

from tgi.server.images.addresses import address_refusal
from tgi.server.images.deadline import FetchEnded, FetchGuard
from tgi.server.images.limits import ImageError
from tgi.server.images.sources import ImageRef
from tgi.server.validation.fields import escaped

log = logging.getLogger("tgi.server")

#: image fetches running at once, server-wide (their own thread pool); more wait their turn, their
#: deadline running meanwhile
FETCH_WORKERS = 8
#: the ports an image URL may name without --allowed-media-ports
DEFAULT_PORTS = (80, 443)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NOT_FETCHED = "could not fetch the image URL"
_HOST_REFUSED = "the image URL's host is not allowed"
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?")


@dataclass(frozen=True)
class MediaPolicy:
    """Where image URLs may point. `allowed_domains`: empty, any host whose addresses are all public;
    else only these hosts, whose private addresses are then allowed too (vLLM's --allowed-media-domains;
    loopback, link-local, unspecified and multicast ones never are). `allowed_ports`: ports allowed beside
    80 and 443 (--allowed-media-ports). `local_root`: the folder `file:` URLs must lie in
    (--allowed-local-media-path); None: `file:` URLs are refused."""

    allowed_domains: tuple[str, ...] = ()
    local_root: str | None = None
    timeout_s: float = 10.0
    max_redirects: int = 3
    allowed_ports: tuple[int, ...] = ()


def image_bytes(
    url: str,
    policy: MediaPolicy,
    max_bytes: int,
    field: str | None = None,
    guard: FetchGuard | None = None,
) -> tuple[bytes, str | None]:
    """(bytes, mimetype or None) of the image at `url`, or `ImageError` saying why it cannot be had.
    `guard`: the fetch's deadline and cancellation (default: `policy.timeout_s` from now)."""
    try:
        scheme = urlsplit(url).scheme.lower()
        if scheme == "data":
            return data_url_bytes(url, field)
        if scheme in ("http", "https"):
            return _fetched(url, policy, max_bytes, field, guard or FetchGuard(policy.timeout_s))
        if scheme == "file":
            return _local_file(url, policy, max_bytes, field), None
    except ImageError:
        raise
    except ValueError as exc:  # a malformed URL anywhere (a safety net: `_target` refuses those it knows)
        log.warning("image URL `%s` refused: %s", escaped(_shown(url)), escaped(str(exc)))
        raise ImageError("the image URL is not valid", field) from None
    raise ImageError(f"an image URL must be a data:, http(s): or file: URL, not `{_shown(url)}`", field)


async def images_fetched(
    executor: Executor, refs: Sequence[ImageRef], policy: MediaPolicy, max_bytes: int
) -> list[tuple[bytes, str | None]]:
    """`image_bytes` of each of `refs` (its url, naming its field), run on `executor` (the server's fetch
    threads, not asyncio's default executor, which grammar validation uses and slow hosts could fill), each
    with its deadline running from now (a fetch that waits for a thread spends its time waiting). When
    this ends (all had, one refused, or the awaiting task cancelled: the client left) the fetches still
    running or waiting are abandoned, their sockets shut down."""
    guards = [FetchGuard(policy.timeout_s) for _ in refs]
    loop = asyncio.get_running_loop()
    fetches = [
        loop.run_in_executor(executor, image_bytes, ref.url, policy, max_bytes, ref.field, guard)
        for ref, guard in zip(refs, guards, strict=True)
    ]
    try:
        return list(await asyncio.gather(*fetches))
    finally:
        for guard, fetch in zip(guards, fetches, strict=True):
            guard.cancel()
            fetch.cancel()  # one not started never starts; one running is not waited for (nor its error)


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
    allowed = {d.lower().rstrip(".") for d in policy.allowed_domains}
    if allowed and host.rstrip(".") not in allowed:
        raise ImageError("the image URL's host is not one of --allowed-media-domains", field)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        log.warning("image URL host `%s` does not resolve: %s", escaped(host), escaped(str(exc)))
        raise ImageError("the image URL's host does not resolve", field) from None
    addresses = [info[4][0] for info in infos]
    for address in addresses:
        why = address_refusal(ipaddress.ip_address(address.split("%")[0]), bool(allowed))
        if why is not None:
            log.warning("image URL host `%s` refused: %s", escaped(host), why)
            raise ImageError(_HOST_REFUSED, field)
    return addresses[0]


def _target(url: str, policy: MediaPolicy, field: str | None, redirected: bool) -> tuple[str, int, bool, str]:
    """(host, port, https, request target) of an http(s) `url`, or `ImageError` when it is malformed or its
    port is not allowed. A redirect's URL (`redirected`) is not repeated to the client."""
    shown = "the image URL redirects to a URL that" if redirected else "the image URL"
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        log.warning("image URL `%s` refused: %s", escaped(_shown(url)), escaped(str(exc)))
        raise ImageError(f"{shown} is not valid (its host or port)", field) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        if redirected:
            raise ImageError(f"{shown} is not an http(s) URL with a host", field)
        raise ImageError(f"an image URL must be an http(s) URL with a host, not `{_shown(url)}`", field)
    if ":" in host:  # an IPv6 literal (urlsplit checked its brackets and its form)
        if "%" in host:
            raise ImageError(f"{shown} names an IPv6 zone, which is not allowed", field)
    else:
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ImageError(f"{shown} has a host that is not valid", field) from None
        if not _HOST_NAME.fullmatch(host) or len(host) > 253:
            raise ImageError(f"{shown} has a host that is not valid", field)
    https = scheme == "https"
    port = (443 if https else 80) if port is None else port
    if port not in (*DEFAULT_PORTS, *policy.allowed_ports):
        raise ImageError(
            f"{shown} names port {port}; image URLs may use ports 80 and 443"
            + (f" and {', '.join(map(str, policy.allowed_ports))}" if policy.allowed_ports else "")
            + " (--allowed-media-ports adds more)",
            field,
        )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, port, https, "".join(c if 32 < ord(c) < 127 else quote(c) for c in target)


def _connected(address: str, port: int, guard: FetchGuard) -> socket.socket:
    """A TCP connection to `address`, watched by `guard`, within the time it has left."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        guard.watch(sock)
        sock.settimeout(guard.left())
        sock.connect((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


class _PinnedHTTP(http.client.HTTPConnection):
    """A connection to `address`, sending `host` as the Host header, watched by `guard`."""

    def __init__(self, host: str, address: str, port: int, guard: FetchGuard) -> None:
        super().__init__(host, port)
        self._address, self._guard = address, guard

    def connect(self) -> None:
        self.sock = _connected(self._address, self.port, self._guard)


class _PinnedHTTPS(_PinnedHTTP):
    """As `_PinnedHTTP`, over TLS with the certificate checked for `host`; the handshake watched too."""

    def connect(self) -> None:
        sock = _connected(self._address, self.port, self._guard)
        try:
            tls = ssl.create_default_context().wrap_socket(
                sock, server_hostname=self.host, do_handshake_on_connect=False
            )
        except BaseException:
            sock.close()
            raise
        self.sock = tls  # closed by the fetch from here on
        self._guard.watch(tls)
        tls.settimeout(self._guard.left())
        tls.do_handshake()


def _fetched(
    url: str, policy: MediaPolicy, max_bytes: int, field: str | None, guard: FetchGuard
) -> tuple[bytes, str | None]:
    late = ImageError(
        f"fetching the image URL took more than {guard.seconds:g}s (--image-fetch-timeout)", field
    )
    try:
        for hop in range(policy.max_redirects + 1):
            host, port, https, target = _target(url, policy, field, redirected=hop > 0)
            address = checked_address(host, port, policy, field)
            guard.left()
            connection = (_PinnedHTTPS if https else _PinnedHTTP)(host, address, port, guard)
            try:
                connection.request("GET", target, headers={"Accept": "image/*", "User-Agent": "tgi"})
                sock = connection.sock  # kept: `getresponse` drops it when the server closes after
                sock.settimeout(guard.left())
                response = connection.getresponse()
                guard.left()  # headers cut short by the watchdog read as a response: not one
                if response.status in _REDIRECTS and response.getheader("Location"):
                    url = urljoin(url, response.getheader("Location"))
                    continue
                if response.status != 200:
                    raise ImageError(f"fetching the image URL failed: HTTP {response.status}", field)
                length = response.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) > max_bytes:
                    raise ImageError(
                        f"the image URL's image has {length} bytes; the limit is {max_bytes}", field
                    )
                data = bytearray()
                while not response.isclosed():  # closed: all of its Content-Length read (its socket too)
                    sock.settimeout(guard.left())
                    chunk = response.read(65536)
                    if not chunk:
                        break
                    data += chunk
                    if len(data) > max_bytes:
                        raise ImageError(f"the image URL's image has more than {max_bytes} bytes", field)
                guard.left()  # a body the watchdog cut short ended early: not the image
                kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
                return bytes(data), kind if kind.startswith("image/") else None
            finally:
                connection.close()
        raise ImageError(f"the image URL redirects more than {policy.max_redirects} times", field)
    except ImageError:
        raise
    except FetchEnded:
        raise _why_ended(guard, late, field) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # TimeoutError among them
        if guard.ended is not None or isinstance(exc, TimeoutError):
            raise _why_ended(guard, late, field) from None
        why = f"{type(exc).__name__}: {escaped(str(exc))}"
        log.warning("image URL `%s` not fetched: %s", escaped(_shown(url)), why)
        raise ImageError(_NOT_FETCHED, field) from None
    finally:
        guard.finish()


def _why_ended(guard: FetchGuard, late: ImageError, field: str | None) -> ImageError:
    return (
        ImageError("the image fetch was abandoned (the client left)", field)
        if guard.ended == "cancelled"
        else late
    )


def _shown(url: str) -> str:
    return url if len(url) <= 60 else url[:57] + "..."
