# outbox — PGXS build for a C++ PostgreSQL extension.
#
#   make                 build outbox.so and outbox-driver (the drivers' helper process)
#   make install         install both into the PostgreSQL that pg_config names
#   make unit            build and run the pure C++ unit tests (no PostgreSQL needed)
#   make format          clang-format every C++ source in place
#   make check-layers    the room map's rules and the size limits (test/check_layers)
#   make deb             the Debian packages postgresql-NN-outbox (test/build_debs; as root)
#   make WERROR=1        treat warnings as errors (CI does)
#
# The whole test suite (pg_regress, TAP, unit) runs with test/run_tests; see README.md.

EXTENSION = outbox
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" outbox.control)
MODULE_big = outbox

# The layers (docs/architecture.md; test/check_layers checks them): only src/pg/ includes
# PostgreSQL headers, only src/brokers/ the brokers' client libraries.
# Pure logic: the module, outbox-driver and the unit tests.
PURE_SRCS = $(wildcard src/*.cpp)
# The broker kinds' rows and the rules of them both processes need (src/brokers/<kind>/kind.cpp):
# library-free, so the module links them too.
KIND_SRCS = src/brokers/registry.cpp $(wildcard src/brokers/*/kind.cpp)
# The rest of src/brokers/: the kinds' checks and drivers, with their client libraries
# (outbox-driver and the unit tests only).
BROKER_SRCS = $(filter-out $(KIND_SRCS),$(wildcard src/brokers/*.cpp src/brokers/*/*.cpp))
# Each kind names the libraries it links in src/brokers/<kind>/kind.mk (BROKER_LIBS += ...).
BROKER_LIBS =
include $(wildcard src/brokers/*/kind.mk)
# The driver process machinery: both ends of the protocol, the worker's supervisor and the
# backends' check client (the module), the helper's main (outbox-driver).
IPC_SRCS = src/ipc/protocol.cpp src/ipc/options.cpp src/ipc/pipe_io.cpp src/ipc/spawn.cpp
MODULE_IPC_SRCS = src/ipc/supervisor.cpp src/ipc/remote_driver.cpp src/ipc/check_client.cpp
PG_SRCS = $(wildcard src/pg/*.cpp)
OBJS = $(patsubst %.cpp,%.o,$(PURE_SRCS) $(KIND_SRCS) $(IPC_SRCS) $(MODULE_IPC_SRCS) $(PG_SRCS))

DATA = $(wildcard sql/outbox--*.sql)

PG_CONFIG ?= pg_config
# Only what PostgreSQL looks up by name is exported (PostgreSQL 15's PGDLLEXPORT is empty).
PG_CPPFLAGS = -Iinclude -isystem $(shell $(PG_CONFIG) --includedir-server) \
              -DOUTBOX_EXTVERSION='"$(EXTVERSION)"' -DOUTBOX_MODULE \
              '-DPGDLLEXPORT=__attribute__((visibility("default")))'
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -fvisibility=hidden $(if $(WERROR),-Werror)
# No broker library: the drivers and the config checks run in outbox-driver (OUTBOX_MODULE leaves
# the kinds' driver halves out of the rows, broker_kind.hpp).
SHLIB_LINK = -lcrypto -lstdc++

# Debian builds LLVM bitcode with clang and without our C++ flags; JIT inlining of this module
# buys nothing (its hot paths are SPI and network I/O), so no bitcode is built or installed.
override with_llvm = no

EXTRA_CLEAN = test/unit/build test/unit/build-sanitize build outbox-driver

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The object files depend on every header; a changed header rebuilds everything (small project).
# outbox.control too: its default_version is compiled in (OUTBOX_EXTVERSION).
HEADERS = $(shell find include -name '*.hpp')
$(OBJS): $(HEADERS) outbox.control

# outbox-driver: the network drivers in a process of their own, started by each delivery worker
# (README "How it works"). A plain executable that includes no PostgreSQL header, so it is built
# with its own flags and objects (PGXS cannot build a MODULE_big and a PROGRAM from shared OBJS),
# and installed next to the module, in $libdir, where the worker looks for it.
DRIVER_HOST = outbox-driver
DRIVER_HOST_SRCS = src/ipc/helper_main.cpp $(IPC_SRCS) $(PURE_SRCS) $(KIND_SRCS) $(BROKER_SRCS)
DRIVER_HOST_OBJS = $(patsubst %.cpp,build/driver-host/%.o,$(DRIVER_HOST_SRCS))
DRIVER_HOST_CXXFLAGS = -std=c++17 -O2 -g -Wall -Wextra -Iinclude -fPIE -fstack-protector-strong \
                       -D_FORTIFY_SOURCE=2 $(if $(WERROR),-Werror)

build/driver-host/%.o: %.cpp $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(DRIVER_HOST_CXXFLAGS) -c -o $@ $<

$(DRIVER_HOST): $(DRIVER_HOST_OBJS)
	$(CXX) -pie -Wl,-z,relro,-z,now -o $@ $(DRIVER_HOST_OBJS) $(BROKER_LIBS) -lcrypto -lpthread

all: $(DRIVER_HOST)
install: install-driver-host
uninstall: uninstall-driver-host
.PHONY: install-driver-host uninstall-driver-host
install-driver-host: $(DRIVER_HOST) installdirs
	$(INSTALL_PROGRAM) $(DRIVER_HOST) '$(DESTDIR)$(pkglibdir)/$(DRIVER_HOST)'
uninstall-driver-host:
	rm -f '$(DESTDIR)$(pkglibdir)/$(DRIVER_HOST)'

# test/tools/accept_nodelay.cpp: the mock brokers of test/unit/kafka_mock.hpp without Nagle.
UNIT_SRCS = $(wildcard test/unit/*.cpp) $(PURE_SRCS) $(KIND_SRCS) $(BROKER_SRCS) $(IPC_SRCS) \
            $(MODULE_IPC_SRCS) test/tools/accept_nodelay.cpp
UNIT_CXXFLAGS = -std=c++17 -g -O1 -Wall -Wextra -Iinclude $(if $(WERROR),-Werror) $(UNIT_SANITIZE)
# Objects per file (make -j builds them in parallel), in a directory per flavour, so that a
# sanitizer build (UNIT_SANITIZE=...) never mixes with a normal one.
# The unit tests run in UNIT_SHARDS processes at once (test/unit/run_sharded).
UNIT_SHARDS ?= 3
UNIT_BUILD = test/unit/build$(if $(UNIT_SANITIZE),-sanitize)
UNIT_OBJS = $(patsubst %.cpp,$(UNIT_BUILD)/%.o,$(UNIT_SRCS))

$(UNIT_BUILD)/%.o: %.cpp $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(UNIT_CXXFLAGS) -c -o $@ $<

$(UNIT_BUILD)/unit_tests: $(UNIT_OBJS)
	$(CXX) $(UNIT_CXXFLAGS) -o $@ $(UNIT_OBJS) -lgtest -lgtest_main -lpthread $(BROKER_LIBS) \
		-lcrypto

# The supervisor's tests run the real helper: $(DRIVER_HOST) from this tree. unit-build only
# builds (test/run_tests builds holding two of the machine's test slots, then runs the tests,
# which mostly wait on timers and sockets, holding one).
.PHONY: unit unit-build format check-layers
unit-build: $(UNIT_BUILD)/unit_tests $(DRIVER_HOST)
unit: unit-build
	OUTBOX_DRIVER=$(CURDIR)/$(DRIVER_HOST) test/unit/run_sharded $(UNIT_SHARDS) $(UNIT_BUILD)/unit_tests

check-layers:
	test/check_layers

format:
	clang-format -i $(shell find src include test/unit test/tools -name '*.cpp' -o -name '*.hpp')

# The benchmark suite (test/bench/README.md): make bench, or make bench BENCH_ARGS=--quick
.PHONY: bench
bench:
	test/bench/run $(BENCH_ARGS)

# The Debian packages of debian/, postgresql-NN-outbox, each built in a clean root of the Debian
# release that ships its major, into build/debs/NN/: make deb, or make deb DEB_MAJORS="15 17"
.PHONY: deb
deb:
	test/build_debs $(DEB_MAJORS)
