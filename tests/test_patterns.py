"""PatternReplacer, the core's regex rules: what a rule replaces and keeps, and bad rules and
texts refused with errors that name them."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata._core import PatternReplacer
from memstrata.exceptions import InvalidInputError, UnsupportedTypeError


def test_rules_apply_in_order_keeping_before_and_after() -> None:
    replacer = PatternReplacer(
        [
            (r"(?:^|[^0-9])[0-9]{4}(?:$|[^0-9])", "####", r"(?:^|[^0-9])", r"(?:$|[^0-9])"),
            (r"pin=\S+", "pin=?", None, None, ["#"]),
        ]
    )
    assert replacer.replace("pin=1234 5678 123") == ("pin=? #### 123", 3)
    assert len(replacer) == 2


def test_nothing_replaced_gives_the_same_text_back() -> None:
    text = "nothing to see here " * 10
    out, n = PatternReplacer([("zzz", "y")]).replace(text)
    assert out is text and n == 0


def test_a_match_without_its_before_stays() -> None:
    replacer = PatternReplacer([(r"[a-z]+://\S*", "***", r"[a-z]+://[a-z]*:", r"@\S*")])
    assert replacer.replace("x://u:pw@h y://h/p") == ("x://u:***@h y://h/p", 1)


def test_a_long_text_is_replaced_in_full() -> None:
    # Long enough for the GIL to be released around the work.
    text = "token=abc " * 100_000
    out, n = PatternReplacer([(r"token=\w+", "token=?")]).replace(text)
    assert n == 100_000 and out == "token=? " * 100_000


@pytest.mark.parametrize(
    ("rules", "where"),
    [
        ([("ok", "x"), ("(", "x")], "rules[1].pattern"),
        ([("a", "x", "[")], "rules[0].before"),
        ([("a", "x", None, r"\b")], "rules[0].after"),
        ([("a", "x", None, None, ["ok", "+"])], "rules[0].requires[1]"),
        ([("a" * 20_000, "x")], "rules[0].pattern"),
        ([("a", "x")] * 257, "257 rules"),
    ],
)
def test_a_bad_pattern_is_named(rules: list[Any], where: str) -> None:
    with pytest.raises(InvalidInputError, match=where.replace("[", r"\[")):
        PatternReplacer(rules)


@pytest.mark.parametrize(
    "rules",
    ["abc", [("a",)], [("a", 1)], [["a", "b"]], [("a", "b", None, None, "c")], [("a", "b", 3)], 5],
)
def test_rules_of_the_wrong_shape_are_refused(rules: Any) -> None:
    with pytest.raises(UnsupportedTypeError, match="rules"):
        PatternReplacer(rules)


def test_bad_texts_are_refused() -> None:
    replacer = PatternReplacer([("a", "b")])
    with pytest.raises(UnsupportedTypeError, match="text must be a str, got bytes"):
        replacer.replace(b"abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        replacer.replace("a\ud800")
