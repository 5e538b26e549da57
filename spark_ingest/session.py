"""The SparkSession this job runs in: local[*] by default, unchanged on a cluster, with the
Hive metastore Spark ships as its catalog.

The master comes, in this order, from `--master`, the environment (`WSN_INGEST_MASTER`, then
`MASTER`), or whatever launched us (`spark-submit --master`, spark-defaults.conf); with none of
these PySpark starts `local[*]`. No Maven packages are needed: only built-in sources and sinks,
and the Hive and Derby jars of the pyspark distribution.

The catalog: a metastore the session is configured with (`spark.hadoop.hive.metastore.uris`,
`spark.hadoop.javax.jdo.option.ConnectionURL`, a hive-site.xml) is used as it is; without one,
an embedded Derby metastore in `metastore_dir` (the CLI's `--metastore`, by default
`<out>/_catalog`). Embedded Derby admits one process at a time: readers in other processes
while a stream runs need a metastore service (docs/spark_ingest.md, "Tables").
"""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import SparkSession

from spark_ingest.jvm import set_log_level

# Settings this job relies on, whatever the cluster's defaults are.
REQUIRED_CONF = {
    # windows, `date` partitions and timestamps without a zone are in UTC
    "spark.sql.session.timeZone": "UTC",
    # timestamps as Parquet readers expect them (pyarrow, DuckDB: UTC microseconds), not
    # the deprecated INT96
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

# Defaults a user may override with `--conf`: the job prints its own progress to stderr, so
# Spark's console progress bars (`[Stage 0:> (0 + 1) / 1]`) would only interleave with it.
DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    # PySpark records the Python call site of every Column operation for its error
    # messages (`_with_origin`): four more py4j round trips per operation. Off, a run of one
    # small file spent ~1-2 s less building its plans (docs/performance.md, "A small run on
    # a quiet machine"); an error then names the query, not the Python line that built it.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

# Loggers whose warnings, at the default level, say nothing a user of wsn-ingest can act on
# and would bury the ones that do (a full run of 1M rows printed 114 lines of them): set to
# ERROR when the level is WARN. Their warnings:
NOISE = (
    # "Updating partition stats fast for: aggregates" / "Updated size to 310437": Hive's
    # metastore recording a partition's file count and size, at every ADD or ALTER PARTITION
    "hive.log",
    # "METASTORE_FILTER_HOOK will be ignored, since hive.security.authorization.manager is
    # set ...", at the session's first metastore call (Spark's bundled Hive defaults)
    "org.apache.hadoop.hive.ql.session.SessionState",
    # "HiveConf of name hive.internal.ss.authz.settings.applied.marker does not exist"
    "org.apache.hadoop.hive.conf.HiveConf",
    # "Truncated the string representation of a plan since it was too large": a run's plans
    # are wide (the tables' columns)
    "org.apache.spark.util.SparkStringUtils",
)

# settings that mean "a metastore is configured": then `metastore_dir` is not used
METASTORE_KEYS = (
    "spark.hadoop.hive.metastore.uris",
    "spark.hadoop.javax.jdo.option.ConnectionURL",
    "spark.sql.catalogImplementation",
)


def master_from_env() -> str | None:
    return os.environ.get("WSN_INGEST_MASTER") or os.environ.get("MASTER") or None


def session_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings get_session applies: the user's `conf` over REQUIRED_CONF over
    DEFAULT_CONF (later wins)."""
    return {**DEFAULT_CONF, **REQUIRED_CONF, **(conf or {})}


def metastore_conf(metastore_dir: str) -> dict[str, str]:
    """An embedded Derby metastore and its warehouse under `metastore_dir` (a local path)."""
    d = os.path.abspath(metastore_dir)
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={d}/metastore_db;create=true"
        ),
        "spark.sql.warehouse.dir": f"{d}/warehouse",
    }


def hive_available() -> bool:
    """Whether this pyspark has the Hive classes (the pip package does)."""
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    return not os.path.isdir(jars) or any(n.startswith("spark-hive_") for n in os.listdir(jars))


def get_session(
    app: str = "wsn-ingest",
    master: str | None = None,
    conf: dict[str, str] | None = None,
    metastore_dir: str | None = None,
) -> SparkSession:
    """The session with REQUIRED_CONF and DEFAULT_CONF applied; any key in `conf` (the CLI's
    `--conf KEY=VALUE`) wins over both. With `metastore_dir` and no metastore in `conf`,
    the catalog is an embedded Derby metastore there."""
    builder = SparkSession.builder.appName(app)
    master = master or master_from_env()
    if master:
        builder = builder.master(master)
    settings = session_conf(conf)
    if metastore_dir and hive_available() and not any(k in settings for k in METASTORE_KEYS):
        settings = {**metastore_conf(metastore_dir), **settings}
        os.makedirs(metastore_dir, exist_ok=True)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    level = os.environ.get("WSN_INGEST_LOG_LEVEL", "WARN")
    spark.sparkContext.setLogLevel(level)
    if level.upper() == "WARN":
        for name in NOISE:
            set_log_level(spark, name, "ERROR")
    if metastore_dir:
        _derby_log(spark, metastore_dir)
    return spark


def _derby_log(spark: SparkSession, metastore_dir: str) -> None:
    """Derby writes `derby.log` into the working directory unless told otherwise."""
    jvm: Any = spark.sparkContext._jvm
    jvm.java.lang.System.setProperty(
        "derby.stream.error.file", os.path.join(os.path.abspath(metastore_dir), "derby.log")
    )
