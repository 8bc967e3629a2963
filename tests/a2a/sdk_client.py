"""The official a2a-sdk Python client against a running orchestrator.

Usage: sdk_client.py BASE_URL API_KEY

Each check prints one JSON line {"check": name, "ok": bool, "detail": ...};
the Rust test (tests/a2a_sdk.rs) reads them. The agent behind the server
completes a message with its params echoed, and holds one whose data has
"hold" until the test lets it go (a file the test removes).
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import struct_pb2

from a2a.client import ClientConfig, ClientFactory
from a2a.client.base_client import BaseClient
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

BASE, KEY = sys.argv[1], sys.argv[2]


def report(check, ok, detail=None):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": detail}), flush=True)


def message(data, context_id=None, text=None):
    meta = struct_pb2.Struct()
    meta.update({"skillId": "helper/answer"})
    parts = [Part(text=text)] if text else []
    if data is not None:
        value = struct_pb2.Value()
        value.struct_value.update(data)
        parts.append(Part(data=value))
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts, metadata=meta)
    if context_id:
        m.context_id = context_id
    return m


async def last(stream):
    """The last event of a send (blocking: the only one)."""
    out = None
    async for event in stream:
        out = event
    return out


async def expect_error(check, call, error):
    """Reports whether `call` fails with `error` (an SDK error class)."""
    try:
        await call
        report(check, False, "no error")
    except error as e:
        report(check, True, str(e))


def task_of(event):
    return event.task if event.HasField("task") else None


async def main():
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    blocking = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(BASE)
    streaming = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(BASE)
    report("card resolved", blocking is not None)

    # Blocking send: the completed task, its result an artifact.
    event = await last(blocking.send_message(SendMessageRequest(message=message({"q": 1}))))
    task = task_of(event)
    report("blocking send completes", task and task.status.state == TaskState.TASK_STATE_COMPLETED,
           str(event))
    context = task.context_id

    # Streaming: the snapshot, updates in order, closed at the end.
    states = []
    async for ev in streaming.send_message(SendMessageRequest(message=message({"s": 1}, context))):
        if ev.HasField("status_update"):
            states.append(TaskState.Name(ev.status_update.status.state))
        elif ev.HasField("task"):
            states.append("task:" + TaskState.Name(ev.task.status.state))
        elif ev.HasField("artifact_update"):
            states.append("artifact")
    report("streaming send ends completed", states and states[-1] == "TASK_STATE_COMPLETED"
           and "artifact" in states, states)

    got = await blocking.get_task(GetTaskRequest(id=task.id))
    report("get", got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED, str(got.status))

    listed = await blocking.list_tasks(ListTasksRequest(context_id=context))
    report("list by context", len(listed.tasks) == 2 and listed.total_size == 2,
           [t.id for t in listed.tasks])

    # A held task: subscribe, cancel, cancel again.
    held = task_of(await last(blocking.send_message(SendMessageRequest(
        message=message({"hold": True}),
        configuration={"return_immediately": True}))))
    report("non-blocking send returns at once", held.status.state in (
        TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING), str(held.status))

    sub_events = []

    async def follow():
        async for ev in streaming.subscribe(SubscribeToTaskRequest(id=held.id)):
            sub_events.append(ev)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    canceled = await blocking.cancel_task(CancelTaskRequest(id=held.id))
    report("cancel", canceled.status.state == TaskState.TASK_STATE_CANCELED, str(canceled.status))
    await asyncio.wait_for(follower, 10)
    report("subscribe to a running task sees its end",
           bool(sub_events) and sub_events[0].HasField("task")
           and sub_events[-1].HasField("status_update")
           and sub_events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED,
           [str(e)[:80] for e in sub_events])
    await expect_error("cancel again is -32002",
                       blocking.cancel_task(CancelTaskRequest(id=held.id)), TaskNotCancelableError)
    await expect_error("unknown task is -32001",
                       blocking.get_task(GetTaskRequest(id=str(uuid.uuid4()))), TaskNotFoundError)

    # The same core calls over 0.3 (the card's JSONRPC 0.3 interface).
    card = blocking._card
    old_url = next(i.url for i in card.supported_interfaces
                   if i.protocol_binding == "JSONRPC" and i.protocol_version == "0.3")
    old_http = httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    old = BaseClient(card, ClientConfig(httpx_client=old_http, streaming=False),
                     CompatJsonRpcTransport(old_http, card, old_url), [])
    event = await last(old.send_message(SendMessageRequest(message=message({"v": 3}))))
    task03 = task_of(event)
    report("0.3 send completes", task03 and task03.status.state == TaskState.TASK_STATE_COMPLETED, str(event))
    got03 = await old.get_task(GetTaskRequest(id=task03.id))
    report("0.3 get", got03.id == task03.id, str(got03.status))
    await expect_error("0.3 cancel of an ended task is -32002",
                       old.cancel_task(CancelTaskRequest(id=task03.id)), TaskNotCancelableError)
    await expect_error("0.3 unknown task is -32001",
                       old.get_task(GetTaskRequest(id=str(uuid.uuid4()))), TaskNotFoundError)
    old_stream = BaseClient(card, ClientConfig(httpx_client=old_http, streaming=True),
                            CompatJsonRpcTransport(old_http, card, old_url), [])
    kinds = []
    async for ev in old_stream.send_message(SendMessageRequest(message=message({"s": 3}))):
        kinds.append(ev.WhichOneof("payload") if hasattr(ev, "WhichOneof") else str(type(ev)))
    report("0.3 streaming send", bool(kinds), kinds)


asyncio.run(main())
