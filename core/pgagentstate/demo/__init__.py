"""The refund demo: the seed's WhatsApp conversation, kept in Postgres across workers, crashes and time.

Framework-free pieces only (the core never imports a framework): the dialogue's rules
(:mod:`.dialogue`), the durable refund workflow (:mod:`.workflow`), the payment/email/WhatsApp API
stand-ins (:mod:`.services`), the webhook service (:mod:`.webhook`), the load balancer (:mod:`.proxy`)
and the orchestrator behind ``pgagentstate demo`` (:mod:`.runner`). Each framework's agent is
``pgagentstate.<framework>.refund_agent``, imported only by the worker that runs it.
"""

from __future__ import annotations

from .runner import run_demo

__all__ = ["run_demo"]
