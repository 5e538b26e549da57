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
import re
from typing import Any

from pyspark.sql import SparkSession

from spark_ingest import classes
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
    # "Skipped the rest of the content in the corrupted file", with a Java trace: a landing
    # Parquet file Spark cannot decode, which the run reports itself, in one line, as a
    # damaged file (consume.short)
    "org.apache.spark.sql.execution.datasources.FileScanRDD",
)

# The JVM's log configuration when this process starts the JVM (the file says why): Spark's
# default profile without its four start-up lines. A configuration of the user's own is
# left as it is: one named in the driver's options or the environment, or a log4j2 file in
# the Spark configuration directory (on the driver's class path, where log4j finds it).
LOG4J2_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
# how a user names a configuration: log4j 2's property (and its 1.x-style spelling, which
# log4j 2 reads too), or its environment variable
LOG4J_OPTIONS = (
    "-dlog4j2.configurationfile=",
    "-dlog4j.configurationfile=",
    "-dlog4j.configuration=",
)
LOG4J_ENV = "LOG4J_CONFIGURATION_FILE"
# the files log4j 2 finds on the class path by itself (not a `.template` beside them)
LOG4J_FILE_RE = re.compile(r"log4j2(-test)?\.(properties|xml|json|jsn|yaml|yml)")

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


def log_conf(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with the driver's JVM told to use LOG4J2_FILE, when a session made now starts
    that JVM and the user configures log4j nowhere (see LOG4J2_FILE); else `conf` as it is."""
    own = classes.driver_java_options(conf)
    conf_dir = classes.spark_conf_dir()
    users = (
        any(o in own.lower() for o in LOG4J_OPTIONS)
        or os.environ.get(LOG4J_ENV)
        or (
            os.path.isdir(conf_dir)
            and any(LOG4J_FILE_RE.fullmatch(n) for n in os.listdir(conf_dir))
        )
    )
    # a path with blanks would be split into two options; a zipped package has no file
    if users or not classes.starts_jvm() or any(c.isspace() for c in LOG4J2_FILE):
        return conf
    if not os.path.isfile(LOG4J2_FILE):
        return conf
    return {**conf, classes.JAVA_OPTIONS: f"-Dlog4j2.configurationFile={LOG4J2_FILE} {own}".strip()}


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
    the catalog is an embedded Derby metastore there. A JVM it starts logs as LOG4J2_FILE
    says unless the user configures log4j (log_conf)."""
    builder = SparkSession.builder.appName(app)
    master = master or master_from_env()
    if master:
        builder = builder.master(master)
    settings = log_conf(session_conf(conf))
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
