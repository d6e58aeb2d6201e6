"""Delivery analytics on Spark: the ordering audit, ack and timeout figures,
and timeout advice, computed from baton's delivery event log.

extract (read lines) -> transforms (pure DataFrame -> DataFrame) -> load
(Parquet, HTML). Entry point: `python -m pipeline.job`.
"""
