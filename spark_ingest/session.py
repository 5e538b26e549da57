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

# Defaults a user may override with `--conf`: the job prints its own progress to stderr, so
# Spark's console progress bars (`[Stage 0:> (0 + 1) / 1]`) would only interleave with it.
DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
}


def master_from_env() -> str | None:
    return os.environ.get("WSN_INGEST_MASTER") or os.environ.get("MASTER") or None


def session_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings get_session applies: the user's `conf` over REQUIRED_CONF over
    DEFAULT_CONF (later wins)."""
    return {**DEFAULT_CONF, **REQUIRED_CONF, **(conf or {})}


def get_session(
    app: str = "wsn-ingest",
    master: str | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """The session with REQUIRED_CONF and DEFAULT_CONF applied; any key in `conf` (the CLI's
    `--conf KEY=VALUE`) wins over both, e.g. `spark.ui.showConsoleProgress=true`."""
    builder = SparkSession.builder.appName(app)
    master = master or master_from_env()
    if master:
        builder = builder.master(master)
    for k, v in session_conf(conf).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("WSN_INGEST_LOG_LEVEL", "WARN"))
    return spark
