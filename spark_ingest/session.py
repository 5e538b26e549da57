"""The SparkSession this job runs in: local[*] by default, unchanged on a cluster.

The master comes, in this order, from `--master`, the environment (`WSN_INGEST_MASTER`, then
`MASTER`), or whatever launched us (`spark-submit --master`, spark-defaults.conf); with none of
these PySpark starts `local[*]`. No Maven packages are needed: only built-in sources and sinks.
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# Settings this job relies on, whatever the cluster's defaults are.
REQUIRED_CONF = {
    # windows, `date` partitions and timestamps without a zone are in UTC
    "spark.sql.session.timeZone": "UTC",
}


def master_from_env() -> str | None:
    return os.environ.get("WSN_INGEST_MASTER") or os.environ.get("MASTER") or None


def get_session(
    app: str = "wsn-ingest",
    master: str | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    builder = SparkSession.builder.appName(app)
    master = master or master_from_env()
    if master:
        builder = builder.master(master)
    for k, v in {**REQUIRED_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("WSN_INGEST_LOG_LEVEL", "WARN"))
    return spark
