"""Rendering stored text inside a block: ``in_tagged_block`` on a 1,500-token working memory
written in Russian, Greek, Chinese or Arabic, with ``<``, ``[`` and angle quotation marks in it
(each of them may start a look-alike tag or notice, so each is read as a reader would).

It runs once per new state (an update tool call renders the block it checks against the
budget), so it is paid on the update path. Peers, in the same run: the same function on an
English memory of the same size (text that is ASCII reads as it is spelt: one regular
expression), and ``html.escape``, what a Python developer would write to keep stored text
inside a tag (it escapes every ``<`` and reads no look-alikes).
"""

from __future__ import annotations

import html
from typing import Any

import pytest
from benchkit import compare

from memstrata import count_tokens
from memstrata.prompts import in_tagged_block

TARGET = ">= 0.15x the English memory's render (at most about 7x its time)"
LABEL = "working_memory"
LINES = {
    "Russian": "Проект «Север»: сроки <важно> сдвинуты [см. протокол]; ответственный — Иванов.",
    "Greek": "Το έργο «Βοριάς»: οι προθεσμίες <σημαντικό> μετατέθηκαν [βλ. πρακτικά].",  # noqa: RUF001
    "Chinese": "项目「北方」：截止日期<重要>已推迟【见会议记录】，[待定]；负责人张伟。",  # noqa: RUF001
    "Arabic": "المشروع «الشمال»: تم تأجيل المواعيد <مهم> [انظر المحضر]؛ المسؤول أحمد.",
}
ENGLISH = "Project North: deadlines <important> moved [see minutes]; the owner is Ivanov."


def memory_of(line: str, tokens: int = 1500) -> str:
    """Numbered lines of ``line`` up to ``tokens`` tokens (cl100k, memstrata's estimate)."""
    lines: list[str] = []
    while count_tokens("\n".join(lines)) < tokens:
        lines.append(f"{len(lines) + 1}. {line}")
    return "\n".join(lines)


@pytest.mark.parametrize("language", list(LINES))
def test_render_a_non_ascii_working_memory(benchmark: Any, language: str) -> None:
    body = memory_of(LINES[language])
    english = memory_of(ENGLISH)
    # Ordinary text is shown as written: nothing in either spells a tag or a notice.
    assert in_tagged_block(body, LABEL) == body
    assert in_tagged_block(english, LABEL) == english
    ratios = compare(
        benchmark,
        f"in_tagged_block, 1,500-token working memory in {language} "
        f"({len(body):,} characters, {body.count('<') + body.count('['):,} brackets)",
        lambda: in_tagged_block(body, LABEL),
        {
            "the same render of an English memory of the same size": lambda: in_tagged_block(
                english, LABEL
            ),
            "html.escape of the same text (no look-alikes read)": lambda: html.escape(
                body, quote=False
            ),
        },
        target=TARGET,
    )
    assert ratios
