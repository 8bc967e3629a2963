"""A remote A2A agent built from the official a2a-sdk server classes
(AgentExecutor, DefaultRequestHandler, InMemoryTaskStore, the Starlette
routes), for tests/a2a_worker.rs: the orchestrator's `a2a` worker delegates
to it.

Usage: remote_agent.py PORT LOG_FILE

It logs one JSON line per message it receives, per cancel it is asked for
and per call ({"event": "message"|"cancel"|"call", ...}: the message's id
and task, the call's Authorization header), so the test counts what
reached it. What it does depends on the message's text:
- `steps N`: N status updates ("step i"), an artifact, then completed with
  a data artifact {"steps": N}; with `wait` in the text, it waits between
  steps until the file LOG_FILE + ".go" exists;
- `ask`: asks for input (input-required); the answer's text completes it;
- `hold`: works until canceled;
- `auth`: asks for authorization (auth-required).
"""

import asyncio
import json
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware

from a2a.helpers.proto_helpers import (
    get_message_text,
    new_data_part,
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Role, TaskState

PORT, LOG = int(sys.argv[1]), sys.argv[2]


def log(event, **fields):
    with open(LOG, "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


class Remote(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        log("message", message_id=message.message_id, task_id=context.task_id,
            context_id=context.context_id, text=get_message_text(message))
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = get_message_text(message)
        first = get_message_text(task.history[0]) if task.history else text
        agent = lambda t: new_text_message(t, role=Role.ROLE_AGENT, task_id=task.id,
                                           context_id=task.context_id)
        if first.startswith("ask"):
            if len(task.history) <= 1 and text.startswith("ask"):
                await updater.requires_input(agent("which colour?"))
                return
            await updater.add_artifact([new_text_part(f"painted {text}")], name="paint")
            await updater.complete()
            return
        if first.startswith("auth"):
            await updater.requires_auth(agent("sign in first"))
            return
        await updater.start_work()
        if first.startswith("hold"):
            while True:
                await asyncio.sleep(0.05)
        n = int(first.split()[1]) if first.startswith("steps") else 1
        for i in range(1, n + 1):
            if "wait" in first:
                while not os.path.exists(LOG + ".go"):
                    await asyncio.sleep(0.05)
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                agent(f"step {i}"),
            )
            await asyncio.sleep(0.05)
        await updater.add_artifact([new_text_part("notes")], name="notes")
        await updater.add_artifact([new_data_part({"steps": n})], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        log("cancel", task_id=context.task_id)
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.cancel()


card = AgentCard(
    name="remote",
    description="a remote agent for the a2a worker's tests",
    version="1.0.0",
    supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{PORT}/",
                                         protocol_binding="JSONRPC", protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=True),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain", "application/json"],
    skills=[AgentSkill(id="paint", name="Paint", description="paints", tags=["test"])],
)
handler = DefaultRequestHandler(agent_executor=Remote(), task_store=InMemoryTaskStore(),
                                agent_card=card)
app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


class LogAuth(BaseHTTPMiddleware):
    """Logs the credential each call came with."""

    async def dispatch(self, request, call_next):
        if request.method == "POST":
            log("call", authorization=request.headers.get("authorization"))
        return await call_next(request)


app.add_middleware(LogAuth)
uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
