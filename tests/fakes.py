"""The in-memory fakes of baton's adapters, re-exported from `tools.sim.fakes`
(they moved there so that a product tool, the simulation, can import them
without importing the tests)."""

from tools.sim.fakes import (  # noqa: F401
    T0_US,
    ArmedTask,
    Crash,
    FakePlatform,
    FakeRoomStore,
    FakeStatusQueue,
    FakeTimers,
    LoggedEvent,
    Meanwhile,
    RecordingEventLog,
    SendCall,
    SimClock,
)
