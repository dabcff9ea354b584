# adctl — the two commands of the README:
#   make demo   install what is missing, build the binaries, run a tiny AnimateDiff job end to
#               end on CPU: a validation sample and an exported motion module at the end
#   make test   install what is missing, build, run every test that needs no GPU, then the
#               libFuzzer targets (their own clang build in FUZZ_BUILD_DIR, FUZZ_SECONDS each)
# Variables: BUILD_DIR (build), BUILD_TYPE (RelWithDebInfo), JOBS (nproc), CTEST_JOBS (1),
# RANKS (demo ranks), CMAKE_FLAGS (extra -D options), FUZZ_BUILD_DIR (build-fuzz),
# FUZZ_SECONDS (20).

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CTEST_JOBS ?= 1
RANKS ?= 2
CMAKE_FLAGS ?=
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 20

.PHONY: all deps configure build test fuzz demo clean

all: build

deps:
	scripts/install-deps

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -LE gpu -j $(CTEST_JOBS)
	$(MAKE) fuzz

# The fuzz targets of fuzz/ (label fuzz): clang with libFuzzer + ASan + UBSan, control plane only.
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DADCTL_FUZZ=ON \
	  -DADCTL_FUZZ_SECONDS=$(FUZZ_SECONDS) -DADCTL_BUILD_WORKER=OFF -DADCTL_BUILD_TESTS=OFF \
	  -DADCTL_BUILD_WEB=OFF
	cmake --build $(FUZZ_BUILD_DIR) --target fuzz_targets -j $(JOBS)
	ctest --test-dir $(FUZZ_BUILD_DIR) --output-on-failure -L fuzz

# Only what the demo runs: the daemon, the CLI, the worker and (when node is there) the web
# page; not the tests.
demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target adctld adctl adworker
	if ninja -C $(BUILD_DIR) -t targets all | grep -q '^web:'; then \
	  cmake --build $(BUILD_DIR) -j $(JOBS) --target web; fi
	BUILD_DIR=$(BUILD_DIR) RANKS=$(RANKS) scripts/demo

clean:
	rm -rf $(BUILD_DIR)
