"""Secret redaction for checkpoints: tool bodies blanked, secret-shaped strings replaced.

:func:`redact_messages` makes the redacted copy of a conversation that the context gate writes
to a checkpoint; :func:`redact_secrets` sweeps one text.

Decisions:

* Only the four conversational roles (``user``, ``assistant``, ``system``, ``developer``) keep
  their content, swept. Every other role (``tool``, legacy ``function``, ``ipython``, anything
  new) has its ``content`` replaced by ``[redacted: N chars]``: such a message carries what a
  tool returned, and a tool returns whatever it read.
* Tool-call arguments and tool blocks (Anthropic ``tool_use`` / ``tool_result``, Responses
  ``function_call`` / ``function_call_output`` and their kin) are blanked the same way,
  wherever they sit.
* Everything else is swept at any depth (lists and tuples alike), dictionary keys included; a
  value whose key names a secret (``password``, ``api_key``, ``client_secret``, ``auth_token``,
  ...) is blanked whole, and so is each text or number in a list under such a key.
* Passwords in URLs are found by parsing: a candidate span runs from ``scheme://`` to the next
  white space or quote, and its password is everything between the first ``:`` of the user
  part and the last ``@`` that does not follow a ``/`` (so a password holding ``/`` or ``@``
  is redacted whole). The scheme, user and host stay.
* The patterns run in Rust's ``regex`` crate (:class:`memstrata._core.PatternReplacer`), whose
  searches take time linear in the text whatever it holds; the rules are written so that no
  text is searched more than a few times, so one sweep is linear too. A text holding a lone
  surrogate is refused (``InvalidInputError``): it is not Unicode text, and the context gate
  refuses such messages before it checkpoints them. ``tests/test_redaction.py`` redacts 1 MB
  adversarial inputs; ``benches/test_redaction.py`` prints the figures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from memstrata._core import PatternReplacer
from memstrata.exceptions import InvalidInputError

Message = dict[str, Any]

POLICY_TOOL_CONTENT = "tool.content"
POLICY_TOOL_ARGUMENTS = "assistant.tool_calls.function.arguments"
POLICY_CUSTOM_TOOL_INPUT = "assistant.tool_calls.custom.input"
POLICY_FUNCTION_CALL = "assistant.function_call.arguments"
POLICY_FUNCTION_CONTENT = "function.content"

# The roles whose content is conversation, swept rather than blanked.
CONVERSATIONAL_ROLES = frozenset({"user", "assistant", "system", "developer"})

# Content blocks and Responses items that carry a tool's input or output (Anthropic's tool_use /
# tool_result and kin, OpenAI Responses' function_call / function_call_output and kin): the
# fields holding the bodies, redacted whole like a tool-role message.
_TOOL_BLOCK_BODIES: dict[str, tuple[str, ...]] = {
    "tool_use": ("input",),
    "server_tool_use": ("input",),
    "mcp_tool_use": ("input",),
    "tool_result": ("content",),
    "mcp_tool_result": ("content",),
    "web_search_tool_result": ("content",),
    "web_fetch_tool_result": ("content",),
    "code_execution_tool_result": ("content",),
    "bash_code_execution_tool_result": ("content",),
    "text_editor_code_execution_tool_result": ("content",),
    "function_call": ("arguments",),
    "function_call_output": ("output",),
    "custom_tool_call": ("input",),
    "custom_tool_call_output": ("output",),
    "computer_call_output": ("output",),
    "local_shell_call_output": ("output",),
    "shell_call_output": ("output",),
    "mcp_call": ("arguments", "output"),
    # Responses' built-in tools: what they ran or typed and what they read or printed.
    "code_interpreter_call": ("code", "outputs"),
    "file_search_call": ("results",),
    "local_shell_call": ("action",),
    "shell_call": ("action",),
    "computer_call": ("action",),
    "image_generation_call": ("result",),
    "mcp_approval_request": ("arguments",),
    "apply_patch_call": ("operation",),
    "apply_patch_call_output": ("output",),
}

_REDACTED_PREFIX = "[redacted"

# Names that say a secret: a key of a dict whose value is then blanked, and the name half of the
# name=value pairs swept from text (the same alternation is valid in Python and Rust syntax).
_SECRET_WORD = (
    r"(?:password|passwd|pwd|secret|api[_-]?key|private[_-]?key|account[_-]?key"
    r"|access[_-]?key|shared[_-]?access[_-]?key"
    r"|(?:auth|access|refresh|session|security|id|api|bot)[_-]?token)"
)
# A key also names a secret when it is a credential-carrying HTTP header (``Authorization``,
# ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``): headers kept as a dict hold them whole.
_SECRET_KEY = re.compile(
    r"[A-Za-z0-9_.-]{0,64}?(?:" + _SECRET_WORD + r"[A-Za-z0-9_.-]{0,64}|authorization|cookie)",
    re.I,
)

# The rules are patterns of Rust's ``regex`` crate, run by the core (:class:`PatternReplacer`).
# Without look-around, what must come before or after a secret is matched and kept: a rule's
# ``before`` and ``after``. ``[^X]`` before a secret says "not after an X" (the sweep puts a
# line break before every text, so a secret at its start has one too, and no pattern needs a
# ``^``, which would stop the regex crate from jumping from one occurrence of the secret's
# literal to the next); ``(?:$|[^X])`` after it says "not before an X". ``(?-u:\b)`` next to
# a letter or digit says "not next to a letter, digit or ``_``", without taking a character
# (so a secret ending in ``=`` can be followed at once by the next header; in the rules that
# ignore case, the Kelvin sign and the long s count as letters within a name, not beside it).
# The core takes the longest text ``before`` and ``after`` match at the two ends of a match,
# and starts its next search where the secret ended, so the character ``after`` took can
# begin the next match.
_B = r"(?-u:\b)"
# White space as Python's ``str.isspace`` has it (Rust's ``\s`` leaves out \x1c-\x1f).
_SPACE = r"\s\x1c-\x1f"


def _not_after(chars: str) -> str:
    return rf"[^{chars}]"


def _not_before(chars: str) -> str:
    return rf"(?:$|[^{chars}])"


def _value(chars: str) -> str:
    """A run of at least six of ``[chars]`` that does not begin with ``[redacted`` (an earlier
    rule's work): each branch names the first character where the run leaves ``[redacted``.
    (A run that is only a beginning of it, ``[redac`` to ``[redacte``, is no secret either.)"""
    prefix = "[redacted"
    run = f"[{chars}]"
    branches = []
    for k, ch in enumerate(prefix):
        other = f"[[{chars}]--[{re.escape(ch)}{re.escape(ch.upper())}]]"
        branches.append(re.escape(prefix[:k]) + other + run + f"{{{max(5 - k, 0)},}}")
    return "(?:" + "|".join(branches) + ")"


# A name that says secret, then ``=`` or ``:`` (the name and the value may be quoted, and the
# quotes escaped once or twice, as in JSON text quoted inside a string: ``{\\"password\\": ...``).
_ESCAPES = r"\\{0,3}"
_ASSIGNMENT = (
    r"(?i)"
    + _SECRET_WORD
    + rf"[a-z0-9_.-]{{0,64}}(?:{_ESCAPES}[\"'])?[ \t]{{0,16}}[:=][ \t]{{0,16}}"
)

# What ends a URL's candidate span.
_URL_END = rf"{_SPACE}\"'<>`"


@dataclass(frozen=True)
class _Rule:
    """One secret shape: the ``secret`` pattern replaced, what is matched and kept ``before``
    and ``after`` it, and patterns the secret must also hold (``requires``). ``span``: the
    pattern searched, when it is not just the three in a row."""

    kind: str
    secret: str
    before: str = ""
    after: str = ""
    requires: tuple[str, ...] = ()
    span: str = ""

    def spec(self) -> tuple[str, str, str | None, str | None, list[str]]:
        span = self.span or "".join(f"(?:{p})" for p in (self.before, self.secret, self.after))
        return (
            span,
            f"[redacted: {self.kind}]",
            self.before or None,
            self.after or None,
            list(self.requires),
        )


# Secret-shaped strings, tried in this order, each on the text the ones before it left.
# Checkpoints are for audit, so the patterns lean towards redacting too much rather than too
# little; each keeps a harmless prefix ("Bearer ", "AccountKey=") where one helps a reader see
# what was there.
_RULES: list[_Rule] = [
    _Rule(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?s:.)*?"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    _Rule("slack_webhook", r"[\w/-]+", before=r"https://hooks\.slack\.com/services/"),
    _Rule("bearer", r"[A-Za-z0-9\-._~+/]{16,}=*", before=_B + r"[Bb]earer[ \t]{1,16}"),
    _Rule(
        "basic_auth",
        r"(?i)[a-z0-9+/]{8,}={0,2}",
        before=r"(?i)" + _B + r"authorization[ \t]{0,16}[:=][ \t]{0,16}basic[ \t]{1,16}",
    ),
    _Rule(
        "jwt",
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        before=_not_after("A-Za-z0-9_-"),
    ),
    _Rule("api_key", _B + r"sk-(?:ant-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}"),
    _Rule("aws_access_key", _B + r"A(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}" + _B),
    _Rule(
        # STS session tokens are long base64 beginning with a fixed serialisation header.
        "aws_session_token",
        r"(?:IQoJb3JpZ2lu|FwoGZXIvYXdz|FQoGZXIvYXdz)[A-Za-z0-9/+=]{20,}",
        before=_not_after("A-Za-z0-9/+="),
    ),
    _Rule(
        "github_token",
        _B + r"g(?:h[pousr]_[A-Za-z0-9]{30,}|ithub_pat_[A-Za-z0-9_]{30,})",
    ),
    _Rule("gitlab_token", _B + r"gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}"),
    _Rule("slack_token", _B + r"x(?:ox[abposre]-[A-Za-z0-9-]{10,}|app-\d-[A-Za-z0-9-]{10,})"),
    _Rule("google_api_key", _B + r"AIza[0-9A-Za-z_-]{35}"),
    _Rule("google_oauth", _B + r"(?:ya29\.|GOCSPX-)[0-9A-Za-z_-]{20,}"),
    _Rule("stripe_key", _B + r"(?:[rs]k_(?:live|test)_|whsec_)[0-9A-Za-z]{16,}"),
    _Rule("twilio_key", _B + r"SK[0-9a-fA-F]{32}" + _B),
    _Rule(
        # A Twilio auth token next to its account SID (``AC…:token``, ``AC… token``).
        "twilio_auth_token",
        r"[0-9a-f]{32}" + _B,
        before=_B + r"AC[0-9a-f]{32}[:/ ,;|\t]{1,4}",
    ),
    _Rule("sendgrid_key", _B + r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    _Rule("huggingface_token", _B + r"hf_[A-Za-z0-9]{30,}"),
    _Rule("package_token", _B + r"(?:npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_-]{50,})"),
    # Mailgun's old keys: ``key-`` and 32 characters.
    _Rule("mailgun_key", _B + r"key-[0-9a-zA-Z]{32}" + _B),
    _Rule(
        # Mailgun's private API keys: 32-8-8 hex digits.
        "mailgun_key",
        r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}",
        before=_not_after("0-9A-Za-z-"),
        after=_not_before("0-9A-Za-z-"),
    ),
    _Rule(
        # Discord bot tokens: a base64 user id (24 to 28 characters), a dot, 6 characters of
        # timestamp, a dot, an HMAC.
        "discord_token",
        r"[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}",
        before=_not_after("A-Za-z0-9_-"),
        after=_not_before("A-Za-z0-9_-"),
    ),
    _Rule(
        # Telegram bot tokens: the bot id (8 to 10 digits), a colon, 35 characters; the id
        # stays.
        "telegram_token",
        r":[A-Za-z0-9_-]{35}",
        before=_B + r"[0-9]{8,10}",
        after=_not_before("A-Za-z0-9_-"),
    ),
    _Rule(
        # Azure AD client secrets: 3 characters, a digit, ``Q~``, then 31 to 34 more.
        "azure_client_secret",
        r"[A-Za-z0-9_~.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}",
        before=_not_after("A-Za-z0-9_~.-"),
        after=_not_before("A-Za-z0-9_~.-"),
    ),
    _Rule(
        # Azure storage and service bus connection strings, and SAS signatures in URLs.
        "azure_key",
        rf"[^{_SPACE};&\"'<>]{{8,}}",
        before=r"(?i)(?:accountkey|sharedaccesskey|sharedaccesssignature)[ \t]{0,4}=[ \t]{0,4}"
        r"|(?i)" + _B + r"sig=",
    ),
    _Rule(
        # Passwords in URLs, found as a parser would. A candidate span runs from a scheme
        # (at the start of its run of scheme characters) and ``://`` to the next white space
        # or quote. Its password runs from the first ``:`` of the user part (which holds no
        # ``/ @ ? #``) to the last ``@`` that does not follow a ``/`` (an ``@`` right after a
        # ``/`` opens a path segment, ``/@user``), so a password holding ``/`` or ``@`` is
        # redacted whole; scheme, user and host stay. A span without one stays whole, and so
        # does a URL inside its query. Before the bare 40-character shape, which could cut a
        # password in two.
        "url_password",
        "",
        span=_not_after("A-Za-z0-9+.-") + rf"[A-Za-z][A-Za-z0-9+.-]{{0,31}}://[^{_URL_END}]*",
        before=_not_after("A-Za-z0-9+.-")
        + rf"[A-Za-z][A-Za-z0-9+.-]{{0,31}}://[^:/@?#{_URL_END}]*:",
        after=rf"@(?:/@|[^@{_URL_END}])*",
        requires=(r"[^/]\z",),
    ),
    _Rule(
        # An AWS secret access key has no prefix: 40 characters of base64 mixing upper case,
        # lower case and digits. Hex digests (one case only) and prose never look like that.
        "aws_secret_key",
        r"[A-Za-z0-9/+]{40}",
        before=_not_after("A-Za-z0-9/+="),
        after=_not_before("A-Za-z0-9/+="),
        requires=("[A-Z]", "[a-z]", "[0-9]"),
    ),
    _Rule(
        # name = value pairs whose name says secret (``TWILIO_AUTH_TOKEN=...``,
        # ``"password": "..."``, ``aws_secret_access_key: ...``), in any case. The value is
        # quoted (up to the closing quote or the end of the line) or bare (up to white space or
        # a separator); six characters at least, so ``password: none`` stays.
        "assigned_secret",
        "",
        span=_ASSIGNMENT
        + _ESCAPES
        + "(?:"
        + "|".join((r"\"" + _value('^"\\n'), "'" + _value("^'\\n"), _value(rf"^{_SPACE}\"',;")))
        + ")",
        before=_ASSIGNMENT + _ESCAPES + r"[\"']?",
    ),
]

_REPLACER = PatternReplacer([rule.spec() for rule in _RULES])


def redact_secrets(text: str) -> tuple[str, int]:
    """``text`` with every secret-shaped string replaced by ``[redacted: <kind>]``, and how many
    were replaced.

    Runs in time linear in ``len(text)`` whatever it holds.

    Raises:
        InvalidInputError: ``text`` holds a lone surrogate (it is not Unicode text).
    """
    # The line break before the text is never part of a secret: it comes back first.
    swept, n = _REPLACER.replace("\n" + text)
    return (text, 0) if not n else (swept[1:], n)


def redacted_for_log(text: str) -> str:
    """``text`` with its secret-shaped strings redacted, for a log line; never raises (a lone
    surrogate is shown as its ``\\udXXX`` escape first). Errors that echo what a model or a
    request held go to logs through this."""
    try:
        return redact_secrets(text)[0]
    except InvalidInputError:
        return redact_secrets(text.encode("utf-8", "backslashreplace").decode())[0]


def redact_messages(messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """Redacted copies of ``messages`` and the channels that were redacted.

    Tool bodies and tool-call arguments become ``[redacted: N chars]`` wherever they are: the
    content of every message whose role is not conversational (``tool``, legacy ``function``,
    any other), ``tool_calls[].function.arguments``, a legacy ``function_call``, Responses
    items and content blocks that carry a tool's input or output (``tool_use`` input,
    ``tool_result`` content, ``function_call`` / ``function_call_output``, ...). Every other
    string of every message, dictionary keys included, at any depth, is swept for
    secret-shaped strings, and a value whose key names a secret is blanked. The inputs are not
    changed.
    """
    policy: dict[str, None] = {}
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        copy = dict(message)
        blank_content = role is not None and role not in CONVERSATIONAL_ROLES
        if blank_content and "content" in copy:
            copy["content"] = _redacted(copy["content"])
            policy[f"{role}.content"] = None
        kind = message.get("type") if role is None else None
        item_bodies = _TOOL_BLOCK_BODIES.get(kind, ()) if isinstance(kind, str) else ()
        for item_body in item_bodies:
            if item_body in copy:
                # A Responses item that is itself a tool call or a tool output.
                copy[item_body] = _redacted(copy[item_body])
                policy[f"{kind}.{item_body}"] = None
        calls = copy.get("tool_calls")
        if isinstance(calls, (list, tuple)):
            new_calls = []
            for call in calls:
                function = call.get("function") if isinstance(call, Mapping) else None
                custom = call.get("custom") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping) and "arguments" in function:
                    arguments = _redacted(function["arguments"])
                    call = {**call, "function": {**function, "arguments": arguments}}
                    policy[POLICY_TOOL_ARGUMENTS] = None
                if isinstance(custom, Mapping) and "input" in custom:
                    call = {**call, "custom": {**custom, "input": _redacted(custom["input"])}}
                    policy[POLICY_CUSTOM_TOOL_INPUT] = None
                new_calls.append(call)
            copy["tool_calls"] = new_calls
        legacy = copy.get("function_call")
        if isinstance(legacy, Mapping) and "arguments" in legacy:
            copy["function_call"] = {**legacy, "arguments": _redacted(legacy["arguments"])}
            policy[POLICY_FUNCTION_CALL] = None
        swept_message: dict[str, Any] = {}
        for field, value in copy.items():
            if field == "role" or (field == "content" and blank_content) or field in item_bodies:
                swept_message[field] = value
                continue
            name, named = _sweep_key(field, swept_message)
            if named:
                policy[f"{role}.keys.secrets"] = None
            swept, blocks, secrets = _sweep(value)
            if _names_secret(field):
                swept, secrets = _blank_named(value, swept, secrets)
            swept_message[name] = swept
            for block in blocks:
                policy[f"{role}.{field}.{block}"] = None
            if secrets:
                policy[f"{role}.{field}.secrets"] = None
        out.append(swept_message)
    return out, list(policy)


def _redacted(body: Any) -> str:
    return f"[redacted: {_length(body)} chars]"


def _names_secret(key: Any) -> bool:
    return isinstance(key, str) and len(key) <= 160 and _SECRET_KEY.fullmatch(key) is not None


def _blankable(value: Any) -> bool:
    """A value that a secret-naming key blanks: a text or number (a nested container is swept
    instead; its own keys say what it holds)."""
    return (
        isinstance(value, (str, int, float))
        and not isinstance(value, bool)
        and not (isinstance(value, str) and (len(value) == 0 or value.startswith(_REDACTED_PREFIX)))
    )


def _blank_named(value: Any, swept: Any, secrets: int) -> tuple[Any, int]:
    """What the value of a secret-naming key becomes, given ``swept`` (its swept copy) and the
    secrets counted so far: a text or number is blanked, and so is every text or number in a
    list under it (``"api_keys": [...]``: no key inside says what the items are); a nested
    dict stays swept, its own keys saying what it holds."""
    if _blankable(value):
        return _redacted(value), secrets + 1
    if isinstance(value, (list, tuple)) and isinstance(swept, (list, tuple)):
        items = []
        for item, swept_item in zip(value, swept):
            new, secrets = _blank_named(item, swept_item, secrets)
            items.append(new)
        return items, secrets
    return swept, secrets


def _sweep_key(key: Any, taken: Mapping[Any, Any]) -> tuple[Any, int]:
    """``key`` swept for secrets, made distinct from the keys in ``taken`` if it changed (two
    keys redacted alike must not overwrite each other); and how many secrets it held."""
    if not isinstance(key, str):
        return key, 0
    swept, n = redact_secrets(key)
    if not n:
        return key, 0
    name, i = swept, 2
    while name in taken:
        name, i = f"{swept} #{i}", i + 1
    return name, n


def _sweep(value: Any) -> tuple[Any, list[str], int]:
    """``value`` with tool blocks redacted and secrets swept from every string and key, at any
    depth; the kinds of tool blocks found and how many secrets. Containers are copied only
    where something changed."""
    if isinstance(value, str):
        text, n = redact_secrets(value)
        return text, [], n
    if isinstance(value, (list, tuple)):  # orjson writes a tuple as an array
        blocks: list[str] = []
        total = 0
        items = []
        for item in value:
            new, found, n = _sweep(item)
            items.append(new)
            blocks += found
            total += n
        return (items if blocks or total else value), blocks, total
    if isinstance(value, Mapping):
        blocks = []
        total = 0
        kind = value.get("type")
        body_fields = _TOOL_BLOCK_BODIES.get(kind, ()) if isinstance(kind, str) else ()
        out: dict[Any, Any] = {}
        for field, item in value.items():
            if field in body_fields:
                out[field] = _redacted(item)
                blocks.append(f"{kind}.{field}")
                continue
            name, n = _sweep_key(field, out)
            total += n
            new, found, n = _sweep(item)
            if _names_secret(field):
                new, n = _blank_named(item, new, n)
            out[name] = new
            blocks += found
            total += n
        return (out if blocks or total else value), blocks, total
    return value, [], 0


def _length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if value is None:
        return 0
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return len(repr(value))
