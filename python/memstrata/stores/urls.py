"""Store URLs as they may be shown: a PostgreSQL URL or libpq connection string carries its
password (``postgresql://user:secret@host/db``, ``?password=secret``, ``password=secret``),
and an error message, a log line or a command's output that quotes the URL must not."""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"

# The password of a URL's user part: from the first ``:`` after ``//user`` to the last ``@``
# (a password holding an unencoded ``/`` or ``@`` is hidden whole; hiding more is harmless).
_USER_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:(.*)@", re.DOTALL)
# A ``password`` member of a URL's query string.
_QUERY_PASSWORD = re.compile(r"(?i)[?&]password=([^&#]*)")
# A ``password = value`` pair of a libpq key/value string: a quoted value, or everything up to
# the next ``key=`` pair, so that a value with an unquoted space (which libpq refuses, quoting
# its second half in the error) is hidden whole.
_PAIR_PASSWORD = re.compile(
    r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'?|.*?(?=\s+[A-Za-z_]+\s*=|\s*$))", re.DOTALL
)


def _spans(url: str) -> list[tuple[int, int]]:
    """Where ``url``'s passwords are, in order."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url):
        found = [m.span(1) for m in (_USER_PASSWORD.match(url),) if m is not None]
        found += [m.span(1) for m in _QUERY_PASSWORD.finditer(url)]
    else:
        found = [m.span(1) for m in _PAIR_PASSWORD.finditer(url)]
    return sorted(span for span in found if span[1] > span[0])


def redacted_url(url: str) -> str:
    """``url`` with any password it holds replaced by ``***``: in the user part of a URL,
    in its query string, or as a ``password=`` pair of a key/value connection string."""
    out, at = [], 0
    for start, end in _spans(url):
        if start >= at:
            out += [url[at:start], HIDDEN]
            at = end
    return "".join(out) + url[at:]


def without_secrets(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``) with the URL's passwords, and any quoted
    part of one, replaced by ``***``: libpq quotes the token it could not read
    (``invalid percent-encoded token: "s3cr%t"``)."""
    raw = [url[start:end] for start, end in _spans(url)]
    secrets = {s for secret in raw for s in (secret, secret.strip("'"), unquote(secret)) if s}
    if not secrets:
        return text
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)

    def quoted(match: re.Match[str]) -> str:
        part = match.group(1)
        if part and any(part in secret for secret in secrets):
            return f'"{HIDDEN}"'
        return match.group(0)

    return re.sub(r'"([^"]*)"', quoted, text)
