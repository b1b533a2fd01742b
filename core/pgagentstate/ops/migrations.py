"""Schema migrations: ordered SQL files shipped in the package, applied under an advisory lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..errors import SchemaError
from .base import Op, Stmt, Tx


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    script: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration in the package, in order. Files are named ``NNNN_name.sql`` and never renumbered."""
    found: list[Migration] = []
    package = __package__.rsplit(".", 1)[0]
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    return tuple(found)


def canonical_schema() -> str:
    package = __package__.rsplit(".", 1)[0]
    return resources.files(package).joinpath("schema.sql").read_text(encoding="utf-8")


def migrate(schema: str) -> Op[list[int]]:
    """Apply every pending migration in one transaction; returns the versions applied."""
    rows = yield Tx(
        (
            Stmt("migrate_lock", {"schema_name": schema}, "none"),
            Stmt("migrate_create_schema", {}, "none"),
            Stmt("migrate_create_table", {}, "none"),
            Stmt("migrate_applied", {}, "all"),
        ),
        hold=True,
        patient=True,
    )
    applied = {r[0] for r in rows[3]}
    unknown = sorted(applied - {m.version for m in migrations()})
    if unknown:
        yield Tx(())  # ends the transaction: nothing applied
        raise SchemaError(
            f"schema {schema!r} has migrations {unknown} that this version of pgagentstate does not know: "
            "it was set up by a newer version; upgrade the library"
        )
    pending = [m for m in migrations() if m.version not in applied]
    stmts: list[Stmt] = []
    for m in pending:
        stmts.append(Stmt(f"migration {m.version}", {}, "none", script=m.script))
        stmts.append(Stmt("migrate_record", {"version": m.version, "name": m.name}, "none"))
    yield Tx(tuple(stmts), patient=True)
    return [m.version for m in pending]


def status(schema: str) -> Op[tuple[list[int], list[int]]]:
    """(applied, pending) migration versions, without changing anything."""
    (exists,) = yield Tx((Stmt("migrate_table_exists", {"schema_name": schema}, "one"),))
    applied: list[int] = []
    if exists and exists[0]:
        (rows,) = yield Tx((Stmt("migrate_applied", {}, "all"),))
        applied = [r[0] for r in rows]
    return applied, [m.version for m in migrations() if m.version not in applied]
