"""The room's rules on their own: `decide` on a RoomState, pure, no service and no I/O (one shared `step`, steps.py)."""
