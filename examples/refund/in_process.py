"""Play the refund dialogue in one process: ``python examples/<framework>_agent.py [DSN]``.

Each customer message is handled with a brand-new store and a brand-new agent, as if by another server
behind a load balancer after the previous one was redeployed: whatever the agent remembers came from
Postgres. (``examples/demo.py`` does the same with real worker processes, a load balancer and a crash.)
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from pgagentstate import AsyncStateStore

from .agents import RefundAgent
from .dialogue import SCRIPT
from .services import Faults, Service
from .workflow import ServiceUrls

# (store, urls) -> a new agent: one "server", started from scratch for each message.
MakeAgent = Callable[[AsyncStateStore, ServiceUrls], RefundAgent]


def dsn() -> str | None:
    """``python examples/x.py [DSN]``; else $PGAGENTSTATE_DSN / $DATABASE_URL / the embedded Postgres."""
    return sys.argv[1] if len(sys.argv) > 1 else None


async def play(title: str, make_agent: MakeAgent) -> None:
    os.environ.setdefault("PGAGENTSTATE_DEMO_SCRIPTED", "1")  # set it to 0 to use a real model with your key
    customer = "5511" + "".join(random.choice("0123456789") for _ in range(8))
    with tempfile.TemporaryDirectory() as tmp:
        # The payment API times out once: the refund step retries with the same Idempotency-Key.
        payment = Service("payment", Path(tmp) / "payment.sqlite", faults=Faults(next=["timeout"])).start()
        email = Service("email", Path(tmp) / "email.sqlite").start()
        urls = ServiceUrls(payment.url, email.url)
        async with AsyncStateStore(dsn(), tenant="examples") as store:
            await store.setup()
        print(f"{title} — customer +{customer}\n")
        for offset, text in SCRIPT:
            if offset >= 300:
                print("   ... 5 minutos depois ...")
            print(f"   Cliente: {text}")
            async with AsyncStateStore(dsn(), tenant="examples", max_size=4) as store:  # a new "server"
                agent = make_agent(store, urls)
                for reply in await agent.respond(customer, text):
                    print(f"   Agente : {reply}")
                await agent.aclose()
        print(f"\nrefunds paid: {payment.ledger.stats()['effects']}, emails sent: {email.ledger.stats()['effects']}"
              f" (payment API requests: {payment.ledger.stats()['requests']})")
        payment.stop()
        email.stop()


def run(title: str, make_agent: MakeAgent) -> None:
    asyncio.run(play(title, make_agent))
