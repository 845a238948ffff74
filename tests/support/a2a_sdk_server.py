"""A small A2A 1.0 agent built with the official a2a-sdk server, for interop tests and
the door benchmark.

    python a2a_sdk_server.py --port 0 --token T [--mode echo|fail] [--busy N] [--delay S]

Serves JSON-RPC on POST /a2a/jsonrpc (the SDK's default path, as a real a2a-sdk
deployment does; POST / is a 404) and the card on GET /.well-known/agent-card.json,
whose one interface names that endpoint, and prints
`LISTENING http://127.0.0.1:PORT http://127.0.0.1:PORT/a2a/jsonrpc` (the agent's base
address, then its JSON-RPC endpoint) once the socket listens. Every POST needs
`Authorization: Bearer T` (401 otherwise); the card is public.

Behaviour of a task, by mode and text:
- the first N offers (--busy N) are created straight into TASK_STATE_REJECTED with the
  status message `task rejected: capsule is busy`;
- --mode fail, or a text starting with "fail": TASK_STATE_FAILED after --delay, status
  message `failed: asked to fail`;
- a text starting with "slow": works for an hour (for CancelTask);
- otherwise TASK_STATE_COMPLETED after --delay with an artifact "reply" whose text is
  `echo: <text>`.
"""

import argparse
import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import get_message_text
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)

BUSY = "task rejected: capsule is busy"
# Where the SDK serves JSON-RPC unless told otherwise (a2a.utils.constants).
RPC_PATH = "/a2a/jsonrpc"


class Peer(AgentExecutor):
    def __init__(self, mode: str, busy: int, delay: float) -> None:
        self.mode = mode
        self.busy_left = busy
        self.delay = delay

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        text = get_message_text(msg) if msg is not None else ""
        task_id = context.task_id
        context_id = context.context_id
        updater = TaskUpdater(event_queue, task_id, context_id)
        if self.busy_left > 0:
            self.busy_left -= 1
            # Created straight into REJECTED: the first event is the terminal task.
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(
                        state=TaskState.TASK_STATE_REJECTED,
                        message=updater.new_agent_message([Part(text=BUSY)]),
                    ),
                    history=[msg] if msg is not None else [],
                )
            )
            return
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[msg] if msg is not None else [],
                )
            )
        await updater.start_work(updater.new_agent_message([Part(text="working")]))
        if text.startswith("slow"):
            await asyncio.sleep(3600)
        await asyncio.sleep(self.delay)
        if self.mode == "fail" or text.startswith("fail"):
            await updater.failed(updater.new_agent_message([Part(text="failed: asked to fail")]))
            return
        await updater.add_artifact([Part(text=f"echo: {text}")], name="reply")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([Part(text="canceled by client request")]))


class BearerAuth:
    """Pure ASGI middleware: every POST needs the bearer token."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = b"Bearer " + token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if auth != self.expected:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", required=True)
    ap.add_argument("--mode", choices=["echo", "fail"], default="echo")
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.3)
    args = ap.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it (Linux). uvicorn sets it on sockets it binds itself,
    # not on one handed over; without it every keep-alive request waits ~40 ms for a
    # delayed ACK (Nagle), which would make the benchmark unfair to the SDK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    url = f"{base}{RPC_PATH}"

    card = AgentCard(
        name="SDK Echo Peer",
        description="a2a-sdk reference peer for mur's interop tests",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Replies with the text it was sent.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Peer(args.mode, args.busy, args.delay),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    routes = create_agent_card_routes(card, cache_control="public, max-age=300") + create_jsonrpc_routes(handler, rpc_url=RPC_PATH)
    app = BearerAuth(Starlette(routes=routes), args.token)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    print(f"LISTENING {base} {url}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
