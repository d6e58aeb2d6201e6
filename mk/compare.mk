# `make bench-compare` (tools/bench/compare, docs/compare.md): baton against
# (a) fire and forget, (b) a fixed delay between sends, (c) asyncio actors in
# one process, on one workload and one fake platform configuration. Every
# name here starts with COMPARE_. Defaults finish in about 12 minutes on 2
# cores; the page's figures were made with COMPARE_ROOMS=1000 COMPARE_WINDOW_S=600.
COMPARE_ROOMS ?= 300
COMPARE_BURST ?= 10
# the main point's bursts start over this many s (rooms x burst / window = offered msgs/s)
COMPARE_WINDOW_S ?= 180
COMPARE_MAIN_LATENCY_MS ?= 100
COMPARE_LATENCIES_MS ?= 50,100,300,1000
COMPARE_SWEEP_ROOMS ?= 60
COMPARE_SWEEP_WINDOW_S ?= 40
COMPARE_DELAY_MS ?= 300
COMPARE_ACK_TIMEOUT_MS ?= 3000
COMPARE_SYSTEMS ?= fire,delay,actor,baton
COMPARE_OUT ?= out/compare
COMPARE_PLOT ?= docs/img/compare-per-room.png
# e.g. COMPARE_ARGS=--sequential
COMPARE_ARGS ?=

.PHONY: bench-compare

bench-compare: venv
	$(PY) -m tools.bench.compare.run --rooms $(COMPARE_ROOMS) --burst $(COMPARE_BURST) \
		--window-s $(COMPARE_WINDOW_S) --main-latency $(COMPARE_MAIN_LATENCY_MS) --latencies $(COMPARE_LATENCIES_MS) \
		--sweep-rooms $(COMPARE_SWEEP_ROOMS) --sweep-window-s $(COMPARE_SWEEP_WINDOW_S) --delay-ms $(COMPARE_DELAY_MS) \
		--ack-timeout-ms $(COMPARE_ACK_TIMEOUT_MS) --systems $(COMPARE_SYSTEMS) --out $(COMPARE_OUT) \
		--plot "$(COMPARE_PLOT)" $(COMPARE_ARGS)
