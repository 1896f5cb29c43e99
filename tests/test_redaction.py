"""Redaction: every secret shape in every place a message can carry it, ordinary text
untouched, and linear time on adversarial input."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import reference_redaction
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata import RecoverableContextError
from memstrata.exceptions import InvalidInputError
from memstrata.layers.context_gate import ContextGate
from memstrata.redaction import redact_messages, redact_secrets

# Made-up secrets shaped like real ones (none of these is a real credential).
FAKE_OPENAI_KEY = "sk-proj-Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA"
FAKE_ANTHROPIC_KEY = "sk-ant-api03-Fk2Lm9Np3Qr7St1Uv5Wx8Yz0Ab4Cd6Ef"
FAKE_AWS_KEY = "AKIAZ7QX3MPL4RT9WV2K"
FAKE_GITHUB_TOKEN = "ghp_Q8wE3rT6yU1iO4pA7sD0fG2hJ5kL9zX3cV6b"
FAKE_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLW5vdC1yZWFs"
FAKE_PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAmadeupmadeupmadeup\n"
    "-----END RSA PRIVATE KEY-----"
)


def _fake(*parts: str) -> str:
    # Assembled at run time so no credential-shaped literal sits in the repository.
    return "".join(parts)


B64 = "Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA1b2C3d4E5f6G7h8I9j0KaLbMcNdOePfQgRhSiTjUkVlWmXnYoZp"
HEX = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"

# name -> (the text as it appears, the part of it that must not survive).
CORPUS: dict[str, tuple[str, str]] = {}


def _add(name: str, text: str, hidden: str | None = None) -> None:
    hidden = text if hidden is None else hidden
    assert hidden in text and len(hidden) >= 6, name
    CORPUS[name] = (text, hidden)


_add("openai legacy", _fake("sk-", B64[:48]))
_add("openai project", _fake("sk-", "proj-", B64[:40], "_", B64[40:80]))
_add("openai service account", _fake("sk-", "svcacct-", B64[:48]))
_add("anthropic", _fake("sk-", "ant-", "api03-", B64[:60], "-", B64[:30], "AA"))
_add("aws access key", _fake("AKIA", "Z7QX3MPL4RT9WV2K"))
_add("aws temporary access key", _fake("ASIA", "Z7QX3MPL4RT9WV2K"))
_add("aws secret key", _fake("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY"))
_add("aws secret pair", _fake("aws_secret_access_key = ", B64[:40]), B64[:40])
_add("aws session token", _fake("IQoJb3JpZ2lu", "X2VjEJr", B64[:80], "/", B64[:60], "=="))
_add(
    "aws session token pair",
    _fake("aws_session_token=", "FwoGZXIvYXdz", "EJr", B64[:70]),
    _fake("FwoGZXIvYXdz", "EJr", B64[:70]),
)
_add("github classic", _fake("ghp", "_", B64[:36]))
_add("github oauth", _fake("gho", "_", B64[:36]))
_add("github app", _fake("ghs", "_", B64[:36]))
_add("github fine-grained", _fake("github", "_pat_", "11ABCDEFG0", B64[:12], "_", B64[:59]))
_add("gitlab", _fake("glpat", "-", B64[:20]))
_add("google api key", _fake("AIza", "Sy", B64[:33]))
_add("google oauth token", _fake("ya29", ".", B64[:60]))
_add("google oauth client secret", _fake("GOCSPX", "-", B64[:28]))
_add("slack bot", _fake("xoxb", "-", "123456789012-1234567890123-", B64[:24]))
_add("slack user", _fake("xoxp", "-", "123456789012-1234567890123-", B64[:24]))
_add("slack app", _fake("xapp", "-1-", "A0123456789-1234567890123-", HEX * 2))
_add(
    "slack webhook",
    _fake("https://hooks.slack.com/services/", "T0000/B0000/", B64[:24]),
    B64[:24],
)
_add("stripe live", _fake("sk", "_live_", B64[:24]))
_add("stripe restricted", _fake("rk", "_live_", B64[:24]))
_add("stripe test", _fake("sk", "_test_", B64[:24]))
_add("stripe webhook secret", _fake("whsec", "_", B64[:32]))
_add("twilio api key", _fake("SK", HEX))
_add("twilio auth token pair", _fake("TWILIO_AUTH_TOKEN=", HEX), HEX)
_add("twilio sid and auth token", _fake("AC", HEX[::-1], ":", HEX), HEX)
_add("sendgrid", _fake("SG", ".", B64[:22], ".", B64[:43]))
_add("huggingface", _fake("hf", "_", B64[:34]))
_add("npm", _fake("npm", "_", B64[:36]))
_add("pypi", _fake("pypi-", "AgEIcHlwaS5vcmc", B64[:60]))
_add("mailgun legacy key", _fake("key", "-", HEX))
_add("mailgun private key", _fake(HEX, "-", HEX[:8], "-", HEX[8:16]))
_add(
    "discord bot token",
    _fake("MTA5ODc2NTQzMjEwOTg3NjU0Mw", ".", "GhIjKl", ".", B64[:38]),
)
_add("telegram bot token", _fake("123456789", ":", "AAH", B64[:32]), _fake("AAH", B64[:32]))
_add("azure client secret", _fake("abc", "8Q~", B64[:34]))
_add(
    "azure storage connection string",
    _fake(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=",
        B64[:86],
        "==;EndpointSuffix=core.windows.net",
    ),
    B64[:86],
)
_add(
    "azure service bus connection string",
    _fake(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;",
        "SharedAccessKey=",
        B64[:44],
    ),
    B64[:44],
)
_add(
    "azure sas signature",
    _fake("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030&sig=", B64[:40], "%3D"),
    B64[:40],
)
_add("jwt", _fake("eyJ", "hbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiJ1c2VyLTQyIn0", ".", B64[:43]))
_add("url password", _fake("postgres://app:", "Hunter2xyz", "@db.internal:5432/x"), "Hunter2xyz")
_add("url password, no user", _fake("redis://:", "s3cr3tpass", "@cache:6379/0"), "s3cr3tpass")
_add(
    "url password, https",
    _fake("https://deploy:", "ghost-Pa55", "@git.example.com/repo"),
    "ghost-Pa55",
)
_add(
    "url password with / and @",
    _fake("postgres://app:", "p@ss/w0rd@x", "@db.internal:5432/x"),
    "p@ss/w0rd@x",
)
_add(
    "url password with //",
    _fake("mysql://root:", "a//b/c:d", "@10.0.0.1/db"),
    "a//b/c:d",
)
_add("bearer header", _fake("Authorization: Bearer ", B64[:32]), B64[:32])
_add(
    "basic header",
    _fake("Authorization: Basic ", "ZGVwbG95OnNlY3JldC1wYXNz"),
    "ZGVwbG95OnNlY3JldC1wYXNz",
)
_add(
    "basic header, upper case",
    _fake("AUTHORIZATION: BASIC ", "ZGVwbG95OnNlY3JldC1wYXNz"),
    "ZGVwbG95OnNlY3JldC1wYXNz",
)
_add("api key header", _fake("x-api-key: ", B64[:32]), B64[:32])
_add("password pair", _fake('"password": "', "correct horse battery", '"'), "correct horse battery")
_add("client secret pair", _fake("CLIENT_SECRET='", "n0t-a-real-secret", "'"), "n0t-a-real-secret")
for _kind in (
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "DSA PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
):
    _add(
        f"pem {_kind}",
        _fake(f"-----BEGIN {_kind}-----\n", B64[:64], "\n", B64[1:65], f"\n-----END {_kind}-----"),
        B64[:64],
    )


def _tool_call(arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}


# Every place a message can carry a secret: name -> (secret text -> messages).
MESSAGE_SHAPES: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "system text": lambda s: [{"role": "system", "content": f"Deploy with {s} if asked."}],
    "developer text": lambda s: [{"role": "developer", "content": f"use {s}"}],
    "user text": lambda s: [{"role": "user", "content": f"my key is {s}, keep it safe"}],
    "user text part": lambda s: [
        {"role": "user", "content": [{"type": "text", "text": f"again: {s}"}]}
    ],
    "assistant text": lambda s: [{"role": "assistant", "content": f"Using {s} now."}],
    "tool-call arguments JSON text": lambda s: [
        {"role": "assistant", "content": None, "tool_calls": [_tool_call(json.dumps({"t": s}))]}
    ],
    "tool-call arguments, secret as key": lambda s: [
        {"role": "assistant", "tool_calls": [_tool_call(json.dumps({s: 1}))]}
    ],
    "tool result": lambda s: [{"role": "tool", "tool_call_id": "call_1", "content": f"ok {s}"}],
    "legacy function result": lambda s: [
        {"role": "function", "name": "deploy", "content": f"deployed with {s}"}
    ],
    "legacy function call": lambda s: [
        {"role": "assistant", "function_call": {"name": "legacy", "arguments": s}}
    ],
    "other role": lambda s: [{"role": "ipython", "content": [{"type": "text", "text": s}]}],
    "responses function_call": lambda s: [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": json.dumps([s])}
    ],
    "responses function_call_output": lambda s: [
        {"type": "function_call_output", "call_id": "c1", "output": f"out {s}"}
    ],
    "responses message": lambda s: [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": s}]}
    ],
    "anthropic tool_use": lambda s: [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"k": s}}],
        }
    ],
    "anthropic tool_result": lambda s: [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": s}],
                }
            ],
        }
    ],
    "nested dict value": lambda s: [
        {"role": "user", "content": [{"type": "text", "text": "x", "meta": {"a": [{"b": s}]}}]}
    ],
    "nested dict key": lambda s: [
        {"role": "user", "content": [{"type": "text", "text": "x", "meta": {"a": {s: "v"}}}]}
    ],
    "top-level key": lambda s: [{"role": "user", "content": "hi", "metadata": {s: True}}],
}


def _strings(value: Any) -> Iterator[str]:
    """Every string in ``value``, keys included, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _assert_hidden(name: str, hidden: str, out: Any) -> None:
    chunks = [hidden[i : i + 12] for i in range(0, max(1, len(hidden) - 11), 6)]
    for text in _strings(out):
        assert hidden not in text, f"{name} survived: {text!r}"
        for chunk in chunks:
            assert chunk not in text, f"part of {name} survived: {chunk!r} in {text!r}"


@pytest.mark.parametrize("shape", sorted(MESSAGE_SHAPES))
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_secret_in_every_message_shape_is_redacted(name: str, shape: str) -> None:
    text, hidden = CORPUS[name]
    messages = MESSAGE_SHAPES[shape](text)
    before = json.dumps(messages)
    out, policy = redact_messages(messages)
    _assert_hidden(name, hidden, out)
    assert policy
    assert json.dumps(messages) == before  # the input is not changed


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_secret_is_absent_from_the_checkpoint(tmp_path: Path, name: str) -> None:
    text, hidden = CORPUS[name]
    messages = [m for shape in MESSAGE_SHAPES.values() for m in shape(text)]
    messages.append({"role": "user", "content": "word " * 400})
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "leak-check")
    raw = Path(err.value.checkpoint_path).read_text()
    _assert_hidden(name, hidden, json.loads(raw))
    assert hidden not in raw


def test_non_conversational_roles_are_blanked_and_named_in_the_policy() -> None:
    messages = [
        {"role": "function", "name": "f", "content": "anything at all"},
        {"role": "ipython", "content": "anything"},
        {"role": "tool", "tool_call_id": "c", "content": {"rows": [1, 2]}},
    ]
    out, policy = redact_messages(messages)
    assert [m["content"] for m in out] == [
        "[redacted: 15 chars]",
        "[redacted: 8 chars]",
        f"[redacted: {len(json.dumps({'rows': [1, 2]}, separators=(',', ':')))} chars]",
    ]
    assert out[0]["name"] == "f"
    assert policy == ["function.content", "ipython.content", "tool.content"]


def test_a_value_under_a_secret_naming_key_is_blanked() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "x", "config": {"db_password": "hunter2", "max_tokens": 5}}
            ],
        }
    ]
    out, policy = redact_messages(messages)
    assert out[0]["content"][0]["config"] == {"db_password": "[redacted: 7 chars]", "max_tokens": 5}
    assert policy == ["user.content.secrets"]


def test_keys_redacted_alike_stay_distinct() -> None:
    a, b = CORPUS["github classic"][0], CORPUS["github oauth"][0]
    out, _ = redact_messages([{"role": "user", "content": [{"type": "x", "m": {a: 1, b: 2}}]}])
    assert sorted(out[0]["content"][0]["m"].values()) == [1, 2]


def test_url_passwords_keep_scheme_user_and_host() -> None:
    out, n = redact_secrets("db: postgres://app:p@ss/w0rd@db.internal:5432/x and more")
    assert out == "db: postgres://app:[redacted: url_password]@db.internal:5432/x and more"
    assert n == 1


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com/a/b and https://medium.com/@writer/post",
        "mailto:someone@example.com, ssh git@github.com:org/repo.git",
        "https://example.com/path?q=a:b@c",
        "The skeleton key opened the door; tokens of appreciation; bearer of news. sk-short",
        "a basic idea; max_tokens: 4000; commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "uuid 123e4567-e89b-12d3-a456-426614174000, time 12:30:45, ratio 16:9",
        "module memstrata.layers.context_gate.redact_messages_and_everything_else",
        "password: none; secret: ???; Authorization: pending",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact_secrets(text) == (text, 0)
    out, policy = redact_messages([{"role": "user", "content": text}])
    assert out == [{"role": "user", "content": text}] and policy == []


# Moved from tests/test_context_gate.py ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"key={FAKE_OPENAI_KEY}", FAKE_OPENAI_KEY, None),
        (f"my key is {FAKE_ANTHROPIC_KEY} ok", FAKE_ANTHROPIC_KEY, "api_key"),
        (f"aws {FAKE_AWS_KEY}", FAKE_AWS_KEY, "aws_access_key"),
        (f"token {FAKE_GITHUB_TOKEN}", FAKE_GITHUB_TOKEN, "github_token"),
        (f"Authorization: Bearer {FAKE_JWT}", FAKE_JWT, None),
        (f"here:\n{FAKE_PRIVATE_KEY}\nbye", "MIIEowIBAAKCAQEAmadeup", "private_key"),
        ("db at postgres://app:Hunter2xyz@db.internal:5432/x", "Hunter2xyz", "url_password"),
        ('config: password = "correct-horse-9"', "correct-horse-9", "assigned_secret"),
    ],
)
def test_secret_sweep(text: str, secret: str, kind: str | None) -> None:
    out, n = redact_secrets(text)
    assert secret not in out
    assert n >= 1
    if kind:
        assert f"[redacted: {kind}]" in out
    assert "postgres://app:[redacted" in out or "postgres" not in text


def test_secret_sweep_leaves_ordinary_prose_alone() -> None:
    prose = "The skeleton key opened the door; tokens of appreciation; bearer of news. sk-short"
    assert redact_secrets(prose) == (prose, 0)


def test_redact_messages_covers_text_parts_and_does_not_mutate() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": f"key {FAKE_OPENAI_KEY}"}]},
        {"role": "assistant", "content": f"I will use {FAKE_GITHUB_TOKEN}"},
        {"role": "system", "content": "plain"},
    ]
    out, policy = redact_messages(messages)
    assert FAKE_OPENAI_KEY not in json.dumps(out) and FAKE_GITHUB_TOKEN not in json.dumps(out)
    assert policy == ["user.content.secrets", "assistant.content.secrets"]
    assert messages[0]["content"][0]["text"].endswith(FAKE_OPENAI_KEY)
    assert out[2] == messages[2]


# Linear time ----------------------------------------------------------------------------------

MB = 1 << 20


def _megabyte(unit: str) -> str:
    return unit * (MB // len(unit))


ADVERSARIAL: dict[str, str] = {
    "repeated keyword": _megabyte("secret"),
    "repeated assignment": _megabyte("password="),
    "repeated quoted assignment": _megabyte('api_key="'),
    "key=value flood": _megabyte("api_key=abcdefgh "),
    "quoted flood": _megabyte('"password": "[redacted x \' '),
    "escaped quoted flood": _megabyte('password\\": \\"'),
    "token alphabet": _megabyte("aB3_-"),
    "base64 alphabet": _megabyte("aB3+/"),
    "base64 run": "".join(B64[i % len(B64)] for i in range(MB)),
    "one letter": "a" * MB,
    "a colon": _megabyte("a:"),
    "url starts": _megabyte("https://"),
    "url user and colon": _megabyte("https://a:"),
    "credentials": _megabyte("x://u:p@"),
    "path @": _megabyte("https://a:b/@"),
    "equals": "=" * MB,
    "spaces": " " * MB,
    "jwt starts": _megabyte("-eyJaaaa"),
    "key prefixes": _megabyte("sk-ghp_xoxb-AKIASG.hf_"),
    "near-miss tokens": _megabyte("sk-" + B64[:19] + " ghp_" + B64[:29] + " AKIA" + B64[:15] + " "),
    "pem begins": _megabyte("-----BEGIN "),
    "bearer": _megabyte("Bearer "),
    "digits and colons": _megabyte("1234567890:"),
    "dots": _megabyte("MTA5ODc2NTQzMjEwOTg3NjU0Mw."),
    "hex dashes": _megabyte(HEX + "-"),
    "azure": _megabyte("AccountKey=sig=Q~"),
    "account keys": _megabyte("AccountKey="),
    "prose": _megabyte("The quick brown fox jumps over the lazy dog. "),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_a_megabyte_of_adversarial_text_redacts_in_linear_time(name: str) -> None:
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    redact_secrets(text)
    elapsed = time.perf_counter() - start
    # Quadratic patterns took minutes here; the sweep takes tens of milliseconds (the figures
    # are in benches/test_redaction.py). The bound only guards against a quadratic rule.
    assert elapsed < 1.0, f"{name}: {elapsed:.2f} s for {len(text):,} characters"


# The rules against the pure-Python reference ---------------------------------------------------

_WRAPPERS = ("{}", "x {} y", '"{}"', "key: {}\n", "password={}", "{} {}", "({}),{};", "é{}é")


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_secret_redacts_as_the_reference_does(name: str) -> None:
    text, _ = CORPUS[name]
    for wrapper in _WRAPPERS:
        framed = wrapper.replace("{}", text)
        assert redact_secrets(framed) == reference_redaction.redact_secrets(framed), framed


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_text_redacts_as_the_reference_does(name: str) -> None:
    text = ADVERSARIAL[name][: 64 * 1024]
    assert redact_secrets(text) == reference_redaction.redact_secrets(text)


# Fragments that start, end, break or fake every shape, put together at random. (Not the Kelvin
# sign or the long s: the rules that ignore case fold them as Unicode does, the reference's
# lower-casing does not, and the rules redact a little more around them.)
_FRAGMENTS = sorted(
    {text for text, _ in CORPUS.values()}
    | {hidden for _, hidden in CORPUS.values()}
    | {
        *(B64[:n] for n in (5, 8, 16, 19, 20, 32, 35, 40, 41)),
        *(HEX[:n] for n in (8, 32)),
        *"-_.:=@/?#'\" ;,\n\t~+",
        "sk-",
        "ghp_",
        "AKIA",
        "eyJ",
        "Bearer ",
        "authorization: basic ",
        "https://",
        "x://",
        "u:",
        "p@",
        "/@",
        "password",
        "Secret_Token",
        "=",
        ": ",
        '"',
        "'",
        "[redacted",
        "[redac",
        "[redacted: api_key]",
        "AccountKey=",
        "sig=",
        "Q~",
        "8Q~",
        "AC",
        "SK",
        "123456789:",
        "MTA5ODc2NTQzMjEwOTg3NjU0Mw.",
        "GhIjKl.",
        "key-",
        "-----BEGIN RSA ",
        "PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "é",
        "\u2028",
        "\x1c",
    }
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=24))
def test_any_mix_of_fragments_redacts_as_the_reference_does(parts: list[str]) -> None:
    text = "".join(parts)
    assert redact_secrets(text) == reference_redaction.redact_secrets(text)


def test_a_lone_surrogate_is_refused_with_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        redact_secrets("password=abc\ud800defgh")


def test_a_lone_surrogate_in_a_nested_key_is_refused_at_the_checkpoint(tmp_path: Path) -> None:
    """Checkpoint JSON cannot hold it: an InvalidInputError, not the serialiser's TypeError."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "word " * 400, "m": {"k\udc00": 1}}]}
    ]
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path)
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        gate.check_and_compress(messages, "surrogate")
    assert list(tmp_path.iterdir()) == []


def test_a_lone_surrogate_in_a_key_is_refused_without_redaction_too(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "word " * 400, "m": {"k\udc00": 1}}]}
    ]
    gate = ContextGate(
        max_input_tokens=200, checkpoints_dir=tmp_path, checkpoint_redact_secrets=False
    )
    with pytest.raises(InvalidInputError, match=r"cannot checkpoint call 'surrogate'.*surrogates"):
        gate.check_and_compress(messages, "surrogate")
    assert list(tmp_path.iterdir()) == []


def test_a_large_user_message_checkpoints_quickly(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "secret " * 15_000}]
    gate = ContextGate(max_input_tokens=1000, checkpoints_dir=tmp_path)
    start = time.perf_counter()
    with pytest.raises(RecoverableContextError):
        gate.check_and_compress(messages, "big")
    assert time.perf_counter() - start < 2.0


def test_texts_in_a_list_under_a_secret_naming_key_are_blanked() -> None:
    # No key inside a list says what its items are: the key above it does.
    config = {"api_keys": ["hunter2hunter2", 123456789, {"value": "x"}], "retries": [1, 2]}
    out, policy = redact_messages([{"role": "user", "content": "x", "config": config}])
    assert out[0]["config"] == {
        "api_keys": ["[redacted: 14 chars]", "[redacted: 9 chars]", {"value": "x"}],
        "retries": [1, 2],
    }
    assert policy == ["user.config.secrets"]
    assert config["api_keys"][0] == "hunter2hunter2"  # the input is not changed


def test_tool_calls_and_content_given_as_tuples_are_redacted(tmp_path: Path) -> None:
    # orjson writes a tuple as an array: a tuple must be redacted as a list is.
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}
    messages = [
        {"role": "user", "content": "word " * 400},
        {"role": "assistant", "content": None, "tool_calls": (call,)},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "see", "attachments": (FAKE_OPENAI_KEY,)},
    ]
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path)
    with pytest.raises(RecoverableContextError) as refused:
        gate.check_and_compress(messages, "tuples")
    text = Path(refused.value.checkpoint_path).read_text()
    assert '{\\"q\\": \\"x\\"}' not in text and FAKE_OPENAI_KEY not in text
    saved = json.loads(text)["messages"]
    assert saved[1]["tool_calls"][0]["function"]["arguments"] == "[redacted: 10 chars]"
    assert saved[3]["attachments"] == ["[redacted: api_key]"]


@pytest.mark.parametrize(
    "text",
    [
        '{\\"password\\": \\"hunter2hunter2\\"}',  # JSON quoted inside a JSON string
        '{\\\\\\"db_password\\\\\\": \\\\\\"hunter2hunter2\\\\\\"}',  # quoted twice
        "PASSWORD=\\'hunter2hunter2\\'",
    ],
)
def test_an_assignment_with_escaped_quotes_is_redacted(text: str) -> None:
    out, n = redact_secrets(text)
    assert "hunter2" not in out and n == 1 and "[redacted: assigned_secret]" in out
    assert out == reference_redaction.redact_secrets(text)[0]


def test_responses_built_in_tool_items_are_blanked(tmp_path: Path) -> None:
    # What a built-in tool ran, typed, read or printed: a secret there need not look like one.
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "word " * 400},
        {
            "type": "code_interpreter_call",
            "id": "ci_1",
            "code": "print(open('.env').read())",
            "outputs": [{"type": "logs", "logs": "PASS hunter2"}],
        },
        {
            "type": "local_shell_call",
            "id": "ls_1",
            "call_id": "c1",
            "action": {"type": "exec", "command": ["mysql", "-phunter2"]},
        },
        {"type": "computer_call", "id": "cc_1", "action": {"type": "type", "text": "hunter2"}},
        {
            "type": "file_search_call",
            "id": "fs_1",
            "queries": ["vault"],
            "results": [{"file_id": "f1", "text": "the vault code is hunter2"}],
        },
    ]
    out, policy = redact_messages(items)
    assert "hunter2" not in json.dumps(out)
    assert out[2]["call_id"] == "c1" and out[4]["queries"] == ["vault"]
    assert {"code_interpreter_call.outputs", "file_search_call.results"} <= set(policy)
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path)
    with pytest.raises(RecoverableContextError) as refused:
        gate.check_and_compress(items, "built-in")
    assert "hunter2" not in Path(refused.value.checkpoint_path).read_text()


def test_credential_headers_kept_as_a_dict_are_blanked() -> None:
    headers = {
        "Authorization": "Basic dXNlcjpwYXNzd29yZA==",
        "proxy-authorization": "Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "Cookie": "sid=s3cr3tsession",
        "Set-Cookie": "sid=s3cr3tsession; HttpOnly",
        "Content-Type": "application/json",
        "authorization_url": "https://auth.example/authorize",
    }
    out, policy = redact_messages([{"role": "user", "content": "x", "headers": headers}])
    assert out[0]["headers"] == {
        "Authorization": "[redacted: 26 chars]",
        "proxy-authorization": "[redacted: 46 chars]",
        "Cookie": "[redacted: 17 chars]",
        "Set-Cookie": "[redacted: 27 chars]",
        "Content-Type": "application/json",
        "authorization_url": "https://auth.example/authorize",
    }
    assert policy == ["user.headers.secrets"]
