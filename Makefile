# make                build ./run
# make test           build and run the test suite (test_all.c)
# make test-sanitize  the same suite, built with AddressSanitizer and UBSan
CC ?= cc
CFLAGS ?= -O3 -march=native
# -ffp-contract=off: no fused multiply-add, so float results follow the source
# order exactly and match the reference outputs bit for bit.
BASEFLAGS = -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS = -lm -lpthread
SANITIZE = -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all

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

clean:
	rm -f run test_all run_sanitize test_all_sanitize

.PHONY: test test-sanitize clean
