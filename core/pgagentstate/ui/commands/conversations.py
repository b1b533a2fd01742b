"""``pgagentstate conversations``: conversations with their health, filtered and paged."""

from __future__ import annotations

import argparse

from ...ops import operations
from ..term import ago, table
from .base import Add, duration, emit, idle_option, open_store


def cmd_conversations(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        found = store.run(
            operations.list_conversations(
                store.context,
                app=args.app,
                framework=args.framework,
                user_id=args.user,
                status=args.status,
                health=args.health,
                stuck_only=args.stuck,
                idle_over=args.older_than,
                active_within=args.newer_than,
                id_prefix=args.prefix,
                idle=args.idle,
                limit=args.limit,
                offset=args.offset,
            )
        )
    headers = [
        "id",
        "health",
        "status",
        "framework",
        "app",
        "user",
        "msgs",
        "stuck",
        "failed",
        "calls",
        "dups",
        "updated",
    ]
    rows = [
        (
            s.conversation.id,
            s.health,
            s.conversation.status,
            s.conversation.framework,
            s.conversation.app,
            s.conversation.user_id,
            s.messages,
            s.stuck_steps,
            s.failed_steps,
            s.calls,
            s.duplicate_hits,
            ago(s.conversation.updated_at),
        )
        for s in found
    ]
    emit(args, found, lambda: table(headers, rows, whole=("id", "user")) + f"\n\n{len(rows)} conversation(s)")
    return 0


def register(add: Add) -> None:
    p = add("conversations", cmd_conversations, "list conversations with their health")
    p.add_argument("--app")
    p.add_argument("--framework", help="langgraph, adk, openai_agents, ...")
    p.add_argument("--user", help="user id")
    p.add_argument("--status", choices=operations.HEALTH_CATEGORIES, help="stored status")
    p.add_argument("--health", choices=operations.HEALTH_CATEGORIES, help="health (idle open ones are abandoned)")
    p.add_argument("--stuck", action="store_true", help="only conversations with a stuck workflow step")
    p.add_argument("--older-than", type=duration, metavar="DUR", help="no activity for at least DUR (e.g. 7d)")
    p.add_argument("--newer-than", type=duration, metavar="DUR", help="activity within DUR (e.g. 2h)")
    p.add_argument("--prefix", help="conversation id prefix")
    idle_option(p)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)
