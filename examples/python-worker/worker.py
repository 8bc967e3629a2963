#!/usr/bin/env python3
"""A worker for the orchestrator's bus, in Python (nats-py), written from
docs/worker-protocol.md alone. Section numbers (§) below are that page's.

    python3 worker.py --agent py-echo        # NATS_URL, default nats://127.0.0.1:4222

Task tokens are checked with the orchestrator's public key, ORCH_VERIFY_KEY
(a path or the PEM text); `--no-verify` runs tasks unchecked, for
development only.

The agent directory holds `agent.json` (its card) and `handler.py`, which
exposes `async def handle(action, params, ctx)`. `ctx` has task_id, attempt,
resumed, idempotency_key, input (the answer to an earlier input_required,
or None) and progress: `ctx["progress"](message=..., artifact=...)`
reports progress (§6), any number of times, published in order before the
result. An exception with a `code` and a `retryable`
attribute (and optionally `retry_after_seconds`) is reported as that
failure; any other exception fails the task with `handler_error`.
"""

import argparse
import asyncio
import importlib.util
import json
import math
import os
import random
import re
import secrets
import signal
import socket
import sys
import time
from datetime import datetime, timezone

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError, NotFoundError

import redact
from tokens import Refused, TokenCheck

PREFIX = "orch"
PRIORITIES = ("high", "normal", "low")
WRONG_LAST_SEQUENCE = 10071
WORKING_AFTER = 0.1  # §4.7
REGISTRY_EVERY = 5.0  # §8
SHUTDOWN_GRACE = 30.0  # §9


def parse_duration(text):
    """'500ms', '30s', '2m', '1h 30m' -> seconds (§2, durations)."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    total, rest = 0.0, text.replace(" ", "")
    # Whole numbers only, as the page's grammar says.
    for number, unit in re.findall(r"(\d+)(ms|s|m|h|d)", rest):
        total += int(number) * units[unit]
    if not rest or re.sub(r"(\d+)(ms|s|m|h|d)", "", rest):
        raise ValueError(f"not a duration: {text!r}")
    return total


def log(line):
    print(f"{now_rfc3339()} py-worker: {line}", file=sys.stderr, flush=True)


def now_rfc3339():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def trace_headers(headers):
    """The task message's W3C trace context, passed on unchanged: this
    worker exports no spans of its own, so its reports are children of the
    orchestrator's publish (worker-protocol.md section 6)."""
    return {k: headers[k] for k in ("traceparent", "tracestate") if headers and headers.get(k)}


class Stop(Exception):
    """Why a running handler was stopped: 'canceled', 'lost' or 'shutdown'."""


class Halt:
    """Set to stop a running handler, with why: 'canceled' or 'shutdown'."""

    def __init__(self):
        self.event = asyncio.Event()
        self.reason = None

    def stop(self, reason):
        self.reason = self.reason or reason
        self.event.set()


class Claims:
    """§5: the claim of a task in the ORCH_DELIVERIES bucket."""

    BUCKET = "ORCH_DELIVERIES"
    STREAM = "KV_ORCH_DELIVERIES"

    def __init__(self, js, lease, instance, agent):
        self.js = js
        self.lease = lease
        self.ttl = str(max(1, math.ceil(lease)))
        self.instance = instance
        self.agent = agent

    def subject(self, task):
        """The claim's key is `<agent>.<task id>`."""
        return f"$KV.{self.BUCKET}.{self.agent}.{task}"

    async def write(self, task, value, expected, timeout=5.0):
        """Publishes `value` if the key's last revision is `expected`; the new
        revision, or None when another write came first."""
        headers = {"Nats-Expected-Last-Subject-Sequence": str(expected), "Nats-TTL": self.ttl}
        data = json.dumps(value).encode()
        try:
            ack = await self.js.publish(self.subject(task), data, timeout=timeout, headers=headers)
        except APIError as e:
            if e.err_code == WRONG_LAST_SEQUENCE:
                return None
            raise
        return ack.seq

    async def read(self, task):
        """(revision, value); value None when nobody holds the claim."""
        try:
            msg = await self.js.get_last_msg(self.STREAM, self.subject(task), direct=True)
        except NotFoundError:
            return 0, None
        headers = msg.headers or {}
        if headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers:
            return msg.seq, None
        return msg.seq, json.loads(msg.data)

    @staticmethod
    def decide(found, attempt, stream_seq):
        """The table of §5, for a delivery of `attempt` from `stream_seq`."""
        if found is None:
            return "create"
        if found.get("state") == "canceled":
            return "canceled"
        if found["attempt"] > attempt:
            return "superseded"
        if found["attempt"] < attempt:
            return "take_over"
        return "busy" if found.get("stream_seq") == stream_seq else "duplicate"

    async def acquire(self, task, attempt, stream_seq):
        """('run', revision) or (decision, None); raises when unreachable."""
        value = {"state": "running", "attempt": attempt, "stream_seq": stream_seq, "instance": self.instance}
        expected = 0
        for _ in range(5):
            revision = await self.write(task, value, expected)
            if revision is not None:
                return "run", revision
            expected, found = await self.read(task)
            decision = self.decide(found, attempt, stream_seq)
            if decision not in ("create", "take_over"):
                return decision, None
        return "raced", None

    async def renew(self, task, value, revision, timeout):
        """The new revision; raises Stop('canceled'|'lost')."""
        new = await self.write(task, value, revision, timeout)
        if new is not None:
            return new
        _, found = await self.read(task)
        raise Stop("canceled" if found and found.get("state") == "canceled" else "lost")

    async def release(self, task, revision):
        headers = {
            "KV-Operation": "PURGE",
            "Nats-Rollup": "sub",
            "Nats-Expected-Last-Subject-Sequence": str(revision),
        }
        try:
            await self.js.publish(self.subject(task), b"", headers=headers)
        except Exception:
            pass  # no longer ours, or the bucket is away: the TTL ends it


class Worker:
    def __init__(self, nc, agent_dir, token_check_for):
        self.nc = nc
        self.js = nc.jetstream()
        with open(os.path.join(agent_dir, "agent.json")) as f:
            self.card = json.load(f)
        self.agent = self.card["name"]
        self.skills = {s["id"]: s.get("scopes", []) for s in self.card["skills"]}
        self.tokens = token_check_for(self.agent)  # None: unchecked
        delivery = self.card.get("delivery", {})
        self.lease = parse_duration(delivery.get("ackWait", "30s"))
        self.max_deliver = int(delivery.get("maxDeliver", 5))
        self.backoff = [parse_duration(d) for d in delivery.get("backoff", [])]
        self.concurrency = int(delivery.get("concurrency", 16))
        self.retry_delay = parse_duration(os.environ.get("ORCH_RETRY_DELAY", "1s"))
        self.retry_max = parse_duration(os.environ.get("ORCH_RETRY_MAX_DELAY", "5s"))
        # One subject token (§8): no dots, whatever the host is called.
        host = socket.gethostname().replace(".", "-")
        self.instance = f"py-{host}-{os.getpid()}-{secrets.token_hex(3)}"
        self.claims = Claims(self.js, self.lease, self.instance, self.agent)
        self.handler = load_handler(agent_dir)
        self.running = {}  # task id -> Halt, to stop its handler
        self.tasks = set()
        self.notes = set()  # run-abandoned notes being sent (§4.10)
        self.held = []  # taken by a long poll with no free slot (§3)
        self.slot_freed = asyncio.Event()
        self.stopping = asyncio.Event()
        self.started_at = now_rfc3339()

    # §2: provisioning ---------------------------------------------------

    async def provision(self):
        """§2: waits until the orchestrator has provisioned what this agent
        uses (in the current layout), looking only at its own consumer,
        event subject and claim key (§12: never a stream's info), then
        creates or updates this agent's consumers."""
        said = False
        while True:
            missing = await self.missing()
            if missing is None:
                break
            if not said:
                log(f"waiting for the orchestrator to provision the bus ({missing})")
                said = True
            await asyncio.sleep(0.5)
        self.pulls = {}
        for priority in PRIORITIES:
            durable = f"agent_{self.agent}_{priority}"
            await self.js.add_consumer(
                "ORCH_TASKS",
                ConsumerConfig(
                    name=durable,  # CONSUMER.CREATE.<stream>.<name>.<filter>: what §12 allows
                    durable_name=durable,
                    filter_subject=f"{PREFIX}.tasks.{self.agent}.{priority}",
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=self.lease,
                    max_deliver=self.max_deliver,
                    backoff=self.backoff or None,
                    max_ack_pending=-1,
                ),
            )
            self.pulls[priority] = f"$JS.API.CONSUMER.MSG.NEXT.ORCH_TASKS.{durable}"

    async def missing(self):
        """§2: the first thing this agent uses that is not provisioned yet."""
        consumer = f"$JS.API.CONSUMER.INFO.ORCH_TASKS.agent_{self.agent}_high"
        try:
            info = json.loads((await self.nc.request(consumer, b"", timeout=5)).data)
        except Exception:
            return "ORCH_TASKS"
        if "error" in info and info["error"].get("err_code") != 10014:  # consumer not found
            return "ORCH_TASKS"
        try:
            await self.js.get_last_msg("ORCH_EVENTS", f"{PREFIX}.events.{self.agent}.layout", direct=True)
        except NotFoundError:
            pass
        except Exception:
            return "ORCH_EVENTS (with direct gets)"
        try:
            await self.js.publish(f"$KV.ORCH_DELIVERIES.{self.agent}.layout", b"", headers={"Nats-TTL": "1"})
        except Exception:
            return "KV_ORCH_DELIVERIES (with per-message TTL)"
        return None

    # §3: taking work ----------------------------------------------------

    def backoff_delay(self, failures):
        """§4.5: the retry delay doubled per earlier failure, at most the
        longest wait, times a random factor between 1/2 and 3/2."""
        return min(self.retry_delay * 2 ** min(failures, 20), max(self.retry_max, self.retry_delay)) * (0.5 + random.random())

    async def keep(self, msg, delay, kept):
        """§4.5: holds `msg` for `delay` s with an in-progress ack every
        lease / 3 since `kept`; the time of the last one, or None when the
        worker stops first (the message is then given back)."""
        until = time.monotonic() + delay
        while True:
            beat_at = kept + self.lease / 3
            await wait_any(self.stopping, timeout=max(0.0, min(until, beat_at) - time.monotonic()))
            if self.stopping.is_set():
                await msg.nak()
                return None
            now = time.monotonic()
            if now >= beat_at:
                await msg.in_progress()
                kept = now
            if now >= until:
                return kept

    async def pull(self, priority, batch, expires=None):
        """A pull request of `batch`: no_wait, or a long poll of `expires` s.
        Sets `self.pull_failed` when the stream answered with an error
        (503: its leader is being elected) or the request failed."""
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        request = {"batch": batch}
        if expires:
            request["expires"] = int(expires * 10**9)
        else:
            request["no_wait"] = True
        msgs = []
        try:
            await self.nc.publish(self.pulls[priority], json.dumps(request).encode(), reply=inbox)
            while len(msgs) < batch:
                msg = await sub.next_msg(timeout=(expires or 0) + 2)
                status = msg.headers and msg.headers.get("Status")
                if status:
                    if status.startswith("5"):
                        self.pull_failed = True
                    break  # 404 no messages, 408 expired, 409 ...
                msgs.append(msg)
        except (NatsTimeout, asyncio.TimeoutError):
            pass
        except Exception as e:
            log(f"pull failed: {e!r}")
            self.pull_failed = True
        finally:
            await sub.unsubscribe()
        return msgs

    def free(self):
        return self.concurrency - len(self.tasks)

    async def intake(self):
        failures = 0
        while not self.stopping.is_set():
            self.pull_failed = False
            if self.free() <= 0:
                self.slot_freed.clear()
                await wait_any(self.slot_freed, self.stopping)
                continue
            while self.held and self.free() > 0:
                self.start(self.held.pop(0))
            taken = 0
            for priority in PRIORITIES:
                if self.free() > 0:
                    for msg in await self.pull(priority, self.free()):
                        self.start(msg)
                        taken += 1
            if taken:
                continue
            # Nothing ready: a long poll of one message per consumer.
            polls = [self.pull(p, 1, expires=2.0) for p in PRIORITIES]
            for msg in [m for got in await asyncio.gather(*polls) for m in got]:
                if self.free() > 0 and not self.stopping.is_set():
                    self.start(msg)
                else:
                    self.held.append(msg)
            if self.pull_failed:
                # §3: a stream that fails every pull at once is not spun on.
                await wait_any(self.stopping, timeout=self.backoff_delay(failures))
                failures += 1
            else:
                failures = 0
        for msg in self.held:
            await msg.nak()  # taken, never started: given back (§9)
        self.held.clear()

    async def keep_held_alive(self):
        """§3: a held message's ack wait runs; in-progress acks keep it."""
        while not self.stopping.is_set():
            await wait_any(self.stopping, timeout=self.lease / 3)
            for msg in list(self.held):
                await msg.in_progress()

    def start(self, msg):
        task = asyncio.create_task(self.deliver(msg))
        self.tasks.add(task)

        def done(t):
            self.tasks.discard(t)
            self.slot_freed.set()

        task.add_done_callback(done)

    # §4: one delivery ---------------------------------------------------

    async def deliver(self, msg):
        meta = msg.metadata
        stream_seq, delivered = meta.sequence.stream, meta.num_delivered
        try:
            env = json.loads(msg.data)
            header, payload, control = env["header"], env["payload"], env["control"]
            task, attempt = header["task_id"], int(control["attempt"])
            correlation, action = header["correlation_id"], payload["action"]
        except Exception as e:
            await self.dead_letter(msg, stream_seq, e)
            return
        if header.get("to") != self.agent:
            await self.refuse(env, msg, "wrong_agent", f"sent to {header.get('to')!r}, this is {self.agent!r}")
            return
        if action not in self.skills:
            await self.refuse(env, msg, "unknown_action", f"{self.agent} has no skill {action!r}")
            return
        if self.tokens:
            try:
                self.tokens.check(env, self.skills[action])
            except Refused as r:
                log(f"task {task}: token refused: {r}")
                error = {"code": r.code, "message": r.message, "retryable": False}
                await self.report_kept(env, msg, r.state, error=error)
                return
        resumed = delivered > 1 or bool(msg.headers and msg.headers.get("Orch-Republished"))
        # §4.4: any delivery may copy an attempt that already reported, so
        # its record is read every time, beside the claim (no added wait).
        # §4.5: a claim held by another replica, a bucket that cannot be
        # reached, or (for a repeated delivery) a record that cannot be
        # read: keep the message and look again after a backoff.
        failures, kept = 0, time.monotonic()
        while True:
            over, claimed = await asyncio.gather(
                self.attempt_over(task, attempt),
                self.claims.acquire(task, attempt, stream_seq),
                return_exceptions=True,
            )
            ran = not isinstance(claimed, BaseException) and claimed[0] == "run"
            if over is True:
                if ran:
                    await self.claims.release(task, claimed[1])
                await msg.ack()
                return
            if ran and over is None and resumed:
                await self.claims.release(task, claimed[1])
            elif ran:
                decision, revision = claimed
                break
            elif not isinstance(claimed, BaseException):
                decision = claimed[0]
                if decision in ("canceled", "duplicate", "superseded"):
                    await msg.ack()
                    return
                if decision not in ("busy", "raced"):
                    await msg.nak(delay=self.retry_delay)  # a claim it cannot read
                    return
            kept = await self.keep(msg, self.backoff_delay(failures), kept)
            if kept is None:
                return
            failures += 1
        trace = trace_headers(msg.headers)
        ctx = {
            "task_id": task,
            "attempt": attempt,
            "resumed": resumed,
            "idempotency_key": control.get("idempotency_key", ""),
            "progress": Progress(self, env, trace, resumed),
            # The answer to an earlier attempt's input_required, if any.
            "input": payload.get("input"),
        }
        value = {"state": "running", "attempt": attempt, "stream_seq": stream_seq, "instance": self.instance}
        await self.run(env, msg, ctx, value, revision, trace)

    async def run(self, env, msg, ctx, value, revision, trace):
        task, attempt = ctx["task_id"], ctx["attempt"]
        halt = Halt()
        self.running[task] = halt
        handler = asyncio.create_task(self.call_handler(env, ctx))
        started = last_write = time.monotonic()
        working = None  # the `working` report, sent beside the watch
        try:
            while not handler.done():
                beat_at = last_write + self.lease / 3
                wake = beat_at if working else min(beat_at, started + WORKING_AFTER)
                await wait_any(handler, halt.event, timeout=max(0.0, wake - time.monotonic()))
                if halt.event.is_set():
                    raise Stop(halt.reason)
                if handler.done():
                    break
                now = time.monotonic()
                if not working and now >= started + WORKING_AFTER:
                    working = asyncio.create_task(self.report(env, "working", trace=trace, resumed=ctx["resumed"]))
                if now >= beat_at:
                    # §4.6: the claim first, then the message's ack wait.
                    revision, last_write = await self.renew(task, value, revision, last_write)
                    await msg.in_progress()
            # §4.8: fence before reporting.
            if time.monotonic() - last_write > self.lease / 2:
                revision, last_write = await self.renew(task, value, revision, last_write)
        except Stop as stop:
            log(f"task {task}: handler stopped ({stop})")
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
            if str(stop) == "canceled":
                await msg.ack()
            elif str(stop) == "shutdown":
                await self.claims.release(task, revision)
                await msg.nak()  # delay 0: another replica takes it at once
            else:
                # Lost: the new holder settles the message (§4.10).
                self.note_abandoned(env, finished=False, reason="the claim was lost while the handler ran")
            return
        finally:
            self.running.pop(task, None)
            if working:
                await working  # before the final event, never after it
            await ctx["progress"].finish()  # every report before the final event
        state, fields = handler.result()
        await self.report_result(env, msg, ctx, (state, fields), trace, (value, revision, last_write))

    async def report_result(self, env, msg, ctx, outcome, trace, claim):
        """§4.8–4.10: the fence, then the final event; while either cannot
        be done the message and the claim are kept and tried again after a
        backoff. A claim found lost drops the result and is noted."""
        (task, state_fields), (value, revision, last_write) = (ctx["task_id"], outcome), claim
        state, fields = state_fields
        failures, kept = 0, time.monotonic()
        while True:
            if time.monotonic() - last_write > self.lease / 3:
                left = last_write + self.lease - time.monotonic()
                try:
                    if left <= 0:
                        raise Stop("lost")
                    revision = await self.claims.renew(task, value, revision, timeout=min(left, self.lease / 3))
                    last_write = kept = time.monotonic()
                    await msg.in_progress()
                except Stop as stop:
                    if str(stop) == "canceled":
                        await msg.ack()
                    else:
                        log(f"task {task}: claim lost before reporting: result dropped")
                        self.note_abandoned(env, finished=True, reason="the claim was lost before the result was reported")
                    return
                except Exception:
                    kept = await self.keep(msg, self.backoff_delay(failures), kept)
                    if kept is None:
                        await self.claims.release(task, revision)
                        return
                    failures += 1
                    continue
            if await self.report(env, state, trace=trace, resumed=ctx["resumed"], timeout=self.lease / 3, **fields):
                await msg.ack()
                return
            kept = await self.keep(msg, self.backoff_delay(failures), kept)
            if kept is None:
                await self.claims.release(task, revision)
                return
            failures += 1

    def note_abandoned(self, env, finished, reason):
        """§4.10: the run-abandoned note, in the background until the bus
        takes it (10 minutes at most)."""
        header, control = env["header"], env["control"]
        task, attempt = header["task_id"], int(control["attempt"])
        note = {
            "v": 1,
            "task_id": task,
            "correlation_id": header["correlation_id"],
            "agent": self.agent,
            "attempt": attempt,
            "instance": self.instance,
            "finished": finished,
            "reason": reason,
            "at": now_rfc3339(),
        }
        headers = {
            "Nats-Msg-Id": f"{task}.{attempt}.abandoned.{self.instance}",
            "Orch-Task-Id": task,
            "Orch-Correlation-Id": header["correlation_id"],
        }

        async def send():
            give_up, failures = time.monotonic() + 600, 0
            while time.monotonic() < give_up:
                try:
                    await self.js.publish(f"{PREFIX}.events.{self.agent}.{task}.abandoned", json.dumps(note).encode(), headers=headers)
                    return
                except Exception:
                    await asyncio.sleep(self.backoff_delay(failures))
                    failures += 1

        keep = asyncio.create_task(send())
        self.notes.add(keep)
        keep.add_done_callback(self.notes.discard)

    async def renew(self, task, value, revision, last_write):
        """(revision, time of the write); Stop when canceled or lost, or when
        the bucket has been unreachable for a whole lease."""
        while True:
            # A write not acknowledged before the lease ends cannot keep it.
            left = last_write + self.lease - time.monotonic()
            if left <= 0:
                raise Stop("lost")
            try:
                return await self.claims.renew(task, value, revision, timeout=left), time.monotonic()
            except Stop:
                raise
            except Exception:
                await asyncio.sleep(min(self.retry_delay, self.lease / 6))

    async def call_handler(self, env, ctx):
        """(state, event fields) of one handler run."""
        payload = env["payload"]
        try:
            result = await self.handler.handle(payload["action"], payload.get("params", {}), ctx)
            return "completed", {"result": result}
        except asyncio.CancelledError:
            raise
        except Exception as e:
            message = getattr(e, "message", None) or str(e) or type(e).__name__
            error = {
                "code": getattr(e, "code", "handler_error"),
                # Sensitive param values never leave in a message.
                "message": redact.scrub(message, redact.secrets(payload.get("params", {}))),
                "retryable": bool(getattr(e, "retryable", False)),
            }
            fields = {"error": error}
            if getattr(e, "retry_after_seconds", None) is not None:
                fields["retry_after_seconds"] = int(e.retry_after_seconds)
            return "failed", fields

    async def attempt_over(self, task, attempt):
        """§4.4: the attempt's final event exists: True, False, or None when
        the lookup failed."""
        try:
            last = await self.js.get_last_msg("ORCH_EVENTS", f"{PREFIX}.events.{self.agent}.{task}", direct=True)
            event = json.loads(last.data)
        except NotFoundError:
            return False
        except Exception:
            return None
        return event["attempt"] > attempt or (event["attempt"] == attempt and event["state"] != "working")

    # §6: events ---------------------------------------------------------

    async def report(self, env, state, trace=None, resumed=False, timeout=5.0, **fields):
        """Publishes the attempt's event; True once JetStream stored it."""
        header, control = env["header"], env["control"]
        task, attempt = header["task_id"], int(control["attempt"])
        event = {
            "v": 1,
            "task_id": task,
            "correlation_id": header["correlation_id"],
            "agent": self.agent,
            "attempt": attempt,
            "state": state,
            "instance": self.instance,
            "at": now_rfc3339(),
            **fields,
        }
        if resumed:
            event["resumed"] = True
        # A progress report has an id of its own, with this instance in it
        # (§6): a run that took the attempt over reports its own 1, 2, ...
        seq = fields["progress"]["seq"] if "progress" in fields else None
        headers = {
            "Nats-Msg-Id": f"{task}.{attempt}.{state}" + (f".{self.instance}.{seq}" if seq else ""),
            "Orch-Task-Id": task,
            "Orch-Correlation-Id": header["correlation_id"],
        }
        headers.update(trace or {})
        try:
            await self.js.publish(f"{PREFIX}.events.{self.agent}.{task}", json.dumps(event).encode(), headers=headers, timeout=timeout)
            return True
        except Exception as e:
            log(f"event {state} for {task} not published: {e!r}")
            return False

    async def refuse(self, env, msg, code, message):
        """§4.2: a rejected event, then an ack."""
        await self.report_kept(env, msg, "rejected", error={"code": code, "message": message, "retryable": False})

    async def report_kept(self, env, msg, state, **fields):
        """A final event of an attempt that never ran, then an ack; while it
        cannot be published the message is kept (§4.9)."""
        failures, kept = 0, time.monotonic()
        while not await self.report(env, state, **fields):
            kept = await self.keep(msg, self.backoff_delay(failures), kept)
            if kept is None:
                return
            failures += 1
        await msg.ack()

    async def dead_letter(self, msg, stream_seq, error):
        """§4.1: an unreadable envelope is copied to the DLQ, then terminated."""
        task = None
        env = None
        try:
            env = json.loads(msg.data)
            task = env["header"]["task_id"]
        except Exception:
            pass
        code = "malformed_json" if env is None else "malformed_envelope"
        reason = str(error)[:200] or type(error).__name__
        headers = {
            "Nats-Msg-Id": f"dlq.ORCH_TASKS.{stream_seq}",
            "Orch-Dlq-Code": code,
            "Orch-Dlq-Reason": reason.replace("\r", " ").replace("\n", " "),  # one line
            "Orch-Original-Subject": msg.subject,
            "Orch-Stream-Seq": str(stream_seq),
        }
        if task:
            headers["Orch-Task-Id"] = str(task)
        try:
            await self.js.publish(f"{PREFIX}.dlq.{self.agent}", msg.data, headers=headers)
        except Exception:
            await msg.nak(delay=self.retry_delay)
            return
        try:
            correlation = env["header"]["correlation_id"]
            attempt = env.get("control", {}).get("attempt")
            if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
                attempt = 1
            stub = {"header": {"task_id": task, "correlation_id": correlation}, "control": {"attempt": attempt}}
            message = f"the envelope cannot be read: {error}"
            await self.report(stub, "rejected", error={"code": code, "message": message})
        except Exception:
            pass  # no ids to report on
        await msg.term()

    # §7: cancel, §8: registry, §9: shutdown ------------------------------

    async def on_cancel(self, msg):
        task = msg.subject.rsplit(".", 1)[-1]
        if task in self.running:
            self.running[task].stop("canceled")

    async def heartbeat(self):
        """§8: the entry is written by a publish to its key's subject."""
        subject = f"$KV.ORCH_AGENTS.{self.agent}.{self.instance}"
        while not self.stopping.is_set():
            entry = {
                "agent": self.agent,
                "instance": self.instance,
                "card": self.card,
                "started_at": self.started_at,
                "heartbeat_at": now_rfc3339(),
                "in_flight": len(self.running),
            }
            try:
                await self.js.publish(subject, json.dumps(entry).encode())
            except Exception as e:
                log(f"registry heartbeat failed: {e!r}")
            await wait_any(self.stopping, timeout=REGISTRY_EVERY)
        try:
            await self.js.publish(subject, b"", headers={"KV-Operation": "DEL"})
        except Exception:
            pass

    async def serve(self):
        await self.provision()
        await self.nc.subscribe(f"{PREFIX}.control.cancel.*", cb=self.on_cancel)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        log(f"{self.instance} serving {self.agent}")
        beat = asyncio.create_task(self.heartbeat())
        keep = asyncio.create_task(self.keep_held_alive())
        await self.intake()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=SHUTDOWN_GRACE)
        for halt in list(self.running.values()):
            halt.stop("shutdown")
        if self.tasks:
            await asyncio.wait(self.tasks)
        await asyncio.gather(beat, keep)
        await self.nc.drain()


class Progress:
    """ctx["progress"]: the handler's progress reports (§6), each a
    `working` event with a `progress` object numbered from 1, published in
    the order reported. Nothing runs for a handler that reports none."""

    def __init__(self, worker, env, trace, resumed):
        self.worker, self.env, self.trace, self.resumed = worker, env, trace, resumed
        self.seq = 0
        self.queue = asyncio.Queue()
        self.publisher = None

    def __call__(self, message=None, artifact=None):
        """Queues a report: a status message, an artifact (or a chunk of
        one: `append`, `last_chunk`), or both."""
        if message is None and artifact is None:
            return
        self.seq += 1
        progress = {"seq": self.seq}
        if message is not None:
            progress["message"] = message
        if artifact is not None:
            progress["artifact"] = artifact
        self.queue.put_nowait(progress)
        if self.publisher is None:
            self.publisher = asyncio.create_task(self.publish())

    async def publish(self):
        while (progress := await self.queue.get()) is not None:
            await self.worker.report(self.env, "working", trace=self.trace, resumed=self.resumed, progress=progress)

    async def finish(self):
        """Waits until every queued report is published."""
        if self.publisher is not None:
            self.queue.put_nowait(None)
            await self.publisher


async def wait_any(*waitables, timeout=None):
    """Waits until an asyncio.Event is set or a task is done, or `timeout`."""
    futures = [asyncio.ensure_future(w.wait()) if isinstance(w, asyncio.Event) else w for w in waitables]
    _, pending = await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for f, w in zip(futures, waitables):
        if f in pending and isinstance(w, asyncio.Event):
            f.cancel()


def nats_credentials():
    """§12: NATS_NKEY (a seed file; needs the `nkeys` package), NATS_CREDS,
    NATS_USER + NATS_PASSWORD or NATS_TOKEN, as the Rust worker reads them."""
    env = os.environ
    if env.get("NATS_NKEY"):
        return {"nkeys_seed": env["NATS_NKEY"]}
    if env.get("NATS_CREDS"):
        return {"user_credentials": env["NATS_CREDS"]}
    if env.get("NATS_USER"):
        return {"user": env["NATS_USER"], "password": env.get("NATS_PASSWORD", "")}
    if env.get("NATS_TOKEN"):
        return {"token": env["NATS_TOKEN"]}
    return {}


def load_handler(agent_dir):
    spec = importlib.util.spec_from_file_location("agent_handler", os.path.join(agent_dir, "handler.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", required=True, help="the agent's directory (agent.json, handler.py)")
    parser.add_argument("--nats-url", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--verify-key", default=os.environ.get("ORCH_VERIFY_KEY"), help="the orchestrator's public key (path or PEM)")
    parser.add_argument("--no-verify", action="store_true", help="run tasks without checking their tokens (development only)")
    args = parser.parse_args()
    if args.no_verify:
        log("WARNING: task tokens are NOT checked (--no-verify); development only")
        token_check_for = lambda agent: None  # noqa: E731
    elif not args.verify_key:
        sys.exit("no key to verify task tokens with: set ORCH_VERIFY_KEY (or --verify-key) to the orchestrator's public key")
    else:
        token_check_for = lambda agent: TokenCheck(args.verify_key, agent)  # noqa: E731
    with open(os.path.join(args.agent, "agent.json")) as f:
        agent = json.load(f)["name"]
    # §12: replies come under the agent's own inbox prefix, the only one a
    # least-privilege bus lets this agent subscribe to.
    nc = await nats.connect(
        args.nats_url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        inbox_prefix=f"_INBOX.agents.{agent}".encode(),
        **nats_credentials(),
    )
    await Worker(nc, args.agent, token_check_for).serve()


if __name__ == "__main__":
    asyncio.run(main())
