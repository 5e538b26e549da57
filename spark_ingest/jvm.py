"""The session's JVM classes, named without asking the JVM.

py4j resolves `jvm.org.apache.hadoop.fs.Path` one name at a time, a round trip each, and a
name that is not a class (`org`, `org.apache`, `PythonUtils` before PySpark's imports are
tried) is looked up as a class first, scanning every jar on the class path: 0.3-0.9 ms
each. PySpark itself looks `functions` and `PythonUtils` up again on every Column and
reader call (`F.col` names the class each time): about 2,300 class lookups in a small
incremental run (docs/performance.md, "What an incremental run's fixed cost is made of").

What a caller may rely on: a class named here is the same py4j `JavaClass` a lookup would
give (its methods and constructors are called the same way); nothing changes in what is
computed.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession

# The names PySpark looks up on its JVM view on every call, and the classes they resolve to
# (pyspark/java_gateway.py imports them; pyspark/sql/classic/column.py, readwriter.py and
# functions/builtin.py name them).
PYSPARK_NAMES = {
    "functions": "org.apache.spark.sql.functions",
    "org.apache.spark.sql.functions": "org.apache.spark.sql.functions",
    "PythonUtils": "org.apache.spark.api.python.PythonUtils",
}


def java_class(spark: SparkSession, fqn: str) -> Any:
    """The class `fqn` of the session's JVM (no round trip until it is used)."""
    gateway: Any = spark.sparkContext._gateway
    return JavaClass(fqn, gateway._gateway_client)


def set_log_level(spark: SparkSession, logger: str, level: str) -> None:
    """Set the JVM's log4j level of `logger` (and the loggers under it) to `level`
    (`ERROR`, `OFF`, ...)."""
    configurator = java_class(spark, "org.apache.logging.log4j.core.config.Configurator")
    configurator.setLevel(
        logger, java_class(spark, "org.apache.logging.log4j.Level").valueOf(level)
    )


def own_log_level(spark: SparkSession, logger: str) -> str | None:
    """The level set for `logger` itself, or None when it takes its parent's."""
    manager = java_class(spark, "org.apache.logging.log4j.LogManager")
    config = manager.getContext(False).getConfiguration().getLoggerConfig(logger)
    if str(config.getName()) != logger or config.getExplicitLevel() is None:
        return None
    return str(config.getExplicitLevel().name())


def restore_log_level(spark: SparkSession, logger: str, level: str | None) -> None:
    """Give `logger` back the level `own_log_level` read (None: its parent's again)."""
    if level is not None:
        set_log_level(spark, logger, level)
        return
    context = java_class(spark, "org.apache.logging.log4j.LogManager").getContext(False)
    config = context.getConfiguration().getLoggerConfig(logger)
    if str(config.getName()) == logger:
        config.setLevel(None)  # a logger config without a level takes its parent's
        context.updateLoggers()


def logs_at_warn_or_less(spark: SparkSession, logger: str) -> bool:
    """Whether `logger` logs no INFO line (its level, own or inherited, is WARN or above):
    what a user who asked for INFO or DEBUG sees is left alone."""
    manager = java_class(spark, "org.apache.logging.log4j.LogManager")
    level = manager.getLogger(logger).getLevel()
    info = java_class(spark, "org.apache.logging.log4j.Level").INFO
    return not bool(level.isLessSpecificThan(info))


def pin_pyspark_names(spark: SparkSession) -> None:
    """Make PySpark's per-call lookups (PYSPARK_NAMES) on the session's JVM view local.

    The view answers an unknown attribute with a lookup (`JVMView.__getattr__`); one stored
    on the view itself is found first. Only the names of PYSPARK_NAMES, and only those that
    resolve to the same class in this JVM: anything else is looked up as before."""
    view: Any = spark.sparkContext._jvm
    # a view without an instance dict (another py4j) stays as it is: only speed is at stake
    if not hasattr(view, "__dict__") or all(name in vars(view) for name in PYSPARK_NAMES):
        return
    for name, fqn in PYSPARK_NAMES.items():
        found = getattr(view, name)  # one lookup, as PySpark's next call would make
        if isinstance(found, JavaClass) and found._fqn == fqn:
            vars(view)[name] = found
