"""LangChain agents: the layers' tools and prompt for ``langchain.agents.create_agent``, as one
middleware.

Install with ``pip install 'memstrata[langchain]'``.

:class:`MemstrataMiddleware` gives the agent the layers' tools (the same LangChain tools as
:func:`memstrata.integrations.langgraph.memstrata_tools`) and puts the layers' blocks in the
system message before every model call, for an agent compiled once at start-up (given the
stack) or built inside one request's run (given the run).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import SystemMessage

from memstrata.exceptions import InvalidInputError
from memstrata.integrations._langchain_tools import (
    aprompt_text,
    memstrata_tools,
    open_run,
    prompt_text,
    run_finder,
)
from memstrata.stack import MemoryStack, Run

__all__ = ["MemstrataMiddleware"]


class MemstrataMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """The layers' memory for a ``create_agent`` agent:
    ``create_agent(model, tools, middleware=[MemstrataMiddleware(stack, system=...)])``.

    It adds the layers' tools to the agent's own, and before every model call (sync and async)
    renders the layers' blocks (working memory, the mind's header...) into the system message,
    so a memory the model just wrote is in its next prompt. The conversation the agent keeps
    (its state, its checkpoints) never holds them: they are rendered for each call only.

    Given the :class:`~memstrata.MemoryStack`, one agent compiled at start-up serves every
    request: each tool call and each prompt uses the run of the stack the server opened
    around the call (``with stack.run(...)`` or ``async with stack.arun(...)``; see
    :meth:`MemoryStack.current_run`). Nothing the agent is sent picks the user. A tool called
    with no run open answers the model an error (``no_run``) and logs it; the model call
    raises, since a prompt without the user's memory would pass for one with it. Given a
    :class:`~memstrata.Run`, both are bound to that run: an agent built inside it, for that
    request only.

    The system message the model gets is the agent's own first (``create_agent``'s
    ``system_prompt``, or what a middleware listed before this one made of it), unchanged,
    then ``system``, then the layers' blocks, each a paragraph. A string message stays a
    string; a message of content blocks keeps its blocks as they are (a cache-control marker
    on them survives) and gets one more text block. The unchanging part comes first, so a
    provider's prompt cache still matches it. Instructions can go in either place:
    ``system_prompt`` where the agent is built, ``system`` beside the memory. The blocks are
    :meth:`Run.prepare`'s, with stored text escaped, so nothing a user or a model stored can
    pass for the prompt's structure.
    """

    def __init__(self, source: Run | MemoryStack, *, system: str = "") -> None:
        self._find = run_finder(source, "MemstrataMiddleware")
        if not isinstance(system, str):
            raise InvalidInputError(f"system must be a str, got {type(system).__name__}")
        self._system = system
        self.tools = memstrata_tools(source)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Calls the model with the layers' blocks in the system message."""
        text = prompt_text(open_run(self._find), self._system)
        return handler(_with_system_text(request, text))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """:meth:`wrap_model_call` for an agent run with ``ainvoke`` or ``astream``: the store
        reads go through ``run.aprepare``."""
        text = await aprompt_text(open_run(self._find), self._system)
        return await handler(_with_system_text(request, text))


def _with_system_text(request: ModelRequest[Any], text: str) -> ModelRequest[Any]:
    """The request with ``text`` after its system message (see :class:`MemstrataMiddleware`)."""
    if not text:
        return request
    current = request.system_message
    if current is None:
        system = SystemMessage(content=text)
    elif isinstance(current.content, str):
        joined = f"{current.content}\n\n{text}" if current.content else text
        system = current.model_copy(update={"content": joined})
    else:
        block = {"type": "text", "text": text}
        system = current.model_copy(update={"content": [*current.content, block]})
    return request.override(system_message=system)
