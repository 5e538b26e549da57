"""The session's JVM logging (spark_ingest/session.py, log_conf): a JVM the job starts says
nothing at start-up a user cannot act on, and a user's own log4j configuration wins. Real
JVMs, started the way the CLI starts them (get_session in a fresh process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ingest_data import START_UP_LINES

from spark_ingest import classes, session

ROOT = Path(__file__).resolve().parents[2]

SESSION = """
from spark_ingest.session import get_session
spark = get_session(master="local[1]", conf={"spark.ui.enabled": "false"})
print(spark.range(5).count())
spark.stop()
"""


def _start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **env}
    return subprocess.run(
        [sys.executable, "-c", SESSION], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty Spark configuration directory and no log4j environment: what log_conf sees
    on a machine where the user configured nothing."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.delenv(session.LOG4J_ENV, raising=False)
    return conf_dir


def _options(conf: dict[str, str]) -> str:
    return session.log_conf(conf).get(classes.JAVA_OPTIONS, "")


def test_the_jvm_says_nothing_at_start_up_a_user_cannot_act_on(no_user_config: Path) -> None:
    r = _start({"SPARK_CONF_DIR": str(no_user_config)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "5"
    for line in START_UP_LINES:
        assert line not in r.stderr, r.stderr


def test_a_users_own_log4j_configuration_wins(no_user_config: Path) -> None:
    # the user's file, where spark-submit and log4j look: its pattern marks each line
    (no_user_config / "log4j2.properties").write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stdout.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = USER-LOG %p %c{1}: %m%n\n"
    )
    assert _options({}) == ""  # nothing added
    r = _start({"SPARK_CONF_DIR": str(no_user_config)})
    assert r.returncode == 0, r.stderr[-3000:]
    # Hadoop's warning, which the job's file silences, in the user's pattern
    assert "USER-LOG WARN NativeCodeLoader: Unable to load native-hadoop" in r.stderr, r.stderr


def test_the_jobs_file_is_named_only_where_the_user_named_none(
    no_user_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = f"-Dlog4j2.configurationFile={session.LOG4J2_FILE}"
    assert Path(session.LOG4J2_FILE).is_file()
    assert _options({}) == ours
    # the user's options stay, after ours
    assert _options({classes.JAVA_OPTIONS: "-XX:+UseSerialGC"}) == f"{ours} -XX:+UseSerialGC"
    # a flag about log4j that names no configuration is not one
    flag = "-Dlog4j2.formatMsgNoLookups=true"
    assert _options({classes.JAVA_OPTIONS: flag}) == f"{ours} {flag}"
    # spark-defaults.conf's options are kept: a --conf of the key would replace them
    (no_user_config / "spark-defaults.conf").write_text(
        "spark.driver.extraJavaOptions -Dfrom.defaults=1\n"
    )
    assert _options({}) == f"{ours} -Dfrom.defaults=1"
    # a template beside them is not a configuration
    (no_user_config / "log4j2.properties.template").write_text("rootLogger.level = info\n")
    assert _options({}) == f"{ours} -Dfrom.defaults=1"
    # a configuration the user names in any of log4j's ways: nothing added
    for named in ("-Dlog4j2.configurationFile=/etc/x.xml", "-Dlog4j.configuration=file:/x"):
        conf = {classes.JAVA_OPTIONS: f"-Xss4m {named}"}
        assert session.log_conf(conf) == conf
    monkeypatch.setenv(session.LOG4J_ENV, "/etc/wsn/log4j2.xml")
    assert _options({}) == ""
    monkeypatch.delenv(session.LOG4J_ENV)
    (no_user_config / "log4j2.xml").write_text("<Configuration/>")
    assert _options({}) == ""
