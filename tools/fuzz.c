/* fuzz.c: libFuzzer targets for run.c's input handling. `make fuzz` builds them.

   One file, three targets, chosen at compile time:
     -DFUZZ_CHECKPOINT  the input is a checkpoint file: open_checkpoint(), and for
                        an accepted one with a small run state, a few forward()
                        steps and samples, so every read through the weights runs
     -DFUZZ_TOKENIZER   the input is a tokenizer.bin, followed by two bytes that
                        give the model's vocab_size: load_tokenizer(), then encode
                        and decode with what was loaded
     -DFUZZ_ENCODE      the input is prompt text: encode() with the repo's
                        tokenizer.bin, ../shared's aidreams_tok512.bin and
                        Llama 3's (exported from ../shared into fuzz_corpus/),
                        then decode() and print_piece() of every id
     -DFUZZ_BATCH       the input is a line of a batch file: parse_request(),
                        and for an accepted line, the prompt written back as
                        JSON and read again
     -DFUZZ_SERVE       the input is what a client sends the server: the
                        request's head (parse_http_head()), then what follows
                        it as the body of a completions or chat request
                        (read_api_request())

   run.c is included whole, as test_all.c does. fail() longjmps to *fail_jump
   when it is set, so a rejected input comes back here, and the harness frees
   what the loader had taken (so leak detection stays on).

   Each input is written to a memfd and handed to the loaders as
   /proc/self/fd/N. open/fopen/mmap/munmap/stderr are wrapped for run.c only:
   - the harness knows the descriptor or FILE a failed loader left open, and
     closes it;
   - mmap() becomes malloc() of exactly the file's size plus a read, so
     AddressSanitizer sees any read past what the loader validated (a real
     mapping is page-rounded, and reads past the file end inside the last page
     go unseen); -DFUZZ_REAL_MMAP keeps the real mmap();
   - run.c's stderr is a memory stream, checked after each rejected input: one
     line, "run: <path>: ...\n". */

#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fuzz_open(const char *path, int flags, ...);
static FILE *fuzz_fopen(const char *path, const char *mode);
#ifndef FUZZ_REAL_MMAP
static void *fuzz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);
static int fuzz_munmap(void *addr, size_t len);
#define mmap(a, b, c, d, e, f) fuzz_mmap(a, b, c, d, e, f)
#define munmap(a, b) fuzz_munmap(a, b)
#endif
static FILE *fuzz_stderr;
#define open(...) fuzz_open(__VA_ARGS__)
#define fopen(p, m) fuzz_fopen(p, m)
#undef stderr
#define stderr fuzz_stderr

#define main run_main
#include "../run.c"
#undef main
#undef open
#undef fopen
#undef mmap
#undef munmap
#undef stderr

/* ------------------------------------------------------------------------- */
/* Wrappers and shared plumbing                                               */

/* helpers that not every target uses */
#define HARNESS static __attribute__((unused))

static int last_fd = -1;     /* the descriptor run.c opened last */
static FILE *last_file;      /* the FILE run.c opened last */

static int fuzz_open(const char *path, int flags, ...) {
    last_fd = open(path, flags);
    return last_fd;
}

static FILE *fuzz_fopen(const char *path, const char *mode) {
    last_file = fopen(path, mode);
    return last_file;
}

#ifndef FUZZ_REAL_MMAP
static void *fuzz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    (void)addr, (void)prot, (void)flags;
    uint8_t *p = malloc(len ? len : 1);
    if (!p) return MAP_FAILED;
    size_t done = 0;
    while (done < len) {
        ssize_t got = pread(fd, p + done, len - done, offset + (off_t)done);
        if (got <= 0) {
            free(p);
            errno = EIO;
            return MAP_FAILED;
        }
        done += (size_t)got;
    }
    return p;
}

static int fuzz_munmap(void *addr, size_t len) {
    (void)len;
    free(addr);
    return 0;
}
#endif

/* Stops the fuzzer with a message: a property the harness checks has failed. */
static void harness_abort(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* The input file: a memfd, rewritten for each input. */
static int input_fd = -1;
static char input_path[64];

HARNESS void write_input(const uint8_t *data, size_t size) {
    if (input_fd < 0) {
        input_fd = memfd_create("fuzz_input", 0);
        if (input_fd < 0) harness_abort("memfd_create: %s", strerror(errno));
        snprintf(input_path, sizeof input_path, "/proc/self/fd/%d", input_fd);
    }
    if (ftruncate(input_fd, 0) != 0) harness_abort("ftruncate: %s", strerror(errno));
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(input_fd, data + done, size - done, (off_t)done);
        if (n <= 0) harness_abort("pwrite: %s", strerror(errno));
        done += (size_t)n;
    }
}

/* run.c's stderr for one input, in memory. */
static char err_text[16384];
static FILE *devnull;

HARNESS void begin_capture(void) {
    memset(err_text, 0, sizeof err_text);
    fuzz_stderr = fmemopen(err_text, sizeof err_text - 1, "w");
    if (!fuzz_stderr) harness_abort("fmemopen: %s", strerror(errno));
}

HARNESS void end_capture(void) {
    fclose(fuzz_stderr);
    fuzz_stderr = stderr;
}

/* A rejected input must leave exactly one line, "run: <path>: <problem>". */
HARNESS void check_rejection_message(const char *path) {
    size_t n = strlen(err_text);
    const char *nl = memchr(err_text, '\n', n);
    int ok = n > 6 && strncmp(err_text, "run: ", 5) == 0 && nl == err_text + n - 1 &&
             strncmp(err_text + 5, path, strlen(path)) == 0;
    if (!ok) harness_abort("rejection message is not one line naming %s: '%s'", path, err_text);
}

/* Closes what a loader left open when fail() jumped out of it. */
HARNESS void close_leftovers(void) {
    if (last_file) fclose(last_file);
    else if (last_fd >= 0) close(last_fd);
    last_file = NULL;
    last_fd = -1;
}

HARNESS FILE *null_file(void) {
    if (!devnull) devnull = fopen("/dev/null", "w");
    if (!devnull) harness_abort("cannot open /dev/null");
    return devnull;
}

/* Encodes `text`, checks every id is in the vocabulary, decodes and prints
   each one to /dev/null. When the vocabulary has all 256 byte pieces, nothing
   becomes unk, so the decoded text must be the normalised input: the text with
   malformed bytes as U+FFFD and U+2581 as a space. */
HARNESS void encode_decode(Tokenizer *t, const char *text, size_t len, int add_eos, int check_round_trip) {
    int n;
    int *ids = encode(t, text, len, 1, add_eos, &n);
    int has_bos = t->bos_id >= 0; /* Qwen's tokenizer has none */
    if (has_bos && (n < 1 || ids[0] != t->bos_id)) harness_abort("encode did not start with BOS");
    size_t norm_len;
    char *norm = check_round_trip ? normalize(t, text, len, &norm_len) : NULL;
    /* SentencePiece: decoding drops the leading space that normalize() added */
    size_t at = norm && norm_len > 0 && t->kind == SENTENCEPIECE ? 1 : 0;
    FILE *out = null_file();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size) harness_abort("encode produced id %d of %d", ids[i], t->vocab_size);
        if (i == 0 && has_bos) continue;
        int piece_len;
        const char *piece = decode(t, i ? ids[i - 1] : -1, ids[i], &piece_len);
        if (piece_len < 0) harness_abort("decode gave length %d", piece_len);
        print_piece(t, out, piece, piece_len);
        if (norm && !(add_eos && i == n - 1)) {
            if ((t->kind == SENTENCEPIECE && ids[i] == UNK_ID) || at + (size_t)piece_len > norm_len || memcmp(norm + at, piece, piece_len) != 0)
                harness_abort("decode(encode(text)) differs from the text at byte %zu (id %d)", at, ids[i]);
            at += (size_t)piece_len;
        }
    }
    if (norm && at != norm_len) harness_abort("decode(encode(text)) is %zu bytes, the text %zu", at, norm_len);
    free(norm);
    free(ids);
}

HARNESS int has_all_byte_pieces(const Tokenizer *t) {
    if (t->kind == BYTE_LEVEL_BPE) return 1; /* load_tokenizer() checked it */
    for (int b = 0; b < 256; b++)
        if (t->byte_piece[b] < 0) return 0;
    return 1;
}

/* ------------------------------------------------------------------------- */
#if defined(FUZZ_CHECKPOINT)

/* Run the model only when its run state is small: the header can ask for
   gigabytes of KV cache, which is a property of the model, not a bug. */
#define MAX_STATE_BYTES (32u << 20)

static uint64_t state_bytes(const Config *c) {
    uint64_t head_size = c->head_size, q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    uint64_t widest = widest_input(c);
    uint64_t floats = 2 * (uint64_t)c->n_layers * c->seq_len * kv_dim  /* KV cache */
                      + (uint64_t)c->seq_len * head_size                 /* RoPE tables */
                      + (uint64_t)c->seq_len                             /* attention scores */
                      + MAX_BATCH * (3 * (uint64_t)c->dim + 2 * q_dim + 2 * kv_dim + 2 * (uint64_t)c->hidden_dim
                                     + 3 * widest)
                      + 3 * (uint64_t)c->vocab_size;                     /* logits, sampler */
    return 4 * floats;
}

static Checkpoint ck; /* static: fail() may longjmp out of open_checkpoint */

/* Runs the accepted model the way generate() does: BOS and a few prompt tokens
   as a batch, then single steps, with both samplers. */
static void exercise_model(const uint8_t *data, size_t size) {
    const Config *c = &ck.config;
    if (state_bytes(c) > MAX_STATE_BYTES) return;
    kernels = choose_kernels(NULL);
    RunState s;
    Batch b;
    /* both KV caches, picked by the input's length: the int8 one quantizes
       whatever the model computes (NaN, infinities) */
    init_run_state(&s, c, c->seq_len, 0, size % 2 ? CACHE_INT8 : CACHE_FP32);
    init_batch(&b, c, &s, 1);
    pack_weights(&ck); /* as start_model() does, where the kernel set packs int8 matrices */
    /* the other samplers on by the input's length too: top-k, min-p, the presence penalty */
    Sampler sampler = {.vocab_size = c->vocab_size, .temperature = 1.0f, .topp = 0.9f, .topk = (int)(size % 7),
                       .minp = size % 3 ? 0.05f : 0.0f, .presence_penalty = size % 5 ? 1.5f : 0.0f, .rng_state = 42,
                       .probindex = xmalloc((size_t)c->vocab_size * sizeof(ProbIndex)), .softmax = softmax,
                       .argmax = kernels->argmax};
    int tokens[3] = {BOS_ID, 0, 0};
    for (int i = 1; i < 3; i++) tokens[i] = size > (size_t)i ? data[size - i] % c->vocab_size : 0;
    int n = c->seq_len < 3 ? c->seq_len : 3;
    for (int i = 0; i < n; i++)
        if (tokens[i] >= c->vocab_size)
            harness_abort("generate() would run token %d through a model of vocab_size %d", tokens[i], c->vocab_size);
    float *logits = forward_tokens(&ck, &b, tokens, n, 0);
    int next = sample(&sampler, logits);
    if (next < 0 || next >= c->vocab_size) harness_abort("sampled token %d of %d", next, c->vocab_size);
    for (int pos = n; pos < c->seq_len && pos < n + 2; pos++) {
        add_to_answer(&sampler, next);
        sampler.temperature = pos % 2 ? 0.0f : 0.8f;
        next = sample(&sampler, forward(&ck, &s, next, pos));
        if (next < 0 || next >= c->vocab_size) harness_abort("sampled token %d of %d", next, c->vocab_size);
    }
    free(sampler.probindex);
    free_answer(&sampler);
    free_packed_weights(&ck);
    free_batch(&b);
    free_run_state(&s);
}

/* One load attempt of the file as it is in the memfd; 1 if accepted. */
static int try_checkpoint(const uint8_t *data, size_t size) {
    jmp_buf jump;
    begin_capture();
    fail_jump = &jump;
    if (setjmp(jump)) {
        fail_jump = NULL;
        end_capture();
        close_leftovers();
        close_checkpoint(&ck); /* whatever open_checkpoint got to */
        memset(&ck, 0, sizeof ck);
        check_rejection_message(input_path);
        return 0;
    }
    open_checkpoint(&ck, input_path);
    last_fd = -1; /* open_checkpoint closed it */
    exercise_model(data, size);
    fail_jump = NULL;
    end_capture();
    close_checkpoint(&ck);
    memset(&ck, 0, sizeof ck);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    if (try_checkpoint(data, size)) return 0;

    /* Rejected: most mutations change the size the header implies. Try once
       more with the file cut or padded (with the input's own bytes, repeated)
       to that size, so header combinations that pass reach the weights. */
    Config c;
    jmp_buf jump;
    uint64_t expected = 0;
    static int32_t *types; /* static: set before fail() may longjmp */
    types = NULL;
    begin_capture();
    fail_jump = &jump;
    if (setjmp(jump) == 0) expected = parse_header(&c, data, size, "input", &types);
    fail_jump = NULL;
    end_capture();
    free(types);
    if (expected == 0 || expected == size || expected > (4u << 20) || size == 0) return 0;
    uint8_t *fitted = malloc(expected);
    for (uint64_t i = 0; i < expected; i++) fitted[i] = data[i % size];
    write_input(fitted, expected);
    try_checkpoint(fitted, expected);
    free(fitted);
    return 0;
}

/* ------------------------------------------------------------------------- */
#elif defined(FUZZ_TOKENIZER)

static Tokenizer tok; /* static: fail() may longjmp out of load_tokenizer */

/* The input: a tokenizer.bin, then two bytes, little-endian: vocab_size - 1. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab_size = 1 + (data[size - 2] | data[size - 1] << 8);
    /* run.c takes vocab_size from the checkpoint header, which refuses fewer
       than 3 (ids 0, 1, 2 are unk, BOS, EOS; the encoder emits them) */
    if (vocab_size < 3) return 0;
    write_input(data, size - 2);
    jmp_buf jump;
    begin_capture();
    fail_jump = &jump;
    if (setjmp(jump)) {
        fail_jump = NULL;
        end_capture();
        close_leftovers();
        free_tokenizer(&tok);
        check_rejection_message(input_path);
        return 0;
    }
    load_tokenizer(&tok, input_path, vocab_size);
    last_file = NULL; /* load_tokenizer closed it */
    fail_jump = NULL;
    end_capture();

    /* use it: some fixed text and the input's first bytes as text */
    static const char *texts[] = {"", "Once upon a time", " <0x41> <s></s>\xE2\x96\x81x", "\xF0\x9F\x98\x80\xFF\xC3"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        encode_decode(&tok, texts[i], strlen(texts[i]), (int)i & 1, 0);
    encode_decode(&tok, (const char *)data, size < 64 ? size - 2 : 62, 0, 0);
    FILE *out = null_file();
    for (int id = 0; id < tok.vocab_size; id++) {
        int len;
        const char *piece = decode(&tok, id % 3 == 1 ? BOS_ID : 0, id, &len);
        print_piece(&tok, out, piece, len);
    }
    free_tokenizer(&tok);
    memset(&tok, 0, sizeof tok);
    return 0;
}

/* ------------------------------------------------------------------------- */
#elif defined(FUZZ_ENCODE)

#ifndef FUZZ_TOKENIZER_PATH
#define FUZZ_TOKENIZER_PATH "tokenizer.bin"
#endif
#ifndef FUZZ_SHARED
#define FUZZ_SHARED "../shared"
#endif

#ifndef FUZZ_LLAMA3_TOKENIZER_PATH
#define FUZZ_LLAMA3_TOKENIZER_PATH "fuzz_corpus/tokenizer_llama3.bin"
#endif
#ifndef FUZZ_QWEN3_TOKENIZER_PATH
#define FUZZ_QWEN3_TOKENIZER_PATH "fuzz_corpus/tokenizer_qwen3.bin"
#endif

static Tokenizer llama, small, llama3, qwen3;
static int have_small, have_llama3, have_qwen3;

/* Loads a tokenizer that the fuzzing can do without; returns whether it is there. */
static int load_optional_tokenizer(Tokenizer *t, const char *path, int vocab_size) {
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "fuzz_encode: %s not found, fuzzing without it\n", path);
        return 0;
    }
    load_tokenizer(t, path, vocab_size);
    last_file = NULL;
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_stderr = stderr;
    const char *path = getenv("FUZZ_TOKENIZER") ? getenv("FUZZ_TOKENIZER") : FUZZ_TOKENIZER_PATH;
    load_tokenizer(&llama, path, 32000);
    last_file = NULL;
    char small_path[4096];
    snprintf(small_path, sizeof small_path, "%s/models/aidreams_tok512.bin",
             getenv("SHARED") ? getenv("SHARED") : FUZZ_SHARED);
    have_small = load_optional_tokenizer(&small, small_path, 512);
    /* Llama 3's byte-level BPE, as `make fuzz` exports it from ../shared */
    const char *llama3_path = getenv("FUZZ_LLAMA3_TOKENIZER") ? getenv("FUZZ_LLAMA3_TOKENIZER") : FUZZ_LLAMA3_TOKENIZER_PATH;
    have_llama3 = load_optional_tokenizer(&llama3, llama3_path, 128256);
    /* Qwen3's (NFC first), in a model of Qwen's 151936 ids */
    const char *qwen3_path = getenv("FUZZ_QWEN3_TOKENIZER") ? getenv("FUZZ_QWEN3_TOKENIZER") : FUZZ_QWEN3_TOKENIZER_PATH;
    have_qwen3 = load_optional_tokenizer(&qwen3, qwen3_path, 151936);
    return 0;
}

/* The input is the prompt, bytes as they are (NUL included: encode() takes a length). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int add_eos = size > 0 && data[0] == '!';
    encode_decode(&llama, (const char *)data, size, add_eos, has_all_byte_pieces(&llama));
    if (have_small) encode_decode(&small, (const char *)data, size, add_eos, has_all_byte_pieces(&small));
    if (have_llama3) encode_decode(&llama3, (const char *)data, size, add_eos, 1);
    if (have_qwen3) encode_decode(&qwen3, (const char *)data, size, add_eos, 1);
    return 0;
}

/* ------------------------------------------------------------------------- */
#elif defined(FUZZ_BATCH)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_stderr = stderr;
    return 0;
}

/* The input is one line of a batch file. Refused: one message line naming the
   file and the line, without control characters. Accepted: the strings are UTF-8 without NUL, and writing
   the prompt as JSON and reading that back gives the same bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const Request defaults = {.n = 256, .temperature = 1.0f, .topp = 0.9f};
    char *decoded = malloc(size + 1), *again = NULL, *written = NULL;
    Request q;
    jmp_buf jump;
    begin_capture();
    if (setjmp(jump)) {
        fail_jump = NULL;
        end_capture();
        check_rejection_message("-f fuzz.jsonl: line 1, column ");
        for (const unsigned char *c = (const unsigned char *)err_text; c[1]; c++) /* no control character but the newline */
            if (*c < 0x20 || *c == 0x7F || (c[0] == 0xC2 && c[1] >= 0x80 && c[1] < 0xA0))
                harness_abort("the message holds a control character: '%s'", err_text);
        free(decoded), free(again), free(written);
        return 0;
    }
    fail_jump = &jump;
    int accepted = parse_request("fuzz.jsonl", 1, (const char *)data, size, decoded, &q, &defaults);
    if (accepted) {
        const char *strings[] = {q.prompt, q.system, q.id};
        for (int i = 0; i < 3; i++) {
            if (!strings[i]) continue;
            for (size_t at = 0, len = strlen(strings[i]); at < len;) {
                int n = utf8_char_len((const unsigned char *)strings[i] + at, len - at);
                if (n == 0) harness_abort("accepted a string that is not UTF-8");
                at += n;
            }
        }
        size_t written_len;
        FILE *f = open_memstream(&written, &written_len);
        fputs("{\"prompt\":", f);
        json_write_string(f, q.prompt, strlen(q.prompt));
        fputs("}", f);
        fclose(f);
        Request back;
        again = malloc(written_len + 1);
        if (!parse_request("fuzz.jsonl", 1, written, written_len, again, &back, &defaults) || strcmp(back.prompt, q.prompt) != 0)
            harness_abort("the prompt written as JSON does not read back the same");
    }
    fail_jump = NULL;
    end_capture();
    if (err_text[0]) harness_abort("an accepted line wrote to stderr: %s", err_text);
    free(decoded), free(again), free(written);
    return 0;
}

/* ------------------------------------------------------------------------- */
#elif defined(FUZZ_SERVE)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_stderr = stderr;
    return 0;
}

static void check_utf8(const char *s, const char *what) {
    for (size_t at = 0, len = strlen(s); at < len;) {
        int n = utf8_char_len((const unsigned char *)s + at, len - at);
        if (n == 0) harness_abort("accepted %s that is not UTF-8", what);
        at += n;
    }
}

/* The server never calls fail() for a client's bytes: a head is whole, cut
   short, or refused with a status; a body is read, or refused with one line
   of message and the byte it is at. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jmp_buf jump;
    begin_capture();
    if (setjmp(jump)) harness_abort("fail() on a client's bytes: %s", err_text);
    fail_jump = &jump;
    HttpHead h;
    const char *why = NULL;
    int status = parse_http_head((const char *)data, size, &h, &why);
    if (status != 0 && status != 200 && status != 400 && status != 431 && status != 501 && status != 505)
        harness_abort("parse_http_head gave status %d", status);
    if (status != 200 && status != 0 && (!why || !why[0])) harness_abort("a refused head without a reason");
    if (status == 0 && size >= SERVE_MAX_HEAD) harness_abort("a head of %zu bytes still waits for more", size);
    if (status == 200) {
        if (h.head_len < 4 || h.head_len > size || memcmp(data + h.head_len - 4, "\r\n\r\n", 4) != 0)
            harness_abort("the head's length %zu is wrong", h.head_len);
        if (strlen(h.path) >= sizeof h.path || strlen(h.method) >= sizeof h.method) harness_abort("a field not terminated");
        if (h.content_length < -1) harness_abort("Content-Length %lld", h.content_length);
    }
    /* the body: what follows a whole head, else the whole input */
    size_t from = status == 200 ? h.head_len : 0, len = size - from;
    const char *body = (const char *)data + from;
    ApiRequest *q = calloc(1, sizeof *q);
    q->chat = size % 2, q->thinking = 1;
    q->strings = malloc(len + 1);
    JsonReader r = {.text = body, .p = body, .end = body + len, .out = q->strings};
    if (json_read(&r, read_api_request, q)) {
        if (q->chat) {
            if (q->n_messages < 1) harness_abort("a chat request without messages");
            for (int i = 0; i < q->n_messages; i++) {
                check_utf8(q->messages[i].content, "a message");
                if (strcmp(q->messages[i].role, "system") && strcmp(q->messages[i].role, "user") &&
                    strcmp(q->messages[i].role, "assistant"))
                    harness_abort("accepted the role '%s'", q->messages[i].role);
            }
        } else {
            check_utf8(q->prompt, "a prompt");
        }
        if (q->n_stop > MAX_STOP_TEXTS) harness_abort("%d stop strings", q->n_stop);
        for (int i = 0; i < q->n_stop; i++) check_utf8(q->stop[i], "a stop string");
        if (q->max_tokens < 0 || q->top_k < 0 || !(q->top_p >= 0 && q->top_p <= 1)) harness_abort("a setting out of range");
    } else {
        if (!r.error[0] || r.error_at < 0 || r.error_at > (long)len) harness_abort("a refusal at byte %ld of %zu", r.error_at, len);
        for (const unsigned char *c = (const unsigned char *)r.error; *c; c++)
            if (*c < 0x20) harness_abort("the message holds a control character: '%s'", r.error);
    }
    free(q->messages), free(q->strings), free(q);
    fail_jump = NULL;
    end_capture();
    if (err_text[0]) harness_abort("a client's bytes wrote to stderr: %s", err_text);
    return 0;
}

#else
#error "define one of FUZZ_CHECKPOINT, FUZZ_TOKENIZER, FUZZ_ENCODE, FUZZ_BATCH, FUZZ_SERVE"
#endif
