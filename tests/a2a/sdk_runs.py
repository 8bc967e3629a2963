"""The official a2a-sdk Python client starts a workflow run and answers
its approval gate.

Usage: sdk_runs.py BASE_URL API_KEY

Each check prints one JSON line {"check": name, "ok": bool, "detail": ...};
tests/a2a_runs.rs reads them. The server has the trigger `gated` (a step,
a gate whose input needs a `note`, a step that echoes the note).
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, ListTasksRequest, Message, Part, Role, SendMessageRequest, TaskState

BASE, KEY = sys.argv[1], sys.argv[2]


def report(check, ok, detail=None):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": detail}), flush=True)


def struct(d):
    s = struct_pb2.Struct()
    s.update(d)
    return s


def data_part(d):
    v = struct_pb2.Value()
    v.struct_value.update(d)
    return Part(data=v)


async def main():
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
    client = await factory.create_from_url(BASE)
    card = await A2ACardResolver(http, BASE).get_agent_card()
    ids = [s.id for s in card.skills]
    report("the card lists the trigger", "trigger:gated" in ids, ids)

    # Streamed: the run's snapshot, its updates, closed where it waits.
    start = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER,
                    parts=[Part(text="hello")], metadata=struct({"trigger": "gated"}))
    seen, run_id, context, asked = [], None, None, None
    async for ev in client.send_message(SendMessageRequest(message=start)):
        if ev.HasField("task"):
            run_id, context = ev.task.id, ev.task.context_id
            seen.append("task")
        elif ev.HasField("status_update"):
            seen.append(TaskState.Name(ev.status_update.status.state))
            if ev.status_update.status.HasField("message"):
                asked = ev.status_update.status.message.parts[0].text
    report("a streamed run stops at its gate, input-required",
           seen and seen[-1] == "TASK_STATE_INPUT_REQUIRED" and asked == "Send it?", [seen, asked])

    # The answer: a message naming the run, with the gate's input.
    answer = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, task_id=run_id,
                     context_id=context, parts=[Part(text="approve"), data_part({"note": "sdk"})])
    # (The stream starts from the run as it is once the answer is taken:
    # it may have ended by then, its result in the snapshot.)
    states, result = [], None

    def data(artifact):
        return MessageToDict(artifact.parts[0].data)

    async for ev in client.send_message(SendMessageRequest(message=answer)):
        if ev.HasField("status_update"):
            states.append(TaskState.Name(ev.status_update.status.state))
        elif ev.HasField("artifact_update"):
            result = data(ev.artifact_update.artifact)
        elif ev.HasField("task"):
            states.append(TaskState.Name(ev.task.status.state))
            if ev.task.artifacts:
                result = data(ev.task.artifacts[0])
    report("the answer runs it to the end", states and states[-1] == "TASK_STATE_COMPLETED"
           and result == {"echo": {"note": "sdk"}}, [states, result])

    got = await client.get_task(GetTaskRequest(id=run_id))
    report("get the run", got.status.state == TaskState.TASK_STATE_COMPLETED
           and got.metadata["trigger"] == "gated", str(got.status))

    listed = await client.list_tasks(ListTasksRequest(context_id=context))
    listed_ids = [t.id for t in listed.tasks]
    report("its context lists the run and its steps' tasks",
           run_id in listed_ids and len(listed_ids) == 3, listed_ids)
    await http.aclose()


asyncio.run(main())
