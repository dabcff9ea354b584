# adctl — the two commands of the README:
#   make demo   install what is missing, build, run a tiny AnimateDiff job end to end on CPU
#   make test   install what is missing, build, run every test that needs no GPU
# Variables: BUILD_DIR (build), BUILD_TYPE (RelWithDebInfo), JOBS (nproc), CTEST_JOBS (1),
# RANKS (demo ranks), CMAKE_FLAGS (extra -D options).

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CTEST_JOBS ?= 1
RANKS ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo clean

all: build

deps:
	scripts/install-deps

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -LE gpu -j $(CTEST_JOBS)

demo: build
	BUILD_DIR=$(BUILD_DIR) RANKS=$(RANKS) scripts/demo

clean:
	rm -rf $(BUILD_DIR)
