# make          build ./run
# make test     build and run the test suite (test_all.c)
CC ?= cc
CFLAGS ?= -O3 -march=native
# -ffp-contract=off: no fused multiply-add, so float results follow the source
# order exactly and match the reference outputs bit for bit.
BASEFLAGS = -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS = -lm -lpthread

run: run.c
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ run.c $(LDLIBS)

test_all: test_all.c run.c
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ test_all.c $(LDLIBS)

test: run test_all
	./test_all

clean:
	rm -f run test_all

.PHONY: test clean
