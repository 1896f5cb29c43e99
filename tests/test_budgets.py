"""Budgets that hold: text chosen to fool a token estimate (runs of newlines, spaces, one
repeated character, emoji, CJK, base64) never takes a block past its budget, counted exactly."""

from __future__ import annotations

import base64
import random

import pytest

from memstrata import AgentMind, MemoryStack, SharedMemory, TeamState, WorkingMemory
from memstrata.exceptions import BudgetExceededError
from memstrata.stores import InMemoryStore
from memstrata.tokens import count_tokens

_RNG = random.Random(5)
ADVERSARIAL = {
    "newlines": "note" + "\n" * 3_000,
    "spaces": " " * 4_000,
    "one_char": "a" * 3_900,
    "emoji": "\U0001f600" * 900,
    "cjk": "".join(chr(_RNG.randint(0x4E00, 0x9FFF)) for _ in range(1_200)),
    "base64": base64.b64encode(_RNG.randbytes(2_400)).decode(),
    "tabs_and_words": "\t" * 400 + "hello\n" * 300,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_the_working_memory_never_stores_past_its_budget(name: str) -> None:
    stack = MemoryStack([WorkingMemory(budget=(0, 300))], store=InMemoryStore())
    text = ADVERSARIAL[name]
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        try:
            handle.update(text)
        except BudgetExceededError:
            assert count_tokens(f"<working_memory>\n{text}\n</working_memory>") > 300
        block = handle.render()
        assert count_tokens(block) <= 300


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_the_mind_header_stays_within_its_budget(name: str) -> None:
    mind = AgentMind(budget=(0, 200), token_budget=150)
    store = InMemoryStore()
    with mind.session(store, agent="a") as handle:
        handle.set_goal("Goal " + ADVERSARIAL[name][:3_800])
        handle.reflect("Rule " + ADVERSARIAL[name][:3_800], pin=True)
        handle.believe("Fact " + ADVERSARIAL[name][:3_800], confidence="high")
        handle.believe("A short fact about releases", confidence="high")
    stack = MemoryStack([mind], store=store)
    with stack.run(agent="a") as run:
        header = "\n".join(m["content"] for m in run.prepare([]))
    assert count_tokens(header) <= 200


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_shared_memory_and_team_state_stay_within_their_budgets(name: str, tmp_path) -> None:
    memory = SharedMemory(budget=(0, 250))
    for i in range(30):
        memory.set(key=f"task:{i}", kind="task_result", value=i, title=ADVERSARIAL[name][:256])
    team = TeamState(state_dir=tmp_path, budget=(0, 120))
    team.record(f"obj {name}", claim=ADVERSARIAL[name][:3_000], verified="ok", verdict="pass")
    stack = MemoryStack([memory, team], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        run.layer("shared-memory").require([f"task:{i}" for i in range(30)])
        items = run.prepare([])
    (shared,) = [i["content"] for i in items if "Memory Tools" in i["content"]]
    (state,) = [i["content"] for i in items if "Team State" in i["content"]]
    assert count_tokens(shared) <= 250
    assert count_tokens(state) <= 120
