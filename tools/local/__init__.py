"""The local stack and what runs on it: emulators, functions and fake platform (stack), `make demo`, the operator day, `make chaos`, and judging a run."""
