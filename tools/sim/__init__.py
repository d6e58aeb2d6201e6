"""Stand-ins for what baton talks to, and models that run the real rules without it: the fake platform, the in-memory fakes, the deterministic simulation, the scale model."""
