"""The shared secret of a group over several hosts, and the HMAC every message between its processes carries.

c10d's store and gloo's sockets have no authentication: whoever reaches `--master-port` can write the store's
keys. So the nodes of a group share a secret (`--dist-secret-file PATH`, or the variable `TGI_DIST_SECRET`
holding the secret itself; required with `--nnodes` > 1, on any address: a loopback port is open to every
user of the host), and:

- every value of the join (`node_join.py`) is sealed with HMAC-SHA256 under the secret, over its bytes and a
  context that names its key and this group's session (a random nonce node 0 draws at start), so that no
  value is taken for another, nor one of an earlier group for this one's;
- every command rank 0 broadcasts, and the step output the last pipeline stage sends back, is sealed under a
  key of the group's own (`command_key`: from the secret and the session over several hosts, random for a
  group on one host) with its sequence number in the context.

A value that fails its check ends the process with an `AuthError` that names the value, never the secret.
The seal authenticates; it does not hide: the store's values can be read by whoever reaches its port.
Torch-free.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat

from tgi.core.config import ConfigError

log = logging.getLogger(__name__)

SECRET_ENV = "TGI_DIST_SECRET"
SECRET_FLAG = "--dist-secret-file"
#: the shortest secret taken (a 32-byte one: `openssl rand -hex 32 > secret`)
MIN_SECRET_BYTES = 16
SEALED = b"hmac-sha256:"
UNSIGNED = b"unsigned:"
MAC_HEX = 64
NAMES = f"{SECRET_FLAG} / {SECRET_ENV}"
HOW = f"{SECRET_FLAG} PATH or {SECRET_ENV} (make one with `openssl rand -hex 32 > secret`)"


class SecretError(ConfigError):
    """No shared secret where one is required, or one that cannot be used."""


class AuthError(RuntimeError):
    """A value from another process failed its HMAC check (another secret, or a forgery)."""


def load_secret(path: str | None, env: dict[str, str] | None = None) -> bytes | None:
    """The secret of `path` (the file's bytes, surrounding whitespace removed), else of `TGI_DIST_SECRET`;
    None when neither is given. `SecretError` for a file that cannot be read or a secret too short."""
    env = os.environ if env is None else env
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read().strip()
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise SecretError(f"{SECRET_FLAG} {path}: cannot read it ({exc.strerror or exc})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "%s %s: the file is readable by other users of this host (chmod 600 it)", SECRET_FLAG, path
            )
        where = f"{SECRET_FLAG} {path}"
    else:
        value = env.get(SECRET_ENV, "")
        if not value:
            return None
        secret, where = value.strip().encode(), SECRET_ENV
    if len(secret) < MIN_SECRET_BYTES:
        raise SecretError(f"{where}: the secret is shorter than {MIN_SECRET_BYTES} bytes; {HOW}")
    return secret


def require_secret(path: str | None, nnodes: int, env: dict[str, str] | None = None) -> bytes | None:
    """The group's secret: required (`SecretError` naming the flag and the variable) when it spans more
    than one node; None for a group on one host that was given none."""
    secret = load_secret(path, env)
    if secret is None and nnodes > 1:
        raise SecretError(
            f"--nnodes {nnodes}: the nodes of a group over several hosts must share a secret, and none was "
            f"given: {HOW}, the same on every node"
        )
    return secret


def new_session() -> str:
    """A fresh nonce for one group (node 0 draws it; it is public)."""
    return secrets.token_hex(16)


def command_key(secret: bytes | None, session: str) -> bytes:
    """The key the ranks' commands and step outputs are sealed with: from the secret and the session over
    several hosts (every node derives it), random on one host (rank 0 hands it to the ranks it starts)."""
    if secret is None:
        return secrets.token_bytes(32)
    return hmac.new(secret, b"tgi/commands/" + session.encode(), hashlib.sha256).digest()


def _mac(key: bytes, context: str, payload: bytes) -> bytes:
    ctx = context.encode()
    msg = len(ctx).to_bytes(4, "big") + ctx + payload
    return hmac.new(key, msg, hashlib.sha256).hexdigest().encode()


def seal(key: bytes | None, context: str, payload: bytes) -> bytes:
    """`payload` with its HMAC over `context` and itself; marked unsigned when there is no key (a node
    without a secret says so to node 0, which refuses it)."""
    if key is None:
        return UNSIGNED + payload
    return SEALED + _mac(key, context, payload) + b":" + payload


def is_unsigned(sealed: bytes) -> bool:
    return sealed.startswith(UNSIGNED)


def unsigned_payload(sealed: bytes) -> bytes:
    """The payload of a value, whatever its seal, unchecked: only to say who sent a value refused."""
    if sealed.startswith(UNSIGNED):
        return sealed[len(UNSIGNED) :]
    return sealed[len(SEALED) + MAC_HEX + 1 :]


def open_sealed(key: bytes, context: str, sealed: bytes, what: str) -> bytes:
    """The payload of `sealed` once its HMAC checks under `key` and `context`; else `AuthError` naming
    `what` (the value, never the key)."""
    if sealed.startswith(UNSIGNED):
        raise AuthError(f"{what} carries no HMAC: its sender has no shared secret ({HOW})")
    head = len(SEALED)
    mac, sep = sealed[head : head + MAC_HEX], sealed[head + MAC_HEX : head + MAC_HEX + 1]
    if not sealed.startswith(SEALED) or sep != b":":
        raise AuthError(f"{what} is not a sealed value")
    payload = sealed[head + MAC_HEX + 1 :]
    if not hmac.compare_digest(mac, _mac(key, context, payload)):
        raise AuthError(f"{what} failed its HMAC check: another shared secret, or not from this group")
    return payload


def attach_key(collective: object, key: bytes) -> None:
    """Give a group's collective the key its messages are sealed with (each rank, once the group formed)."""
    collective.message_key = key  # type: ignore[attr-defined]


def message_key(collective: object) -> bytes:
    key = getattr(collective, "message_key", None)
    if not isinstance(key, bytes):
        raise RuntimeError("the group's collective carries no message key (`dist_auth.attach_key`)")
    return key
