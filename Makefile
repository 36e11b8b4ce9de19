# Set-up and entry points. `make demo` and `make test` work from a fresh clone on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The reference plugins are separate distributions, installed editable beside the core.
PLUGINS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/opencl/pyproject.toml plugins/cuda/pyproject.toml))
# hwadapter-paddle (bridges/paddle): hwadapter devices as PaddlePaddle custom devices; the `paddle` extra brings the
# CPU paddlepaddle its tests run against (one venv: ~25 s more to install, measured cold; tests/test_paddle_bridge.py).
BRIDGES := $(patsubst %/pyproject.toml,%,$(wildcard bridges/paddle/pyproject.toml))

.PHONY: demo devices doctor test test-slow test-gpu bench clean

$(STAMP): pyproject.toml setup.py core/native/native.cpp core/hwadapter/include/hwadapter/device_api.h $(addsuffix /pyproject.toml,$(PLUGINS) $(BRIDGES)) scripts/ensure-opencl.sh
	./scripts/ensure-opencl.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,paddle,mpi]' $(addprefix -e ,$(PLUGINS) $(BRIDGES))
	touch $@

demo: $(STAMP)
	$(PY) examples/demo.py

# The CLI without activating .venv (the README's `hwadapter devices` / `hwadapter doctor`).
devices: $(STAMP)
	$(VENV)/bin/hwadapter devices

doctor: $(STAMP)
	$(VENV)/bin/hwadapter doctor

# -n auto: one pytest-xdist worker per core (2 on CI), each its own process with its own devices; worksteal: a worker
# that runs out of tests takes queued ones from the other (the longest tests would otherwise end the run on one core)
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal

test-slow: $(STAMP)
	$(PY) -m pytest -q -n auto -m slow

# On a machine with an NVIDIA GPU: cupy for CUDA 13, the CUDA plugin's GPU tests, the conformance kit on cuda, and
# its benchmarks.
test-gpu: $(STAMP)
	$(PY) -m pip install -q -e 'plugins/cuda[cuda13]' 'nvidia-nccl-cu13>=2.27.7,<3'  # NCCL: cupy's wheel does not bring it
	$(PY) -m pytest -q -n auto -m gpu tests/test_cuda.py tests/test_cuda_native.py tests/test_paddle_adopt.py tests/test_onnx_conformance.py tests/test_training.py tests/test_cuda_collectives.py
	$(PY) -m pytest -q tests/test_autograd.py -k "device"  # every device's gradients against cpu:0's, cuda:0 among them
	$(VENV)/bin/hwadapter conformance cuda --timeout 600  # cold kernel builds on a GPU take longer than the default 120 s
	$(PY) benchmarks/cuda_plugin.py
	$(PY) benchmarks/training.py --device cuda:0 --rounds 3

# The runners (dispatch, fused_elementwise, matmul, graph, onnx_models, training), their output shown as they run and written,
# dated and with the machine, to docs/performance.md: the one place benchmark figures are kept.
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/report.py --out docs/performance.md

clean:
	rm -rf $(VENV) build *.egg-info core/*.egg-info plugins/*/*.egg-info bridges/*/*.egg-info
