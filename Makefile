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
SANITIZE = -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all
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
