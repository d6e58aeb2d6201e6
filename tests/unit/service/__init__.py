"""The delivery service and its handlers over the in-memory fakes (tests/fakes.py): the fault harness, the status queue, senders, preparation, sent proofs."""
