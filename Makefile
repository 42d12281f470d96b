# Set-up and the everyday commands. Every target installs what it needs once; a second run reuses it.
#   make demo   synthetic S3DIS -> prepare -> 6-fold training -> report, on the CPU
#               (make demo BACKBONE=ptv3: Point Transformer V3 with GeoPE, configs/demo_ptv3.yaml)
#   make test   the test suite (display tests under xvfb-run)
#   make lint   ruff check with the rules of pyproject.toml ([tool.ruff]); the suite fails on a finding too
#   make bench  the main CPU benchmarks (docs/benchmarks.md names them), results in bench/results/
#   make docs   the documentation site in site/ (MkDocs; open site/index.html or run: .venv/bin/mkdocs serve)
#   make test-nn-minimal  pointgeope.nn alone: pip install ".[nn]" in a fresh environment (build/nn-minimal/)
#   make ablation  rpe, geope, lingeope, rope3d, rope-mixed, pointrope, none x 3 seeds on the demo's fold 1
#               (21 trials, 2 at a time; one alone took 3.5 min on a shared 2-core machine:
#               bench/results/ablation/one_trial/)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch's CPU build (.ci/install_torch.sh): a wheel already at hand (pip's find-links) without the network, else
# from TORCH_INDEX, pytorch.org's CPU index (PyPI's Linux wheel is the multi-GB CUDA build). On a CUDA machine:
# make TORCH_INDEX=https://download.pytorch.org/whl/cu128 (your CUDA version), or TORCH_INDEX= for PyPI's build.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
PYTEST_ARGS ?= -n 2
DEMO_DIR ?= demo
# The demo's network: ptv1 (Point Transformer v1, configs/demo.yaml) or ptv3 (configs/demo_ptv3.yaml)
BACKBONE ?= ptv1
DEMO_CONFIG := $(if $(filter ptv3,$(BACKBONE)),configs/demo_ptv3.yaml,configs/demo.yaml)
DEMO_RUN := $(if $(filter ptv3,$(BACKBONE)),ptv3_geope,geope)

.PHONY: setup sysdeps demo test lint test-triton-old test-pyg-oldest test-nn-minimal bench ablation docs

setup: $(STAMP) sysdeps

$(STAMP): pyproject.toml pointgeope/__init__.py   # the version is written there
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || bash .ci/install_torch.sh $(PY) "$(TORCH_SPEC)" "$(TORCH_INDEX)"
	$(PY) -m pip install -e ".[toolkit,test]"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -e ".[docs]"
	touch $(DOCS_STAMP)

sysdeps:
	@bash .ci/sysdeps.sh

demo: setup
	$(VENV)/bin/pointgeope synth $(DEMO_DIR)/raw --size demo
	$(VENV)/bin/pointgeope prepare $(DEMO_DIR)/raw $(DEMO_DIR)/s3dis --jobs 2
	@case "$(BACKBONE)" in ptv1|ptv3) ;; *) echo "BACKBONE=$(BACKBONE): expected ptv1 or ptv3" >&2; exit 2;; esac
	$(PY) train.py --config $(DEMO_CONFIG) --cv --data-root $(DEMO_DIR)/s3dis --run-dir $(DEMO_DIR)/runs/$(DEMO_RUN)
	$(VENV)/bin/pointgeope report $(DEMO_DIR)/runs/$(DEMO_RUN)

ablation: setup
	$(VENV)/bin/pointgeope synth $(DEMO_DIR)/raw --size demo
	$(VENV)/bin/pointgeope prepare $(DEMO_DIR)/raw $(DEMO_DIR)/s3dis --jobs 2
	$(VENV)/bin/pointgeope ablate --config configs/demo.yaml --data-root $(DEMO_DIR)/s3dis --test-area 1 \
		--presets rpe,geope,lingeope,rope3d,rope-mixed,pointrope,none --seeds 0,1,2 --jobs 2 --run-dir $(DEMO_DIR)/runs/ablation

test: setup
	@if command -v xvfb-run >/dev/null; then xvfb-run -a -s "-screen 0 1280x1024x24 -noreset" $(PY) -m pytest $(PYTEST_ARGS); \
	else echo "xvfb-run not found: display tests will be skipped"; $(PY) -m pytest $(PYTEST_ARGS); fi

lint: $(STAMP)
	$(PY) -m ruff check .

# The kernel tests again under Triton 3.6's interpreter (the GPU machines' Triton; the venv has the newest),
# and the compile check under its compiler (sm_90), from a side folder that shadows the venv's Triton for this run only.
TRITON_OLD ?= 3.6.0
test-triton-old: setup
	test -d .triton-$(TRITON_OLD) || $(PY) -m pip install -q --no-deps --target .triton-$(TRITON_OLD) triton==$(TRITON_OLD)
	PYTHONPATH=.triton-$(TRITON_OLD) $(PY) -m pytest -q -p no:cacheprovider tests/model/test_triton_ops.py \
		tests/model/test_kernels.py tests/model/test_fused_attention.py tests/model/test_fused_attention_layer.py \
		tests/model/test_bucket_fps.py tests/model/test_rodrigues_terms.py tests/model/test_norm.py \
		tests/model/test_norm_paths.py tests/model/test_norm_plain.py tests/model/test_residual_norm.py \
		tests/model/test_gather_backward.py tests/model/test_shifted_kernel.py tests/model/test_triton_compile.py \
		tests/model/test_frame_fold.py tests/model/test_residual_norm_train.py

# pointgeope.nn under the oldest torch-geometric it supports (pyproject.toml's lower bound): the first of
# pointgeope/nn/__init__.py's TESTED_PYG_VERSIONS, which owns the version (read as text: no torch needed)
PYG_OLDEST ?= $(or $(shell grep -m1 '^TESTED_PYG_VERSIONS = ' pointgeope/nn/__init__.py | cut -s -d'"' -f2),\
	$(error pointgeope/nn/__init__.py: expected a line TESTED_PYG_VERSIONS = ("<oldest>", ...), found none))
test-pyg-oldest: setup
	test -d .pyg-$(PYG_OLDEST) || $(PY) -m pip install -q --no-deps --target .pyg-$(PYG_OLDEST) torch_geometric==$(PYG_OLDEST)
	PYTHONPATH=.pyg-$(PYG_OLDEST) $(PY) -m pytest -q -p no:cacheprovider tests/nn \
		tests/test_examples.py -k "not test_pyg_point_transformer_trains"

# pointgeope.nn as a PyG user installs it: torch (TORCH_SPEC, TORCH_INDEX) and ".[nn]" in a fresh environment,
# without the toolkit's packages; tests/nn against the installed package (.ci/test_nn_minimal.sh). Needs no make setup.
test-nn-minimal:
	PYTHON=$(PYTHON) TORCH_SPEC="$(TORCH_SPEC)" TORCH_INDEX="$(TORCH_INDEX)" bash .ci/test_nn_minimal.sh

bench: setup
	$(PY) bench/bench_geope.py
	$(PY) bench/bench_prepare.py
	$(PY) bench/bench_synth_write.py
	$(PY) bench/bench_voxelize.py
	$(PY) bench/bench_model.py
	$(PY) bench/bench_step_copies.py --out bench/results/bench_step_copies.json --label current
	$(PY) bench/bench_evaluate.py
	$(PY) bench/bench_predict.py

# --strict: a broken link, a missing page or an API object that does not resolve fails the build
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
