# ampc: the two commands a user needs, plus their steps.
#   make demo    install what is missing, build, and run the example models end to end
#   make check   install what is missing, build, and run every test (lit + unit)
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo check clean

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

clean:
	rm -rf $(BUILD)
