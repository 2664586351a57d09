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

#: A path segment shown as it is: a plain lower-case word (``websocket``, ``cosmos-rpc``), a
#: version (``v3``) or a short number. Anything else, a key of letters and digits, one in
#: mixed case, one with ``=`` or ``+`` in it, or a long run of letters, is masked: a false
#: positive masks a name, never the reverse.
_NAME_LIKE = re.compile(r"^(?:[a-z][a-z._-]{0,15}|v[0-9]{1,3}|[0-9]{1,5})?$")

#: A query parameter's name shown before its masked value (``apikey``, ``api_key``, ``apiKey``):
#: letters only, and short. A name with digits in it, or a long one, may be the key itself
#: (``?<base64>=``): masked whole.
_PARAMETER_NAME = re.compile(r"^[A-Za-z][A-Za-z_.-]{0,19}$")

#: A scheme as URLs spell it (``wss``, ``grpc+https``), the one part of a malformed URL shown.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{0,19}$")


def shown_url(url: str) -> str:
    """``url`` with its user, password, query values and key-like path segments masked.

    A URL that is not of the form ``scheme://host...`` (a scheme missing or
    mistyped, a port that does not parse) is exactly what an error quotes: of
    it only a scheme that reads as one is shown, the rest is masked, since
    what follows may be ``user:key@host`` with nothing to tell it apart.
    """
    if not url:
        return url  # nothing to hide, and an error about an empty URL says it was empty
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # a port that does not parse, a bad IPv6 literal
        return _malformed(url)
    if not parts.netloc or "://" not in url:
        return _malformed(url)
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{MASK}@{netloc}"
    path = "/".join(segment if _NAME_LIKE.match(segment) else MASK for segment in parts.path.split("/"))
    query = "&".join(
        f"{name}={MASK}" if sep and _PARAMETER_NAME.match(name) else MASK
        for name, sep, _ in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return urlunsplit((parts.scheme, netloc, path, query, MASK if parts.fragment else ""))


def _malformed(url: str) -> str:
    """A URL that does not parse as ``scheme://host``: its scheme, if it has one, and a mask."""
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://{MASK}" if sep and _SCHEME.match(scheme) else MASK
