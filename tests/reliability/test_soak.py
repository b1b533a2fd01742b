"""The soak's short version (the long one is benchmarks/reliability/soak.py): 10 customers at a time for 36 s of
webhook load, a random fault every 2.5 s on average drawn from kill -9 of a worker, pg_terminate_backend, a Postgres
crash, payment API errors and a network partition (the workers' path to Postgres blackholed or reset for 1-4 s), then
history.check over everything that happened: no anomaly.
"""

from __future__ import annotations

import json
from pathlib import Path

from pg_cluster import PgCluster
from soak_world import SoakConfig, run_soak, summary


async def test_short_soak_with_random_faults_has_no_anomaly(cluster: PgCluster, tmp_path: Path) -> None:
    config = SoakConfig(
        conversations=10,
        minutes=0.6,
        fault_every=2.5,
        think=0.3,
        round_deadline=120.0,
        seed=3,
        partition_seconds=(1.0, 4.0),
    )
    soak = await run_soak(cluster, config, tmp_path)
    figures = summary(soak)
    print("\nsoak:", json.dumps(figures, indent=1))
    assert figures["rounds"] >= 1 and figures["turns"] >= 5 * config.conversations
    assert figures["faults_injected"] >= 5
    assert figures["faults"].get("partition", 0) >= 1
    assert figures["operations"]["state_reads"] > 0  # the sampler read versions during the run
    assert figures["anomalies"] == 0, figures["examples_of_anomalies"]
