"""Helpers shared by the example tests (importable because conftest puts this folder on sys.path)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from pgagentstate import StateStore

from refund.cluster import Cluster, Delivery
from refund.dialogue import SCRIPT

SEED = [text for _, text in SCRIPT]
RECAP = "O que você sabe sobre meu pedido?"


def new_customer() -> str:
    return "5511" + "".join(random.choice("0123456789") for _ in range(8))


def start_cluster(framework: str, tmp: Path, dsn: str, schema: str) -> Cluster:
    """Services, two worker processes of ``framework`` and the round-robin proxy, ready to take messages."""
    cluster = Cluster(framework, tmp, dsn=dsn, schema=schema, tenant=f"t-{framework}")
    cluster.__enter__()
    try:
        cluster.wait_ready()
    except BaseException:
        cluster.__exit__(None, None, None)
        raise
    return cluster


BASE = 1_780_000_000  # the simulated clock's start (the webhook's timestamps)


def play_seed(cluster: Cluster, customer: str) -> list[Delivery]:
    """The seed conversation; the last message five minutes (simulated clock) after the others."""
    return [cluster.deliver(customer, text, BASE + offset) for offset, text in SCRIPT]


def wait_distilled(store: StateStore, conversation_id: str, timeout: float = 30.0) -> None:
    """Until the cluster's distillation worker (another process) has distilled the whole conversation."""
    deadline = time.monotonic() + timeout
    while conversation_id in store.pending_distillations(100):
        assert time.monotonic() < deadline, f"{conversation_id} not distilled in {timeout} s"
        time.sleep(0.05)


def effects_for(cluster: Cluster, service: str, customer: str) -> list[dict[str, Any]]:
    """What a service did for this customer, from the service's own records."""
    svc = {"payment": cluster.payment, "email": cluster.email, "whatsapp": cluster.whatsapp}[service]
    return [e for e in svc.ledger.effects() if customer in str(e["key"]) or customer in str(e["request"])]
