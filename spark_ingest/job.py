"""spark-submit entry point (a plain script path, as spark-submit wants):

    spark-submit [--master URL] spark_ingest/job.py batch --landing DIR --out DIR
    spark-submit [--master URL] spark_ingest/job.py stream --landing DIR --out DIR \
        --checkpoint DIR

The job uses only built-in Spark expressions (no Python UDFs), so executors need nothing of
this package; the driver imports it from the checkout next to this file (client mode) or
from `--py-files spark_ingest.zip` (cluster mode, see docs/spark_ingest.md).
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a script by spark-submit: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
