"""`make bench-compare`: baton against the alternatives its users weigh, on
one workload and one fake platform (docs/compare.md).

- (a) `fire`: every message sent the moment it is published;
- (b) `delay`: per room, a fixed delay (300 ms) between a send's return and
  the next send, acks ignored;
- (c) `actor`: one asyncio process, every room an actor in memory that sends
  and waits for the delivery webhook or the ack timeout;
- (d) `baton`: the local stack on the emulators (tools/local/stack.py).

Modules: `workload` (the plan every system replays), `metrics` (every figure,
computed from the fake platform's own records, pure), `httpio` (a small
asyncio HTTP/1.1 client and server for (a)-(c)), `alternatives` (the
process of one of (a)-(c)), `run` (the driver: processes, points, table,
JSON, plot), `plot` (the PNG).
"""
