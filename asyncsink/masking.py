"""Showing a URL without its secrets: ``mask_url``.

Every message, ``repr`` and log line of asyncsink that shows a URL shows it through
``mask_url``. It reads the text as it is, without a URL parser, so that it masks safely
what no parser accepts (a port out of range, a password holding an unencoded ``/``,
``?``, ``#`` or ``@``), and where a URL is ambiguous it masks more rather than less.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_url"]

MASK = "***"

_HEAD = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9+.-]*:)?//")


def mask_url(url: object) -> str:
    """``url`` fit to show: the userinfo masked (a user name may be a token too), every
    query value masked (a query item without ``=`` as a whole) and the fragment masked;
    the scheme, the host, the port and the path are kept.

    The userinfo is taken to end at the last ``@``, since an unencoded ``@`` before it
    can only be part of the credentials: ``http://u:p/w@host/x`` shows
    ``http://***@host/x``. When a ``?`` or ``#`` comes before that ``@``, the ``@`` may
    end credentials holding them or sit in a query value or fragment, so nothing but the
    scheme is shown: ``http://***``.

    >>> mask_url("https://user:s3cret@example.com:8443/in?token=abc&mode=fast#top")
    'https://***@example.com:8443/in?token=***&mode=***#***'
    """
    text = str(url)
    match = _HEAD.match(text)
    head, rest = (match.group(0), text[match.end() :]) if match else ("", text)
    userinfo, at, rest_after = rest.rpartition("@")
    if at and any(ch in userinfo for ch in "?#"):
        # The '@' ends credentials holding a '?' or '#', or sits in a query value or a
        # fragment: nothing after the scheme is safe to show.
        return head + MASK
    if at:
        head += MASK + "@"
        rest = rest_after
    rest, hash_sign, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    if question:
        rest += "?" + "&".join(_mask_item(item) for item in query.split("&"))
    if hash_sign:
        rest += "#" + (MASK if fragment else "")
    return head + rest


def _mask_item(item: str) -> str:
    if not item:
        return item
    name, equals, _ = item.partition("=")
    return f"{name}={MASK}" if equals else MASK
