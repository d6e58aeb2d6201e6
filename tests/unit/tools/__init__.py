"""tools/ without a stack: the benchmarks' arithmetic, the simulation, the fake platform, the cloud load test's plan, `make demo`'s arguments."""
