"""Keeping a computed frame for the several queries of one run, with its partitioning.

Two ways, chosen by `spark.wsn.ingest.keep` (docs/spark_ingest.md, "Performance"):

- `checkpoint`: a local checkpoint. The fastest (measured: 3-5 s against 7-12 s to fill
  Spark's columnar cache with the `fields` maps of 2M messages), but its blocks cannot be
  recomputed: a lost executor fails the job.
- `persist`: memory and disk. About 10 % slower on the whole batch job (measured, 2M
  Parquet messages, local[2]), but a lost executor's blocks are recomputed from the landing
  files, as Spark recomputes any lost partition.

The default is `checkpoint` on a local master, where the driver is the only executor and
there is nothing to lose, and `persist` on a cluster.
"""

from __future__ import annotations

import contextlib

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from spark_ingest.jvm import set_log_level

KEEP_CONF = "spark.wsn.ingest.keep"
KEEP_MODES = ("checkpoint", "persist")


def keep_mode(spark: SparkSession) -> str:
    """`spark.wsn.ingest.keep` if set (`--conf spark.wsn.ingest.keep=persist`), else
    `checkpoint` on a local master and `persist` elsewhere. Raises ValueError for any other
    value, naming the two."""
    mode = spark.conf.get(KEEP_CONF, None)
    if mode is None:
        local = (spark.sparkContext.master or "").startswith("local")
        return "checkpoint" if local else "persist"
    if mode not in KEEP_MODES:
        raise ValueError(f"{KEEP_CONF}={mode!r}: use one of {', '.join(KEEP_MODES)}")
    return mode


def materialize(spark: SparkSession, df: DataFrame, keep_partitioning: bool = True) -> DataFrame:
    """`df` computed now and kept (memory, spilling to disk), for the several queries that
    read it; free it with `release`.

    With `keep_partitioning` a checkpoint is taken with adaptive execution off, so the plan
    keeps its declared hash partitioning (AQE plans hide it) and later queries do not
    shuffle again. A persisted frame keeps it anyway (Spark does not let AQE change a cached
    plan's partitioning)."""
    if keep_mode(spark) == "persist":
        kept = df.persist(StorageLevel.MEMORY_AND_DISK)
        kept.count()  # filled now, so that every later query only reads it
        return kept
    if not keep_partitioning:
        return df.localCheckpoint(eager=True)
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        return df.localCheckpoint(eager=True)
    finally:
        spark.conf.set(key, before or "true")


def release(df: DataFrame) -> None:
    """Drop the blocks of a `materialize`d frame now rather than at the JVM's next garbage
    collection (for a checkpoint best effort: its RDD is reached through Spark internals)."""
    if df.is_cached:
        df.unpersist()
        return
    with contextlib.suppress(Exception):  # only memory is at stake, never correctness
        spark = df.sparkSession
        # Spark warns on every such unpersist that the lineage "cannot be recomputed": true,
        # intended, and not something a user of wsn-ingest can act on
        set_log_level(spark, "org.apache.spark.rdd.MapPartitionsRDD", "ERROR")
        df._jdf.queryExecution().analyzed().rdd().unpersist(False)
