# make demo           build ./run and let the model in demo/ tell stories (one with its draft)
# make                build ./run
# make test           build and run the quick test suite (about a minute: test_all.c --quick)
# make check          build and run the whole test suite (what CI runs)
# make test-sanitize  the whole suite, built with AddressSanitizer and UBSan
# make run PLAIN=1    ./run without Part II: the plain kernels only (same output, slower)
# make bench-serve    the server under load from 1 to 16 clients, beside batch mode and (if LLAMA_CPP
#                     names a llama.cpp folder built with cmake) llama-server (tools/serve_bench.py;
#                     SERVE_BENCH_FLAGS)
# make bench          speed and memory on three model shapes, and batch mode (needs ../shared);
#                     BENCH_FLAGS=--long adds the 1.1B shape near position 2000
#                     with each KV cache (--long-only: just that)
# make test-arm64     the whole suite cross-compiled for aarch64, run under qemu-user
CC ?= cc
# No -march: run.c compiles its fast kernels for each instruction set and picks
# them at run time, so one binary is fast on any x86-64; -march=native would
# also let the compiler put newer instructions into the sse and avx2 sets.
# run.c turns off fused multiply-add contraction itself (a pragma), so results
# follow the source exactly with any flags but clang's -ffp-contract=fast,
# which overrides that pragma by design.
CFLAGS ?= -O3
BASEFLAGS = -std=gnu11 -Wall -Wextra
LDLIBS = -lm -lpthread
# PLAIN=1 builds ./run without Part II; the tests always have it (they compare
# every kernel set with Part I), and check the plain ./run through the golden files
ifdef PLAIN
RUNFLAGS = -DRUN_PLAIN
endif
# float-cast-overflow: GCC's -fsanitize=undefined leaves it out (clang's has it);
# it catches float -> int conversions out of range, e.g. NaN weights in quantize().
# every kernel set the CPU has is checked under them too
SANITIZE = -g -O1 -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
# a python3 with numpy, for tests/test_export.py (Debian's python3-numpy lives in /usr/bin)
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy' 2>/dev/null && { echo $$p; break; }; done)
export PYTHON

run: run.c
	$(CC) $(BASEFLAGS) $(RUNFLAGS) $(CFLAGS) -o $@ run.c $(LDLIBS)

test_all: test_all.c run.c
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ test_all.c $(LDLIBS)

test: run test_all
	./test_all --quick

check: run test_all
	./test_all

run_sanitize: run.c
	$(CC) $(BASEFLAGS) $(RUNFLAGS) $(SANITIZE) -o $@ run.c $(LDLIBS)

test_all_sanitize: test_all.c run.c
	$(CC) $(BASEFLAGS) $(SANITIZE) -o $@ test_all.c $(LDLIBS)

test-sanitize: run_sanitize test_all_sanitize
	RUN=./run_sanitize ./test_all_sanitize

# aarch64: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (Debian).
# qemu-aarch64 is called by name, with the cross libc as its library prefix, so
# binfmt_misc need not be set up. The scripts that test_all runs exec $RUN, so
# RUN is run_arm64_qemu, a two-line wrapper written here. This checks the code,
# and the kernel sets run.c has for aarch64, on a second architecture.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_CFLAGS ?= -O3
QEMU_ARM64 ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
# qemu CPUs, each with the kernel set it should get at start-up: the whole
# suite on the first (-cpu max: dotprod and i8mm), the kernel tests
# (test_all --kernels) on the others (a Neoverse N1 has the dot product only,
# a Cortex-A72 neither)
ARM64_CPUS ?= max:i8mm neoverse-n1:dotprod cortex-a72:neon

run_arm64: run.c
	$(ARM64_CC) $(BASEFLAGS) $(RUNFLAGS) $(ARM64_CFLAGS) -o $@ run.c $(LDLIBS)

test_all_arm64: test_all.c run.c
	$(ARM64_CC) $(BASEFLAGS) $(ARM64_CFLAGS) -o $@ test_all.c $(LDLIBS)

run_arm64_qemu: Makefile
	printf '#!/bin/sh\nexec %s "$$(dirname "$$0")/run_arm64" "$$@"\n' '$(QEMU_ARM64)' > $@
	chmod +x $@

test-arm64: run_arm64 test_all_arm64 run_arm64_qemu
	$(if $(strip $(ARM64_CPUS)),,$(error ARM64_CPUS names no qemu CPU to test on))
	first=1; for pair in $(ARM64_CPUS); do \
		export QEMU_CPU=$${pair%%:*} EXPECT_KERNELS=$${pair#*:}; \
		if [ $$first = 1 ]; then EMULATED=1 RUN=./run_arm64_qemu $(QEMU_ARM64) ./test_all_arm64 || exit 1; \
		else $(QEMU_ARM64) ./test_all_arm64 --kernels || exit 1; fi; first=0; done

demo: run
	./run demo/model.bin -z demo/tokenizer.bin -t 0 -n 200 -i "Once upon a time"
	./run demo/model.bin -z demo/tokenizer.bin -t 0.8 -s 42 -n 200 -i "Once upon a time"
	./run demo/model.bin -z demo/tokenizer.bin -t 0 -n 200 -i "Once upon a time" -d demo/draft.bin

BENCH_FLAGS ?=
bench: run
	$(or $(PYTHON),python3) tools/bench.py $(BENCH_FLAGS)

SERVE_BENCH_FLAGS ?=
bench-serve: run
	$(or $(PYTHON),python3) tools/serve_bench.py $(SERVE_BENCH_FLAGS)

clean:
	rm -f run test_all run_sanitize test_all_sanitize run_arm64 test_all_arm64 run_arm64_qemu

.PHONY: test check test-sanitize test-arm64 demo bench bench-serve clean

# make fuzz                       build the libFuzzer targets (clang) and their seed corpus
# make fuzz-run SECONDS=600       run each target for SECONDS, one after the other, niced
# Needs clang with libFuzzer (Debian: clang and libclang-rt-14-dev) and python3;
# the seeds come from ../shared (SHARED=...) and this repo's tokenizer.bin.
FUZZ_CC ?= clang
FUZZ_FLAGS = -std=gnu11 -g -O1 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
SHARED ?= ../shared
SECONDS ?= 600
FUZZ_TARGETS = fuzz_checkpoint fuzz_tokenizer fuzz_encode fuzz_batch fuzz_serve

fuzz: $(FUZZ_TARGETS) fuzz_corpus/.done

fuzz_checkpoint: tools/fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_CHECKPOINT -o $@ tools/fuzz.c $(LDLIBS)

fuzz_tokenizer: tools/fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_TOKENIZER -o $@ tools/fuzz.c $(LDLIBS)

fuzz_encode: tools/fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_ENCODE -DFUZZ_SHARED='"$(SHARED)"' -o $@ tools/fuzz.c $(LDLIBS)

fuzz_batch: tools/fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_BATCH -o $@ tools/fuzz.c $(LDLIBS)

fuzz_serve: tools/fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_SERVE -o $@ tools/fuzz.c $(LDLIBS)

# seed corpus: the shared models, tokenizers and tokenizer cases, plus small
# generated checkpoints/tokenizers of every layout and damaged copies
fuzz_corpus/.done: tools/seeds_for_fuzz.py tokenizer.bin
	rm -rf fuzz_corpus
	python3 tools/seeds_for_fuzz.py $(SHARED) fuzz_corpus
	-$(PYTHON) export.py fuzz_corpus/tokenizer_llama3.bin --tokenizer $(SHARED)/tokenizer/llama3/tokenizer.json
	-$(PYTHON) export.py fuzz_corpus/tokenizer_qwen3.bin --tokenizer $(SHARED)/tokenizer/qwen3/tokenizer.json
	touch $@

# new inputs go to fuzz_out/<target>, crashes to fuzz_out/crashes/; stops at the first crash
fuzz-run: fuzz
	@mkdir -p fuzz_out/crashes
	for t in checkpoint tokenizer encode batch serve; do \
		mkdir -p fuzz_out/$$t; \
		nice -n 19 ./fuzz_$$t -max_total_time=$(SECONDS) -print_final_stats=1 \
			-artifact_prefix=fuzz_out/crashes/$$t- fuzz_out/$$t fuzz_corpus/$$t || exit 1; \
	done

fuzz-clean:
	rm -rf $(FUZZ_TARGETS) fuzz_corpus fuzz_out

.PHONY: fuzz fuzz-run fuzz-clean
