# ampc: the two commands a user needs, plus their steps.
#   make demo    install what is missing, build, and run the example models end to end
#   make check   install what is missing, build, and run every test (lit + unit)
#   make gpu-bundle  the folder a GPU machine runs to validate and benchmark ampc
#                (bench/gpu-bundle.sh; then GPU_BUNDLE/run.sh RESULTS_DIR there)
BUILD ?= build
JOBS ?= $(shell nproc)
GPU_BUNDLE ?= $(BUILD)/gpu-bundle

.PHONY: all deps configure build demo check gpu-bundle clean

all: build

deps:
	@bash cmake/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release; \
	fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash examples/demo.sh $(BUILD)

check: build
	cmake --build $(BUILD) --target check-ampc

gpu-bundle: build
	@bash bench/gpu-bundle.sh $(BUILD) $(GPU_BUNDLE)

clean:
	rm -rf $(BUILD)
