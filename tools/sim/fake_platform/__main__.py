"""`python -m tools.sim.fake_platform`: run the fake platform (see the package's docstring)."""

from tools.sim.fake_platform.server import main

main()
