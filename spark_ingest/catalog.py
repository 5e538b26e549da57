"""The tables in Spark's catalog: created once, then kept pointing at the current version of
every partition (manifest.py).

Each table is EXTERNAL, `USING parquet`, with its LOCATION `<out>/<table>`; a partitioned
table's partitions are (`date`, `hour`) of its time, each one a version directory
`<out>/<table>/date=D/hour=H/vN`. A run replaces a partition by pointing it at a new
version: one metastore update, so a reader sees the old version or the new one, never a
missing or half-written partition. The metastore is Spark's built-in Hive metastore
(embedded Derby under `<out>/_catalog` unless the session was configured with another one,
session.py); without Hive support (a session with the in-memory catalog) the tables last as
long as the session, and the files and their versions are the same.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pyspark.sql import SparkSession

from spark_ingest.jvm import java_class
from spark_ingest.manifest import location
from spark_ingest.schema import TABLES, Table

# TBLPROPERTIES that say how a table's rows were made; a run refuses a table made otherwise
CONFIG_PROPS = ("wsn.window_us", "wsn.time", "wsn.format")


class CatalogError(RuntimeError):
    """A table exists but is not this --out's, or not of this version of the job."""


def _q(name: str) -> str:
    return f"`{name}`"


def _spec(key: str) -> str:
    """`date=2026-11-21/hour=5` -> `date='2026-11-21', hour=5`."""
    parts = dict(p.split("=", 1) for p in key.split("/"))
    return f"date='{parts['date']}', hour={int(parts['hour'])}"


class Catalog:
    #: (application id, database, out, config) already checked by this process
    _ensured: ClassVar[set[tuple[str, str, str, str]]] = set()

    def __init__(self, spark: SparkSession, out: str, database: str) -> None:
        self.spark = spark
        self.out = out.rstrip("/")
        self.db = database
        self._arity: dict[str, int] = {}
        #: tables this process created (with the configuration of its run)
        self.created: set[str] = set()

    def name(self, table: str) -> str:
        return f"{_q(self.db)}.{_q(table)}"

    @property
    def hive(self) -> bool:
        return self.spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "hive"

    def _location_of(self, table: str) -> str:
        jcat: Any = self.spark._jsparkSession.sessionState().catalog()
        return str(jcat.getTableMetadata(self._ident(table)).location().toString())

    def ensure(self, config: dict[str, Any], qualify: Any, check: bool = True) -> None:
        """Create the database and every table that does not exist; check that those that
        do are this --out's (their location) and of this configuration (CONFIG_PROPS). Once
        per process (a stream does not check again at every trigger)."""
        mark = (
            self.spark.sparkContext.applicationId,
            self.db,
            self.out,
            repr(sorted(config.items())),
        )
        if mark in Catalog._ensured:
            return
        self._ensure(config, qualify, check)
        if check:
            Catalog._ensured.add(mark)

    def _ensure(self, config: dict[str, Any], qualify: Any, check: bool) -> None:
        # CREATE DATABASE IF NOT EXISTS of a database that exists warned "Namespace wsn was
        # created concurrently. Ignoring." (Spark 4.3, the Hive catalog): at the first run of
        # every process, with nothing wrong. Asked first, it warns only when that is true.
        if not self.spark.catalog.databaseExists(self.db):
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {_q(self.db)}")
        existing = {t.name for t in self.spark.catalog.listTables(self.db)}
        for table in TABLES.values():
            where = qualify(f"{self.out}/{table.name}")
            if table.name in existing:
                have = qualify(self._location_of(table.name))
                if not table.partitioned:  # it points at its current version: <table>/vN
                    have = re.sub(r"/v\d+/?$", "", have)
                if have != where:
                    raise CatalogError(
                        f"table {self.db}.{table.name} belongs to another --out ({have}); "
                        "give this one its own --database"
                    )
                if check:
                    self._check(table, config)
                continue
            self._create(table, where, config)
            self.created.add(table.name)

    def _create(self, table: Table, where: str, config: dict[str, Any]) -> None:
        # the location first: Hive logs a stack trace for a table whose directory is missing
        path = java_class(self.spark, "org.apache.hadoop.fs.Path")(where)
        path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()).mkdirs(path)
        cols = ", ".join(f"{_q(f.name)} {f.dataType.simpleString()}" for f in table.schema.fields)
        part = " PARTITIONED BY (`date`, `hour`)" if table.partitioned else ""
        props = ", ".join(f"'{k}' = '{config[k]}'" for k in CONFIG_PROPS)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name(table.name)} ({cols}) USING parquet{part} "
            f"LOCATION '{where}' TBLPROPERTIES ({props})"
        )

    def _check(self, table: Table, config: dict[str, Any]) -> None:
        props = {
            r["key"]: r["value"]
            for r in self.spark.sql(f"SHOW TBLPROPERTIES {self.name(table.name)}").collect()
        }
        for k in CONFIG_PROPS:
            if str(props.get(k)) != str(config[k]):
                raise CatalogError(
                    f"table {self.db}.{table.name} was made with {k}={props.get(k)}, this run "
                    f"has {config[k]}: rebuild with --full (a new window or --time changes "
                    "every row)"
                )
        names = [f.name for f in self.spark.table(self.name(table.name)).schema.fields]
        if names != table.columns:
            raise CatalogError(
                f"table {self.db}.{table.name} has other columns than this version of "
                "wsn-ingest writes: rebuild with --full into a new --database"
            )

    def set_config(self, config: dict[str, Any]) -> None:
        """Record the configuration of a full rebuild in every table."""
        for table in TABLES.values():
            props = ", ".join(f"'{k}' = '{config[k]}'" for k in CONFIG_PROPS)
            self.spark.sql(f"ALTER TABLE {self.name(table.name)} SET TBLPROPERTIES ({props})")

    # -- partitions --------------------------------------------------------------------------
    def apply(
        self,
        changes: dict[str, dict[str, int | None]],
        existed: dict[str, set[str]] | None,
    ) -> None:
        """Point the catalog at the versions in `changes` (table -> partition key -> version,
        None to drop). `existed` says which partitions the catalog already has; None (after a
        crash) makes every step idempotent instead."""
        for tname, parts in sorted(changes.items()):
            table = TABLES[tname]
            if not parts:
                continue
            if not table.partitioned:
                version = parts.get("")
                if version is not None:
                    where = location(self.out, tname, "", version)
                    self.spark.sql(f"ALTER TABLE {self.name(tname)} SET LOCATION '{where}'")
                continue
            had = existed.get(tname, set()) if existed is not None else None
            drops = [k for k, v in parts.items() if v is None]
            keep = {k: v for k, v in parts.items() if v is not None}
            adds = keep if had is None else {k: v for k, v in keep.items() if k not in had}
            moves = keep if had is None else {k: v for k, v in keep.items() if k in had}
            for chunk in _chunks(sorted(adds.items()), 200):
                spec = " ".join(
                    f"PARTITION ({_spec(k)}) LOCATION '{location(self.out, tname, k, v)}'"
                    for k, v in chunk
                )
                self.spark.sql(f"ALTER TABLE {self.name(tname)} ADD IF NOT EXISTS {spec}")
            self._relocate(tname, moves)
            for chunk in _chunks(sorted(drops), 200):
                spec = ", ".join(f"PARTITION ({_spec(k)})" for k in chunk)
                self.spark.sql(f"ALTER TABLE {self.name(tname)} DROP IF EXISTS {spec}")
            if self.hive and moves:
                self.spark.catalog.refreshTable(f"{self.db}.{tname}")

    def _relocate(self, tname: str, moves: dict[str, int]) -> None:
        """Point existing partitions at new locations: one metastore call for all of them
        (through the session catalog; a SQL `SET LOCATION` per partition costs ~0.2 s each),
        falling back to SQL where that API is not what this Spark has."""
        if not moves:
            return
        try:
            self._relocate_batch(tname, moves)
        except Exception:  # another Spark's internals: the statement that always works
            for k, v in sorted(moves.items()):
                where = location(self.out, tname, k, v)
                self.spark.sql(
                    f"ALTER TABLE {self.name(tname)} PARTITION ({_spec(k)}) SET LOCATION '{where}'"
                )

    def _ident(self, table: str) -> Any:
        """The TableIdentifier of `table` in this database."""
        some = java_class(self.spark, "scala.Some")
        return java_class(self.spark, "org.apache.spark.sql.catalyst.TableIdentifier").apply(
            table, some(self.db)
        )

    def _relocate_batch(self, tname: str, moves: dict[str, int]) -> None:
        jcat: Any = self.spark._jsparkSession.sessionState().catalog()
        ident = self._ident(tname)
        utils = java_class(self.spark, "org.apache.spark.api.python.PythonUtils")
        hash_map = java_class(self.spark, "java.util.HashMap")
        new = []
        for k, v in sorted(moves.items()):
            spec = hash_map()
            for p in k.split("/"):
                name, value = p.split("=", 1)
                spec.put(name, value)
            part = jcat.getPartition(ident, utils.toScalaMap(spec))
            new.append(self._moved(part, location(self.out, tname, k, v)))
        seq = (
            java_class(self.spark, "scala.jdk.javaapi.CollectionConverters")
            .asScala(java_class(self.spark, "java.util.ArrayList")(new))
            .toSeq()
        )
        jcat.alterPartitions(ident, seq)

    def _moved(self, part: Any, where: str) -> Any:
        """A copy of a CatalogTablePartition with its location changed (Scala case classes:
        `copy` with every argument; their number differs between Spark versions)."""
        s = part.storage()
        ns = self._arity.get("storage") or self._count_args(s)
        np_ = self._arity.get("part") or self._count_args(part)
        self._arity.update(storage=ns, part=np_)
        uri = java_class(self.spark, "scala.Some")(java_class(self.spark, "java.net.URI")(where))
        storage = s.copy(uri, *[getattr(s, f"copy$default${i}")() for i in range(2, ns + 1)])
        return part.copy(
            part.spec(), storage, *[getattr(part, f"copy$default${i}")() for i in range(3, np_ + 1)]
        )

    @staticmethod
    def _count_args(obj: Any) -> int:
        return int(
            next(
                m for m in obj.getClass().getMethods() if m.getName() == "copy"
            ).getParameterCount()
        )


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]
