"""The job on a real Spark standalone cluster (issue 15): a master and one worker started
from pyspark's own distribution (`bin/spark-class ...deploy.master.Master` and
`...deploy.worker.Worker`, on 127.0.0.1, small memory), then `spark-submit --master
spark://127.0.0.1:PORT spark_ingest/job.py batch ...` and `wsn-ingest batch --master
spark://...`: both outputs must equal the local run's. Both processes are stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_data import T0, batch_zone, new_database, write_zone

from spark_ingest.batch import run_batch
from spark_ingest.plot import current_files
from spark_ingest.schema import TABLES
from spark_ingest.synth import landing_name, readings, write_parquet_messages

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _small(jvm_options: str) -> list[str]:
    """Small memory and the tests' JVM options (conftest.SPARK_TEST_CONF: C1 only and the
    serial collector, the fewest CPU seconds on the shared cores) for every JVM of the
    cluster: daemons, drivers, executors, all short-lived and running few small queries."""
    return [
        arg
        for k, v in {
            "spark.executor.memory": "512m",
            "spark.driver.memory": "512m",
            "spark.driver.extraJavaOptions": jvm_options,
            "spark.executor.extraJavaOptions": jvm_options,
        }.items()
        for arg in ("--conf", f"{k}={v}")
    ]


@pytest.fixture(scope="module")
def jvm_options(spark_test_conf: dict[str, str]) -> str:
    return spark_test_conf["spark.driver.extraJavaOptions"]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(jvm_options: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        # the daemons' own heap: small, the machine is shared
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=jvm_options,
    )
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID (spark-class execs java, so this is the JVM), then SIGKILL."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, jvm_options: str
) -> Iterator[tuple[str, Path, str]]:
    logs = tmp_path_factory.mktemp("cluster-logs")
    cls = str(_spark_home() / "bin" / "spark-class")
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(logs / "master.log", "wb") as out:
            procs.append(subprocess.Popen(
                [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", "0"],
                env=_env(jvm_options), stdout=out, stderr=subprocess.STDOUT, cwd=logs,
            ))  # fmt: skip
        with open(logs / "worker.log", "wb") as out:
            procs.append(subprocess.Popen(
                [cls, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", "0", "--cores", "2", "--memory", "1g",
                 "--work-dir", str(logs / "work"), master_url],
                env=_env(jvm_options), stdout=out, stderr=subprocess.STDOUT, cwd=logs,
            ))  # fmt: skip
        deadline = time.monotonic() + 90
        while "Registering worker" not in (logs / "master.log").read_text(errors="replace"):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise AssertionError(
                    "standalone cluster did not come up:\n"
                    + (logs / "master.log").read_text(errors="replace")[-3000:]
                    + (logs / "worker.log").read_text(errors="replace")[-3000:]
                )
            time.sleep(0.5)
        yield master_url, logs / "master.log", jvm_options
    finally:
        for p in reversed(procs):
            _stop(p)
    assert all(p.poll() is not None for p in procs)


@pytest.fixture(scope="module")
def local_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A zone with every kind of line (bad ones, late ones, a silent device; JSON lines
    and Parquet; lines with and without device ids), run on the local session."""
    root = tmp_path_factory.mktemp("cluster")
    files, _, _ = batch_zone()
    write_zone(root / "landing", files)
    write_parquet_messages(root / "landing", landing_name(T0, 50, ".parquet"),
                           readings(60, devices=("sim-01", "sim-02", "sim-03")))  # fmt: skip
    run_batch(spark, str(root / "landing"), str(root / "local"), database=new_database())
    return {"root": root}


def _outputs(spark: Any, out: Path) -> dict[str, list[str]]:
    """The current rows of the tables under `out` (each run has its own metastore, so the
    files are read, version by version as the catalog would)."""
    got = {}
    for t in ("aggregates", "device_quality", "quarantine", "site_quality", "camera_states"):
        files = [str(f) for f in current_files(out / t)]
        cols = TABLES[t].data_columns
        # source_file and site name the files the same way in every run (a file:// URI)
        got[t] = (
            sorted(map(repr, spark.read.parquet(*files).select(*cols).collect())) if files else []
        )
    return got


def _run(
    args: list[str], cwd: Path, master_log: Path, jvm_options: str
) -> subprocess.CompletedProcess[str]:
    """Run a driver; check it ran its job on the cluster: the master registered one more
    application, named as the job names itself."""
    apps = master_log.read_text(errors="replace").count("Registered app wsn-ingest")
    env = _env(jvm_options)
    r = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert master_log.read_text(errors="replace").count("Registered app wsn-ingest") == apps + 1
    return r


def test_spark_submit_on_a_standalone_cluster_equals_the_local_run(
    spark: Any, cluster: tuple[str, Path, str], local_run: dict[str, Any]
) -> None:
    root = local_run["root"]
    url, master_log, jvm_options = cluster
    _run(
        [str(_spark_home() / "bin" / "spark-submit"), "--master", url, *_small(jvm_options),
         str(ROOT / "spark_ingest" / "job.py"), "batch",
         "--landing", str(root / "landing"), "--out", str(root / "submit")],
        ROOT, master_log, jvm_options,
    )  # fmt: skip
    assert _outputs(spark, root / "submit") == _outputs(spark, root / "local")


def test_wsn_ingest_master_on_a_standalone_cluster_equals_the_local_run(
    spark: Any, cluster: tuple[str, Path, str], local_run: dict[str, Any]
) -> None:
    root = local_run["root"]
    url, master_log, jvm_options = cluster
    r = _run(
        [sys.executable, "-m", "spark_ingest", "batch", "--master", url, *_small(jvm_options),
         "--conf", "spark.wsn.ingest.classArchive=off",
         "--landing", f"file://{root}/landing", "--out", str(root / "cli")],
        ROOT, master_log, jvm_options,
    )  # fmt: skip
    assert f"on {url}" in r.stderr, r.stderr[-3000:]  # its progress line names the master
    assert "sim-01" in r.stdout, r.stdout
    assert _outputs(spark, root / "cli") == _outputs(spark, root / "local")
