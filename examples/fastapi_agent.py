"""A FastAPI agent endpoint for many users: one HTTP request is one agent turn with memory.

    OPENAI_API_KEY=... uvicorn --factory examples.fastapi_agent:create_app

POST /chat {"thread_id": "...", "message": "..."} with the caller's identity in X-User
-> {"reply": "...", "memory": {...}}

The stack (and its SQLite store) is created once per process and shared by requests. The turn
runs on the event loop through the stack's async forms (``stack.arun``, ``run.aprepare``,
``run.acall_tool``) and the async OpenAI client, so one process serves many conversations at
once. Each run names the user as well as the conversation: two users who both call their
conversation "1" keep their own memory, and a client cannot read another user's by sending
their thread id.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel

from memstrata import MemoryStack

try:  # run as examples.fastapi_agent or from inside examples/
    from examples.openai_tool_loop import MODEL, SYSTEM, make_stack
except ImportError:
    from openai_tool_loop import MODEL, SYSTEM, make_stack  # type: ignore[no-redef]


class ChatRequest(BaseModel):
    thread_id: str
    message: str


def current_user(x_user: str = Header(default="")) -> str:
    """Stands in for your authentication (a session, a verified token): the user must come
    from it, never from the request body."""
    if not x_user:
        raise HTTPException(status_code=401, detail="no user")
    return x_user


async def agent_turn(
    client: Any,
    stack: MemoryStack,
    user_text: str,
    *,
    thread_id: str,
    user: str,
    max_steps: int = 8,
) -> tuple[str, Any]:
    """Runs the model until it answers without tool calls; returns its answer and the
    conversation's working memory."""
    history: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
    async with stack.arun(thread_id=thread_id, resource_id=user) as run:
        for _ in range(max_steps):
            response = await client.chat.completions.create(
                model=MODEL,
                messages=await run.aprepare([{"role": "system", "content": SYSTEM}, *history]),
                tools=run.tool_specs("openai"),
            )
            message = response.choices[0].message.model_dump(exclude_none=True)
            history.append(message)
            await run.aobserve(message)  # also applies legacy updateWorkingMemory calls
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message.get("content") or ""), run.layer("working-memory").snapshot
            for call in calls:
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                result = await run.acall_tool(name, arguments)
                history.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        return "(stopped: too many tool steps)", run.layer("working-memory").snapshot


def create_app(client: Any = None, db_path: str = "agent-memory.db") -> FastAPI:
    app = FastAPI(title="memstrata agent")
    stack = make_stack(db_path)

    def model_client() -> Any:
        nonlocal client
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI()
        return client

    @app.post("/chat")
    async def chat(request: ChatRequest, user: str = Depends(current_user)) -> dict[str, Any]:
        reply, memory = await agent_turn(
            model_client(), stack, request.message, thread_id=request.thread_id, user=user
        )
        return {"reply": reply, "memory": memory}

    return app
