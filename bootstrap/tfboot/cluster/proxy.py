"""A proxy variable gRPC obeys, set where tasks talk to their peers: said before it sends a
cluster's traffic through the proxy. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

PROXIES = ("grpc_proxy", "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")
NO_PROXIES = ("no_grpc_proxy", "no_proxy", "NO_PROXY")


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def _bypassed(host: str, entries: list[str]) -> bool:
    for entry in entries:
        if entry == "*" or host == entry or host.endswith("." + entry.lstrip(".")):
            return True
        if "/" in entry:
            try:
                if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def proxy_warning(env: Mapping[str, str], peers: list[str], who: str) -> str | None:
    """A proxy variable gRPC obeys, not bypassed for every peer by no_proxy."""
    proxy = next((name for name in PROXIES if env.get(name, "").strip()), None)
    if proxy is None:
        return None
    entries = [
        e.strip().lower() for n in NO_PROXIES for e in env.get(n, "").split(",") if e.strip()
    ]
    through = [p for p in peers if not _bypassed(_host(p).lower(), entries)]
    if not through:
        return None
    return (
        f"{proxy} is set and {who} would send the traffic to peers {', '.join(through[:4])}"
        f"{' ...' if len(through) > 4 else ''} through it; add their hosts or domain to no_proxy, "
        f"or unset {proxy}"
    )
