"""`python -m tools.fake_platform`: run the fake platform (see the package's docstring)."""

from tools.fake_platform.server import main

main()
