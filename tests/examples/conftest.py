"""Fixtures for the refund agents and the demo: a schema per module, real worker processes."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgagentstate import StateStore

# pytest runs with --import-mode=importlib: make this folder's helper module (ex_support) importable, and the
# examples as their own scripts see them (``refund`` and ``<framework>_agent`` from examples/).
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
for path in (Path(__file__).resolve().parent, EXAMPLES):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Worker processes inherit the environment: a real API key must not turn the script into a real model.
os.environ["PGAGENTSTATE_DEMO_SCRIPTED"] = "1"


@pytest.fixture(scope="module")
def module_schema(dsn: str) -> Iterator[str]:
    """A fresh schema shared by one test module (its worker clusters outlive single tests)."""
    name = f"t_ex_{uuid.uuid4().hex[:10]}"
    with StateStore(dsn, schema=name, max_size=1) as s:
        s.setup()
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
