"""Which web pages may talk to this server: the ``Origin`` and ``Host`` checks.

A browser lets any page open a WebSocket to any address and send simple POSTs anywhere, and
with ``--auth none`` nothing else stands in the way: a page the user visits could read and edit
every document on a server running on their laptop. So:

- A request that carries an ``Origin`` (browsers always send one on WebSocket upgrades) must
  come from this server's own origin, a loopback origin, or one listed in
  ``--allowed-origins``. Clients that are not browsers send none and are unaffected.
- With ``--auth none`` the ``Host`` must also be a loopback name, an IP literal, or the host of
  a listed origin: otherwise DNS rebinding (evil.example resolving to 127.0.0.1) would make a
  hostile page "same-origin". With tokens the Host is not checked: rebinding gains no token.

Pure functions over header values; knows nothing of ASGI.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    allowed_origins: frozenset[str]  # normalised "scheme://host[:port]"
    check_host: bool  # --auth none: refuse Hosts a rebinding attack could produce

    @classmethod
    def from_settings(cls, allowed: str, *, auth: str) -> OriginPolicy:
        origins = frozenset(
            normalised
            for part in allowed.split(",")
            if part.strip() and (normalised := normalise_origin(part.strip())) is not None
        )
        return cls(origins, check_host=auth == "none")

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused, or None when it may proceed."""
        if self.check_host and not self._host_allowed(host):
            return "this Host is not allowed (--allowed-origins lists more)"
        if origin is None:
            return None
        if origin == "null":
            return "an opaque origin is not allowed"
        normalised = normalise_origin(origin)
        if normalised is None:
            return "the Origin header is malformed"
        if normalised in self.allowed_origins or _is_loopback(urlsplit(normalised).hostname):
            return None
        if host is not None and urlsplit(normalised).netloc == host.lower():
            return None  # same origin: the server's own pages (the web editor)
        return "this Origin is not allowed (--allowed-origins lists more)"

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            return True  # HTTP/1.0 without Host: no browser sends that
        hostname = urlsplit(f"//{host}").hostname
        if hostname is None:
            return False
        if _is_loopback(hostname) or _is_ip(hostname):
            return True
        return any(urlsplit(o).hostname == hostname for o in self.allowed_origins)


def normalise_origin(origin: str) -> str | None:
    """``scheme://host[:port]`` in lower case without a default port; None if not an origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    default = 80 if parts.scheme == "http" else 443
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, default) else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}"


def _is_ip(hostname: str) -> bool:
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        return False
    return True


def _is_loopback(hostname: str | None) -> bool:
    if not hostname:
        return False
    hostname = hostname.lower().rstrip(".")
    if hostname in LOOPBACK_NAMES or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
