"""The benchmarks and the cost model: capacity, latency, reads and writes per message, the pipeline against DuckDB, baton against the alternatives, what a million messages cost."""
