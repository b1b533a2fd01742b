"""URI schemes for ADK's CLI and API server: ``pgagentstate://`` and ``pgagentstate+embedded://``.

After :func:`register_services` (call it from a ``services.py`` in the agents directory)::

    adk web --session_service_uri "pgagentstate://postgres@127.0.0.1:5432/app?tenant=acme" \\
            --memory_service_uri  "pgagentstate://postgres@127.0.0.1:5432/app?tenant=acme" agents/
    adk api_server --session_service_uri "pgagentstate+embedded://" agents/

See :func:`pgagentstate.adk._store.parse_uri` for what a URI may say.
"""

from __future__ import annotations

from typing import Any

from google.adk.cli.service_registry import ServiceRegistry, get_service_registry

from ._store import EMBEDDED_SCHEME, SCHEME
from .memory_service import PostgresMemoryService
from .session_service import PostgresSessionService

SCHEMES = (SCHEME, EMBEDDED_SCHEME)
# Keyword arguments of the services that a registry factory may pass through (from session_db_kwargs).
_PASSED = {"tenant", "schema", "setup", "min_size", "max_size", "pgbouncer", "limits"}


def _options(kwargs: dict[str, Any]) -> dict[str, Any]:
    unknown = set(kwargs) - _PASSED - {"agents_dir"}
    if unknown:
        raise TypeError(f"unsupported options for a pgagentstate service: {sorted(unknown)}")
    return {k: v for k, v in kwargs.items() if k in _PASSED}


def session_service_factory(uri: str, **kwargs: Any) -> PostgresSessionService:
    """ADK registry factory: a :class:`PostgresSessionService` for a ``pgagentstate`` URI."""
    return PostgresSessionService(uri=uri, **_options(kwargs))


def memory_service_factory(uri: str, **kwargs: Any) -> PostgresMemoryService:
    """ADK registry factory: a :class:`PostgresMemoryService` for a ``pgagentstate`` URI."""
    return PostgresMemoryService(uri=uri, **_options(kwargs))


def register_services(registry: ServiceRegistry | None = None) -> None:
    """Register the ``pgagentstate`` URI schemes for session and memory services with ADK.

    Idempotent. With no argument, ADK's global registry (the one ``adk web``/``adk api_server`` and
    ``get_fast_api_app`` use).
    """
    registry = registry or get_service_registry()
    for scheme in SCHEMES:
        registry.register_session_service(scheme, session_service_factory)
        registry.register_memory_service(scheme, memory_service_factory)
