"""Adapters to agent frameworks, one module per framework, each behind its own extra.

* :mod:`memstrata.integrations.langgraph` (``memstrata[langgraph]``): ``MemstrataStore``, a
  LangGraph ``BaseStore`` over any memstrata store, and the layers' tools and prompt for
  ``create_react_agent``.
* :mod:`memstrata.integrations.langchain_agents` (``memstrata[langchain]``):
  ``MemstrataMiddleware``, the layers' tools and prompt for LangChain's ``create_agent``.
* :mod:`memstrata.integrations.openai_agents` (``memstrata[openai-agents]``): ``AgentsMemory``,
  the OpenAI Agents SDK's tools, dynamic instructions, a run per turn and a ``Session``.
* :mod:`memstrata.integrations.pydantic_ai` (``memstrata[pydantic-ai]``): ``MemoryCapability``,
  a Pydantic AI capability with the layers' toolset, instructions and a run per agent run.

Each adapter is thin: it maps the stack and the stores onto the framework's interfaces and holds
no memory logic of its own. Importing this package imports no framework.
"""

from __future__ import annotations

from memstrata.exceptions import InvalidInputError


def scope_error(exc: InvalidInputError, owner: str, agent_hint: str | None) -> InvalidInputError:
    """A run's missing scope, named as the adapter's option that gives it: the layers name
    ``stack.run(<option>=...)``, which the adapter's caller never calls. ``agent_hint``, when
    the adapter had no agent name to give, replaces an error about the agent scope (``{exc}``
    is the layer's message)."""
    text = str(exc)
    if agent_hint is not None and "stack.run(agent=" in text:
        return InvalidInputError(agent_hint.format(exc=text))
    return InvalidInputError(text.replace("stack.run(", f"{owner}("))
