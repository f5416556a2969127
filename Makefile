# make demo           build ./run and let the model in demo/ tell a story
# make                build ./run
# make test           build and run the test suite (test_all.c)
# make test-sanitize  the same suite, built with AddressSanitizer and UBSan
# make run PLAIN=1    only the plain sequential kernels (same output, slower)
# make bench          speed and memory on three model shapes (needs ../shared)
CC ?= cc
CFLAGS ?= -O3 -march=native
# -ffp-contract=off: no fused multiply-add, so float results follow the source
# order exactly and match the reference outputs bit for bit.
BASEFLAGS = -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS = -lm -lpthread
ifdef PLAIN
BASEFLAGS += -DRUN_PLAIN
endif
# float-cast-overflow: GCC's -fsanitize=undefined leaves it out (clang's has it);
# it catches float -> int conversions out of range, e.g. NaN weights in quantize().
# -march=native: the SIMD kernels are checked too, where the CPU has them
SANITIZE = -g -O1 -march=native -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
# a python3 with numpy, for test_export.py (Debian's python3-numpy lives in /usr/bin)
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy' 2>/dev/null && { echo $$p; break; }; done)
export PYTHON

run: run.c
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ run.c $(LDLIBS)

test_all: test_all.c run.c
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ test_all.c $(LDLIBS)

test: run test_all
	./test_all

run_sanitize: run.c
	$(CC) $(BASEFLAGS) $(SANITIZE) -o $@ run.c $(LDLIBS)

test_all_sanitize: test_all.c run.c
	$(CC) $(BASEFLAGS) $(SANITIZE) -o $@ test_all.c $(LDLIBS)

test-sanitize: run_sanitize test_all_sanitize
	RUN=./run_sanitize ./test_all_sanitize

demo: run
	./run demo/model.bin -z demo/tokenizer.bin -t 0 -n 200 -i "Once upon a time"
	./run demo/model.bin -z demo/tokenizer.bin -t 0.8 -s 42 -n 200 -i "Once upon a time"

bench: run
	python3 bench.py

clean:
	rm -f run test_all run_sanitize test_all_sanitize

.PHONY: test test-sanitize demo bench clean

# make fuzz                       build the libFuzzer targets (clang) and their seed corpus
# make fuzz-run SECONDS=600       run each target for SECONDS, one after the other, niced
# Needs clang with libFuzzer (Debian: clang and libclang-rt-14-dev) and python3;
# the seeds come from ../shared (SHARED=...) and this repo's tokenizer.bin.
FUZZ_CC ?= clang
FUZZ_FLAGS = -std=gnu11 -g -O1 -march=native -ffp-contract=off \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
SHARED ?= ../shared
SECONDS ?= 600
FUZZ_TARGETS = fuzz_checkpoint fuzz_tokenizer fuzz_encode

fuzz: $(FUZZ_TARGETS) fuzz_corpus/.done

fuzz_checkpoint: fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_CHECKPOINT -o $@ fuzz.c $(LDLIBS)

fuzz_tokenizer: fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_TOKENIZER -o $@ fuzz.c $(LDLIBS)

fuzz_encode: fuzz.c run.c
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_ENCODE -DFUZZ_SHARED='"$(SHARED)"' -o $@ fuzz.c $(LDLIBS)

# seed corpus: the shared models, tokenizers and tokenizer cases, plus small
# generated checkpoints/tokenizers of every layout and damaged copies
fuzz_corpus/.done: seeds_for_fuzz.py tokenizer.bin
	rm -rf fuzz_corpus
	python3 seeds_for_fuzz.py $(SHARED) fuzz_corpus
	touch $@

# new inputs go to fuzz_out/<target>, crashes to fuzz_out/crashes/; stops at the first crash
fuzz-run: fuzz
	@mkdir -p fuzz_out/crashes
	for t in checkpoint tokenizer encode; do \
		mkdir -p fuzz_out/$$t; \
		nice -n 19 ./fuzz_$$t -max_total_time=$(SECONDS) -print_final_stats=1 \
			-artifact_prefix=fuzz_out/crashes/$$t- fuzz_out/$$t fuzz_corpus/$$t || exit 1; \
	done

fuzz-clean:
	rm -rf $(FUZZ_TARGETS) fuzz_corpus fuzz_out

.PHONY: fuzz fuzz-run fuzz-clean
