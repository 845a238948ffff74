"""Drives an A2A 1.0 agent with the official a2a-sdk client and prints what it saw, one
JSON object per line; the last line is {"step": "done", ...}.

    python a2a_sdk_client.py URL TOKEN

Steps: fetch the card; SendMessage "hello" with returnImmediately, then GetTask every
100 ms until the task is terminal (at most 10 s); SendMessage "slow job" and CancelTask
it; CancelTask the finished task (expects an error); GetTask an unknown id (expects an
error). Exit status 0 when every step ran, 1 otherwise.
"""

import asyncio
import json
import sys
import time

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def out(**kw) -> None:
    print(json.dumps(kw), flush=True)


def state_name(task) -> str:
    return TaskState.Name(task.status.state)


def answer(task) -> str:
    return "\n".join(p.text for a in task.artifacts for p in a.parts if p.HasField("text"))


async def send(client, text: str):
    req = SendMessageRequest(
        message=Message(message_id=f"m-{time.time_ns()}", role=Role.ROLE_USER, parts=[Part(text=text)]),
        configuration=SendMessageConfiguration(return_immediately=True, accepted_output_modes=["text/plain"]),
    )
    async for ev in client.send_message(req):
        if ev.HasField("task"):
            return ev.task
    raise RuntimeError("SendMessage answered without a task")


async def error_of(coro) -> dict:
    try:
        r = await coro
    except Exception as e:  # the SDK raises typed A2A errors
        return {"error": type(e).__name__, "text": str(e)}
    return {"unexpected": MessageToDict(r)}


async def main(url: str, token: str) -> int:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
    try:
        card = await A2ACardResolver(http, url).get_agent_card()
        out(step="card", name=card.name, interfaces=[MessageToDict(i) for i in card.supported_interfaces],
            streaming=card.capabilities.streaming)
        client = await create_client(card, ClientConfig(streaming=False, polling=True, httpx_client=http))

        task = await send(client, "hello")
        out(step="send", id=task.id, state=state_name(task))
        deadline = time.monotonic() + 10
        polls = 0
        while task.status.state not in TERMINAL and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            task = await client.get_task(GetTaskRequest(id=task.id))
            polls += 1
        out(step="poll", id=task.id, state=state_name(task), answer=answer(task), polls=polls,
            history=len(task.history))
        short = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        out(step="history_length", history=len(short.history))

        slow = await send(client, "slow job")
        canceled = await client.cancel_task(CancelTaskRequest(id=slow.id))
        out(step="cancel", id=slow.id, state=state_name(canceled))

        out(step="cancel_finished", **(await error_of(client.cancel_task(CancelTaskRequest(id=task.id)))))
        out(step="get_unknown", **(await error_of(client.get_task(GetTaskRequest(id="no-such-task")))))
        out(step="done", ok=True)
        return 0
    except Exception as e:
        out(step="done", ok=False, error=type(e).__name__, text=str(e))
        return 1
    finally:
        await http.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
