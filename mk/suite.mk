# SPDX-License-Identifier: MIT
#
# mk/suite.mk - make bench-suite (bench/suite-bench.py): every policy of
# stalloc-replay judged on one workload suite (shared cpu-torch traces,
# stalloc-synth sweeps, the real GPU recordings through stalloc-import when
# it is built: $(IMPORT_BIN), from mk/import.mk).  SUITE=full for the larger sweep, SUITE_JOBS for the
# parallel jobs (2), SUITE_ONLY=REGEX for the workloads whose name matches.  Writes $(O)/bench-suite.json.  Documentation/suite.rst.
SUITE ?= default
SUITE_JOBS ?= 2

BENCH_EXTRA += bench-suite
.PHONY: bench-suite
bench-suite: $(O)/stalloc-synth $(O)/stalloc-plan $(REPLAY_BIN) $(IMPORT_BIN)
	$(Q)python3 bench/suite-bench.py --size $(SUITE) --jobs $(SUITE_JOBS) \
		$(if $(SUITE_ONLY),--only '$(SUITE_ONLY)') \
		--json $(O)/bench-suite.json $(O) $(SHARED)

# make bench-perturb (bench/perturb-bench.py): what one request inserted,
# left out or resized costs a planned replay, on a dense synthetic trace
# and the shared CPU traces.  Documentation/suite.rst.
PERTURB_TRACES = $(O)/perturb-dense.trace \
	$(wildcard $(SHARED)/workloads/cpu-torch/*.trace)

BENCH_EXTRA += bench-perturb
.PHONY: bench-perturb
bench-perturb: $(O)/stalloc-synth $(O)/stalloc-plan $(REPLAY_BIN)
	$(Q)$(O)/stalloc-synth -o $(O)/perturb-dense.trace --layers 4 \
		--hidden 256 --heads 4 --seq 512 --vocab 8000 \
		--micro-batches 4 --stages 2
	$(Q)python3 bench/perturb-bench.py $(O) $(PERTURB_TRACES)
