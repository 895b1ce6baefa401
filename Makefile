# Set-up from nothing: `make run` and `make test` create .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SAMPLE ?= samples/file_tools/stream.jsonl

.PHONY: run test lint format bench bench-shapes bench-growth fuzz soak samples goldens clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/opencode-events normalize $(SAMPLE)

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check opencode_events tests scripts bench
	$(BIN)/ruff format --check opencode_events tests scripts bench
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format opencode_events tests scripts bench
	$(BIN)/ruff check --fix opencode_events tests scripts bench

bench: $(STAMP)
	# Bytecode as an installed package has it (PYTHONDONTWRITEBYTECODE may be set here).
	$(PY) -m compileall -q opencode_events
	$(PY) bench/run.py
	$(PY) bench/store_bench.py
	$(PY) bench/cache_bench.py

# The store ratios on several database shapes (bench/gen_db.py --shape); the worst shape is
# the verdict. BENCH_ROUNDS rounds over all shapes (default 2).
SHAPES ?= bench,field,medium,spaced
bench-shapes: $(STAMP)
	$(PY) -m compileall -q opencode_events
	$(PY) bench/store_bench.py --shapes $(SHAPES)

# First-run times and peak RSS at 1x, 3x and 10x the bench database (the 10x one is 30 GB,
# made once into BENCH_GROWTH_DIR, default bench/out/growth; about 15 minutes; not in CI).
bench-growth: $(STAMP)
	$(PY) -m compileall -q opencode_events
	$(PY) bench/store_bench.py --growth 1x,3x,10x

# The long fuzz run: a million mutated real inputs per input kind (FUZZ_CASES to change).
fuzz: $(STAMP)
	$(PY) scripts/fuzz.py

# import --follow over a store written for an hour; memory must stay flat (not in CI).
SOAK_MINUTES ?= 60
soak: $(STAMP)
	$(PY) bench/soak_follow.py --minutes $(SOAK_MINUTES)

samples: $(STAMP)
	$(PY) scripts/capture.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

goldens: $(STAMP)
	$(PY) scripts/update_goldens.py
	$(PY) scripts/doc_examples.py
