"""Chat models scripted for the LangChain agent tests (LangGraph's ``create_react_agent`` and
LangChain's ``create_agent``): no network, answers decided by what the model is sent.

Imported only by tests that first ``pytest.importorskip`` a LangChain package.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class ToolCallingFake(FakeMessagesListChatModel):
    """LangChain's scripted chat model, accepting bound tools (the agents bind them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:  # type: ignore[override]
        return self


class PerUserModel(BaseChatModel):
    """Answers "remember <x>" with a working-memory update of ``{"fact": x}``, and a tool's
    answer with "done"; records every system prompt it is sent, by the fact it was asked."""

    prompts: dict[str, list[str]] = {}  # noqa: RUF012 - pydantic copies the default per model

    @property
    def _llm_type(self) -> str:
        return "per-user-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> PerUserModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        asked = next(str(m.content) for m in messages if m.type == "human")
        fact = asked.removeprefix("remember ")
        self.prompts.setdefault(fact, []).append(str(messages[0].content))
        if messages[-1].type == "tool":
            answer = AIMessage(content="done")
        else:
            call = {"name": "working-memory_update", "args": {"fact": fact}, "id": f"c-{fact}"}
            answer = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=answer)])
