"""Which addresses an image URL's host may resolve to (`tgi.server.images.addresses`), checked directly on
address objects, and through `checked_address` with the resolver replaced (no real lookup is made)."""

import ipaddress
import socket

import pytest

from tgi.server.images.addresses import address_refusal
from tgi.server.images.fetch import MediaPolicy, checked_address
from tgi.server.images.limits import ImageError

#: refused for every host, those on --allowed-media-domains included
NEVER = [
    "127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "0.1.2.3", "::", "224.0.0.1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",  # IPv4-mapped, IPv4-compatible loopback
    "64:ff9b::7f00:1", "2002:7f00:1::1", "2002:a9fe:a9fe::1",  # NAT64 and 6to4 of loopback, link-local
]  # fmt: skip
#: refused unless the host is on --allowed-media-domains
PRIVATE = [
    "10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "fc00::1", "2001:db8::1",
    "fec0::1",  # site-local (Python 3.11 calls it global)
    "::ffff:10.0.0.1",  # IPv4-mapped private
    "64:ff9b::a00:1", "64:ff9b::c0a8:101",  # NAT64 of private IPv4 addresses (Python calls them global)
    "2002:a00:1::1", "2002:c0a8:101::",  # 6to4 of private IPv4 addresses (Python calls them global)
    "64:ff9b:1::808:808",  # local-use NAT64: refused whatever it embeds
    "::8.8.8.8",  # IPv4-compatible (deprecated): refused whatever it embeds
]  # fmt: skip
#: fetched from: public, or standing for a public IPv4 address
PUBLIC = ["8.8.8.8", "2606:4700::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("address", NEVER)
def test_loopback_link_local_unspecified_and_multicast_are_refused_for_every_host(address):
    ip = ipaddress.ip_address(address)
    assert address_refusal(ip) is not None and address_refusal(ip, allowed_host=True) is not None


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_are_refused_unless_the_host_is_allowed(address):
    ip = ipaddress.ip_address(address)
    assert address_refusal(ip) == f"{ip} is not a public address"
    assert address_refusal(ip, allowed_host=True) is None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_fetched_from(address):
    assert address_refusal(ipaddress.ip_address(address)) is None


@pytest.fixture
def resolves_to(monkeypatch):
    """`socket.getaddrinfo` answering every name with the given addresses."""

    def set_(*addresses: str) -> None:
        def getaddrinfo(host, port, *args, **kwargs):
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses
            ]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    return set_


def test_a_host_is_refused_when_any_of_its_addresses_is_and_the_address_is_not_told(resolves_to, caplog):
    resolves_to("8.8.8.8", "64:ff9b::a00:1")  # the second: NAT64 of 10.0.0.1
    with pytest.raises(ImageError) as caught:
        checked_address("images.example.com", 443, MediaPolicy(), "f")
    assert (str(caught.value), caught.value.field) == ("the image URL's host is not allowed", "f")
    assert "64:ff9b::a00:1 is not a public address" in caplog.text  # the log says which
    resolves_to("2002:808:808::1")
    assert checked_address("images.example.com", 443, MediaPolicy()) == "2002:808:808::1"


def test_an_allowed_host_may_resolve_to_private_addresses_but_never_to_link_local_ones(resolves_to):
    allowed = MediaPolicy(allowed_domains=("images.internal",))
    resolves_to("10.1.2.3")
    assert checked_address("images.internal", 443, allowed) == "10.1.2.3"
    resolves_to("169.254.169.254")  # the cloud's metadata service
    with pytest.raises(ImageError, match=r"^the image URL's host is not allowed$"):
        checked_address("images.internal", 443, allowed)
