"""The repository's own rules: the docs agree with the code, every path named exists, module sizes, the test environment."""
