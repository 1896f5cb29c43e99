"""Adapters to agent frameworks, one module per framework, each behind its own extra.

* :mod:`memstrata.integrations.langgraph` (``memstrata[langgraph]``): ``MemstrataStore``, a
  LangGraph ``BaseStore`` over any memstrata store, and the layers' tools and prompt for
  ``create_react_agent``.

Each adapter is thin: it maps the stack and the stores onto the framework's interfaces and holds
no memory logic of its own. Importing this package imports no framework.
"""
