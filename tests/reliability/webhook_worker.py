"""One webhook worker of the examples' WhatsApp service, with admission control in front of it.

``python tests/reliability/webhook_worker.py --framework F --port P --name N --max-turns K`` runs the demo's own
app (:func:`refund.webhook.build_app` in examples/, configured from the environment like
``python -m refund.webhook``) behind an ASGI wrapper that lets at most ``K`` webhook deliveries run at
once in this process; the others wait their turn (WhatsApp's request stays open meanwhile).

Why: a turn holds the conversation's lock in a transaction on one pooled connection (``conversation_lock``) for
its whole length, and the agent inside it needs further connections from the same pool (6 per worker in
``build_app``). Without a bound, 6 concurrent turns in one worker take all 6 connections for their locks and then
wait for a seventh that never comes, until psycopg_pool's 30 s timeout (``ConnectionLost: couldn't get a
connection after 30.00 sec`` -> HTTP 500 -> WhatsApp redelivers). ``--max-turns 0`` runs the app unwrapped, to
measure that.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any


def wrap(app: Any, max_turns: int) -> Any:
    """``app`` with at most ``max_turns`` concurrent ``POST /webhook`` requests (0: unbounded)."""
    if max_turns <= 0:
        return app
    gate = asyncio.Semaphore(max_turns)

    async def bounded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/webhook":
            async with gate:
                await app(scope, receive, send)
        else:
            await app(scope, receive, send)

    return bounded


def main(argv: list[str]) -> int:
    import uvicorn

    from refund.webhook import build_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--max-turns", type=int, default=3)
    args = parser.parse_args(argv)
    app = wrap(build_app(args.framework, worker=args.name), args.max_turns)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
