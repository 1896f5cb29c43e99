"""A FastAPI agent endpoint: one HTTP request is one agent turn with memory.

    OPENAI_API_KEY=... uvicorn --factory examples.fastapi_agent:create_app

POST /chat {"thread_id": "...", "message": "..."} -> {"reply": "...", "memory": {...}}
The stack (and its SQLite store) is created once per process and shared by requests.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

try:  # run as examples.fastapi_agent or from inside examples/
    from examples.openai_tool_loop import agent_turn, make_stack
except ImportError:
    from openai_tool_loop import agent_turn, make_stack  # type: ignore[no-redef]


class ChatRequest(BaseModel):
    thread_id: str
    message: str


def create_app(client: Any = None, db_path: str = "agent-memory.db") -> FastAPI:
    app = FastAPI(title="memstrata agent")
    stack = make_stack(db_path)

    def model_client() -> Any:
        nonlocal client
        if client is None:
            from openai import OpenAI

            client = OpenAI()
        return client

    @app.post("/chat")
    def chat(request: ChatRequest) -> dict[str, Any]:
        reply = agent_turn(model_client(), stack, request.message, thread_id=request.thread_id)
        with stack.run(thread_id=request.thread_id) as run:
            memory = run.layer("working-memory").snapshot
        return {"reply": reply, "memory": memory}

    return app
