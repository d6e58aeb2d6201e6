# The operators' console (docs/console.md): the browser its tests drive, the
# screenshots docs/console.md shows, and its benchmark. Included by the main
# Makefile; names start with console/CONSOLE_ or are targets of their own.

CONSOLE_CHROMIUM := /usr/bin/chromium

.PHONY: console-browser console-screenshots bench-console

# Debian's chromium for tests/e2e/test_console.py (Playwright drives this
# system browser; it never downloads one). Without root and apt-get, or if
# the install fails, it says so and the browser tests skip with that reason.
console-browser:
	@test -x $(CONSOLE_CHROMIUM) || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian's chromium for the console's browser tests"; \
			apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && \
				apt-get install -y -q chromium >/dev/null 2>&1; } || \
				echo "console-browser: could not install chromium; tests/e2e/test_console.py will skip" >&2; \
		else \
			echo "console-browser: $(CONSOLE_CHROMIUM) is missing and apt-get needs root; tests/e2e/test_console.py will skip" >&2; \
		fi; }

# The browser tests again, their screenshots written to docs/console/.
console-screenshots: venv console-browser
	BATON_SCREENSHOTS=docs/console $(PY) -m pytest tests/e2e/test_console.py -q -p no:cacheprovider

# Every page's p95 on the local stack with 10,000 rooms (tools/bench/console.py;
# e.g. BENCH_CONSOLE_ARGS="--rooms 2000 --requests 20").
BENCH_CONSOLE_ARGS ?=
bench-console: venv
	$(PY) -m tools.bench.console $(BENCH_CONSOLE_ARGS)
