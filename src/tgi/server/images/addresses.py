"""Which addresses an image URL's host may resolve to (`address_refusal`; `tgi.server.images.fetch` checks
every address a host resolves to with it, and connects to one it checked).

Loopback, link-local, unspecified (`0.0.0.0/8`, `::`) and multicast addresses are refused for every host,
those on `--allowed-media-domains` included. Any other non-public address (private, shared, reserved,
documentation; site-local `fec0::/10`, Teredo `2001::/32`, local-use NAT64 `64:ff9b:1::/48`, IPv4-compatible
`::/96` and IPv4-translated `::ffff:0:0:0/96`, which Python 3.11 calls global) is refused unless the host is
on `--allowed-media-domains`. An IPv6 address that stands for the IPv4 address it embeds (IPv4-mapped
`::ffff:a.b.c.d`, NAT64's well-known `64:ff9b::/96`, 6to4 `2002::/16`) is judged by that IPv4 address: one
embedding a public IPv4 address is fetched from (a DNS64 network reaches IPv4-only hosts so), one embedding a
private one is refused as that one is, one embedding a loopback one is refused for every host."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "this host": 0.x.y.z reaches the local machine on Linux
#: IPv6 addresses that stand for the IPv4 address they embed (6to4's `2002::/16` too: `IPv6Address.sixtofour`)
_IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: IPv6 ranges that embed an IPv4 address in their last 32 bits but are refused as not public whatever it
#: is: local-use NAT64 (where its IPv4 address lies depends on the operator's prefix), IPv4-compatible
#: (deprecated), IPv4-translated (SIIT)
_EMBEDDING_NOT_PUBLIC = tuple(ipaddress.ip_network(n) for n in ("64:ff9b:1::/48", "::/96", "::ffff:0:0:0/96"))
#: not public whatever Python's `is_global` says (3.11 calls these global): site-local, Teredo, and the above
_NOT_PUBLIC = (ipaddress.ip_network("fec0::/10"), ipaddress.ip_network("2001::/32"), *_EMBEDDING_NOT_PUBLIC)


def address_refusal(ip: IPAddress, allowed_host: bool = False) -> str | None:
    """Why an image may not be fetched from `ip` (for the log), or None when it may (the module docstring).
    `allowed_host`: the host is on --allowed-media-domains, which relaxes the private-range check only."""
    embedded = _embedded_ipv4(ip)
    for address in (ip, embedded) if embedded is not None else (ip,):
        if (
            address.is_loopback
            or address.is_link_local
            or address.is_unspecified
            or address.is_multicast
            or address in _THIS_NETWORK
        ):
            return f"{ip} is a loopback, link-local, unspecified or multicast address"
    if allowed_host:
        return None
    translated = ip.version == 6 and (ip in _IPV4_MAPPED or ip in _NAT64 or ip.sixtofour is not None)
    judged = embedded if translated and embedded is not None else ip
    if not judged.is_global or any(judged in net for net in _NOT_PUBLIC):
        return f"{ip} is not a public address"
    return None


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one embeds where it embeds one (6to4's in bits 16-48, the others' in the
    last 32 bits: IPv4-mapped, NAT64, IPv4-compatible, IPv4-translated); None otherwise."""
    if ip.version == 4:
        return None
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _IPV4_MAPPED or ip in _NAT64 or any(ip in net for net in _EMBEDDING_NOT_PUBLIC):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None
