"""Where the ranks of one tensor-parallel group meet, and that nothing of it listens beyond the interface asked for.

PyTorch's own `tcp://` rendezvous starts a `TCPStore` that listens on every interface, unauthenticated,
whatever host the URL names; and gloo binds its data sockets to the address of this host's name. So:

- on one host, by default, the store is a file (`file://`) in a private folder (mode 0700) that
  `Rendezvous.close()` removes: no socket at all;
- with `--master-port`, a `--master-addr` that is not a loopback address, or `--nnodes` > 1, it is a
  `TCPStore` whose listening socket rank 0 binds to exactly that address and port (`create_store`), never
  to all interfaces; a non-loopback address is logged as reachable from the network. The store itself has
  no authentication and no TLS (c10d offers neither): a network policy must keep it to the group's hosts;
- gloo's sockets (and NCCL's, for an NCCL group) bind to the loopback interface when the rendezvous is on
  this host only, else to the interface whose address reaches `--master-addr` (`gloo_interface`); a
  `GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME` the user set wins;
- over several hosts, every value of the nodes' join and every message of the group carries an HMAC under
  the nodes' shared secret (`dist_auth.py`); nothing read from the store or a socket is unpickled.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import logging
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

#: gloo's and NCCL's own settings: the interfaces their sockets bind to
GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"
NCCL_IFNAME_ENV = "NCCL_SOCKET_IFNAME"


@dataclass(frozen=True)
class Rendezvous:
    """The rendezvous of one group, chosen by rank 0 before it spawns the others."""

    init_method: str  # `file://<private folder>/store` or `tcp://<host>:<port>`, passed to every rank
    directory: str | None = None  # the private folder of a file store (None for tcp)

    def close(self) -> None:
        """Remove the private folder, if any (idempotent)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address (127.0.0.0/8, ::1); a name that does
    not resolve is not."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def open_rendezvous(master_addr: str, master_port: int | None) -> Rendezvous:
    """A file store in a new private folder when `master_port` is None and `master_addr` is a loopback
    address; else `tcp://master_addr:port` (a free port of that address when `master_port` is None)."""
    if master_port is None and is_loopback(master_addr):
        directory = tempfile.mkdtemp(prefix="tgi-rendezvous-")  # mode 0700: this user's only
        os.chmod(directory, 0o700)
        return Rendezvous(f"file://{os.path.join(directory, 'store')}", directory)
    if not is_loopback(master_addr):
        log.warning(
            "tensor parallelism: the rendezvous store listens on %s (--master-addr), which is not a loopback "
            "address: it is reachable from the network and unauthenticated",
            master_addr,
        )
    port = master_port if master_port is not None else _free_port(master_addr)
    host = f"[{master_addr}]" if ":" in master_addr else master_addr
    return Rendezvous(f"tcp://{host}:{port}")


def _free_port(host: str) -> int:
    with socket.create_server((host, 0)) as s:
        return s.getsockname()[1]


def is_local(init_method: str) -> bool:
    """True for a rendezvous only this host can join: a file store, or tcp on a loopback address."""
    url = urlsplit(init_method)
    return url.scheme == "file" or (url.scheme == "tcp" and is_loopback(url.hostname or ""))


def create_store(init_method: str, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The `torch.distributed` store of `init_method` for `rank`. For tcp, rank 0 binds the listening
    socket itself to the URL's address and port (torch's `tcp://` handler would listen on all interfaces);
    the other ranks connect to it."""
    import torch.distributed as dist

    url = urlsplit(init_method)
    if url.scheme == "file":
        return dist.FileStore(unquote(url.path), world_size)
    if url.scheme != "tcp" or url.hostname is None or url.port is None:
        raise ValueError(f"unsupported rendezvous {init_method!r} (file:///path or tcp://host:port)")
    if rank != 0:
        return dist.TCPStore(url.hostname, url.port, world_size, False, timeout)
    if init_method in _OPENED:  # opened before the group, for the nodes' join (`open_leader_store`)
        return _OPENED.pop(init_method)
    listener = socket.create_server((url.hostname, url.port), family=_family(url.hostname), reuse_port=False)
    fd = listener.detach()  # the store owns the socket from here
    try:
        return dist.TCPStore(
            url.hostname, url.port, world_size, True, timeout, wait_for_workers=False, master_listen_fd=fd
        )
    except BaseException:
        os.close(fd)
        raise


#: stores rank 0 opened before its group formed, by rendezvous URL: the group's collective takes them over
_OPENED: dict[str, Any] = {}


def open_leader_store(init_method: str, world_size: int, timeout: datetime.timedelta) -> Any:
    """Rank 0's `TCPStore` of `init_method`, listening now (the other nodes join through it before the group
    forms); the group's collective, created later in this process, uses this one instead of binding again."""
    store = create_store(init_method, 0, world_size, timeout)
    _OPENED[init_method] = store
    return store


def _family(host: str) -> socket.AddressFamily:
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]


def loopback_interface() -> str:
    """The name of this host's loopback interface ("lo" on Linux, "lo0" on macOS and BSDs)."""
    names = [name for _, name in socket.if_nameindex()]
    for name in ("lo", "lo0"):
        if name in names:
            return name
    raise RuntimeError(f"no loopback interface (lo, lo0) among this host's interfaces {names}")


def route_interface(host: str) -> str | None:
    """The name of this host's interface whose IPv4 address a connection to `host` leaves from (the one
    that reaches it); None when it cannot be told (IPv6, no route, not Linux)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # UDP: picks the route, sends nothing
            local = s.getsockname()[0]
        for _, name in socket.if_nameindex():
            if _ipv4_of(name) == local:
                return name
    except OSError:
        pass
    return None


def _ipv4_of(interface: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            request = struct.pack("256s", interface.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24])  # SIOCGIFADDR
        except OSError:
            return None


@contextlib.contextmanager
def gloo_interface(process_group_backend: str, init_method: str) -> Iterator[None]:
    """While a gloo group is created, `GLOO_SOCKET_IFNAME` names the interface its sockets bind to: the
    loopback interface for a rendezvous on this host, else the one that reaches the rendezvous address (on
    node 0: the one that holds it); a value the user set is kept. For an NCCL group `NCCL_SOCKET_IFNAME`
    names the same interface (its bootstrap and socket transport), set for the process's life: NCCL reads
    it once, at its first communicator. An interface that cannot be told is logged, and nothing is set."""
    wanted = [
        env
        for env, backend in ((GLOO_IFNAME_ENV, "gloo"), (NCCL_IFNAME_ENV, "nccl"))
        if backend in process_group_backend and not os.environ.get(env)
    ]
    if not wanted or not init_method:
        yield
        return
    if is_local(init_method):
        name = loopback_interface()
    else:
        name = route_interface(urlsplit(init_method).hostname or "")
        if name is None:
            log.warning(
                "%s: no interface found that reaches %s; its sockets bind where it picks",
                process_group_backend,
                init_method,
            )
            yield
            return
    for env in wanted:
        os.environ[env] = name
    try:
        yield
    finally:
        if GLOO_IFNAME_ENV in wanted:
            os.environ.pop(GLOO_IFNAME_ENV, None)
