"""A node's URL as logs, captures, health pages and errors may show it: its credentials masked.

A node provider's endpoint often carries its API key in the URL: as a
user and password (``wss://user:key@host``), in the query
(``?apikey=...``), or as a path segment (``/v3/<key>/websocket``). The
URL is configuration, not a secret store, but an operator pastes what the
provider gave them; so every place the sidecar shows a URL shows
``shown_url`` of it, and only the connection itself uses the URL as given.

What stays: the scheme, host, port and the path's ordinary segments, which
are what an operator needs to tell which node is meant.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "shown_url"]

MASK = "***"

#: A path segment that looks like a key rather than a name (``websocket``, ``v3``): long, of
#: letters and digits both. A false positive masks a name, never the reverse.
_KEY_LIKE = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-]{20,}$")


def shown_url(url: str) -> str:
    """``url`` with its user, password, query values and key-like path segments masked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        # Not a URL that parses (a bad port, say): the error about it names the problem,
        # and shows nothing of it that could be a key.
        return MASK
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{MASK}@{netloc}"
    path = "/".join(MASK if _KEY_LIKE.match(segment) else segment for segment in parts.path.split("/"))
    query = "&".join(
        f"{pair.split('=', 1)[0]}={MASK}" if "=" in pair else MASK
        for pair in parts.query.split("&") if pair
    )
    return urlunsplit((parts.scheme, netloc, path, query, MASK if parts.fragment else ""))
