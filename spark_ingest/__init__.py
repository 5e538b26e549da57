"""wsn-edge Spark ingest: aggregates the gateway's landing zone."""
