"""The official a2a-sdk Python client against an LLM agent of a running
orchestrator (docs/llm.md).

Usage: sdk_llm.py BASE_URL API_KEY

Streams one message to the skill `writer/write` (an agent that is a prompt
for a model the Rust test serves) and checks that the model's text comes
as chunks of the artifact `answer` before the task completes, then that a
blocking send completes with the text. Each check prints one JSON line
{"check": name, "ok": bool, "detail": ...}.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import struct_pb2

from a2a.client import ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

BASE, KEY = sys.argv[1], sys.argv[2]


def report(check, ok, detail=None):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": detail}), flush=True)


def message(text):
    meta = struct_pb2.Struct()
    meta.update({"skillId": "writer/write"})
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER,
                   parts=[Part(text=text)], metadata=meta)


async def main():
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    streaming = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(BASE)
    blocking = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(BASE)

    text, order = "", []
    async for ev in streaming.send_message(SendMessageRequest(message=message("what do streams carry?"))):
        if ev.HasField("artifact_update") and ev.artifact_update.artifact.artifact_id == "answer":
            text += "".join(p.text for p in ev.artifact_update.artifact.parts)
            order.append("answer")
        elif ev.HasField("status_update"):
            order.append(TaskState.Name(ev.status_update.status.state))
    report("the model's text streams as the answer artifact", text == "Streams carry the text.", text)
    report("then the task completes", order and order[-1] == "TASK_STATE_COMPLETED"
           and "answer" in order and order.index("answer") < len(order) - 1, order)

    event = None
    async for ev in blocking.send_message(SendMessageRequest(message=message("again"))):
        event = ev
    task = event.task if event is not None and event.HasField("task") else None
    said = json.dumps([str(a) for a in task.artifacts]) if task else ""
    report("a blocking send completes with the text",
           task is not None and task.status.state == TaskState.TASK_STATE_COMPLETED
           and "Streams carry the text." in said, str(event))
    await http.aclose()


asyncio.run(main())
