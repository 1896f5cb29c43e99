"""A pure-Python reference for ``memstrata.redaction.redact_secrets``: the secret shapes as
Python ``re`` patterns with look-around, each anchored on a literal, applied one after the
other.

The tests check that the library's rules (Rust ``regex`` patterns run by the core) redact
every text exactly as this does; the redaction benchmark times it as the peer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Names that say a secret: a key of a dict whose value is then blanked, and the name half of the
# name=value pairs swept from text.
_SECRET_WORD = (
    r"(?:password|passwd|pwd|secret|api[_-]?key|private[_-]?key|account[_-]?key"
    r"|access[_-]?key|shared[_-]?access[_-]?key"
    r"|(?:auth|access|refresh|session|security|id|api|bot)[_-]?token)"
)
# Whatever a text holds a secret name in, it holds one of these (lower case).
_SECRET_GATES = ("pass", "pwd", "secret", "key", "token")

# An assigned value: quoted (up to the closing quote or the end of the line, whichever comes
# first, so nothing after the opening quote can make it fail) or bare (up to white space or a
# separator). Six characters at least, so ``password: none`` stays. Not an earlier rule's
# ``[redacted`` placeholder, nor a mere beginning of one (``[redac`` to ``[redacte``), which the
# library's rules leave too.
_ASSIGNED_VALUE = (
    r"(?!\[redacted)(?:(?<=\")(?!\[redac(?:te?)?(?:[\"\n]|\Z))[^\"\n]{6,}"
    r"|(?<=')(?!\[redac(?:te?)?(?:['\n]|\Z))[^'\n]{6,}"
    r"|(?!\[redac(?:te?)?(?:[\s\"',;]|\Z))[^\s\"',;]{6,})"
)


@dataclass(frozen=True)
class _Shape:
    """One secret shape: its pattern, and what must be in a text for the pattern to match.

    Every pattern begins with a literal where it can (the regex engine then jumps between
    occurrences of it instead of trying every position) and checks what comes before the
    literal with a lookbehind. ``gates``: the pattern can only match a text holding one of
    them (a C substring search skips it otherwise). ``lower``: the pattern is written in lower
    case and run on the lower-cased text (matching in any case at the speed of a literal).
    ``back``: characters just before a match that belong to the secret (at most ``back_max``),
    for patterns anchored on a literal in their middle.
    """

    kind: str
    pattern: re.Pattern[str]
    gates: tuple[str, ...] = ()
    lower: bool = False
    back: frozenset[str] = frozenset()
    back_max: int = 0
    # The same pattern matching in any case, for a text whose lower-cased copy differs in
    # length (a few non-ASCII letters): the matches cannot be mapped back from the copy.
    folded: re.Pattern[str] | None = None

    def __post_init__(self) -> None:
        if self.lower:
            flags = self.pattern.flags | re.IGNORECASE
            object.__setattr__(self, "folded", re.compile(self.pattern.pattern, flags))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = frozenset("0123456789abcdef")

# Secret-shaped strings. Each pattern keeps a harmless prefix (group "keep") where one helps a
# reader see what was there ("Bearer ", "AccountKey="). Checkpoints are for audit, so the
# patterns lean towards redacting too much rather than too little. ``(?<![A-Za-z0-9_]sk-)``
# after a literal plays the part of ``\b`` before it.
_SHAPES: list[_Shape] = [
    _Shape(
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        ("-----BEGIN ",),
    ),
    _Shape(
        "slack_webhook",
        re.compile(r"(?P<keep>https://hooks\.slack\.com/services/)[\w/-]+"),
        ("hooks.slack.com",),
    ),
    _Shape(
        "bearer",
        re.compile(
            r"(?P<keep>earer(?<![A-Za-z0-9_][Bb]earer)(?<=[Bb]earer)[ \t]{1,16})"
            r"[A-Za-z0-9\-._~+/]{16,}=*"
        ),
        ("earer",),
    ),
    _Shape(
        "basic_auth",
        re.compile(
            r"(?P<keep>authorization(?<![a-z0-9_]authorization)[ \t]{0,16}[:=][ \t]{0,16}"
            r"basic[ \t]{1,16})[a-z0-9+/]{8,}={0,2}"
        ),
        ("authorization",),
        lower=True,
    ),
    _Shape(
        "jwt",
        re.compile(
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
        ),
        ("eyJ",),
    ),
    _Shape(
        "api_key",
        re.compile(
            r"sk-(?<![A-Za-z0-9_]sk-)(?:ant-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}"
        ),
        ("sk-",),
    ),
    _Shape(
        "aws_access_key",
        re.compile(r"A(?<![A-Za-z0-9_]A)(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}(?![A-Za-z0-9_])"),
        ("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _Shape(
        # STS session tokens are long base64 beginning with a fixed serialisation header.
        "aws_session_token",
        re.compile(
            r"(?:IQoJb3JpZ2lu|FwoGZXIvYXdz|FQoGZXIvYXdz)(?<![A-Za-z0-9/+=].{12})[A-Za-z0-9/+=]{20,}",
            re.DOTALL,
        ),
        ("IQoJb3JpZ2lu", "FwoGZXIvYXdz", "FQoGZXIvYXdz"),
    ),
    _Shape(
        "github_token",
        re.compile(r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{30,}|ithub_pat_[A-Za-z0-9_]{30,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Shape(
        "gitlab_token",
        re.compile(r"gl(?<![A-Za-z0-9_]gl)(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}"),
        ("gl",),
    ),
    _Shape(
        "slack_token",
        re.compile(
            r"x(?<![A-Za-z0-9_]x)(?:ox[abposre]-[A-Za-z0-9-]{10,}|app-\d-[A-Za-z0-9-]{10,})"
        ),
        ("xox", "xapp-"),
    ),
    _Shape(
        "google_api_key",
        re.compile(r"AIza(?<![A-Za-z0-9_]AIza)[0-9A-Za-z_-]{35}"),
        ("AIza",),
    ),
    _Shape(
        "google_oauth",
        re.compile(
            r"(?:ya29\.(?<![A-Za-z0-9_]ya29\.)|GOCSPX-(?<![A-Za-z0-9_]GOCSPX-))[0-9A-Za-z_-]{20,}"
        ),
        ("ya29.", "GOCSPX-"),
    ),
    _Shape(
        "stripe_key",
        re.compile(
            r"(?:[rs]k_(?:live|test)_(?<![A-Za-z0-9_].{8})|whsec_(?<![A-Za-z0-9_]whsec_))"
            r"[0-9A-Za-z]{16,}",
            re.DOTALL,
        ),
        ("k_live_", "k_test_", "whsec_"),
    ),
    _Shape(
        "twilio_key",
        re.compile(r"SK(?<![A-Za-z0-9_]SK)[0-9a-fA-F]{32}(?![A-Za-z0-9_])"),
        ("SK",),
    ),
    _Shape(
        # A Twilio auth token next to its account SID (``AC…:token``, ``AC… token``).
        "twilio_auth_token",
        re.compile(
            r"(?P<keep>AC(?<![A-Za-z0-9_]AC)[0-9a-f]{32}[:/ ,;|\t]{1,4})[0-9a-f]{32}"
            r"(?![A-Za-z0-9_])"
        ),
        ("AC",),
    ),
    _Shape(
        "sendgrid_key",
        re.compile(r"SG\.(?<![A-Za-z0-9_]SG\.)[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
        ("SG.",),
    ),
    _Shape(
        "huggingface_token",
        re.compile(r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}"),
        ("hf_",),
    ),
    _Shape(
        "package_token",
        re.compile(
            r"npm_(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}"
            r"|pypi-AgE(?<![A-Za-z0-9_]pypi-AgE)[A-Za-z0-9_-]{50,}"
        ),
        ("npm_", "pypi-AgE"),
    ),
    _Shape(
        # Mailgun's old keys: ``key-`` and 32 characters.
        "mailgun_key",
        re.compile(r"key-(?<![A-Za-z0-9_]key-)[0-9a-zA-Z]{32}(?![A-Za-z0-9_])"),
        ("key-",),
    ),
    _Shape(
        # Mailgun's private API keys: 32-8-8 hex digits (matched from the first dash, the 32
        # digits before it taken too).
        "mailgun_key",
        re.compile(r"-(?<=(?<![0-9A-Za-z-])[0-9a-f]{32}-)[0-9a-f]{8}-[0-9a-f]{8}(?![0-9A-Za-z-])"),
        ("-",),
        back=_HEX,
        back_max=32,
    ),
    _Shape(
        # Discord bot tokens: a base64 user id (24 to 28 characters), a dot, 6 characters of
        # timestamp, a dot, an HMAC (matched from the first dot, the id before it taken too).
        "discord_token",
        re.compile(
            r"\.(?:(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{23}\.)"
            r"|(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{24}\.)"
            r"|(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{25}\.)"
            r"|(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{26}\.)"
            r"|(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{27}\.))"
            r"[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])"
        ),
        (".",),
        back=_B64URL,
        back_max=28,
    ),
    _Shape(
        # Telegram bot tokens: the bot id (8 to 10 digits), a colon, 35 characters.
        "telegram_token",
        re.compile(
            r":(?:(?<=(?<![A-Za-z0-9_])[0-9]{8}:)|(?<=(?<![A-Za-z0-9_])[0-9]{9}:)"
            r"|(?<=(?<![A-Za-z0-9_])[0-9]{10}:))[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"
        ),
        (":",),
    ),
    _Shape(
        # Azure AD client secrets: 3 characters, a digit, ``Q~``, then 31 to 34 more (matched
        # from ``Q~``, the 4 characters before it taken too).
        "azure_client_secret",
        re.compile(
            r"Q~(?<=(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}[0-9]Q~)[A-Za-z0-9_~.-]{31,34}"
            r"(?![A-Za-z0-9_~.-])"
        ),
        ("Q~",),
        back=frozenset(_B64URL | {"~", "."}),
        back_max=4,
    ),
    _Shape(
        # Azure storage and service bus connection strings, and SAS signatures in URLs.
        "azure_key",
        re.compile(
            r"(?P<keep>(?:accountkey|sharedaccesskey|sharedaccesssignature)[ \t]{0,4}="
            r"[ \t]{0,4}|sig=(?<![a-z0-9_]sig=))[^\s;&\"'<>]{8,}"
        ),
        ("accountkey", "sharedaccess", "sig="),
        lower=True,
    ),
    _Shape(
        # An AWS secret access key has no prefix: 40 characters of base64 mixing upper case,
        # lower case and digits. Hex digests (one case only) and prose never look like that.
        "aws_secret_key",
        re.compile(
            r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
            r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
    ),
    _Shape(
        # key = value pairs whose name says secret (``TWILIO_AUTH_TOKEN=...``,
        # ``"password": "..."``, ``aws_secret_access_key: ...``), in any case. The rest of the
        # name is bounded (64 characters) and never given back (the lookahead and
        # back-reference make an atomic group), so a run of keywords costs linear time.
        "assigned_secret",
        re.compile(
            r"(?P<keep>" + _SECRET_WORD + r"(?=(?P<rest>[a-z0-9_.-]{0,64}))(?P=rest)"
            r"(?:\\{0,3}[\"'])?[ \t]{0,16}[:=][ \t]{0,16}\\{0,3}[\"']?)" + _ASSIGNED_VALUE
        ),
        _SECRET_GATES,
        lower=True,
    ),
]

# The start of a URL and its candidate span: a scheme at the start of its run of scheme
# characters (so a long run is tried once), ``://``, then up to white space or a quote. Matched
# from ``://`` backwards would need a variable lookbehind; the scheme is bounded instead.
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s\"'<>`]*")


def redact_secrets(text: str) -> tuple[str, int]:
    """``text`` with every secret-shaped string replaced by ``[redacted: <kind>]``, and how many
    were replaced.

    Runs in time linear in ``len(text)`` whatever it holds.
    """
    total = 0
    lowered = ""
    lowered_of: str | None = None
    for shape in _SHAPES:
        if shape.kind == "aws_secret_key":
            # Passwords in URLs go before the bare 40-character shape could cut one in two.
            text, n = _redact_url_passwords(text)
            total += n
        source, pattern = text, shape.pattern
        if shape.lower:
            if lowered_of is not text:
                lowered, lowered_of = text.lower(), text
            source = lowered
        if shape.gates and not any(gate in source for gate in shape.gates):
            continue
        if shape.folded is not None and len(source) != len(text):
            # Lower-casing changed the length: match in place, in any case.
            source, pattern = text, shape.folded
        text, n = _apply(shape, pattern, text, source)
        total += n
    return text, total


def _apply(shape: _Shape, pattern: re.Pattern[str], text: str, source: str) -> tuple[str, int]:
    """``text`` with the matches of ``pattern`` in ``source`` (``text`` itself or its lower-cased
    copy, of the same length) replaced."""
    pieces: list[str] = []
    last = count = 0
    for match in pattern.finditer(source):
        start, end = match.span()
        if shape.back:
            floor = max(start - shape.back_max, last)
            while start > floor and text[start - 1] in shape.back:
                start -= 1
        keep = match.end("keep") if "keep" in pattern.groupindex else -1
        pieces.append(text[last:start])
        if keep > start:
            pieces.append(text[start:keep])
        pieces.append(f"[redacted: {shape.kind}]")
        last = end
        count += 1
    if not count:
        return text, 0
    pieces.append(text[last:])
    return "".join(pieces), count


def _redact_url_passwords(text: str) -> tuple[str, int]:
    if "://" not in text:
        return text, 0
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        url = match.group(0)
        start = url.index("://") + 3
        at = url.rfind("@", start)
        # An ``@`` right after a ``/`` opens a path segment (``/@user``), not a host.
        while at > start and url[at - 1] == "/":
            at = url.rfind("@", start, at - 1)
        if at < start:
            return url
        colon = url.find(":", start, at)
        if colon < 0 or colon + 1 == at:
            return url
        user = url[start:colon]
        if "/" in user or "@" in user or "?" in user or "#" in user:
            return url  # the ``:`` is past the authority: no credentials
        count += 1
        return f"{url[: colon + 1]}[redacted: url_password]{url[at:]}"

    return _URL.sub(replace, text), count
