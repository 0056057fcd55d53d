"""A tensor-parallel group on one host listens on loopback only: its rendezvous store and gloo's sockets are
never bound to all interfaces, and no port of the group answers on this machine's network address."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat

import psutil
import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.parallel.rendezvous import is_loopback, open_rendezvous
from tgi.core.testing.tiny_models import save_random_model


def _listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _network_addresses() -> list[str]:
    """This machine's own non-loopback IPv4 addresses (its name's, and its interfaces')."""
    found = []
    with_name = socket.gethostbyname(socket.gethostname())
    candidates = [with_name] + [
        a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET
    ]
    for address in candidates:
        if not ipaddress.ip_address(address).is_loopback and address not in found:
            found.append(address)
    return found


def _free_loopback_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


@pytest.mark.parametrize("master_port", [None, "free"], ids=["default", "master-port"])
def test_two_rank_group_listens_on_loopback_only(tmp_path, master_port):
    folder = str(tmp_path / "llama")
    save_random_model(folder, "llama", vocab_size=250, num_kv_heads=2, tie_word_embeddings=False)
    port = _free_loopback_port() if master_port == "free" else None
    config = EngineConfig(
        model_id=folder, num_shard=2, dtype="float32", master_port=port,
        max_batch_total_tokens=1024, max_total_tokens=256, max_batch_prefill_tokens=8, max_num_seqs=4,
    )  # fmt: skip
    before = _listening(os.getpid())  # rank 0 is this process: only what the group opens counts
    engine = LLMEngine.from_config(config)
    try:
        sockets = _listening(os.getpid()) - before
        for w in engine.runner.workers:
            sockets |= _listening(w.process.pid)
        assert sockets, "the group listens somewhere (gloo's pairs at least)"
        exposed = [(ip, p) for ip, p in sockets if not ipaddress.ip_address(ip).is_loopback]
        assert not exposed, f"listening beyond loopback: {exposed}"
        if port is not None:
            assert ("127.0.0.1", port) in sockets  # --master-port is the store's port
        for address in _network_addresses():
            for _, p in sockets:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.settimeout(2)
                    with pytest.raises(OSError):
                        s.connect((address, p))
    finally:
        engine.runner.shutdown()


def test_default_rendezvous_is_a_private_folder_removed_on_close():
    rendezvous = open_rendezvous("127.0.0.1", None)
    assert rendezvous.init_method == f"file://{os.path.join(rendezvous.directory, 'store')}"
    assert stat.S_IMODE(os.stat(rendezvous.directory).st_mode) == 0o700
    rendezvous.close()
    assert not os.path.exists(rendezvous.directory)


def test_master_port_keeps_tcp_and_a_network_address_is_logged(caplog):
    assert open_rendezvous("localhost", 29555).init_method == "tcp://localhost:29555"
    addresses = _network_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address")
    with caplog.at_level(logging.WARNING, logger="tgi.core.parallel.rendezvous"):
        rendezvous = open_rendezvous(addresses[0], 29556)
    assert rendezvous.init_method == f"tcp://{addresses[0]}:29556" and rendezvous.directory is None
    assert "reachable from the network" in caplog.text


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("127.3.4.5") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")


def test_an_nccl_group_binds_its_sockets_to_the_rendezvous_interface_unless_the_user_chose(monkeypatch):
    """NCCL reads NCCL_SOCKET_IFNAME once, at its first communicator: it is set for the process's life;
    gloo's is set while its group forms."""
    from tgi.core.parallel.rendezvous import gloo_interface, loopback_interface

    for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    with gloo_interface("cpu:gloo,cuda:nccl", "tcp://127.0.0.1:29999"):
        assert os.environ["GLOO_SOCKET_IFNAME"] == os.environ["NCCL_SOCKET_IFNAME"] == loopback_interface()
    assert "GLOO_SOCKET_IFNAME" not in os.environ
    assert os.environ["NCCL_SOCKET_IFNAME"] == loopback_interface()
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "chosen0")
    with gloo_interface("nccl", "tcp://127.0.0.1:29999"):
        assert os.environ["NCCL_SOCKET_IFNAME"] == "chosen0"
