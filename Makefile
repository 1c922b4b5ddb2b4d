# ampc: the two commands a user needs, plus their steps.
#   make demo    install what is missing, build, and run the example models end to end
#   make check   install what is missing, build, and run every test (lit + unit, and the
#                fuzz targets over their corpora and FUZZ_CHECK_TIME seconds each)
#   make fuzz    build the fuzz targets (ASan + UBSan, in FUZZ_BUILD) and fuzz each for
#                FUZZ_TIME seconds (fuzz/run-fuzzers.sh; docs/security.md)
#   make gpu-bundle  the folder a GPU machine runs to validate and benchmark ampc
#                (bench/gpu-bundle.sh; then GPU_BUNDLE/run.sh RESULTS_DIR there)
BUILD ?= build
JOBS ?= $(shell nproc)
GPU_BUNDLE ?= $(BUILD)/gpu-bundle
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME ?= 60
FUZZ_CHECK_TIME ?= 20

.PHONY: all deps configure build demo check gpu-bundle clean fuzz-configure fuzz-build fuzz \
        fuzz-check

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
	@$(MAKE) --no-print-directory fuzz-check

# The fuzz build: its own folder, clang-19 with libFuzzer, the sanitizers (cmake/AmpcFuzz.cmake);
# only the fuzz targets and the libraries they link are built.
fuzz-configure: deps
	@if [ ! -f $(FUZZ_BUILD)/build.ninja ]; then \
	  cmake -G Ninja -S . -B $(FUZZ_BUILD) -DAMPC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19; \
	fi

fuzz-build: fuzz-configure
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target ampc-fuzzers

fuzz: fuzz-build
	@bash fuzz/run-fuzzers.sh $(FUZZ_BUILD) --time $(FUZZ_TIME)

# What CI runs after the tests: every corpus file once, then a short run of each target.
fuzz-check: fuzz-build
	@bash fuzz/run-fuzzers.sh $(FUZZ_BUILD) --regression --time $(FUZZ_CHECK_TIME)

gpu-bundle: build
	@bash bench/gpu-bundle.sh $(BUILD) $(GPU_BUNDLE)

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
