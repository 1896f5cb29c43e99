"""What SECURITY.md promises, each promise against a corpus of attacks.

* Prototype-pollution keys at depths 1…1000 never reach stored state, by any write path.
* Traversal call_ids, and symlinks, FIFOs or directories planted where a file is expected, are
  refused by ``read_tool_result``, by offloading and by checkpoint writing.
* Secrets of the major providers' shapes are redacted from checkpoints wherever they appear.
* Checkpoints, offloaded results and the directories memstrata creates for them are private.
* A run scoped to thread / resource / agent / workflow A never reads or writes B's memory,
  whatever its tool arguments say.
* Namespace and key strings that look like SQL are plain data on SQLite and PostgreSQL.
* A number JSON cannot hold, in a dict of arguments, is bad input named by its path; an error
  payload echoes a bad value cut, whatever its size.

Elsewhere: a call that fails changes nothing (``tests/test_fuzz_tools.py``); every limit has its
named error (``tests/test_limits.py``); a killed writer leaves old or new records
(``tests/test_crash.py``); the store conformance suite has one SQL-looking case per backend
(``tests/test_stores.py::test_sql_looking_strings_are_plain_data``); the reason each refused
call_id is given (``tests/test_tool_results.py::test_call_ids_that_could_escape_are_refused``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_checks import drop_postgres_tables

from memstrata import (
    AgentMind,
    ContextGate,
    MemoryStack,
    SharedMemory,
    SQLiteStore,
    ToolResults,
    WorkingMemory,
    deep_merge,
    merge_json,
    strip_unsafe_keys,
)
from memstrata.exceptions import InvalidInputError, RecoverableContextError, ToolError
from memstrata.layers.wm_stored import read_state
from memstrata.stores import PostgresStore, Store

UNSAFE = ("__proto__", "constructor")


def all_keys(value: Any) -> set[str]:
    """Every object key at any depth (iterative: values here nest 1000 deep)."""
    keys: set[str] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            keys.update(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return keys


def poisoned(depth: int) -> dict[str, Any]:
    """An object with unsafe keys at every depth from 1 to ``depth``: ``{"n": …, "__proto__":
    1}`` wrappers around ``{"__proto__": {...}, "constructor": 1, "leaf": depth}``."""
    value: dict[str, Any] = {"__proto__": {"polluted": True}, "constructor": 1, "leaf": depth}
    for _ in range(depth - 1):
        value = {"n": value, "__proto__": 1}
    return value


def poisoned_json(depth: int) -> str:
    """:func:`poisoned` as JSON text, built without a recursive encoder."""
    inner = f'{{"__proto__": {{"polluted": true}}, "constructor": 1, "leaf": {depth}}}'
    return '{"n": ' * (depth - 1) + inner + ', "__proto__": 1}' * (depth - 1)


def leaf_depth(value: Any) -> int:
    """How many ``"n"`` levels lead to the leaf: proves the stripped value kept its shape."""
    depth = 1
    while isinstance(value, dict) and "n" in value:
        value, depth = value["n"], depth + 1
    assert isinstance(value, dict) and "leaf" in value
    return depth


def rows(store: Store) -> list[tuple[Any, ...]]:
    return [(i.namespace, i.key, i.version, json.dumps(i.value)) for i in store.list(limit=10**6)]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "security.db")
    yield s
    s.close()


# 1. Unsafe keys at depths 1…1000 ---------------------------------------------------------------

EVERY_DEPTH = range(1, 1001)
# The write paths store their result, and a stored value nests at most 254 levels
# (orjson's limit): around that edge and far past it, a write is stripped or refused whole.
STORED_DEPTHS = (1, 2, 3, 5, 10, 50, 100, 200, 250, 251, 252, 253, 254, 255, 300, 500, 999, 1000)


def test_kernels_strip_unsafe_keys_at_every_depth_from_1_to_1000() -> None:
    # A stored base is clean; a base dict the patch touches is stripped too, so a dirty one
    # under the patch's path comes out clean (untouched base subtrees are trusted as they are).
    base = {"n": {"keep": 1, "__proto__": 0}}
    for depth in EVERY_DEPTH:
        patch = poisoned(depth)
        for merged in (
            deep_merge({"keep": 1}, patch),
            deep_merge(base if depth > 1 else {}, patch, arrays="union", nulls="delete"),
            strip_unsafe_keys(patch),
        ):
            assert not set(UNSAFE) & all_keys(merged), depth
            assert leaf_depth(merged) == depth
        assert not {"evil"} & all_keys(strip_unsafe_keys({"evil": 1, "n": patch}, keys=["evil"]))
    for depth in (*range(1, 40), *range(100, 1001, 100)):
        text = poisoned_json(depth)
        for merged_text in (merge_json("{}", text), merge_json(text, "{}")):
            assert b"__proto__" not in merged_text and b"constructor" not in merged_text, depth
    with pytest.raises(InvalidInputError, match="1024"):
        deep_merge({}, poisoned(1100))


def _stored_clean_or_refused(
    store: Store, before: list[Any], result: dict[str, Any], depth: int
) -> None:
    """A write either went through stripped, or was refused whole, naming the depth limit."""
    if result.get("ok") is False:
        assert depth > 200, (depth, result)
        assert result["error"]["code"] == "invalid_arguments", result
        assert any(word in result["error"]["message"] for word in ("254", "1024", "JSON")), result
        assert rows(store) == before
    else:
        assert depth <= 254, depth
        for item in store.list(limit=10**6):
            assert not set(UNSAFE) & all_keys(item.value), (depth, item.key)


def test_working_memory_tools_strip_or_refuse_at_every_depth(sqlite_store: SQLiteStore) -> None:
    noetic = WorkingMemory(schema={"type": "object"}, budget=(0, 10**7))
    voltagent = WorkingMemory(
        schema={"type": "object"}, budget=(0, 10**7), tools="voltagent", name="wm-volt"
    )
    stack = MemoryStack([noetic, voltagent], store=sqlite_store, total_budget=2 * 10**7)
    for depth in STORED_DEPTHS:
        with stack.run(thread_id=f"t{depth}") as run:
            for name, args in (
                ("working-memory/update", {"p": poisoned(depth)}),
                ("working-memory/update", '{"p": ' + poisoned_json(depth) + "}"),
                ("update_wm-volt_memory", {"content": {"p": poisoned(depth)}}),
                ("update_wm-volt_memory", {"content": poisoned_json(depth), "mode": "replace"}),
            ):
                before = rows(sqlite_store)
                _stored_clean_or_refused(sqlite_store, before, run.call_tool(name, args), depth)
            for layer in ("working-memory", "wm-volt"):
                assert not set(UNSAFE) & all_keys(run.layer(layer).snapshot)


def test_programmatic_and_observed_updates_strip_or_refuse(sqlite_store: SQLiteStore) -> None:
    stack = MemoryStack(
        [WorkingMemory(schema={"type": "object"}, budget=(0, 10**7))],
        store=sqlite_store,
        total_budget=10**7,
    )
    for depth in STORED_DEPTHS:
        with stack.run(thread_id=f"t{depth}") as run:
            handle = run.layer("working-memory")
            for mode in ("append", "replace"):
                before = rows(sqlite_store)
                try:
                    handle.update({"p": poisoned(depth)}, mode)
                    result: dict[str, Any] = {"ok": True}
                except InvalidInputError as exc:
                    result = {
                        "ok": False,
                        "error": {"code": "invalid_arguments", "message": str(exc)},
                    }
                _stored_clean_or_refused(sqlite_store, before, result, depth)
            # The legacy updateWorkingMemory call, OpenAI and Anthropic shapes.
            before = rows(sqlite_store)
            diagnostics = run.observe(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {
                                "name": "updateWorkingMemory",
                                "arguments": '{"q": ' + poisoned_json(depth) + "}",
                            },
                        }
                    ],
                    "content": [
                        {
                            "type": "tool_use",
                            "name": "updateWorkingMemory",
                            "input": {"r": poisoned(depth)},
                        }
                    ],
                }
            )
            observed = {"ok": not diagnostics}
            if diagnostics:
                observed["error"] = {"code": "invalid_arguments", "message": " ".join(diagnostics)}
                # A dropped call leaves the state as it was; the other one may have applied.
                assert depth > 200, diagnostics
            else:
                _stored_clean_or_refused(sqlite_store, before, observed, depth)
            assert not set(UNSAFE) & all_keys(handle.snapshot)


def test_states_loaded_from_a_store_are_stripped(sqlite_store: SQLiteStore) -> None:
    stack = MemoryStack(
        [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 10**7))],
        store=sqlite_store,
        total_budget=10**7,
    )
    for depth in (1, 2, 10, 100, 250):
        # Written by other code (or an older version) straight into the store.
        sqlite_store.put(("working-memory", "resource", f"u{depth}"), "state", poisoned(depth))
        with stack.run(resource_id=f"u{depth}") as run:
            handle = run.layer("working-memory")
            assert not set(UNSAFE) & all_keys(handle.snapshot)
            assert leaf_depth(handle.snapshot) == depth
            assert "__proto__" not in "".join(str(m["content"]) for m in run.prepare([]))
            assert run.call_tool("working-memory/update", {"x": 1})["ok"] is True
        stored = sqlite_store.get(("working-memory", "resource", f"u{depth}"), "state")
        assert stored is not None and not set(UNSAFE) & all_keys(stored.value)


def test_shared_memory_values_are_stripped_on_every_path(sqlite_store: SQLiteStore) -> None:
    ns = ("shared-memory", "w")
    for depth in (1, 2, 10, 100, 200):
        sqlite_store.put(
            ns,
            f"step:raw{depth}",
            {"kind": "step_result", "value": poisoned(depth), "createdAt": 1, "valueBytes": 1},
        )
    memory = SharedMemory(store=sqlite_store, namespace=ns)
    for depth in (1, 2, 10, 100, 200):
        assert not set(UNSAFE) & all_keys(memory.get_value(f"step:raw{depth}"))
    with MemoryStack([memory], store=sqlite_store).run(thread_id="t") as run:
        for depth in STORED_DEPTHS:
            before = rows(sqlite_store)
            result = run.call_tool("memory_write", {"key": f"d{depth}", "value": poisoned(depth)})
            if result.get("ok") is False:
                assert depth > 200 and rows(sqlite_store) == before, result
            else:
                assert not set(UNSAFE) & all_keys(memory.get_value(f"shared:d{depth}"))
            memory.set(key=f"step:{depth}", kind="step_result", value=[poisoned(min(depth, 200))])
        read = run.call_tool("memory_read", {"keys": [e.key for e in memory.snapshot()][:200]})
    assert not set(UNSAFE) & all_keys(read)
    for item in sqlite_store.list(ns, limit=10**6):
        # The raw entries planted above stay as written; everything memstrata wrote is clean.
        if not item.key.startswith("step:raw"):
            assert not set(UNSAFE) & all_keys(item.value), item.key


def test_mind_entries_never_surface_unsafe_keys(sqlite_store: SQLiteStore) -> None:
    # A mind entry has a fixed shape: extra keys in a stored payload are never read back.
    payload = {
        "type": "belief",
        "id": "b_planted",
        "content": "Planted beliefs carry extra keys.",
        "confidence": "high",
        "tags": ["__proto__"],
        "createdAt": 1,
        "updatedAt": 1,
        "__proto__": {"polluted": True},
        "constructor": poisoned(50),
    }
    sqlite_store.put(("mind", "a"), "belief/b_planted", payload)
    with MemoryStack([AgentMind()], store=sqlite_store).run(agent="a") as run:
        found = run.call_tool("mind_recall", {"query": "planted beliefs extra keys"})
        assert found["ok"] is True and found["result"], found
        assert not set(UNSAFE) & all_keys(found["result"])
        assert (
            run.call_tool(
                "mind_believe", {"content": "Tags are plain strings.", "tags": ["__proto__"]}
            )["status"]
            == "ok"
        )


# 2. Traversal call_ids and planted files -------------------------------------------------------

TRAVERSAL_IDS: list[Any] = [
    "../x",
    "..",
    ".",
    "../../etc/passwd",
    "x/../../y",
    "a/b",
    "/etc/passwd",
    "/tmp/x",
    "..\\x",
    "a\\b",
    "C:\\Windows\\win.ini",
    "\\\\server\\share",
    "%2e%2e%2f",
    "%2e%2e/x",
    "..%2fx",
    "%2F",
    "x%2Fy",
    "..%252f",
    "..%c0%af",
    "%c0%ae%c0%ae/",
    "\xc0\xae\xc0\xae/",  # an overlong "../" decoded as Latin-1
    "x\x00y",
    "\x00",
    "x%00.txt",
    "x\ny",
    " x",
    "x ",
    ".hidden",
    "-rf",
    "~",
    "~root",
    "$HOME",
    "`id`",
    "x;rm -rf",
    "..\u2215x",  # DIVISION SLASH
    "\u2215etc\u2215passwd",
    "..\uff0fx",  # FULLWIDTH SOLIDUS
    "\uff0e\uff0e\uff0fx",  # FULLWIDTH FULL STOPs
    "\u2024\u2024/x",  # ONE DOT LEADER
    "\u2024\u2024\u2215x",
    "\u2025x",  # TWO DOT LEADER
    "x\u202egnp.txt",  # RIGHT-TO-LEFT OVERRIDE
    "x\u200by",  # ZERO WIDTH SPACE
    "\uff58",  # FULLWIDTH x
    "x" * 129,
    "",
    "   ",
    5,
    None,
    ["a"],
    {"a": 1},
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("call_id", TRAVERSAL_IDS, ids=repr)
def test_traversal_call_ids_are_refused_everywhere(tmp_path: Path, call_id: Any) -> None:
    (tmp_path / "outside.txt").write_text("secret outside")
    layer = ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
    gate = ContextGate(max_input_tokens=10, checkpoints_dir=tmp_path / "ckpt")
    before = _tree(tmp_path)
    with MemoryStack([layer], store="memory://").run(thread_id="t") as run:
        result = run.call_tool("read_tool_result", {"call_id": call_id})
    assert result["ok"] is False and result["error"]["code"] == "invalid_arguments", result
    assert "secret outside" not in json.dumps(result)
    with pytest.raises(InvalidInputError, match="call_id"):
        layer.offload(call_id, "words over the threshold " * 10)
    with pytest.raises(InvalidInputError, match="call_id"):
        gate.write_checkpoint([{"role": "user", "content": "hi"}], call_id, 99)
    with pytest.raises(InvalidInputError, match="call_id"):
        gate.check_and_compress([{"role": "user", "content": "word " * 100}], call_id)
    created = _tree(tmp_path) - before
    assert created <= {"calls", "ckpt"}, created


def _planted(tmp_path: Path, calls: Path | None = None) -> tuple[Path, Path]:
    """A tool-calls directory (``calls``, by default ``tmp_path/calls``) with a symlink, a
    dangling symlink, a symlink to a directory, a directory and a FIFO planted under call_id
    names; and a secret file outside it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("do not leak")
    (tmp_path / "elsewhere").mkdir()
    calls = calls if calls is not None else tmp_path / "calls"
    calls.mkdir(parents=True)
    (calls / "link.txt").symlink_to(secret)
    (calls / "dangling.txt").symlink_to(tmp_path / "missing.txt")
    (calls / "dirlink.txt").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (calls / "adir.txt").mkdir()
    os.mkfifo(calls / "fifo.txt")
    return calls, secret


PLANTED = ("link", "dangling", "dirlink", "adir", "fifo")


def test_planted_files_are_never_read_through(tmp_path: Path) -> None:
    layer = ToolResults(tool_calls_dir=tmp_path / "calls")
    # Planted where the run of thread "t" reads.
    _planted(tmp_path, layer.for_thread("t").tool_calls_dir)
    with MemoryStack([layer], store="memory://").run(thread_id="t") as run:
        for call_id in PLANTED:
            # A FIFO read would block forever: the call must come back at once.
            done: list[dict[str, Any]] = []

            def read(call_id: str = call_id, done: list[dict[str, Any]] = done) -> None:
                done.append(run.call_tool("read_tool_result", {"call_id": call_id}))

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            reader.join(timeout=10)
            assert done, f"read_tool_result({call_id!r}) hung"
            result = done[0]
            assert result["ok"] is False, (call_id, result)
            assert result["error"]["code"] == "invalid_arguments", (call_id, result)
            assert "do not leak" not in json.dumps(result)


def test_planted_files_are_never_written_through(tmp_path: Path) -> None:
    calls, secret = _planted(tmp_path)
    layer = ToolResults(tool_calls_dir=calls, threshold_tokens=1)
    for call_id in PLANTED:
        with pytest.raises(InvalidInputError, match=r"symlink|regular file"):
            layer.offload(call_id, "a result the model should never see elsewhere " * 5)
    assert secret.read_text() == "do not leak"
    assert not (tmp_path / "missing.txt").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_symlinked_blob_directory_is_refused(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (calls / "by-hash").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    layer = ToolResults(tool_calls_dir=calls, threshold_tokens=1)
    with pytest.raises(InvalidInputError, match="symlink"):
        layer.offload("call_1", "a result to be stored " * 5)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert not (calls / "call_1.txt").exists()


def test_a_planted_blob_symlink_is_replaced_not_written_through(tmp_path: Path) -> None:
    import hashlib

    calls = tmp_path / "calls"
    text = "a result to be stored " * 5
    digest = hashlib.sha256(text.encode()).hexdigest()
    (calls / "by-hash").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("unchanged")
    (calls / "by-hash" / f"{digest}.txt").symlink_to(victim)
    layer = ToolResults(tool_calls_dir=calls, threshold_tokens=1)
    layer.offload("call_1", text)
    assert victim.read_text() == "unchanged"
    assert layer.read_tool_result("call_1")["content"] == text


def test_checkpoints_never_replace_planted_files(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("unchanged")
    (ckpt / "link.json").symlink_to(victim)
    (ckpt / "dangling.json").symlink_to(tmp_path / "missing.json")
    (ckpt / "adir.json").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (ckpt / "dirlink.json").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    gate = ContextGate(max_input_tokens=10, checkpoints_dir=ckpt)
    for call_id in ("link", "dangling", "adir", "dirlink"):
        with pytest.raises(RecoverableContextError) as err:
            gate.check_and_compress([{"role": "user", "content": "word " * 100}], call_id)
        # Written beside what is planted, which stays as it was.
        assert Path(err.value.checkpoint_path) == ckpt / f"{call_id}~2.json"
        assert json.loads((ckpt / f"{call_id}~2.json").read_text())["call_id"] == call_id
    assert victim.read_text() == "unchanged"
    assert not (tmp_path / "missing.json").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert (ckpt / "adir.json").is_dir() and (ckpt / "link.json").is_symlink()


# 3. Secrets in checkpoints ---------------------------------------------------------------------


def _fake(*parts: str) -> str:
    # Assembled at run time so no credential-shaped literal sits in the repository.
    return "".join(parts)


B64 = "Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA1b2C3d4E5f6G7h8I9j0KaLbMcNdOePfQgRhSiTjUkVlWmXnYoZp"
HEX = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
SECRETS: dict[str, str] = {
    "openai legacy": _fake("sk-", B64[:48]),
    "openai project": _fake("sk-", "proj-", B64[:40], "_", B64[40:80]),
    "openai service account": _fake("sk-", "svcacct-", B64[:48]),
    "anthropic": _fake("sk-", "ant-", "api03-", B64[:60], "-", B64[:30], "AA"),
    "aws access key": _fake("AKIA", "Z7QX3MPL4RT9WV2K"),
    "aws session key": _fake("ASIA", "Z7QX3MPL4RT9WV2K"),
    "aws secret key": _fake("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY"),
    "github classic": _fake("ghp", "_", B64[:36]),
    "github oauth": _fake("gho", "_", B64[:36]),
    "github app": _fake("ghs", "_", B64[:36]),
    "github fine-grained": _fake("github", "_pat_", "11ABCDEFG0", B64[:12], "_", B64[:59]),
    "gitlab": _fake("glpat", "-", B64[:20]),
    "google api key": _fake("AIza", "Sy", B64[:33]),
    "google oauth token": _fake("ya29", ".", B64[:60]),
    "slack bot": _fake("xoxb", "-", "123456789012-1234567890123-", B64[:24]),
    "slack user": _fake("xoxp", "-", "123456789012-1234567890123-", B64[:24]),
    "slack app": _fake("xapp", "-1-", "A0123456789-1234567890123-", HEX * 2),
    "slack webhook": _fake("https://hooks.slack.com/services/", "T0000/B0000/", B64[:24]),
    "stripe live": _fake("sk", "_live_", B64[:24]),
    "stripe restricted": _fake("rk", "_live_", B64[:24]),
    "stripe test": _fake("sk", "_test_", B64[:24]),
    "twilio api key": _fake("SK", HEX),
    "twilio auth token": _fake("TWILIO_AUTH_TOKEN=", HEX),
    "sendgrid": _fake("SG", ".", B64[:22], ".", B64[:43]),
    "huggingface": _fake("hf", "_", B64[:34]),
    "npm": _fake("npm", "_", B64[:36]),
    "pypi": _fake("pypi-", "AgEIcHlwaS5vcmc", B64[:60]),
    "jwt": _fake("eyJ", "hbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiJ1c2VyLTQyIn0", ".", B64[:43]),
    "url password": _fake("postgres://app:", "Hunter2xyz", "@db.internal:5432/x"),
    "url password, no user": _fake("redis://:", "s3cr3tpass", "@cache:6379/0"),
    "url password, https": _fake("https://deploy:", "ghost-Pa55", "@git.example.com/repo"),
    "bearer header": _fake("Authorization: Bearer ", B64[:32]),
    "basic header": _fake("Authorization: Basic ", "ZGVwbG95OnNlY3JldC1wYXNz"),
    "api key header": _fake("x-api-key: ", B64[:32]),
    "password pair": _fake('"password": "', "correct horse battery", '"'),
    "aws secret pair": _fake("aws_secret_access_key = ", B64[:40]),
}
PEM_KINDS = (
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "DSA PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
)
for kind in PEM_KINDS:
    SECRETS[f"pem {kind}"] = _fake(
        f"-----BEGIN {kind}-----\n", B64[:64], "\n", B64[1:65], f"\n-----END {kind}-----"
    )


def _secret_payload(secret: str) -> str:
    """The part of a corpus entry that must not survive (the secret, not its label)."""
    for marker in (
        "TWILIO_AUTH_TOKEN=",
        "Authorization: Bearer ",
        "Authorization: Basic ",
        "x-api-key: ",
        '"password": "',
        "aws_secret_access_key = ",
    ):
        if secret.startswith(marker):
            return secret[len(marker) :].strip('"')
    if "://" in secret and "@" in secret:
        return secret.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    if secret.startswith("https://hooks.slack.com/"):
        return secret.rsplit("/", 1)[1]
    if secret.startswith("-----BEGIN"):
        return B64[:64]
    return secret


def _conversation_with(secret: str) -> list[dict[str, Any]]:
    """The secret in every place a conversation can carry it."""
    return [
        {"role": "system", "content": f"Deploy with {secret} if asked."},
        {"role": "user", "content": f"my key is {secret}, keep it safe"},
        {"role": "user", "content": [{"type": "text", "text": f"again: {secret}"}]},
        {
            "role": "assistant",
            "content": f"Using {secret} now.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "deploy", "arguments": json.dumps({"token": secret})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": f"deployed with {secret}"},
        {"role": "assistant", "function_call": {"name": "legacy", "arguments": secret}},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"calling with {secret}"},
                {"type": "tool_use", "id": "tu_1", "name": "deploy", "input": {"key": secret}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": f"echo {secret}"},
                {"type": "text", "text": f"the result said {secret}"},
            ],
        },
        {"role": "user", "content": "word " * 400},
    ]


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secrets_are_redacted_from_checkpoints_wherever_they_appear(
    tmp_path: Path, name: str
) -> None:
    secret = SECRETS[name]
    hidden = _secret_payload(secret)
    assert len(hidden) >= 6 and hidden in secret
    gate = ContextGate(max_input_tokens=200, checkpoints_dir=tmp_path / "ckpt")
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(_conversation_with(secret), "leak-check")
    text = Path(err.value.checkpoint_path).read_text()
    assert hidden not in text, f"{name} survived in the checkpoint"
    for chunk in (hidden[i : i + 12] for i in range(0, max(1, len(hidden) - 11), 6)):
        assert chunk not in text, f"part of {name} survived: {chunk!r}"
    record = json.loads(text)
    assert set(record["redaction_policy"]) >= {
        "tool.content",
        "assistant.tool_calls.function.arguments",
        "assistant.function_call.arguments",
        "assistant.content.tool_use.input",
        "user.content.tool_result.content",
        "system.content.secrets",
        "user.content.secrets",
        "assistant.content.secrets",
    }
    assert record["messages"][0]["content"].startswith("Deploy with ")


def test_redaction_keeps_ordinary_text(tmp_path: Path) -> None:
    prose = (
        "The skeleton key opened the door; tokens of appreciation; a basic idea; max_tokens: "
        "4000; commit 3f786850e387550fdab836ed7e6dc881de23001b; see https://example.com/a/b."
    )
    gate = ContextGate(max_input_tokens=50, checkpoints_dir=tmp_path)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress([{"role": "user", "content": prose * 5}], "plain")
    record = json.loads(Path(err.value.checkpoint_path).read_text())
    assert record["messages"][0]["content"] == prose * 5
    assert record["redaction_policy"] == []


# 4. Private files and directories --------------------------------------------------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: modes must come from memstrata, not from the environment."""
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_checkpoints_and_their_directory_are_private(tmp_path: Path, open_umask: None) -> None:
    ckpt = tmp_path / "new" / "ckpt"
    gate = ContextGate(max_input_tokens=10, checkpoints_dir=ckpt)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress([{"role": "user", "content": "word " * 100}], "c1")
    assert _mode(Path(err.value.checkpoint_path)) == 0o600
    assert _mode(ckpt) == 0o700


def test_offloaded_results_and_their_directories_are_private(
    tmp_path: Path, open_umask: None
) -> None:
    calls = tmp_path / "new" / "calls"
    layer = ToolResults(tool_calls_dir=calls, threshold_tokens=1)
    layer.offload("call_1", "a result over the threshold " * 10)
    for path in (calls / "call_1.txt", *(calls / "by-hash").iterdir()):
        assert _mode(path) == 0o600, path
    assert _mode(calls) == 0o700 and _mode(calls / "by-hash") == 0o700
    # By default results are kept in the stack's store (a private in-memory one on its own):
    # no directory at all, so nothing on disk for another user to read.
    default = ToolResults(threshold_tokens=1)
    default.offload("call_2", "a result over the threshold " * 10)
    assert default.tool_calls_dir is None


# 5. Scope isolation ----------------------------------------------------------------------------

MARKER = "B-PRIVATE-MARKER"
B_NAMES = ["B", "thread-B", "user-B", "agent-B", "workflow-B", "call_B"]


def _isolation_stack(store: Store, workflow: str, tool_calls_dir: Path) -> MemoryStack:
    return MemoryStack(
        [
            WorkingMemory(schema={"type": "object"}, budget=(0, 100_000)),
            WorkingMemory(scope="resource", budget=(0, 100_000), tools="voltagent", name="profile"),
            SharedMemory(store=store, namespace=("shared-memory", workflow)),
            AgentMind(),
            # One directory for every thread, as a server configures it.
            ToolResults(tool_calls_dir=tool_calls_dir, threshold_tokens=1),
        ],
        store=store,
    )


@pytest.fixture(scope="module")
def isolation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Store, Any]]:
    tmp = tmp_path_factory.mktemp("isolation")
    store = SQLiteStore(tmp / "iso.db")
    stack_b = _isolation_stack(store, "workflow-B", tmp / "tool_calls")
    with stack_b.run(thread_id="thread-B", resource_id="user-B", agent="agent-B") as run:
        run.layer("tool-results").offload("call_B", f"{MARKER} fetched for B. " * 20)
        assert MARKER in run.call_tool("read_tool_result", {"call_id": "call_B"})["content"]
        assert run.call_tool("working-memory/update", {"secret": MARKER})["ok"]
        assert run.call_tool("update_profile_memory", {"content": f"profile {MARKER}"})["ok"]
        assert run.call_tool("memory_write", {"key": "plan", "value": MARKER})["ok"]
        assert run.call_tool("mind_believe", {"content": f"{MARKER} is the vault code."})["id"]
        assert run.call_tool("mind_reflect", {"content": f"{MARKER} rule", "pin": True})["id"]
        goal = run.call_tool("mind_set_goal", {"description": f"Guard {MARKER}."})["id"]
    b_rows = rows(store)
    b_ids = [goal, *(json.loads(r[3]).get("id") for r in b_rows if r[0][0] == "mind")]
    stack_a = _isolation_stack(store, "workflow-A", tmp / "tool_calls")
    run = stack_a.run(thread_id="thread-A", resource_id="user-A", agent="agent-A").open()
    yield run, store, (b_rows, [i for i in b_ids if i])
    run.close()
    store.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_run_never_reads_or_writes_another_scope(
    isolation: tuple[Any, Store, Any], data: st.DataObject
) -> None:
    run, store, (b_rows, b_ids) = isolation
    names_of_b = st.sampled_from([*B_NAMES, *b_ids, "shared:plan", "plan", "state", "../B"])
    value = st.one_of(names_of_b, st.lists(names_of_b, max_size=3), st.booleans(), st.none())
    tool = data.draw(st.sampled_from(sorted({t["name"] for t in run.tool_specs("mcp")})))
    properties = next(t for t in run.tool_specs("mcp") if t["name"] == tool)["inputSchema"].get(
        "properties", {}
    )
    # Every declared argument, plus the scope arguments a model might invent, naming B.
    fields = st.sampled_from(
        [*properties, "thread_id", "resource_id", "agent", "namespace", "workflow", "userId"]
    )
    args = data.draw(st.dictionaries(fields, value, max_size=6))
    result = run.call_tool(tool, args)
    assert MARKER not in json.dumps(result, default=str), (tool, args, result)
    prompt = run.prepare([{"role": "user", "content": "hi"}])
    assert MARKER not in json.dumps(prompt)
    # B's records are exactly as B left them.
    b_namespaces = {r[0] for r in b_rows}
    assert [r for r in rows(store) if r[0] in b_namespaces] == b_rows


def test_a_runs_writes_land_in_its_own_scope_only(isolation: tuple[Any, Store, Any]) -> None:
    run, store, (b_rows, _ids) = isolation
    run.call_tool("working-memory/update", {"thread_id": "thread-B", "note": "a"})
    run.call_tool("update_profile_memory", {"content": "A's profile"})
    run.call_tool("memory_write", {"key": "../../workflow-B/shared:plan", "value": "x"})
    namespaces = {r[0] for r in rows(store)} - {r[0] for r in b_rows}
    a_namespaces = {
        ("working-memory", "user-thread", "user-A", "thread-A"),
        ("profile", "resource", "user-A"),
        ("shared-memory", "workflow-A"),
    }
    # The mind commits at close (or on mind_complete_goal), under ("mind", "agent-A").
    assert a_namespaces <= namespaces <= {*a_namespaces, ("mind", "agent-A")}


def test_offloaded_results_are_per_thread(tmp_path: Path) -> None:
    # One stack (one layer object) serving two conversations, as an agent server runs it.
    layer = ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
    stack = MemoryStack([layer], store=SQLiteStore(tmp_path / "t.db"))
    with stack.run(thread_id="thread-B") as run:
        run.layer("tool-results").offload("call_1", f"{MARKER} for B only. " * 20)
        assert MARKER in run.call_tool("read_tool_result", {"call_id": "call_1"})["content"]
    with stack.run(thread_id="thread-A") as run:
        refused = run.call_tool("read_tool_result", {"call_id": "call_1"})
        assert refused["error"]["code"] == "not_found"
        assert MARKER not in json.dumps(refused)
        # A's own call_1 is a different result, and does not disturb B's.
        run.layer("tool-results").offload("call_1", "A's own result. " * 20)
        assert "A's own" in run.call_tool("read_tool_result", {"call_id": "call_1"})["content"]
    with stack.run(thread_id="thread-B") as run:
        assert MARKER in run.call_tool("read_tool_result", {"call_id": "call_1"})["content"]
    # Thread ids never become paths: each thread's files sit under a hash of its id.
    threads = sorted(p.name for p in (tmp_path / "calls" / "threads").iterdir())
    assert len(threads) == 2 and all(len(t) == 32 and t.isalnum() for t in threads)
    assert _mode(tmp_path / "calls" / "threads" / threads[0]) == 0o700


def test_a_planted_symlink_for_a_thread_is_refused(tmp_path: Path) -> None:
    layer = ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "call_1.txt").write_text("planted")
    scoped = layer.for_thread("thread-A")
    scoped.tool_calls_dir.parent.mkdir(parents=True)
    scoped.tool_calls_dir.symlink_to(elsewhere)
    stack = MemoryStack([layer], store=SQLiteStore(tmp_path / "t.db"))
    with stack.run(thread_id="thread-A") as run:
        read = run.call_tool("read_tool_result", {"call_id": "call_1"})
        assert (
            read["error"]["code"] == "invalid_arguments" and "symlink" in read["error"]["message"]
        )
        with pytest.raises(InvalidInputError, match="symlink"):
            run.layer("tool-results").offload("call_2", "a result over the threshold " * 10)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["call_1.txt"]


# 6. SQL-looking strings ------------------------------------------------------------------------

SQL_STRINGS = [
    "'; DROP TABLE memstrata_items; --",
    "'; DROP TABLE items; --",
    "' OR '1'='1",
    '" OR ""="',
    "x' UNION SELECT namespace, key FROM memstrata_items --",
    "1; DELETE FROM items WHERE 1=1",
    "%",
    "%%",
    "_",
    "a%",
    "a_",
    "\\",
    "\\%",
    "[a-z]*",
    "$1",
    "?",
    ":key",
    "%s",
    "%(data)s",
    "%(lo)s",
    "{0}",
    "*/ SELECT 1 /*",
    "Robert'); DROP TABLE Students;--",
]


def _postgres_store(url: str) -> PostgresStore:
    drop_postgres_tables(url)
    return PostgresStore(url)


@pytest.fixture(params=["sqlite", "postgres"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sql.db")
    else:
        store = _postgres_store(request.getfixturevalue("postgres_url"))
    yield store
    store.close()


def test_sql_looking_namespaces_and_keys_are_plain_data(sql_store: Store) -> None:
    sql_store.put(("other",), "untouched", {"v": 1})
    for i, text in enumerate(SQL_STRINGS):
        sql_store.put(("sql", text), text, {"i": i, "text": text})
        sql_store.put((text,), f"k{i}", i)
    for i, text in enumerate(SQL_STRINGS):
        got = sql_store.get(("sql", text), text)
        assert got is not None and got.value == {"i": i, "text": text}, text
        # A prefix is a prefix, never a pattern: "%" or "_" lists only its own namespace.
        listed = sql_store.list(("sql", text))
        assert [(item.namespace, item.key) for item in listed] == [(("sql", text), text)], text
        assert [item.key for item in sql_store.list((text,))] == [f"k{i}"], text
        assert sql_store.get(("sql", text), text + "x") is None
    assert len(sql_store.list(("sql",), limit=1000)) == len(SQL_STRINGS)
    assert len(sql_store.list(limit=10_000)) == 2 * len(SQL_STRINGS) + 1
    assert sql_store.update(("sql", "%"), "%", lambda v: {**v, "u": 1}).value["u"] == 1
    assert sql_store.delete(("sql", "%"), "%") is True
    assert sql_store.get(("sql", "%%"), "%%") is not None
    assert sql_store.get(("other",), "untouched") is not None


def test_sql_looking_scope_ids_are_plain_data(sql_store: Store) -> None:
    for text in SQL_STRINGS:
        stack = MemoryStack(
            [
                WorkingMemory(schema={"type": "object"}),
                SharedMemory(store=sql_store, namespace=("shared-memory", text)),
                AgentMind(),
            ],
            store=sql_store,
        )
        with stack.run(thread_id=text, resource_id=text, agent=text) as run:
            assert run.call_tool("working-memory/update", {"who": text})["ok"] is True
            assert run.call_tool("memory_write", {"key": text, "value": text})["ok"] is True
            assert run.call_tool("mind_believe", {"content": f"The name is {text} indeed"})["id"]
    for text in SQL_STRINGS:
        namespace = ("working-memory", "user-thread", text, text)
        assert read_state(sql_store, namespace) == ({"who": text}, 1)
        assert sql_store.get(("shared-memory", text), f"shared:{text}") is not None
        assert len(sql_store.list(("mind", text))) == 1
    # One record per working memory (a state this small has no journal).
    assert len(sql_store.list(("working-memory",), limit=1000)) == len(SQL_STRINGS)


# 7. Bad input and what it costs ---------------------------------------------------------------


def _every_tool_stack(tmp_path: Path) -> MemoryStack:
    closed = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}
    return MemoryStack(
        [
            WorkingMemory(schema={**closed, "additionalProperties": False}, budget=(0, 100_000)),
            WorkingMemory(scope="resource", tools="voltagent", name="profile"),
            SharedMemory(namespace=("shared-memory", "wf")),
            AgentMind(),
            ToolResults(tool_calls_dir=tmp_path / "tool_calls", threshold_tokens=1),
        ],
        store="memory://",
        total_budget=1_000_000,
    )


def _placed(value: Any) -> list[tuple[dict[str, Any], str]]:
    """``value`` at the top of the arguments and nested inside an object and an array."""
    return [
        ({"n": value}, "$.n"),
        ({"n": {"deep": [0, {"x": value}]}}, "$.n.deep[1].x"),
        ({"n": [[value]]}, "$.n[0][0]"),
    ]


@pytest.mark.parametrize(
    "value",
    [10**400, -(10**400), 2**64, -(2**63) - 1, math.inf, -math.inf, math.nan],
    ids=["1e400", "-1e400", "2**64", "-2**63-1", "inf", "-inf", "nan"],
)
def test_unstorable_numbers_in_dict_arguments_are_named_for_every_tool(
    tmp_path: Path, value: Any
) -> None:
    """A Python caller (an SDK that parsed the JSON, an MCP client) hands over a dict: a number
    JSON cannot hold is bad input with its path, never an internal error, for every tool."""
    with _every_tool_stack(tmp_path).run(thread_id="t", resource_id="u", agent="a") as run:
        specs = run.tool_specs("mcp")
        for spec in specs:
            fields = [*spec["inputSchema"].get("properties", {}), "n"]
            for field in fields:
                for arguments, path in _placed(value):
                    arguments = {field: arguments["n"]}
                    path = path.replace("$.n", f"$.{field}", 1)
                    result = run.call_tool(spec["name"], arguments)
                    assert result.get("ok") is False, (spec["name"], arguments)
                    error = result["error"]
                    assert error["code"] == "invalid_arguments", (spec["name"], error)
                    assert error["message"].startswith(path + ": "), (spec["name"], error)


def test_a_long_bad_value_is_echoed_cut_in_every_error_payload(tmp_path: Path) -> None:
    """An error payload goes back into the model's context: a 100,000-character bad value
    (too long, not in the enum, of the wrong type, an unknown key, an unknown tool's name)
    comes back cut, the whole payload a few KB at most."""
    big = "x" * 100_000
    calls: list[tuple[str, Any]] = [
        (big, {}),
        ("mind_recall", {"query": big}),  # too long
        ("mind_recall", {"query": "q", "type": big}),  # not one of the enum
        ("mind_recall", {"query": "q", "limit": big}),  # wrong type
        ("mind_recall", {"query": "q", big: 1}),  # unknown key
        ("mind_believe", {"content": "c", "tags": [big]}),
        ("update_profile_memory", {"content": "c", "mode": big}),
        ("read_tool_result", {"call_id": big}),
        ("memory_write", {"key": big, "value": 1}),
        ("working-memory/update", {"name": big}),  # the layer's own schema check
        ("working-memory/update", {big: 1}),
        ("working-memory/replace", {"name": 5}),
    ]
    with _every_tool_stack(tmp_path).run(thread_id="t", resource_id="u", agent="a") as run:
        for name, arguments in calls:
            for sent in (arguments, json.dumps(arguments)):
                result = run.call_tool(name, sent)
                text = json.dumps(result, ensure_ascii=False)
                assert result["ok"] is False, text[:300]
                assert result["error"]["code"] != "internal_error", text[:300]
                assert len(text) < 4096, (name[:40], len(text), text[:300])
                assert "x" * 1001 not in text
    assert "… (100,000 characters)" in run_unknown_tool_message(tmp_path, big)


def run_unknown_tool_message(tmp_path: Path, name: str) -> str:
    with _every_tool_stack(tmp_path).run(thread_id="t", resource_id="u", agent="a") as run:
        result = run.call_tool(name, {})
    message: str = result["error"]["message"]
    assert result["tool"] == name[:200] + "… (100,000 characters)"
    assert "available: " in message and "mind_recall" in message  # the list is not cut off
    return message


# 8. Files planted in the layers' directories ---------------------------------------------------
# Each layer directory (checkpoints, tool calls, team state) gets a symlink to a file outside, a
# hard link to it, a FIFO or a directory under the name the layer is about to use. The outside
# file keeps its content and its mode, no call hangs (a FIFO opened for reading or writing would
# block forever without O_NONBLOCK), and the layer refuses, switches off or moves on as its
# docstring says.

PLANT_KINDS = ("symlink", "hardlink", "fifo", "directory")
OUTSIDE_TEXT = "outside: do not read, do not overwrite"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside.txt"
    path.write_text(OUTSIDE_TEXT)
    path.chmod(0o640)
    return path


def _plant(path: Path, kind: str, outside: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "hardlink":
        os.link(outside, path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _untouched(outside: Path) -> None:
    assert outside.read_text() == OUTSIDE_TEXT
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o640


def _in_time(call: Any, timeout: float = 10.0) -> Any:
    """``call()``'s result, or the exception it raised; fails if it has not returned within
    ``timeout`` seconds (it would hang on a FIFO)."""
    done: list[tuple[Any]] = []

    def target() -> None:
        try:
            done.append((call(),))
        except BaseException as exc:
            done.append((exc,))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert done, f"{call} did not return within {timeout} s"
    return done[0][0]


@pytest.mark.parametrize("kind", PLANT_KINDS)
def test_planted_checkpoints_are_never_followed_and_never_hang(
    tmp_path: Path, outside: Path, kind: str
) -> None:
    ckpt = tmp_path / "ckpt"
    _plant(ckpt / "c1.json", kind, outside)
    gate = ContextGate(max_input_tokens=10, checkpoints_dir=ckpt)
    too_big = [{"role": "user", "content": "word " * 100}]
    raised = _in_time(lambda: gate.check_and_compress(too_big, "c1"))
    assert isinstance(raised, RecoverableContextError), raised
    assert Path(raised.checkpoint_path) == ckpt / "c1~2.json"  # beside what is planted
    _untouched(outside)
    # Another call_id is checkpointed as usual next to the planted name.
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(too_big, "c2")
    assert Path(err.value.checkpoint_path) == ckpt / "c2.json"
    assert json.loads((ckpt / "c2.json").read_text())["call_id"] == "c2"
    assert [p.name for p in ckpt.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("kind", PLANT_KINDS)
def test_planted_tool_results_are_refused_and_never_hang(
    tmp_path: Path, outside: Path, kind: str
) -> None:
    layer = ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
    _plant(layer.for_thread("t").tool_calls_dir / "c1.txt", kind, outside)
    with MemoryStack([layer], store="memory://").run(thread_id="t") as run:
        result = _in_time(lambda: run.call_tool("read_tool_result", {"call_id": "c1"}))
        assert result["ok"] is False and result["error"]["code"] == "invalid_arguments", result
        assert OUTSIDE_TEXT not in json.dumps(result)
        assert "c1.txt" in result["error"]["message"]
        own = run.layer("tool-results")
        raised = _in_time(lambda: own.offload("c1", "a new result over the threshold " * 10))
        assert isinstance(raised, InvalidInputError), raised
    _untouched(outside)


@pytest.mark.parametrize("kind", PLANT_KINDS)
def test_a_planted_blob_is_replaced_or_refused_never_written_through(
    tmp_path: Path, outside: Path, kind: str
) -> None:
    import hashlib

    calls = tmp_path / "calls"
    text = "a result to be stored " * 5
    blob = calls / "by-hash" / f"{hashlib.sha256(text.encode()).hexdigest()}.txt"
    _plant(blob, kind, outside)
    layer = ToolResults(tool_calls_dir=calls, threshold_tokens=1)
    raised = _in_time(lambda: layer.offload("c1", text))
    if kind == "directory":
        assert isinstance(raised, InvalidInputError), raised
    else:
        assert not isinstance(raised, BaseException), raised
        assert layer.read_tool_result("c1")["content"] == text
        assert stat.S_ISREG(os.lstat(blob).st_mode) and os.lstat(blob).st_nlink == 2
    _untouched(outside)


TEAM_FILES = ("current_state.json", "current_state.md", "audit.jsonl", "current_state.lock")


@pytest.mark.parametrize("kind", PLANT_KINDS)
@pytest.mark.parametrize("name", TEAM_FILES)
def test_planted_team_state_files_are_never_followed_and_never_hang(
    tmp_path: Path, outside: Path, name: str, kind: str
) -> None:
    from memstrata import TeamState

    state_dir = tmp_path / "team"
    _plant(state_dir / name, kind, outside)
    team = TeamState(state_dir=state_dir)
    # A fail verdict on a claim is a divergence: the entry goes to audit.jsonl too.
    _in_time(lambda: team.record("ship it", claim="done", verified="tests fail", verdict="fail"))
    _in_time(team.entries)
    _in_time(lambda: MemoryStack([team], store="memory://").run(thread_id="t").prepare([]))
    _untouched(outside)
    replaced = name == "current_state.md" and kind != "directory"
    if replaced:
        # The rendered document is written by rename: whatever was planted is replaced.
        assert team.off_reason is None
        assert "ship it" in (state_dir / name).read_text()
        assert os.lstat(state_dir / name).st_nlink == 1
    else:
        # The layer switches itself off, naming the file; nothing went through the plant.
        assert team.off_reason is not None and name in team.off_reason, team.off_reason


def test_reading_tool_results_never_returns_a_file_swapped_in(
    tmp_path: Path, outside: Path
) -> None:
    """A thread swaps a symlink and a hard link to the outside file in and out of a result's
    name while another reads the result in a loop: no read returns the outside file."""
    layer = ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
    text = "the real result " * 10
    layer.offload("c1", text)
    path = layer.tool_calls_dir / "c1.txt"
    regular = tmp_path / "regular.txt"
    stop = threading.Event()
    flips = [0]

    def flip() -> None:
        spare = tmp_path / "calls" / "spare"
        while not stop.is_set():
            for plant in ("symlink", "hardlink"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(spare)
                _plant(spare, plant, outside)
                os.replace(spare, path)
                regular.write_text(text)
                os.replace(regular, path)
                flips[0] += 1

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    seen = {"real": 0, "refused": 0}
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                content = layer.read_tool_result("c1")["content"]
            except (InvalidInputError, ToolError) as exc:
                assert OUTSIDE_TEXT not in str(exc)
                seen["refused"] += 1
                continue
            assert OUTSIDE_TEXT not in content
            assert content == text
            seen["real"] += 1
    finally:
        stop.set()
        flipper.join(10)
    assert flips[0] > 100 and seen["real"] > 0, (flips, seen)
    _untouched(outside)


@pytest.mark.parametrize("files", [True, False])
def test_offloaded_results_of_two_users_sharing_a_thread_id_stay_apart(
    tmp_path: Path, files: bool
) -> None:
    # Thread ids are often a per-user counter ("t-1"): files must scope results as the store does.
    layer = (
        ToolResults(tool_calls_dir=tmp_path / "calls", threshold_tokens=1)
        if files
        else ToolResults(threshold_tokens=1)
    )
    stack = MemoryStack([layer], store=SQLiteStore(tmp_path / "t.db"))
    with stack.run(thread_id="t-1", resource_id="user-A") as run:
        run.layer("tool-results").offload("call_1", f"{MARKER} for A only. " * 20)
    with stack.run(thread_id="t-1", resource_id="user-B") as run:
        refused = run.call_tool("read_tool_result", {"call_id": "call_1"})
        assert refused["error"]["code"] == "not_found"
        assert MARKER not in json.dumps(refused)
    with stack.run(thread_id="t-1") as run:  # no user: not A's either
        assert run.call_tool("read_tool_result", {"call_id": "call_1"})["error"]["code"] == (
            "not_found"
        )
    with stack.run(thread_id="t-1", resource_id="user-A") as run:
        assert MARKER in run.call_tool("read_tool_result", {"call_id": "call_1"})["content"]
    stack.close()


def test_two_users_sharing_a_thread_id_keep_their_own_conversation_memory(
    tmp_path: Path,
) -> None:
    # Thread ids are the caller's (LangGraph's examples use "1"); two users' conversations that
    # share one must not share a thread-scoped working memory, as they share no tool results.
    layer = WorkingMemory(schema={"type": "object"}, scope="thread")
    stack = MemoryStack([layer], store=SQLiteStore(tmp_path / "t.db"))
    with stack.run(thread_id="1", resource_id="user-B") as run:
        assert run.call_tool("working-memory/update", {"secret": MARKER})["ok"]
    with stack.run(thread_id="1", resource_id="user-A") as run:
        assert run.layer("working-memory").snapshot == {}
        assert MARKER not in json.dumps(run.prepare([{"role": "user", "content": "hi"}]))
        assert run.call_tool("working-memory/update", {"mine": "A"})["ok"]
    with stack.run(thread_id="1", resource_id="user-B") as run:
        assert run.layer("working-memory").snapshot == {"secret": MARKER}
    # A run naming no user is a third conversation.
    with stack.run(thread_id="1") as run:
        assert run.layer("working-memory").snapshot == {}
