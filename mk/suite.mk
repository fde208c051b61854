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
