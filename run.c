/* run.c: inference for Llama-architecture transformers, in one C file.

   ./run model.bin -i "Once upon a time"

   The program memory-maps a flat checkpoint (llama2.c's legacy layout, or the
   versioned layouts with a 256-byte header, fp32 or int8), encodes the prompt
   with a BPE tokenizer (SentencePiece's for Llama 2, byte-level for Llama 3
   and Qwen),
   and then loops: the model turns one token at one position into logits over
   the vocabulary, the sampler picks the next token, and its text piece is
   printed.

   The file has three parts:
   Part I, the model: config and weights, run state, the math blocks, attention
     and forward(), the context shift; then loading a checkpoint and the run
     state, the tokenizer, the sampler. Read alone, it is the whole transformer.
   Part II, the speed: a thread pool, fast kernel sets chosen at start-up from
     what the CPU has (SSE, AVX2, AVX-VNNI, AVX-512, AVX-512 VNNI; NEON, its
     dot product and int8 matrix multiply), and
     forward_batch(), which runs many tokens at once. Everything there computes
     exactly what Part I does, bit for bit; the tests check it. `make PLAIN=1`
     (-DRUN_PLAIN) leaves Part II out.
   Part III: generate, chat (speculative decoding optional), perplexity and the
   command line. An appendix holds the Unicode tables of the byte-level
   tokenizers: the pre-tokenizer's character classes, and NFC's. */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
/* the server's sockets */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#if defined(__x86_64__) && !defined(RUN_PLAIN)
#include <immintrin.h>
#include <cpuid.h>
#endif
#if defined(__aarch64__) && !defined(RUN_PLAIN)
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#endif

/* Floats follow the source exactly: no multiply and add fused into one
   rounding, whatever the compiler's default (clang fuses by default, gcc does
   with -march=native in GNU mode). The outputs then match the reference ones
   bit for bit with every compiler and flag, but clang's -ffp-contract=fast,
   which by design overrides this pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

/* Fuzzers set this to get control back from fail() instead of an exit. */
static jmp_buf *fail_jump;

/* Every error ends up here: one line on stderr, then a non-zero exit. */
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (fail_jump) longjmp(*fail_jump, 1);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail("out of memory (asked for %zu bytes)", n);
    return p;
}

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fail("out of memory (asked for %zu x %zu bytes)", count, size);
    return p;
}

/* count * size bytes starting at a multiple of `alignment`, not yet written. */
static void *xaligned(size_t count, size_t size, size_t alignment) {
    if (size && count > SIZE_MAX / size) fail("out of memory (asked for %zu x %zu bytes)", count, size);
    size_t bytes = count * size;
    void *p = NULL;
    if (posix_memalign(&p, alignment, bytes ? bytes : 1) != 0) fail("out of memory (asked for %zu bytes)", bytes);
    return p;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ========================================================================= */
/* PART I: THE MODEL                                                         */
/* ========================================================================= */

/* ------------------------------------------------------------------------- */
/* Config and weights                                                         */

typedef struct {
    int dim;        /* width of the residual stream */
    int hidden_dim; /* width of the feed-forward layer */
    int n_layers;
    int n_heads;    /* query heads */
    int n_kv_heads; /* key/value heads; fewer than n_heads means grouped-query attention */
    int head_size;  /* width of one head: dim / n_heads, unless the header says otherwise (Qwen3) */
    int qkv_bias;   /* q, k and v projections add a bias (Qwen2) */
    int qk_norm;    /* each head of q and of k is RMS-normalised before RoPE (Qwen3) */
    int vocab_size;
    int seq_len;    /* longest context the model was trained for */
    int shared_classifier; /* the output layer reuses the token embedding */
    int version;    /* 0 = llama2.c legacy, 1 = fp32 with header, 2 = int8, 3 = a type per matrix */
    int group_size; /* version 2: values per int8 scale; 0 = fp32 weights */
    /* the matrices' forms in brief (version 3's type table), to size buffers */
    int smallest_group; /* fewest values per scale of an int8, q4k or q6k matrix (q4k, q6k: 256); 0 = none */
    int fp32_matrices;  /* some matrix is fp32 */
    float rope_theta;
    float norm_eps;
    /* Llama 3.1's RoPE scaling (see rope_frequency()); factor 0 = none */
    float rope_scaling_factor;
    float low_freq_factor;
    float high_freq_factor;
    int original_max_position_embeddings; /* the context the model was first trained for */
} Config;

/* A weight matrix of `rows` x `cols`, row-major, in one of four forms: fp32
   values; int8 values with one fp32 scale per group of group_size consecutive
   values (version 2, and version 3's int8 matrices); or (version 3) q4k or
   q6k, llama.cpp's Q4_K or Q6_K blocks byte for byte (see matvec_q4k(),
   matvec_q6k()). */
typedef struct {
    const float *f32;
    const int8_t *q;
    const float *scale;
    int group_size;      /* int8 */
    const uint8_t *q4k;
    const uint8_t *q6k;
    const uint8_t *packed; /* int8 with Part II's packing kernel sets: a copy, rearranged (pack_weights()) */
} Matrix;

typedef struct {
    Matrix token_embedding;   /* [vocab_size][dim] */
    const float *rms_att;     /* [n_layers][dim] */
    const float *rms_ffn;     /* [n_layers][dim] */
    const float *rms_final;   /* [dim] */
    /* q_dim = n_heads * head_size, kv_dim = n_kv_heads * head_size */
    Matrix *wq, *wk, *wv, *wo; /* per layer: [q_dim][dim], [kv_dim][dim], [kv_dim][dim], [dim][q_dim] */
    const float *bq, *bk, *bv; /* qkv_bias: [n_layers][q_dim], [n_layers][kv_dim] twice; else NULL */
    const float *q_norm, *k_norm; /* qk_norm: [n_layers][head_size] each; else NULL */
    Matrix *w1, *w2, *w3;     /* per layer: [hidden][dim], [dim][hidden], [hidden][dim] */
    Matrix classifier;        /* [vocab_size][dim] */
} Weights;

typedef struct {
    Config config;
    Weights weights;
    const uint8_t *data; /* the whole file, memory-mapped read-only */
    size_t file_size;
    int32_t *types;      /* version 3: the type table, as read and checked (type, group size per matrix) */
    uint8_t *packed;     /* Part II's packing kernel sets: the int8 matrices' copy (pack_weights()), or NULL */
} Checkpoint;

/* ------------------------------------------------------------------------- */
/* Run state: every buffer forward() needs, allocated once                    */

/* The keys (or the values) of every layer and position, in blocks of
   block_size positions; blocks[i] is the block that holds positions
   i * block_size onwards. generate and chat have one block, the whole
   context; batch mode's sequences take blocks from one pool as they grow and
   share those of a common prompt start (a paged cache, as vLLM's). In a block,
   fp32: llama2.c's [layer][pos][kv_dim]. int8 (-c int8, a quarter of the
   memory): each KV head's positions together, [layer][kv_head][pos][head_size],
   each row quantized like a weight group, with one scale. Attention reads one
   head at a time, so its int8 rows are one stream (at position 2000 of the
   1.1B shape, 12% faster than rows kv_dim apart). */
typedef struct {
    float *f32;   /* fp32 values, or NULL */
    int8_t *q;    /* int8 values, or NULL */
    float *scale; /* int8: one per row */
    int n_layers, n_kv_heads, head_size;
    int block_size;    /* positions per block */
    const int *blocks; /* the block table */
} KVCache;

/* Positions per block of batch mode's KV cache. */
#define KV_BLOCK 64

typedef struct {
    float *x;      /* residual stream [dim] */
    float *xb;     /* normalised x, then attention output [max(dim, q_dim)] */
    float *xb2;    /* projection output [dim] */
    float *hb;     /* feed-forward gate [hidden_dim] */
    float *hb2;    /* feed-forward up [hidden_dim] */
    float *q;      /* query [q_dim] */
    float *k;      /* this position's key [kv_dim], on its way into the cache */
    float *v;      /* and its value [kv_dim] */
    float *att;    /* one head's attention scores [n_pos] */
    int16_t *query16; /* one head's query in int16, for the int8 cache's scores [head_size] */
    float *logits; /* [vocab_size] */
    KVCache key_cache, value_cache;
    float *rope_cos; /* [n_pos][head_size / 2] */
    float *rope_sin;
    int8_t *xq;      /* int8, q4k and q6k weights: a projection's input in int8 [max(dim, hidden_dim, q_dim)] */
    float *xq_scale; /* and its scales, one per group */
    int n_pos;       /* positions the caches and RoPE tables hold */
} RunState;

/* ------------------------------------------------------------------------- */
/* Math blocks                                                                */

/* out = x / rms(x) * weight, rms(x) = sqrt(mean(x^2) + eps). out may be x. */
static void rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    ss /= n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int i = 0; i < n; i++) out[i] = weight[i] * (ss * x[i]);
}

/* Qwen3's q/k norm: rmsnorm() of each head of v [n_heads][head_size] on its
   own, with the one weight vector of all heads. */
static void rmsnorm_heads(float *v, int n_heads, const float *weight, int head_size, float eps) {
    for (int h = 0; h < n_heads; h++) rmsnorm(v + (size_t)h * head_size, v + (size_t)h * head_size, weight, head_size, eps);
}

/* In place: x = exp(x - max) / sum(exp(x - max)); subtracting the max keeps
   exp() from overflowing without changing the result. */
static void softmax(float *x, int n) {
    float max_val = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max_val) max_val = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

/* out[i] = W[i] . x for the rows i in [begin, end) of W [d][n]. */
static void matvec(float *out, const float *x, const float *w, int n, int begin, int end) {
    for (int i = begin; i < end; i++) {
        const float *row = w + (size_t)i * n;
        float val = 0.0f;
        for (int j = 0; j < n; j++) val += row[j] * x[j];
        out[i] = val;
    }
}

/* Symmetric int8 quantization per group: scale = max|x| / 127, q = round(x / scale). */
static void quantize(int8_t *q, float *scale, const float *x, int n, int group_size) {
    for (int g = 0; g < n / group_size; g++) {
        const float *group = x + g * group_size;
        float max_abs = 0.0f;
        for (int i = 0; i < group_size; i++) {
            float a = fabsf(group[i]);
            if (a > max_abs) max_abs = a;
        }
        float s = max_abs / 127.0f;
        scale[g] = s;
        for (int i = 0; i < group_size; i++) {
            /* roundf (half away from zero), written so that it vectorizes: the
               fraction v - trunc(v) of a float is exact */
            float v = s > 0 ? group[i] / s : 0.0f, r = truncf(v);
            if (fabsf(v - r) >= 0.5f) r += v > 0 ? 1.0f : -1.0f;
            q[g * group_size + i] = r >= -127 && r <= 127 ? (int8_t)r : 0; /* NaN from a broken model: 0 */
        }
    }
}

/* One head's query in int16, for the scores against the int8 cache's keys:
   scale = max|q| / 32767, q16 = q * (32767 / max|q|) rounded to the nearest
   integer, ties to even (adding and taking away 1.5 * 2^23 rounds a float
   below 2^22 in magnitude so, in a vector unit too). Returns the scale. */
static float quantize_query(int16_t *q16, const float *q, int n) {
    float max_abs = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(q[i]) > max_abs) max_abs = fabsf(q[i]);
    float inverse = max_abs > 0 ? 32767.0f / max_abs : 0.0f;
    for (int i = 0; i < n; i++) {
        float v = q[i] * inverse;
        q16[i] = fabsf(v) < 32767.5f ? (int16_t)((v + 0x1.8p23f) - 0x1.8p23f) : 0; /* NaN from a broken model: 0 */
    }
    return max_abs / 32767.0f;
}

/* out[i] = W[i] . x with both sides int8, for rows [begin, end): an integer dot
   product per group, scaled by the weight group's and the input group's scales. */
static void matvec_q8(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                      int begin, int end) {
    for (int i = begin; i < end; i++) {
        const int8_t *row = w->q + (size_t)i * n;
        const float *row_scale = w->scale + (size_t)i * n / group_size;
        float val = 0.0f;
        for (int j = 0; j < n; j += group_size) {
            int32_t ival = 0;
            for (int k = 0; k < group_size; k++) ival += (int32_t)xq[j + k] * row[j + k];
            val += (float)ival * row_scale[j / group_size] * xs[j / group_size];
        }
        out[i] = val;
    }
}

/* q4k, llama.cpp's Q4_K: blocks of 256 weights in 144 bytes. Bytes 0-3: fp16
   d and dmin; 4-15: a 6-bit scale and a 6-bit min for each of the 8 sub-blocks
   of 32 weights; 16-143: the 4-bit values q, 32 bytes for each pair of
   sub-blocks (the low nibbles the first sub-block, the high ones the second).
   A weight is d * scale * q - dmin * min. */
#define Q4K_BLOCK 256
#define Q4K_BLOCK_BYTES 144

/* The finite fp16 number at p (little-endian), exactly: its exponent and
   mantissa bits, 13 places up in a float, are that number times 2^-112 (the
   exponent biases are 15 and 127), subnormals included, and multiplying by
   2^112 is exact. No branches: it runs once or twice per block of 256 weights.
   Infinite and NaN scales never get here: the loader refuses them. */
static float half_to_float(const uint8_t *p) {
    uint32_t h = p[0] | (uint32_t)p[1] << 8, bits = (h & 0x7fff) << 13;
    float magnitude;
    memcpy(&magnitude, &bits, 4);
    magnitude *= 0x1p112f;
    memcpy(&bits, &magnitude, 4);
    bits |= (h & 0x8000) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Sub-block j's 6-bit scale and min: for j < 4 the low 6 bits of bytes j and
   j + 4; for j >= 4 the nibbles of byte j + 4, with the top 2 bits of bytes
   j - 4 and j above them. */
static void q4k_scale_min(const uint8_t *scales, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = scales[j] & 63;
        *min = scales[j + 4] & 63;
    } else {
        *scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
        *min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

/* Value k (0-31) of sub-block j of a block's 4-bit values qs. */
static int q4k_value(const uint8_t *qs, int j, int k) { return qs[32 * (j / 2) + k] >> (4 * (j % 2)) & 15; }

/* out[i] = W[i] . x for rows [begin, end) of a q4k W, with x in int8 and one
   scale per block of 256 (quantize() with group size Q4K_BLOCK). Per block the
   sums are integers, sum_j scale_j (q . x)_j and sum_j min_j (sum of x)_j, and
   only then scaled: by d and dmin, and x's scale. */
static void matvec_q4k(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    int blocks = n / Q4K_BLOCK;
    for (int i = begin; i < end; i++) {
        const uint8_t *block = w->q4k + (size_t)i * blocks * Q4K_BLOCK_BYTES;
        float val = 0.0f;
        for (int b = 0; b < blocks; b++, block += Q4K_BLOCK_BYTES) {
            const int8_t *x = xq + b * Q4K_BLOCK;
            const uint8_t *qs = block + 16;
            int32_t dot = 0, mins = 0;
            for (int pair = 0; pair < 4; pair++) { /* sub-blocks 2 pair (low nibbles) and 2 pair + 1 (high) */
                int scale_lo, min_lo, scale_hi, min_hi;
                q4k_scale_min(block + 4, 2 * pair, &scale_lo, &min_lo);
                q4k_scale_min(block + 4, 2 * pair + 1, &scale_hi, &min_hi);
                int32_t qx_lo = 0, qx_hi = 0, sum_lo = 0, sum_hi = 0;
                for (int k = 0; k < 32; k++) {
                    qx_lo += (qs[32 * pair + k] & 15) * x[64 * pair + k];
                    qx_hi += (qs[32 * pair + k] >> 4) * x[64 * pair + 32 + k];
                    sum_lo += x[64 * pair + k];
                    sum_hi += x[64 * pair + 32 + k];
                }
                dot += scale_lo * qx_lo + scale_hi * qx_hi;
                mins += min_lo * sum_lo + min_hi * sum_hi;
            }
            val += xs[b] * (half_to_float(block) * (float)dot - half_to_float(block + 2) * (float)mins);
        }
        out[i] = val;
    }
}

/* q6k, llama.cpp's Q6_K: blocks of 256 weights in 210 bytes. Bytes 0-127: the
   low 4 bits of each 6-bit value q; 128-191: the high 2 bits; 192-207: an int8
   scale for each of the 16 sub-blocks of 16 weights; 208-209: fp16 d. A weight
   is d * scale * (q - 32). */
#define Q6K_BLOCK 256
#define Q6K_BLOCK_BYTES 210
#define Q6K_HIGH_BITS 128
#define Q6K_SCALES 192
#define Q6K_D 208

/* A q6k block's values q - 32 (-32 to 31), in order. Each half of 128 values
   has 64 bytes of low bits and 32 of high bits: values l and l + 64 (l < 64)
   take the low and high nibble of low byte l; values l + 32 m (l < 32, m =
   0-3) bit pair m of high byte l. Loops over runs of 32 values vectorize. */
static void q6k_values(const uint8_t *block, int8_t v[Q6K_BLOCK]) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *low = block + 64 * half, *high = block + Q6K_HIGH_BITS + 32 * half;
        for (int m = 0; m < 4; m++)
            for (int l = 0; l < 32; l++)
                v[128 * half + 32 * m + l] =
                    (int8_t)(((low[32 * (m % 2) + l] >> (4 * (m / 2)) & 15) | (high[l] >> (2 * m) & 3) << 4) - 32);
    }
}

/* out[i] = W[i] . x for rows [begin, end) of a q6k W, with x as for q4k (one
   scale per block of 256). Per block the sum of scale * (q - 32) . x over the
   sub-blocks is an integer (at most 256 * 128 * 32 * 128 = 2^27), scaled only
   then: by d, and x's scale. */
static void matvec_q6k(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    int blocks = n / Q6K_BLOCK;
    for (int i = begin; i < end; i++) {
        const uint8_t *block = w->q6k + (size_t)i * blocks * Q6K_BLOCK_BYTES;
        float val = 0.0f;
        for (int b = 0; b < blocks; b++, block += Q6K_BLOCK_BYTES) {
            const int8_t *x = xq + b * Q6K_BLOCK;
            int8_t v[Q6K_BLOCK];
            q6k_values(block, v);
            int32_t dot = 0;
            for (int sub = 0; sub < 16; sub++) {
                int32_t qx = 0;
                for (int k = 16 * sub; k < 16 * sub + 16; k++) qx += v[k] * x[k];
                dot += (int8_t)block[Q6K_SCALES + sub] * qx;
            }
            val += xs[b] * (half_to_float(block + Q6K_D) * (float)dot);
        }
        out[i] = val;
    }
}

/* Rotary position embedding: each adjacent pair (v[2i], v[2i+1]) of every head
   is rotated by the angle pos * theta^(-2i/head_size) (see rope_frequency()). */
static void rope(float *v, int n, int head_size, const float *cos_pos, const float *sin_pos) {
    for (float *head = v; head < v + n; head += head_size)
        for (int i = 0; i < head_size; i += 2) {
            float fcr = cos_pos[i / 2], fci = sin_pos[i / 2];
            float v0 = head[i], v1 = head[i + 1];
            head[i] = v0 * fcr - v1 * fci;
            head[i + 1] = v0 * fci + v1 * fcr;
        }
}

/* SwiGLU: hb = silu(hb) * hb2, silu(x) = x * sigmoid(x). */
static void swiglu(float *hb, const float *hb2, int n) {
    for (int i = 0; i < n; i++) {
        float val = hb[i];
        val *= 1.0f / (1.0f + expf(-val));
        val *= hb2[i];
        hb[i] = val;
    }
}

static void add(float *x, const float *y, int n) {
    for (int i = 0; i < n; i++) x[i] += y[i];
}

/* Row `token` of the embedding table, dequantized when stored as int8, q4k or q6k. */
static void embed(float *out, const Matrix *table, int token, int dim) {
    if (table->f32) {
        memcpy(out, table->f32 + (size_t)token * dim, dim * sizeof(float));
    } else if (table->q) {
        int gs = table->group_size;
        const int8_t *q = table->q + (size_t)token * dim;
        const float *scale = table->scale + (size_t)token * dim / gs;
        for (int i = 0; i < dim; i++) out[i] = q[i] * scale[i / gs];
    } else if (table->q4k) {
        const uint8_t *block = table->q4k + (size_t)token * (dim / Q4K_BLOCK) * Q4K_BLOCK_BYTES;
        for (int b = 0; b < dim / Q4K_BLOCK; b++, block += Q4K_BLOCK_BYTES)
            for (int j = 0; j < 8; j++) {
                int scale, min;
                q4k_scale_min(block + 4, j, &scale, &min);
                float d = half_to_float(block) * scale, m = half_to_float(block + 2) * min;
                for (int k = 0; k < 32; k++) out[Q4K_BLOCK * b + 32 * j + k] = d * q4k_value(block + 16, j, k) - m;
            }
    } else {
        const uint8_t *block = table->q6k + (size_t)token * (dim / Q6K_BLOCK) * Q6K_BLOCK_BYTES;
        for (int b = 0; b < dim / Q6K_BLOCK; b++, block += Q6K_BLOCK_BYTES) {
            int8_t v[Q6K_BLOCK];
            q6k_values(block, v);
            float d = half_to_float(block + Q6K_D);
            for (int k = 0; k < Q6K_BLOCK; k++) out[Q6K_BLOCK * b + k] = d * (int8_t)block[Q6K_SCALES + k / 16] * v[k];
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Projections: out = W x                                                     */

/* The input x [n] of the projections that read it. For int8, q4k and q6k
   weights x is also quantized, in groups as the weights' (q4k, q6k: one scale
   per block of 256), as runq.c does: once for all the projections that share
   it and its groups (q, k and v; the feed-forward's w1 and w3). */
typedef struct {
    const float *x;
    int n;
    int8_t *q;          /* x in int8, when group_size > 0 */
    float *scale;
    int group_size;     /* of the quantized x in q and scale; 0: not quantized yet */
} Input;

static Input prepare_input(RunState *s, const float *x, int n) { return (Input){x, n, s->xq, s->xq_scale, 0}; }

/* The group size a matrix's input is quantized in: int8 its own, q4k and q6k
   one scale per block; 0 for fp32. */
static int input_group_size(const Matrix *w) {
    return w->q4k ? Q4K_BLOCK : w->q6k ? Q6K_BLOCK : w->q ? w->group_size : 0;
}

/* out = W x for a weight matrix W [d][n], fp32, int8, q4k or q6k. */
static void linear(float *out, Input *in, const Matrix *w, int d) {
    if (w->f32) {
        matvec(out, in->x, w->f32, in->n, 0, d);
        return;
    }
    int group_size = input_group_size(w);
    if (in->group_size != group_size) {
        quantize(in->q, in->scale, in->x, in->n, group_size);
        in->group_size = group_size;
    }
    if (w->q4k) matvec_q4k(out, in->q, in->scale, w, in->n, 0, d);
    else if (w->q6k) matvec_q6k(out, in->q, in->scale, w, in->n, 0, d);
    else matvec_q8(out, in->q, in->scale, w, in->n, group_size, 0, d);
}

/* ------------------------------------------------------------------------- */
/* The KV cache and attention                                                 */

/* The number of the row of one layer, KV head and position: its values start
   at row * head_size in f32 or q, and (int8) its scale is scale[row]. */
static size_t cache_row_number(const KVCache *c, int layer, int kv_head, int pos) {
    size_t block = (size_t)c->blocks[pos / c->block_size] * c->n_layers + layer, offset = pos % c->block_size;
    if (c->f32) return (block * c->block_size + offset) * c->n_kv_heads + kv_head;
    return (block * c->n_kv_heads + kv_head) * c->block_size + offset;
}

/* Stores one layer's key (or value) at one position: kv_dim values, one
   head_size row per KV head. The int8 cache quantizes each row with its own
   scale, by quantize() or (Part II) its fast twin. */
typedef void (*QuantizeFn)(int8_t *q, float *scale, const float *x, int n, int group_size);
static void cache_store(KVCache *c, int layer, int pos, const float *kv, QuantizeFn quantize_row) {
    for (int h = 0; h < c->n_kv_heads; h++) {
        size_t number = cache_row_number(c, layer, h, pos), at = number * c->head_size;
        const float *row = kv + (size_t)h * c->head_size;
        if (c->f32) memcpy(c->f32 + at, row, c->head_size * sizeof(float));
        else quantize_row(c->q + at, c->scale + number, row, c->head_size, c->head_size);
    }
}

/* The row of one layer, KV head and position as floats: the fp32 cache's
   own, or the int8 one dequantized into buf [head_size]. */
static const float *cache_row(const KVCache *c, int layer, int kv_head, int pos, float *buf) {
    size_t number = cache_row_number(c, layer, kv_head, pos), at = number * c->head_size;
    if (c->f32) return c->f32 + at;
    float scale = c->scale[number];
    for (int i = 0; i < c->head_size; i++) buf[i] = (float)c->q[at + i] * scale;
    return buf;
}

/* One query head attending over positions 0..pos of its KV head (in layer
   `layer`): scores q.k / sqrt(head_size), softmaxed, then the values mixed by
   them. Against the int8 cache's keys the query goes to int16 (query16: room
   for it), and each score is an integer dot product, exact, times the two
   scales: a fast kernel may add its products in any order. Values are read as
   cache_row() reads them. */
static void attention_head(float *out, const float *q, const KVCache *keys, const KVCache *values, int layer,
                           int kv_head, int pos, float *att, int16_t *query16) {
    int head_size = keys->head_size;
    float query_scale = keys->q ? quantize_query(query16, q, head_size) : 0.0f;
    for (int t = 0; t <= pos; t++) {
        size_t number = cache_row_number(keys, layer, kv_head, t), at = number * head_size;
        float score = 0.0f;
        if (keys->f32) {
            for (int i = 0; i < head_size; i++) score += keys->f32[at + i] * q[i];
        } else {
            int64_t dot = 0;
            for (int i = 0; i < head_size; i++) dot += query16[i] * keys->q[at + i];
            score = (float)dot * (query_scale * keys->scale[number]);
        }
        att[t] = score / sqrtf(head_size);
    }
    softmax(att, pos + 1);
    memset(out, 0, head_size * sizeof(float));
    for (int t = 0; t <= pos; t++) {
        size_t number = cache_row_number(values, layer, kv_head, t), at = number * head_size;
        if (values->f32) {
            for (int i = 0; i < head_size; i++) out[i] += att[t] * values->f32[at + i];
        } else {
            float scale = values->scale[number];
            for (int i = 0; i < head_size; i++) out[i] += att[t] * ((float)values->q[at + i] * scale);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* forward(): one token at one position in, logits over the vocabulary out    */

/* (Builds with Part II run forward_batch() instead, which the tests compare with this.) */
__attribute__((unused)) static float *forward(const Checkpoint *ck, RunState *s, int token, int pos) {
    const Config *c = &ck->config;
    const Weights *w = &ck->weights;
    int dim = c->dim, hidden_dim = c->hidden_dim;
    int head_size = c->head_size;
    int q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    int heads_per_kv = c->n_heads / c->n_kv_heads; /* query heads sharing a key/value head */
    const float *cos_pos = s->rope_cos + (size_t)pos * head_size / 2, *sin_pos = s->rope_sin + (size_t)pos * head_size / 2;

    embed(s->x, &w->token_embedding, token, dim);

    for (int l = 0; l < c->n_layers; l++) {
        /* attention: q, k, v from the normalised stream; k and v go into the
           cache row of this position, and each head reads its KV head's rows */
        rmsnorm(s->xb, s->x, w->rms_att + (size_t)l * dim, dim, c->norm_eps);
        Input in = prepare_input(s, s->xb, dim);
        linear(s->q, &in, &w->wq[l], q_dim);
        linear(s->k, &in, &w->wk[l], kv_dim);
        linear(s->v, &in, &w->wv[l], kv_dim);
        if (c->qkv_bias) { /* Qwen2 */
            add(s->q, w->bq + (size_t)l * q_dim, q_dim);
            add(s->k, w->bk + (size_t)l * kv_dim, kv_dim);
            add(s->v, w->bv + (size_t)l * kv_dim, kv_dim);
        }
        if (c->qk_norm) { /* Qwen3: each head of q and of k normalised on its own */
            rmsnorm_heads(s->q, c->n_heads, w->q_norm + (size_t)l * head_size, head_size, c->norm_eps);
            rmsnorm_heads(s->k, c->n_kv_heads, w->k_norm + (size_t)l * head_size, head_size, c->norm_eps);
        }
        rope(s->q, q_dim, head_size, cos_pos, sin_pos);
        rope(s->k, kv_dim, head_size, cos_pos, sin_pos);
        cache_store(&s->key_cache, l, pos, s->k, quantize);
        cache_store(&s->value_cache, l, pos, s->v, quantize);
        for (int h = 0; h < c->n_heads; h++)
            attention_head(s->xb + h * head_size, s->q + h * head_size, &s->key_cache, &s->value_cache, l,
                           h / heads_per_kv, pos, s->att, s->query16);
        in = prepare_input(s, s->xb, q_dim);
        linear(s->xb2, &in, &w->wo[l], dim);
        add(s->x, s->xb2, dim);

        /* feed-forward: w2(silu(w1 x) * w3 x) */
        rmsnorm(s->xb, s->x, w->rms_ffn + (size_t)l * dim, dim, c->norm_eps);
        in = prepare_input(s, s->xb, dim);
        linear(s->hb, &in, &w->w1[l], hidden_dim);
        linear(s->hb2, &in, &w->w3[l], hidden_dim);
        swiglu(s->hb, s->hb2, hidden_dim);
        in = prepare_input(s, s->hb, hidden_dim);
        linear(s->xb, &in, &w->w2[l], dim);
        add(s->x, s->xb, dim);
    }

    rmsnorm(s->x, s->x, w->rms_final, dim, c->norm_eps);
    Input in = prepare_input(s, s->x, dim);
    linear(s->logits, &in, &w->classifier, c->vocab_size);
    return s->logits;
}

/* ------------------------------------------------------------------------- */
/* Context shift: making room in a full cache without running the model again */

/* Moves the rows of positions [from, from + count) of one layer of a one-block
   cache to [to, to + count), as stored. */
static void cache_move(KVCache *c, int layer, int to, int from, int count) {
    if (c->f32) { /* a layer's positions are one run of rows */
        memmove(c->f32 + cache_row_number(c, layer, 0, to) * c->head_size,
                c->f32 + cache_row_number(c, layer, 0, from) * c->head_size,
                (size_t)count * c->n_kv_heads * c->head_size * sizeof(float));
        return;
    }
    for (int h = 0; h < c->n_kv_heads; h++) {
        size_t dst = cache_row_number(c, layer, h, to), src = cache_row_number(c, layer, h, from);
        memmove(c->q + dst * c->head_size, c->q + src * c->head_size, (size_t)count * c->head_size);
        memmove(c->scale + dst, c->scale + src, count * sizeof(float));
    }
}

/* Drops the cache rows [keep, keep + drop) of every layer and moves the rows
   [keep + drop, end) down by `drop`. A cached key is RoPE(Wk x) at its
   position; rotations add up, so turning each pair back by drop times its
   frequency gives the key of the same token `drop` positions earlier, with the
   RoPE tables' own angles (Llama 3's scaling included). Values carry no
   position: they only move. The layers are not run again. */
static void shift_cache(RunState *s, const Config *c, int keep, int drop, int end) {
    if (keep + drop >= end) return; /* no rows after the dropped ones: nothing moves */
    KVCache *keys = &s->key_cache;
    int head_size = keys->head_size, kv_dim = keys->n_kv_heads * head_size;
    /* rope() by minus the angles of `drop` positions: cos(-a) = cos(a), sin(-a) = -sin(a) */
    const float *cos_back = s->rope_cos + (size_t)drop * head_size / 2;
    float *sin_back = xmalloc(head_size / 2 * sizeof(float));
    for (int i = 0; i < head_size / 2; i++) sin_back[i] = -s->rope_sin[(size_t)drop * head_size / 2 + i];
    for (int l = 0; l < c->n_layers; l++) {
        for (int pos = keep + drop; pos < end; pos++) {
            /* through floats, so that the int8 cache requantizes the turned key */
            for (int h = 0; h < keys->n_kv_heads; h++) {
                float *key = s->k + (size_t)h * head_size;
                memmove(key, cache_row(keys, l, h, pos, key), head_size * sizeof(float));
            }
            rope(s->k, kv_dim, head_size, cos_back, sin_back);
            cache_store(keys, l, pos - drop, s->k, quantize);
        }
        cache_move(&s->value_cache, l, keep, keep + drop, end - keep - drop);
    }
    free(sin_back);
}

/* ------------------------------------------------------------------------- */
/* Loading a checkpoint                                                       */

#define HEADER_MAGIC 0x616b3432u /* "ak42" */
#define HEADER_SIZE 256
#define LEGACY_HEADER_SIZE 28

/* The checkpoint layout, described once: the tensors in file order. Version 0
   (llama2.c's legacy export) interleaves the norms with the matrices and
   keeps two RoPE tables that this program recomputes; versions 1, 2 and 3
   store the norms first, then (when the header's flags say the model has
   them) the q/k norms and the q, k, v biases. Matrices are fp32 (versions 0
   and 1), int8 + scales (version 2), or each in the type its entry in version
   3's type table gives; norms, biases and tables are always fp32. */
typedef enum {
    TOKEN_EMBEDDING, RMS_ATT, WQ, WK, WV, WO, RMS_FFN, W1, W2, W3, RMS_FINAL, ROPE_TABLES, Q_NORM, K_NORM, BQ, BK, BV,
    CLASSIFIER
} Tensor;

static const char *const tensor_names[] = {"token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn",
                                           "w1", "w2", "w3", "rms_final", "rope_tables", "q_norm", "k_norm",
                                           "bq", "bk", "bv", "classifier"};

/* Version 3's type table follows the header: for each matrix in file order
   (per-layer ones layer by layer), an int32 type and an int32 group size (int8:
   values per scale; else 0). An int8 matrix is its values, then a float scale
   per group; a q4k or q6k one its rows' Q4_K or Q6_K blocks, row after row. */
typedef enum { TYPE_FP32 = 0, TYPE_INT8 = 1, TYPE_Q4K = 2, TYPE_Q6K = 3 } MatrixType;
#define TYPE_ENTRY_SIZE 8

static const Tensor legacy_layout[] = {TOKEN_EMBEDDING, RMS_ATT, WQ, WK, WV, WO, RMS_FFN,
                                       W1, W2, W3, RMS_FINAL, ROPE_TABLES, CLASSIFIER};
static const Tensor header_layout[] = {RMS_ATT, RMS_FFN, RMS_FINAL, Q_NORM, K_NORM, BQ, BK, BV, TOKEN_EMBEDDING,
                                       WQ, WK, WV, WO, W1, W2, W3, CLASSIFIER};

/* `count` tensors of rows x cols (count = n_layers for per-layer matrices, 0
   for a tensor the model does not have: a classifier that is the token
   embedding, biases and q/k norms of models without them). */
typedef struct {
    uint64_t count, rows, cols;
    int is_matrix;
} TensorShape;

static TensorShape tensor_shape(const Config *c, Tensor t) {
    uint64_t dim = c->dim, hidden = c->hidden_dim, layers = c->n_layers, vocab = c->vocab_size;
    uint64_t head_size = c->head_size, q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    switch (t) {
    case TOKEN_EMBEDDING: return (TensorShape){1, vocab, dim, 1};
    case RMS_ATT: case RMS_FFN: return (TensorShape){1, layers, dim, 0};
    case Q_NORM: case K_NORM: return (TensorShape){c->qk_norm ? 1 : 0, layers, head_size, 0};
    case BQ: return (TensorShape){c->qkv_bias ? 1 : 0, layers, q_dim, 0};
    case BK: case BV: return (TensorShape){c->qkv_bias ? 1 : 0, layers, kv_dim, 0};
    case WQ: return (TensorShape){layers, q_dim, dim, 1};
    case WO: return (TensorShape){layers, dim, q_dim, 1};
    case WK: case WV: return (TensorShape){layers, kv_dim, dim, 1};
    case W1: case W3: return (TensorShape){layers, hidden, dim, 1};
    case W2: return (TensorShape){layers, dim, hidden, 1};
    case RMS_FINAL: return (TensorShape){1, 1, dim, 0};
    case ROPE_TABLES: return (TensorShape){1, 2 * (uint64_t)c->seq_len, head_size / 2, 0}; /* cos, then sin */
    case CLASSIFIER: break;
    }
    return (TensorShape){c->shared_classifier ? 0 : 1, vocab, dim, 1};
}

static const Tensor *layout_of(const Config *c, int *n) {
    *n = c->version == 0 ? (int)(sizeof legacy_layout / sizeof *legacy_layout)
                         : (int)(sizeof header_layout / sizeof *header_layout);
    return c->version == 0 ? legacy_layout : header_layout;
}

static int32_t read_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static float read_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }

/* A tensor's name for messages: "wq of layer 3". */
static const char *tensor_name(char buf[64], Tensor t, uint64_t layer) {
    int per_layer = t == WQ || t == WK || t == WV || t == WO || t == W1 || t == W2 || t == W3;
    if (per_layer) snprintf(buf, 64, "%s of layer %llu", tensor_names[t], (unsigned long long)layer);
    else snprintf(buf, 64, "%s", tensor_names[t]);
    return buf;
}

/* The matrices in the file (version 3's type table has an entry for each). */
static uint64_t matrix_count(const Config *c) { return 1 + 7 * (uint64_t)c->n_layers + !c->shared_classifier; }

/* Bytes of one tensor of the shape and type; int8 matrices add one float per group. */
static uint64_t tensor_bytes(TensorShape s, MatrixType type, int group_size) {
    uint64_t values = s.rows * s.cols;
    if (type == TYPE_INT8) return values + 4 * (values / group_size);
    if (type == TYPE_Q4K) return values / Q4K_BLOCK * Q4K_BLOCK_BYTES;
    if (type == TYPE_Q6K) return values / Q6K_BLOCK * Q6K_BLOCK_BYTES;
    return 4 * values;
}

/* The type and group size of matrix number k (in file order): version 3's
   type table entry (from parse_header()'s copy of the table), or what its
   version stores. */
static MatrixType matrix_type(const Config *c, const int32_t *types, uint64_t k, int *group_size) {
    if (c->version == 3) {
        *group_size = types[2 * k + 1];
        return (MatrixType)types[2 * k];
    }
    *group_size = c->group_size;
    return c->version == 2 ? TYPE_INT8 : TYPE_FP32;
}


/* The RoPE scaling fields: all zero (no scaling), or a usable Llama 3.1 rule.
   rope_frequency() divides by each of them. */
static void check_rope_scaling(const Config *c, const char *path) {
    if (c->rope_scaling_factor == 0) {
        if (c->low_freq_factor != 0 || c->high_freq_factor != 0 || c->original_max_position_embeddings != 0)
            fail("%s: rope_scaling_factor is 0 (no RoPE scaling) but low_freq_factor, high_freq_factor or "
                 "original_max_position_embeddings is not", path);
        return;
    }
    if (!(c->rope_scaling_factor > 0 && c->rope_scaling_factor < INFINITY))
        fail("%s: rope_scaling_factor %g is not a positive number", path, c->rope_scaling_factor);
    if (!(c->low_freq_factor > 0 && c->low_freq_factor < INFINITY))
        fail("%s: low_freq_factor %g is not a positive number", path, c->low_freq_factor);
    if (!(c->high_freq_factor > c->low_freq_factor && c->high_freq_factor < INFINITY))
        fail("%s: high_freq_factor %g is not a number above low_freq_factor %g", path, c->high_freq_factor,
             c->low_freq_factor);
    if (c->original_max_position_embeddings <= 0)
        fail("%s: original_max_position_embeddings is %d, must be positive", path, c->original_max_position_embeddings);
}

/* Reads and checks the header (and version 3's type table, copied to *types);
   returns the byte size the whole file must have.
   Sizes are computed in 64 bits and every product is checked, so that a hostile
   header cannot wrap an offset. */
static uint64_t parse_header(Config *c, const uint8_t *h, size_t avail, const char *path, int32_t **types) {
    int32_t fields[7];
    uint64_t offset;
    memset(c, 0, sizeof *c);
    if (avail >= 8 && (uint32_t)read_i32(h) == HEADER_MAGIC) {
        if (avail < HEADER_SIZE) fail("%s: truncated header (%zu of %d bytes)", path, avail, HEADER_SIZE);
        c->version = read_i32(h + 4);
        if (c->version < 1 || c->version > 3)
            fail("%s: unknown checkpoint version %d (this program reads 0, 1, 2 and 3)", path, c->version);
        for (int i = 0; i < 7; i++) fields[i] = read_i32(h + 8 + 4 * i);
        if (h[36] > 1) fail("%s: shared_classifier flag is %d, expected 0 or 1", path, h[36]);
        c->shared_classifier = h[36];
        c->group_size = c->version >= 2 ? read_i32(h + 37) : 0;
        c->rope_theta = read_f32(h + 44);
        c->norm_eps = read_f32(h + 48);
        c->rope_scaling_factor = read_f32(h + 52);
        c->low_freq_factor = read_f32(h + 56);
        c->high_freq_factor = read_f32(h + 60);
        c->original_max_position_embeddings = read_i32(h + 64);
        c->head_size = read_i32(h + 68);
        if (h[72] > 1 || h[73] > 1) fail("%s: qkv_bias flag %d or qk_norm flag %d is not 0 or 1", path, h[72], h[73]);
        c->qkv_bias = h[72];
        c->qk_norm = h[73];
        offset = HEADER_SIZE;
    } else {
        if (avail < LEGACY_HEADER_SIZE)
            fail("%s: truncated header (%zu of %d bytes)", path, avail, LEGACY_HEADER_SIZE);
        for (int i = 0; i < 7; i++) fields[i] = read_i32(h + 4 * i);
        /* legacy files flag a separate classifier with a negative vocab_size */
        c->shared_classifier = fields[5] > 0;
        if (fields[5] < 0 && fields[5] != INT32_MIN) fields[5] = -fields[5];
        offset = LEGACY_HEADER_SIZE;
    }
    static const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (fields[i] <= 0) fail("%s: header field %s is %d, must be positive", path, names[i], fields[i]);
    c->dim = fields[0]; c->hidden_dim = fields[1]; c->n_layers = fields[2]; c->n_heads = fields[3];
    c->n_kv_heads = fields[4]; c->vocab_size = fields[5]; c->seq_len = fields[6];
    /* the program feeds ids 1 (BOS) and 2 (EOS) to the model, and encode()
       falls back to 0 (unk): a smaller vocabulary would index past its tables */
    if (c->vocab_size < 3)
        fail("%s: header field vocab_size is %d, must be at least 3 (unk, BOS, EOS)", path, c->vocab_size);
    if (c->head_size < 0) fail("%s: header field head_size is %d, must be positive (or 0: dim / n_heads)", path, c->head_size);
    if (c->head_size == 0) {
        if (c->dim % c->n_heads) fail("%s: dim %d is not a multiple of n_heads %d", path, c->dim, c->n_heads);
        c->head_size = c->dim / c->n_heads;
    }
    if (c->head_size % 2) fail("%s: head size %d is odd (RoPE rotates pairs)", path, c->head_size);
    if ((int64_t)c->head_size * c->n_heads > INT32_MAX / 4)
        fail("%s: n_heads %d x head_size %d is too wide", path, c->n_heads, c->head_size);
    int q_dim = c->head_size * c->n_heads;
    if (c->n_heads % c->n_kv_heads)
        fail("%s: n_heads %d is not a multiple of n_kv_heads %d", path, c->n_heads, c->n_kv_heads);
    if (c->version == 2) {
        if (c->group_size <= 0) fail("%s: group_size is %d, must be positive", path, c->group_size);
        if (c->dim % c->group_size || c->hidden_dim % c->group_size || q_dim % c->group_size)
            fail("%s: group_size %d does not divide dim %d, hidden_dim %d and n_heads x head_size %d", path,
                 c->group_size, c->dim, c->hidden_dim, q_dim);
    }
    if (c->version == 3 && c->group_size != 0)
        fail("%s: group_size is %d, must be 0 in version 3 (each matrix has its own)", path, c->group_size);
    if (c->rope_theta == 0) c->rope_theta = 10000.0f;
    if (c->norm_eps == 0) c->norm_eps = 1e-5f;
    if (!(c->rope_theta > 0 && c->rope_theta < INFINITY)) fail("%s: rope_theta %g is not a positive number", path, c->rope_theta);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) fail("%s: rms_norm_eps %g is not in (0, 1)", path, c->norm_eps);
    check_rope_scaling(c, path);

    /* Count the bytes. Each field is below 2^31, so a sum in double precision
       first tells whether the exact 64-bit sum could overflow. */
    int n;
    const Tensor *layout = layout_of(c, &n);
    double estimate = offset;
    for (int i = 0; i < n; i++) {
        TensorShape s = tensor_shape(c, layout[i]);
        estimate += (double)s.count * s.rows * s.cols * 4;
    }
    if (estimate > (double)((uint64_t)1 << 50)) fail("%s: header sizes overflow (%.3g bytes)", path, estimate);
    c->smallest_group = c->version == 2 ? c->group_size : 0;
    c->fp32_matrices = c->version < 2;
    uint64_t size = offset;
    if (c->version < 3) {
        for (int i = 0; i < n; i++) {
            TensorShape s = tensor_shape(c, layout[i]);
            size += s.count * tensor_bytes(s, s.is_matrix && c->version == 2 ? TYPE_INT8 : TYPE_FP32, c->group_size);
        }
        return size;
    }
    /* version 3: the type table, copied out of the file (which could change under the mapping) and checked */
    uint64_t table_bytes = TYPE_ENTRY_SIZE * matrix_count(c);
    if (avail < offset + table_bytes)
        fail("%s: truncated type table (%zu of %llu bytes)", path, avail - offset, (unsigned long long)table_bytes);
    int32_t *table = *types = xmalloc(table_bytes); /* the caller's to free, also when a check fails */
    memcpy(table, h + offset, table_bytes);
    size += table_bytes;
    uint64_t k = 0;
    for (int i = 0; i < n; i++) {
        TensorShape s = tensor_shape(c, layout[i]);
        for (uint64_t layer = 0; layer < s.count; layer++) {
            if (!s.is_matrix) {
                size += tensor_bytes(s, TYPE_FP32, 0);
                continue;
            }
            int group_size, values_per_scale = 0;
            MatrixType type = matrix_type(c, table, k++, &group_size);
            char name[64];
            if (type == TYPE_INT8) {
                if (group_size <= 0 || s.cols % group_size)
                    fail("%s: %s: int8 group size %d does not divide its rows of %llu values", path,
                         tensor_name(name, layout[i], layer), group_size, (unsigned long long)s.cols);
                values_per_scale = group_size;
            } else if (type == TYPE_Q4K) {
                if (s.cols % Q4K_BLOCK)
                    fail("%s: %s: q4k rows of %llu values are not whole blocks of %d", path,
                         tensor_name(name, layout[i], layer), (unsigned long long)s.cols, Q4K_BLOCK);
                values_per_scale = Q4K_BLOCK;
            } else if (type == TYPE_Q6K) {
                if (s.cols % Q6K_BLOCK)
                    fail("%s: %s: q6k rows of %llu values are not whole blocks of %d", path,
                         tensor_name(name, layout[i], layer), (unsigned long long)s.cols, Q6K_BLOCK);
                values_per_scale = Q6K_BLOCK;
            } else if (type == TYPE_FP32) {
                c->fp32_matrices = 1;
            } else {
                fail("%s: %s: unknown type code %d (0 fp32, 1 int8, 2 q4k, 3 q6k)", path, tensor_name(name, layout[i], layer),
                     (int)type);
            }
            if (type != TYPE_INT8 && group_size != 0)
                fail("%s: %s: group size %d, must be 0 for its type", path, tensor_name(name, layout[i], layer),
                     group_size);
            if (values_per_scale && (c->smallest_group == 0 || values_per_scale < c->smallest_group))
                c->smallest_group = values_per_scale;
            size += tensor_bytes(s, type, group_size);
        }
    }
    return size;
}

/* Whether every scale of a version 3 matrix is a finite number (fp16 d and
   dmin of each q4k block, d of each q6k block, float scales of int8). */
static int finite_scales(const Matrix *m, TensorShape s) {
    uint64_t values = s.rows * s.cols;
    if (m->q4k) {
        for (uint64_t b = 0; b < values / Q4K_BLOCK; b++)
            for (int half = 0; half < 2; half++)
                if ((m->q4k[b * Q4K_BLOCK_BYTES + 2 * half + 1] & 0x7c) == 0x7c) return 0; /* exponent 31 */
    } else if (m->q6k) {
        for (uint64_t b = 0; b < values / Q6K_BLOCK; b++)
            if ((m->q6k[b * Q6K_BLOCK_BYTES + Q6K_D + 1] & 0x7c) == 0x7c) return 0;
    } else if (m->q) {
        for (uint64_t g = 0; g < values / m->group_size; g++)
            if (!isfinite(m->scale[g])) return 0;
    }
    return 1;
}

/* Points every weight into the mapping, walking the layout. */
static void map_weights(Checkpoint *ck, const char *path) {
    const Config *c = &ck->config;
    Weights *w = &ck->weights;
    Matrix **per_layer[CLASSIFIER + 1] = {[WQ] = &w->wq, [WK] = &w->wk, [WV] = &w->wv, [WO] = &w->wo,
                                          [W1] = &w->w1, [W2] = &w->w2, [W3] = &w->w3};
    const uint8_t *p = ck->data + (c->version == 0 ? LEGACY_HEADER_SIZE : HEADER_SIZE);
    if (c->version == 3) p += TYPE_ENTRY_SIZE * matrix_count(c);
    int n;
    uint64_t matrix = 0;
    const Tensor *layout = layout_of(c, &n);
    for (int i = 0; i < n; i++) {
        TensorShape s = tensor_shape(c, layout[i]);
        Matrix **layers = per_layer[layout[i]];
        if (layers) *layers = xcalloc(s.count, sizeof(Matrix));
        for (uint64_t k = 0; k < s.count; k++) {
            Matrix m = {0};
            MatrixType type = s.is_matrix ? matrix_type(c, ck->types, matrix++, &m.group_size) : TYPE_FP32;
            if (type == TYPE_INT8) {
                m.q = (const int8_t *)p;
                m.scale = (const float *)(p + s.rows * s.cols);
            } else if (type == TYPE_Q4K) {
                m.q4k = p;
            } else if (type == TYPE_Q6K) {
                m.q6k = p;
            } else {
                m.f32 = (const float *)p;
            }
            const void *floats = m.f32 ? (const void *)m.f32 : (const void *)m.scale;
            if ((uintptr_t)floats % sizeof(float)) fail("%s: float tensor at a misaligned offset", path);
            char name[64];
            if (c->version == 3 && !finite_scales(&m, s))
                fail("%s: %s: a scale is not a finite number", path, tensor_name(name, layout[i], k));
            p += tensor_bytes(s, type, m.group_size);
            switch (layout[i]) {
            case TOKEN_EMBEDDING: w->token_embedding = m; break;
            case RMS_ATT: w->rms_att = m.f32; break;
            case RMS_FFN: w->rms_ffn = m.f32; break;
            case RMS_FINAL: w->rms_final = m.f32; break;
            case Q_NORM: w->q_norm = m.f32; break;
            case K_NORM: w->k_norm = m.f32; break;
            case BQ: w->bq = m.f32; break;
            case BK: w->bk = m.f32; break;
            case BV: w->bv = m.f32; break;
            case ROPE_TABLES: break; /* recomputed in init_run_state() */
            case CLASSIFIER: w->classifier = m; break;
            default: (*layers)[k] = m; break;
            }
        }
    }
    if (c->shared_classifier) w->classifier = w->token_embedding;
}

/* Maps a file read-only at a 2 MB aligned address, marked for transparent huge
   pages: where the kernel holds the file in 2 MB pieces (as it reads it from
   disk through such a mapping), one TLB entry then covers 2 MB of weights
   instead of 4 KB. */
static const uint8_t *map_file(int fd, size_t size) {
    size_t huge = (size_t)2 << 20, page = (size_t)sysconf(_SC_PAGESIZE), mapped = (size + page - 1) / page * page;
    uint8_t *span = mmap(NULL, mapped + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (span == MAP_FAILED) return NULL;
    size_t head = (huge - (uintptr_t)span % huge) % huge; /* the span's parts before and after the file */
    void *data = mmap(span + head, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (data == MAP_FAILED) {
        munmap(span, mapped + huge);
        return NULL;
    }
    if (head) munmap(span, head);
    munmap(span + head + mapped, huge - head); /* head < huge: never empty */
#ifdef MADV_HUGEPAGE
    madvise(data, size, MADV_HUGEPAGE);
#endif
    return data;
}

static void open_checkpoint(Checkpoint *ck, const char *path) {
    memset(ck, 0, sizeof *ck);
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open checkpoint: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) fail("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", path);
    ck->file_size = (size_t)st.st_size;
    if (ck->file_size > 0) { /* the header is read in place: version 3's type table runs past its 256 bytes */
        ck->data = map_file(fd, ck->file_size);
        if (!ck->data) fail("%s: cannot mmap: %s", path, strerror(errno));
    }
    close(fd);
    uint64_t expected = parse_header(&ck->config, ck->data, ck->file_size, path, &ck->types);
    if ((uint64_t)st.st_size != expected)
        fail("%s: file is %lld bytes but its header describes %llu bytes", path,
             (long long)st.st_size, (unsigned long long)expected);
    map_weights(ck, path);
}

static void close_checkpoint(Checkpoint *ck) {
    Weights *w = &ck->weights;
    free(w->wq); free(w->wk); free(w->wv); free(w->wo);
    free(w->w1); free(w->w2); free(w->w3);
    free(ck->types);
    free(ck->packed); /* NULL after stop_model(); not when a load fails after packing */
    if (ck->data) munmap((void *)ck->data, ck->file_size);
}

/* ------------------------------------------------------------------------- */
/* Allocating the run state                                                   */

/* A zeroed buffer for the KV cache, which every token reads through: 2 MB
   aligned and, in its whole 2 MB pieces, marked for transparent huge pages, so
   that walking it does not cost a TLB miss every 4 KB (on virtual machines a
   costly one). The last piece keeps small pages: no memory beyond the cache. */
static void *alloc_cache(size_t count, size_t size) {
    size_t huge = (size_t)2 << 20;
    void *p = xaligned(count, size, huge);
    size_t bytes = count * size;
#ifdef MADV_HUGEPAGE
    if (bytes >= huge) madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    memset(p, 0, bytes); /* now, so that the first tokens do not pay for the pages' first touch */
    return p;
}

/* The KV cache's element type, chosen with -c. */
typedef enum { CACHE_FP32, CACHE_INT8 } CacheType;

/* A cache of n_blocks blocks of block_size positions. Its block table is the
   one-block cache's, {0}: batch mode gives each sequence a table of its own. */
static void init_kv_cache(KVCache *c, const Config *config, int n_blocks, int block_size, CacheType type) {
    static const int first_block = 0;
    *c = (KVCache){.n_layers = config->n_layers, .n_kv_heads = config->n_kv_heads,
                   .head_size = config->head_size, .block_size = block_size, .blocks = &first_block};
    size_t rows = (size_t)n_blocks * config->n_layers * config->n_kv_heads * block_size;
    c->f32 = type == CACHE_FP32 ? alloc_cache(rows * c->head_size, sizeof(float)) : NULL;
    c->q = type == CACHE_INT8 ? alloc_cache(rows * c->head_size, 1) : NULL;
    c->scale = type == CACHE_INT8 ? alloc_cache(rows, sizeof(float)) : NULL;
}

static void free_kv_cache(KVCache *c) {
    free(c->f32); free(c->q); free(c->scale);
}

/* The angle per position of pair i/2 (i even) of every head: theta^(-i/head_size),
   with the same float expression as llama2.c, so files without scaling give its
   results bit for bit. Llama 3.1's scaling (transformers' rope_type "llama3")
   slows the pairs whose wavelength (positions per turn) is long next to the
   original context: by the factor beyond original / low_freq_factor positions,
   not at all below original / high_freq_factor, and by a blend in between. */
static float rope_frequency(const Config *c, int i, int head_size) {
    float freq = 1.0f / powf(c->rope_theta, i / (float)head_size);
    if (c->rope_scaling_factor == 0) return freq;
    float wavelength = 2 * (float)M_PI / freq;
    float original = (float)c->original_max_position_embeddings;
    if (wavelength < original / c->high_freq_factor) return freq;
    if (wavelength > original / c->low_freq_factor) return freq / c->rope_scaling_factor;
    /* smooth goes from 0 at the long end of the band to 1 at the short end */
    float smooth = (original / wavelength - c->low_freq_factor) / (c->high_freq_factor - c->low_freq_factor);
    return (1 - smooth) * freq / c->rope_scaling_factor + smooth * freq;
}

/* The widest input of a projection: dim, hidden_dim, or (wo) n_heads * head_size. */
static size_t widest_input(const Config *c) {
    size_t q_dim = (size_t)c->head_size * c->n_heads, widest = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    return q_dim > widest ? q_dim : widest;
}

/* Buffers for positions 0 .. n_pos - 1: the context (generate and chat shift
   it when it is full). The KV caches: one block of n_pos positions, or (batch
   mode's pool, n_blocks > 0) n_blocks blocks of KV_BLOCK. */
static void init_run_state(RunState *s, const Config *c, int n_pos, int n_blocks, CacheType cache) {
    size_t head_size = c->head_size;
    size_t q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    size_t widest = widest_input(c);
    s->n_pos = n_pos;
    s->x = xcalloc(c->dim, sizeof(float));
    s->xb = xcalloc(q_dim > (size_t)c->dim ? q_dim : (size_t)c->dim, sizeof(float));
    s->xb2 = xcalloc(c->dim, sizeof(float));
    s->hb = xcalloc(c->hidden_dim, sizeof(float));
    s->hb2 = xcalloc(c->hidden_dim, sizeof(float));
    s->q = xcalloc(q_dim, sizeof(float));
    s->k = xcalloc(kv_dim, sizeof(float));
    s->v = xcalloc(kv_dim, sizeof(float));
    s->att = xcalloc(n_pos, sizeof(float));
    s->query16 = xcalloc(head_size, sizeof(int16_t));
    s->logits = xcalloc(c->vocab_size, sizeof(float));
    init_kv_cache(&s->key_cache, c, n_blocks ? n_blocks : 1, n_blocks ? KV_BLOCK : n_pos, cache);
    init_kv_cache(&s->value_cache, c, n_blocks ? n_blocks : 1, n_blocks ? KV_BLOCK : n_pos, cache);
    s->xq = xcalloc(widest, 1);
    s->xq_scale = xcalloc(widest, sizeof(float));
    /* RoPE angles depend only on position and pair index: compute them once */
    s->rope_cos = xcalloc((size_t)n_pos * head_size / 2, sizeof(float));
    s->rope_sin = xcalloc((size_t)n_pos * head_size / 2, sizeof(float));
    for (int pos = 0; pos < n_pos; pos++) {
        for (size_t i = 0; i < head_size; i += 2) {
            float freq = rope_frequency(c, (int)i, (int)head_size);
            float angle = pos * freq;
            s->rope_cos[pos * head_size / 2 + i / 2] = cosf(angle);
            s->rope_sin[pos * head_size / 2 + i / 2] = sinf(angle);
        }
    }
}

static void free_run_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->hb); free(s->hb2); free(s->q); free(s->k); free(s->v);
    free(s->att); free(s->query16); free(s->logits);
    free_kv_cache(&s->key_cache); free_kv_cache(&s->value_cache);
    free(s->xq); free(s->xq_scale); free(s->rope_cos); free(s->rope_sin);
}

/* ------------------------------------------------------------------------- */
/* Tokenizer: text <-> token ids. Two kinds: SentencePiece BPE (Llama 2,       */
/* llama2.c's tokenizer.bin) and byte-level BPE (Llama 3, Qwen2.5, Qwen3)     */

/* The SentencePiece kind's fixed ids, as in every Llama 2 vocabulary */
enum { UNK_ID = 0, BOS_ID = 1, EOS_ID = 2 };

typedef enum { SENTENCEPIECE, BYTE_LEVEL_BPE } TokenizerKind;
typedef enum { LLAMA2_CHAT, LLAMA3_CHAT, CHATML } ChatTemplate;

#define TOKENIZER_MAGIC 0x6e6b6f74u /* "tokn": a tokenizer file with a kind, not llama2.c's */
enum { MAX_STOP_IDS = 8 };
/* The flags of a kind 2 file: how its tokenizer differs from Llama 3's. Kind 1
   (Llama 3) is kind 2 with WHOLE_CHUNK_TOKENS alone; Qwen's has the other three. */
enum {
    FLAG_NFC = 1,                /* the text is put in Unicode's NFC first */
    FLAG_SINGLE_DIGITS = 2,      /* the pre-tokenizer cuts numbers one digit a chunk, not three */
    FLAG_WHOLE_CHUNK_TOKENS = 4, /* a chunk that is a token is that token (ignore_merges) */
    FLAG_CHATML = 8,             /* chat in ChatML (<|im_start|>, <|im_end|>), not Llama 3's headers */
    KNOWN_FLAGS = 15
};

typedef struct {
    TokenizerKind kind;
    int vocab_size;
    char *text;          /* every piece, each NUL-terminated, one after another */
    uint32_t *offset;    /* piece i is text + offset[i]; [vocab_size + 1] */
    float *scores;       /* SentencePiece: merge priority, higher first. Byte-level
                            BPE: NULL, as a piece's id is its rank, lower first */
    int *sorted;         /* ids of mergeable pieces, sorted by text, for lookup */
    int n_sorted;
    int first_special;   /* byte-level BPE: ids from here on are control (or added)
                            tokens, never encoded from text; they print their text,
                            which only added tokens such as Qwen's <think> have */
    int bos_id;          /* starts every sequence; -1: none (Qwen) */
    ChatTemplate chat;
    /* chat: <|start_header_id|>, <|end_header_id|>, <|eot_id|> (Llama 3), or
       <|im_start|>, -1, <|im_end|> (ChatML); -1: no chat */
    int turn_start_id, end_header_id, turn_end_id;
    int nfc;             /* byte-level BPE: NFC first (Qwen) */
    int max_digits;      /* byte-level BPE: digits in a chunk, 3 (Llama 3) or 1 (Qwen) */
    int whole_chunk_tokens; /* byte-level BPE: FLAG_WHOLE_CHUNK_TOKENS */
    int stop_ids[MAX_STOP_IDS]; /* generation ends at any of these */
    int n_stop;
    int byte_piece[256]; /* SentencePiece: id of the "<0xXX>" piece of each byte, or -1 */
    unsigned char byte_of[256]; /* scratch for decode(): a byte piece's one byte */
} Tokenizer;

static const char *piece_text(const Tokenizer *t, int id) { return t->text + t->offset[id]; }
static int piece_len(const Tokenizer *t, int id) { return (int)(t->offset[id + 1] - t->offset[id] - 1); }

/* "<0xXX>" pieces stand for one raw byte; returns the byte or -1. */
static int byte_piece_value(const char *piece, int len) {
    if (len != 6 || memcmp(piece, "<0x", 3) != 0 || piece[5] != '>') return -1;
    if (!isxdigit((unsigned char)piece[3]) || !isxdigit((unsigned char)piece[4])) return -1;
    char hex[3] = {piece[3], piece[4], 0};
    return (int)strtol(hex, NULL, 16);
}

static int compare_text(const char *a, int alen, const char *b, int blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static const Tokenizer *sort_tokenizer; /* qsort has no context argument */
static int compare_piece_ids(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int c = compare_text(piece_text(sort_tokenizer, x), piece_len(sort_tokenizer, x),
                         piece_text(sort_tokenizer, y), piece_len(sort_tokenizer, y));
    return c ? c : (x > y) - (x < y);
}

/* The id of a mergeable piece with exactly this text, or -1 (lowest id on duplicates). */
static int lookup_piece(const Tokenizer *t, const char *text, int len) {
    int lo = 0, hi = t->n_sorted;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, id = t->sorted[mid];
        if (compare_text(piece_text(t, id), piece_len(t, id), text, len) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < t->n_sorted) {
        int id = t->sorted[lo];
        if (compare_text(piece_text(t, id), piece_len(t, id), text, len) == 0) return id;
    }
    return -1;
}

/* A byte-level BPE tokenizer must have a piece for every byte: then any text
   encodes. */
static void check_byte_pieces(const Tokenizer *t, const char *path) {
    for (int b = 0; b < 256; b++) {
        char byte = (char)b;
        if (lookup_piece(t, &byte, 1) < 0) fail("%s: byte 0x%02X has no piece (byte-level BPE needs all 256)", path, b);
    }
}

static int32_t read_tokenizer_i32(FILE *f, const char *path, const char *what) {
    int32_t v;
    if (fread(&v, 4, 1, f) != 1) fail("%s: tokenizer is truncated (in %s)", path, what);
    return v;
}

/* Reads either kind of tokenizer file.
   llama2.c's tokenizer.bin (SentencePiece): int32 max_token_length, then per
   piece float32 score, int32 length, the bytes.
   Byte-level BPE: uint32 magic "tokn", int32 kind (1 or 2), for kind 2 int32
   flags (FLAG_*), int32 n_pieces, int32 max_token_length, int32 first_special,
   int32 ids of BOS, then of the chat tokens (turn_start_id, end_header_id,
   turn_end_id; -1: none), int32 n_stop, n_stop int32 stop ids; then per piece
   int32 length, the raw bytes. A model may have more ids than the file has
   pieces (Qwen's 151936 for 151669): those have no text, and are never encoded. */
static void load_tokenizer(Tokenizer *t, const char *path, int vocab_size) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) fail("%s: cannot open tokenizer: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) fail("%s: tokenizer is not a regular file", path);
    int32_t first = read_tokenizer_i32(f, path, "the header");
    t->kind = (uint32_t)first == TOKENIZER_MAGIC ? BYTE_LEVEL_BPE : SENTENCEPIECE;
    int32_t max_token_length = first;
    t->vocab_size = vocab_size;
    t->bos_id = BOS_ID;
    t->stop_ids[t->n_stop++] = BOS_ID; /* llama2.c also stops at BOS */
    t->stop_ids[t->n_stop++] = EOS_ID;
    t->first_special = vocab_size;
    t->chat = LLAMA2_CHAT;
    t->turn_start_id = t->end_header_id = t->turn_end_id = -1;
    int n_pieces = vocab_size;
    if (t->kind == BYTE_LEVEL_BPE) {
        int32_t kind = read_tokenizer_i32(f, path, "the header");
        if (kind != 1 && kind != 2)
            fail("%s: unknown tokenizer kind %d (this program reads 1 and 2, byte-level BPE)", path, kind);
        int32_t flags = kind == 1 ? FLAG_WHOLE_CHUNK_TOKENS : read_tokenizer_i32(f, path, "the header");
        if (flags & ~KNOWN_FLAGS) fail("%s: unknown tokenizer flags 0x%x", path, (unsigned)(flags & ~KNOWN_FLAGS));
        t->nfc = (flags & FLAG_NFC) != 0;
        t->max_digits = flags & FLAG_SINGLE_DIGITS ? 1 : 3;
        t->whole_chunk_tokens = (flags & FLAG_WHOLE_CHUNK_TOKENS) != 0;
        t->chat = flags & FLAG_CHATML ? CHATML : LLAMA3_CHAT;
        n_pieces = read_tokenizer_i32(f, path, "the header");
        if (n_pieces < 256 || n_pieces > vocab_size)
            fail("%s: tokenizer has %d pieces, the model's vocabulary %d (it must have 256 to that many)", path,
                 n_pieces, vocab_size);
        max_token_length = read_tokenizer_i32(f, path, "the header");
        t->first_special = read_tokenizer_i32(f, path, "the header");
        if (t->first_special < 256 || t->first_special > n_pieces)
            fail("%s: first_special is %d, must be in [256, %d]", path, t->first_special, n_pieces);
        t->bos_id = read_tokenizer_i32(f, path, "the header");
        t->turn_start_id = read_tokenizer_i32(f, path, "the header");
        t->end_header_id = read_tokenizer_i32(f, path, "the header");
        t->turn_end_id = read_tokenizer_i32(f, path, "the header");
        int header_ids[4] = {t->bos_id, t->turn_start_id, t->end_header_id, t->turn_end_id};
        for (int i = 0; i < 4; i++)
            if (header_ids[i] < -1 || header_ids[i] >= n_pieces)
                fail("%s: %s id %d is outside the tokenizer's %d pieces", path, i ? "chat token" : "BOS",
                     header_ids[i], n_pieces);
        if (t->bos_id < 0 && t->chat == LLAMA3_CHAT && t->turn_start_id >= 0) /* its template starts with BOS */
            fail("%s: BOS id is -1, but Llama 3's chat template (the header ids) needs one", path);
        t->n_stop = read_tokenizer_i32(f, path, "the header");
        if (t->n_stop < 1 || t->n_stop > MAX_STOP_IDS)
            fail("%s: %d stop ids, must be 1 to %d", path, t->n_stop, MAX_STOP_IDS);
        for (int i = 0; i < t->n_stop; i++) {
            t->stop_ids[i] = read_tokenizer_i32(f, path, "the stop ids");
            if (t->stop_ids[i] < 0 || t->stop_ids[i] >= n_pieces)
                fail("%s: special id %d is outside the tokenizer's %d pieces", path, t->stop_ids[i], n_pieces);
        }
    }
    if (max_token_length <= 0) fail("%s: max_token_length is %d, must be positive", path, max_token_length);

    /* all pieces go into one block: no file holds more text than its own size (and
       the ids past its pieces one NUL each) */
    t->offset = xmalloc(((size_t)vocab_size + 1) * sizeof(uint32_t));
    t->text = xmalloc((size_t)st.st_size + 1 + (size_t)(vocab_size - n_pieces));
    if (t->kind == SENTENCEPIECE) t->scores = xcalloc(vocab_size, sizeof(float));
    long long remaining = (long long)st.st_size - ftell(f);
    uint32_t used = 0;
    for (int i = 0; i < n_pieces; i++) {
        int32_t len = 0;
        int header = t->kind == SENTENCEPIECE ? 8 : 4;
        if ((t->kind == SENTENCEPIECE && fread(&t->scores[i], 4, 1, f) != 1) || fread(&len, 4, 1, f) != 1)
            fail("%s: tokenizer has %d pieces, the model needs %d", path, i, vocab_size);
        remaining -= header;
        if (len < 0) fail("%s: piece %d has negative length %d", path, i, len);
        if (len > remaining) fail("%s: piece %d has length %d, past the end of the file", path, i, len);
        if (t->scores && !isfinite(t->scores[i])) fail("%s: piece %d has a non-finite score", path, i);
        if (len > max_token_length)
            fail("%s: piece %d is %d bytes, longer than max_token_length %d", path, i, len, max_token_length);
        t->offset[i] = used;
        if (len > 0 && fread(t->text + used, len, 1, f) != 1) fail("%s: piece %d is truncated", path, i);
        used += (uint32_t)len;
        t->text[used++] = '\0';
        remaining -= len;
    }
    for (int i = n_pieces; i < vocab_size; i++) { /* ids past the file's pieces: no text */
        t->offset[i] = used;
        t->text[used++] = '\0';
    }
    t->offset[vocab_size] = used;
    char *shrunk = realloc(t->text, used);
    if (shrunk) t->text = shrunk;

    /* Mergeable pieces. SentencePiece merges only into normal pieces: not unk,
       BOS or EOS, not byte pieces. Byte-level BPE: every piece but the control
       tokens, and each of the 256 bytes must be one. */
    memset(t->byte_piece, -1, sizeof t->byte_piece);
    for (int b = 0; b < 256; b++) t->byte_of[b] = (unsigned char)b;
    t->sorted = xmalloc(vocab_size * sizeof(int));
    for (int i = 0; i < vocab_size; i++) {
        int b = t->kind == SENTENCEPIECE ? byte_piece_value(piece_text(t, i), piece_len(t, i)) : -1;
        if (b >= 0) {
            if (t->byte_piece[b] < 0) t->byte_piece[b] = i;
        } else if (t->kind == SENTENCEPIECE ? i != UNK_ID && i != BOS_ID && i != EOS_ID && piece_len(t, i) > 0
                                            : i < t->first_special && piece_len(t, i) > 0) {
            t->sorted[t->n_sorted++] = i;
        }
    }
    sort_tokenizer = t;
    qsort(t->sorted, t->n_sorted, sizeof(int), compare_piece_ids);
    if (t->kind == BYTE_LEVEL_BPE) check_byte_pieces(t, path);
    fclose(f);
}

static void free_tokenizer(Tokenizer *t) {
    free(t->text); free(t->offset); free(t->scores); free(t->sorted);
    memset(t, 0, sizeof *t);
}

/* Length of the UTF-8 character at s (n bytes available), by SentencePiece's
   rules: 0 when the bytes are not a valid, shortest-form encoding of a scalar value. */
static int utf8_char_len(const unsigned char *s, size_t n) {
    uint32_t cp;
    int len;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0) { len = 2; cp = s[0] & 0x1F; }
    else if ((s[0] & 0xF0) == 0xE0) { len = 3; cp = s[0] & 0x0F; }
    else if ((s[0] & 0xF8) == 0xF0) { len = 4; cp = s[0] & 0x07; }
    else return 0;
    if (n < (size_t)len) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Where utf8_char_len() is 0: how many bytes one U+FFFD replaces, the
   "maximal subpart" of Unicode's chapter 3 (as Python's and the WHATWG's
   decoders count): a lead byte and the continuation bytes that could still
   follow it, or one byte. */
static int utf8_invalid_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    int need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    if (c == 0xE0) lo = 0xA0; /* the second byte's range, which rules out overlong forms, surrogates and > U+10FFFF */
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    int len = 1;
    while (len < need && (size_t)len < n && s[len] >= lo && s[len] <= hi) len++, lo = 0x80, hi = 0xBF;
    return len;
}

/* The code point of the UTF-8 character at s, len bytes (utf8_char_len's). */
static uint32_t code_point(const unsigned char *s, int len) {
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) cp = (cp << 6) | (s[k] & 0x3F);
    return cp;
}

/* Writes code point cp as UTF-8 at out; returns the bytes written. */
static int put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F)), 3;
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Unicode's Normalization Form C (UAX #15), which Qwen's tokenizer applies to
   the text first: every character decomposed canonically, each run of
   combining marks put in order of combining class, then each mark composed
   with the starter before it unless a mark in between blocks it. The tables
   are at the end of the file; Hangul syllables follow their own rule. */
static int combining_class(uint32_t cp);
static const uint32_t *find_decomposition(uint32_t cp); /* {cp, first, second (0: none)}, or NULL */
static uint32_t find_composition(uint32_t first, uint32_t second); /* 0: none */

enum { HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
       HANGUL_L_COUNT = 19, HANGUL_V_COUNT = 21, HANGUL_T_COUNT = 28, HANGUL_COUNT = 11172 };

/* Appends cp's full canonical decomposition (at most 4 code points) to out. */
static void decompose(uint32_t cp, uint32_t *out, size_t *n) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_COUNT) {
        uint32_t s = cp - HANGUL_S;
        out[(*n)++] = HANGUL_L + s / (HANGUL_V_COUNT * HANGUL_T_COUNT);
        out[(*n)++] = HANGUL_V + s % (HANGUL_V_COUNT * HANGUL_T_COUNT) / HANGUL_T_COUNT;
        if (s % HANGUL_T_COUNT) out[(*n)++] = HANGUL_T + s % HANGUL_T_COUNT;
        return;
    }
    const uint32_t *d = find_decomposition(cp);
    if (!d) {
        out[(*n)++] = cp;
        return;
    }
    decompose(d[1], out, n);
    if (d[2]) decompose(d[2], out, n);
}

/* The character that first and second compose into, or 0. */
static uint32_t compose(uint32_t first, uint32_t second) {
    if (first >= HANGUL_L && first < HANGUL_L + HANGUL_L_COUNT && second >= HANGUL_V &&
        second < HANGUL_V + HANGUL_V_COUNT)
        return HANGUL_S + ((first - HANGUL_L) * HANGUL_V_COUNT + second - HANGUL_V) * HANGUL_T_COUNT;
    if (first >= HANGUL_S && first < HANGUL_S + HANGUL_COUNT && (first - HANGUL_S) % HANGUL_T_COUNT == 0 &&
        second > HANGUL_T && second < HANGUL_T + HANGUL_T_COUNT)
        return first + second - HANGUL_T;
    return find_composition(first, second);
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The NFC of text (valid UTF-8), malloc'd. */
static char *nfc(const char *text, size_t len, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n_chars = 0;
    int below_marks = 1; /* text of code points below U+0300 (the first mark) is its own NFC */
    for (size_t i = 0; i < len; n_chars++) {
        int char_len = utf8_char_len(s + i, len - i);
        below_marks &= code_point(s + i, char_len) < 0x300;
        i += char_len;
    }
    char *out = xmalloc(below_marks ? len + 1 : 16 * n_chars + 1);
    if (below_marks) {
        memcpy(out, text, len);
        *out_len = len;
        return out;
    }
    uint32_t *cps = xmalloc(4 * n_chars * sizeof(uint32_t));
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int char_len = utf8_char_len(s + i, len - i);
        decompose(code_point(s + i, char_len), cps, &n);
        i += char_len;
    }
    /* canonical ordering: a stable sort of each run of marks by class (the
       position, in the key's middle bits, breaks ties) */
    uint64_t *keys = xmalloc(n * sizeof(uint64_t));
    for (size_t a = 0, b; a < n; a = b + 1) {
        for (b = a; b < n && combining_class(cps[b]); b++)
            keys[b - a] = (uint64_t)combining_class(cps[b]) << 56 | (uint64_t)(b - a) << 21 | cps[b];
        if (b - a < 2) continue;
        qsort(keys, b - a, sizeof *keys, compare_u64);
        for (size_t k = a; k < b; k++) cps[k] = (uint32_t)(keys[k - a] & 0x1FFFFF);
    }
    free(keys);
    /* composition: a character joins the last starter if it follows it
       directly, or if every mark between has a lower class (not blocked) */
    size_t n_out = 0, starter = SIZE_MAX;
    int last_class = 0;
    for (size_t k = 0; k < n; k++) {
        int cls = combining_class(cps[k]);
        if (starter != SIZE_MAX && (n_out == starter + 1 || (last_class != 0 && last_class < cls))) {
            uint32_t composite = compose(cps[starter], cps[k]);
            if (composite) {
                cps[starter] = composite;
                continue;
            }
        }
        if (cls == 0) starter = n_out;
        last_class = cls;
        cps[n_out++] = cps[k];
    }
    size_t bytes = 0;
    for (size_t k = 0; k < n_out; k++) bytes += put_utf8(out + bytes, cps[k]);
    free(cps);
    *out_len = bytes;
    return out;
}

/* Every malformed byte becomes U+FFFD. For SentencePiece (Llama 2) also: a
   space in front of non-empty text, and U+2581 (which SentencePiece uses for a
   space) turned into the space that the pieces of tokenizer.bin hold. Then NFC,
   if the tokenizer asks for it (Qwen). */
static char *normalize(const Tokenizer *t, const char *text, size_t len, size_t *out_len) {
    int sentencepiece = t->kind == SENTENCEPIECE;
    char *out = xmalloc(3 * len + 2);
    size_t n = 0;
    if (len > 0 && sentencepiece) out[n++] = ' ';
    for (size_t i = 0; i < len;) {
        const unsigned char *s = (const unsigned char *)text + i;
        int char_len = utf8_char_len(s, len - i);
        if (char_len == 0) {
            memcpy(out + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i += 1;
        } else if (sentencepiece && char_len == 3 && memcmp(s, "\xE2\x96\x81", 3) == 0) {
            out[n++] = ' ';
            i += 3;
        } else {
            memcpy(out + n, s, char_len);
            n += char_len;
            i += char_len;
        }
    }
    *out_len = n;
    if (!t->nfc) return out;
    char *composed = nfc(out, n, out_len);
    free(out);
    return composed;
}

/* Llama 3's pre-tokenizer cuts the text into chunks, and BPE runs within each.
   Hugging Face defines it with the regex
     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
   whose first matching alternative, at each position, is the next chunk.
   Qwen's is the same but for \p{N}, one number a chunk. The character classes: */
typedef enum { END_OF_TEXT, LETTER, NUMBER, NEWLINE, SPACE, SYMBOL } CharClass;
static CharClass unicode_class(uint32_t cp); /* from the tables at the end of the file */

typedef struct {
    uint32_t cp;
    int len; /* bytes */
    CharClass cls;
} Char;

/* The character at text[i] (valid UTF-8), or END_OF_TEXT. */
static Char char_at(const char *text, size_t n, size_t i) {
    if (i >= n) return (Char){0, 0, END_OF_TEXT};
    const unsigned char *s = (const unsigned char *)text + i;
    int len = utf8_char_len(s, n - i);
    uint32_t cp = code_point(s, len);
    return (Char){cp, len, cp == '\r' || cp == '\n' ? NEWLINE : unicode_class(cp)};
}

/* ASCII lower case, and U+017F (long s), which case-folds to 's' */
static uint32_t fold_case(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    return cp == 0x17F ? 's' : cp;
}

static int is_white(CharClass c) { return c == SPACE || c == NEWLINE; }

/* The end of the chunk that starts at text[i], one rule per alternative;
   max_digits is 3 (Llama 3) or 1 (Qwen). */
static size_t next_chunk(const char *text, size_t n, size_t i, int max_digits) {
    Char c0 = char_at(text, n, i), c1 = char_at(text, n, i + c0.len);
    size_t end;

    /* 's 't 're 've 'm 'll 'd, in any case */
    if (c0.cp == '\'' && c1.len) {
        uint32_t a = fold_case(c1.cp);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 1 + c1.len;
        Char c2 = char_at(text, n, i + 1 + c1.len);
        uint32_t b = fold_case(c2.cp);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 1 + c1.len + c2.len;
    }
    /* letters, after at most one character that is not CR, LF, a letter or a number */
    if (c0.cls == LETTER || ((c0.cls == SYMBOL || c0.cls == SPACE) && c1.cls == LETTER)) {
        end = c0.cls == LETTER ? i : i + c0.len;
        for (Char c; (c = char_at(text, n, end)).cls == LETTER;) end += c.len;
        return end;
    }
    /* one to max_digits numbers */
    if (c0.cls == NUMBER) {
        end = i;
        for (int k = 0; k < max_digits; k++) {
            Char c = char_at(text, n, end);
            if (c.cls != NUMBER) break;
            end += c.len;
        }
        return end;
    }
    /* symbols (not space, letter or number), after at most one ' ', then any CR and LF */
    if (c0.cls == SYMBOL || (c0.cp == ' ' && c1.cls == SYMBOL)) {
        end = c0.cls == SYMBOL ? i : i + 1;
        for (Char c; (c = char_at(text, n, end)).cls == SYMBOL;) end += c.len;
        for (Char c; (c = char_at(text, n, end)).cls == NEWLINE;) end += c.len;
        return end;
    }
    /* white space: up to its last CR or LF if it has one; else all of it, but
       for its last character when that is not the first and text follows */
    size_t after_newline = 0, last_start = i;
    end = i;
    for (Char c; is_white((c = char_at(text, n, end)).cls);) {
        last_start = end;
        end += c.len;
        if (c.cls == NEWLINE) after_newline = end;
    }
    if (after_newline) return after_newline;
    if (end < n && last_start > i) return last_start;
    return end;
}

/* A symbol is a run of the normalised text; symbols form a linked list that
   merging shortens. A candidate is a pair of neighbours whose joined text is a
   piece; candidates live in a max-heap keyed by (score, then leftmost). */
typedef struct {
    int start, len;
    int prev, next; /* neighbour indices, -1 at the ends */
} Symbol;

typedef struct {
    float score;
    int left, right; /* symbol indices */
    int len;         /* joined length when pushed; stale if the symbols changed since */
    int id;
} Candidate;

static int candidate_before(const Candidate *a, const Candidate *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    Candidate *items;
    int n, cap;
} Heap;

static void heap_push(Heap *h, Candidate c) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        Candidate *grown = realloc(h->items, (size_t)h->cap * sizeof(Candidate));
        if (!grown) fail("out of memory while encoding");
        h->items = grown;
    }
    int i = h->n++;
    while (i > 0 && candidate_before(&c, &h->items[(i - 1) / 2])) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = c;
}

static Candidate heap_pop(Heap *h) {
    Candidate top = h->items[0], last = h->items[--h->n];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && candidate_before(&h->items[child + 1], &h->items[child])) child++;
        if (!candidate_before(&h->items[child], &last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->n > 0) h->items[i] = last;
    return top;
}

static void push_pair(Heap *h, const Tokenizer *t, const char *text, const Symbol *sym, int left) {
    if (left < 0 || sym[left].next < 0) return;
    int right = sym[left].next;
    int len = sym[left].len + sym[right].len;
    int id = lookup_piece(t, text + sym[left].start, len);
    if (id < 0) return;
    /* byte-level BPE: the lower the id, the earlier the merge (ids < 2^24 are exact floats) */
    Candidate c = {t->scores ? t->scores[id] : -(float)id, left, right, len, id};
    heap_push(h, c);
}

/* Appends the ids of text[begin, end) to tokens: BPE from single characters
   (SentencePiece) or single bytes (byte-level), merging the best pair until no
   neighbouring pair forms a piece. Returns the new count. */
static int encode_chunk(const Tokenizer *t, const char *text, size_t begin, size_t end, Symbol *sym, Heap *heap,
                        int *tokens, int n) {
    /* Llama 3: a chunk that is a piece is that piece, whatever the merges */
    if (t->whole_chunk_tokens) {
        int id = lookup_piece(t, text + begin, (int)(end - begin));
        if (id >= 0) {
            tokens[n] = id;
            return n + 1;
        }
    }
    int n_sym = 0;
    for (size_t i = begin; i < end; n_sym++) {
        int len = t->kind == SENTENCEPIECE ? utf8_char_len((const unsigned char *)text + i, end - i) : 1;
        sym[n_sym] = (Symbol){(int)i, len, n_sym - 1, i + len < end ? n_sym + 1 : -1};
        i += len;
    }
    heap->n = 0;
    for (int i = 0; i + 1 < n_sym; i++) push_pair(heap, t, text, sym, i);
    while (heap->n > 0) {
        Candidate c = heap_pop(heap);
        Symbol *l = &sym[c.left], *r = &sym[c.right];
        if (l->len == 0 || r->len == 0 || l->next != c.right || l->len + r->len != c.len) continue;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        r->len = 0;
        push_pair(heap, t, text, sym, l->prev);
        push_pair(heap, t, text, sym, c.left);
    }

    /* emit: a symbol that is a piece is its id; otherwise (SentencePiece) its
       bytes, each as its "<0xXX>" piece (byte fallback), or unk when the
       vocabulary has none */
    for (int i = n_sym > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int id = lookup_piece(t, text + sym[i].start, sym[i].len);
        if (id >= 0) {
            tokens[n++] = id;
            continue;
        }
        for (int j = 0; j < sym[i].len; j++) {
            int b = (unsigned char)text[sym[i].start + j];
            tokens[n++] = t->byte_piece[b] >= 0 ? t->byte_piece[b] : UNK_ID;
        }
    }
    return n;
}

/* Encodes text into ids, BOS first when asked and the tokenizer has one. Text
   that spells a control token ("<|eot_id|>", "<s>") is ordinary text. Returns a
   malloc'd array. */
static int *encode(const Tokenizer *t, const char *text, size_t text_len, int add_bos, int add_eos, int *n_tokens) {
    size_t norm_len;
    char *norm = normalize(t, text, text_len, &norm_len);
    if (norm_len > INT32_MAX / 2) fail("prompt is too long to encode (%zu bytes)", text_len);
    int *tokens = xmalloc((norm_len + 2) * sizeof(int));
    Symbol *sym = xmalloc((norm_len + 1) * sizeof(Symbol));
    Heap heap = {0};
    int n = 0;
    if (add_bos && t->bos_id >= 0) tokens[n++] = t->bos_id;
    if (t->kind == SENTENCEPIECE) {
        n = encode_chunk(t, norm, 0, norm_len, sym, &heap, tokens, n);
    } else {
        for (size_t i = 0, end; i < norm_len; i = end) {
            end = next_chunk(norm, norm_len, i, t->max_digits);
            n = encode_chunk(t, norm, i, end, sym, &heap, tokens, n);
        }
    }
    if (add_eos) tokens[n++] = t->kind == SENTENCEPIECE ? EOS_ID : t->stop_ids[0];
    free(heap.items);
    free(sym);
    free(norm);
    *n_tokens = n;
    return tokens;
}

/* The token a sequence starts from: BOS, or for a tokenizer without one
   (Qwen) its end of text (the first stop id), after which a new document
   starts. Perplexity's windows start from it, and so does an empty prompt. */
static int start_id(const Tokenizer *t) { return t->bos_id >= 0 ? t->bos_id : t->stop_ids[0]; }

/* A prompt's ids, BOS first if the tokenizer has one; never none. */
static int *encode_prompt(const Tokenizer *t, const char *text, int *n) {
    int *ids = encode(t, text, strlen(text), 1, 0, n);
    if (*n == 0) ids[(*n)++] = start_id(t);
    return ids;
}

/* The bytes of `token` as they should be printed after `prev`. SentencePiece:
   the piece right after BOS drops its leading space, and "<0xXX>" pieces are
   that raw byte. Byte-level BPE: the piece's raw bytes (a character split
   across tokens comes out whole). A control token (BOS, EOS, a template's
   markers) has no text, even when a model draws one mid-answer. */
static const char *decode(const Tokenizer *t, int prev, int token, int *len) {
    const char *piece = piece_text(t, token);
    *len = piece_len(t, token);
    if (t->kind == BYTE_LEVEL_BPE) return piece;
    if (token == BOS_ID || token == EOS_ID) {
        *len = 0;
        return "";
    }
    if (prev == BOS_ID && piece[0] == ' ') {
        piece++;
        (*len)--;
    }
    int b = byte_piece_value(piece, *len);
    if (b >= 0) {
        *len = 1;
        return (const char *)&t->byte_of[b];
    }
    return piece;
}

/* Prints a piece. SentencePiece: a lone byte only if printable or whitespace,
   or part of a multi-byte UTF-8 character (>= 0x80), never a stray control
   byte. Byte-level BPE: the bytes as they are. */
static int piece_is_shown(const Tokenizer *t, const char *piece, int len) {
    if (len != 1 || t->kind != SENTENCEPIECE) return 1;
    unsigned char b = (unsigned char)piece[0];
    return (b >= 0x20 && b < 0x7F) || b == ' ' || (b >= '\t' && b <= '\r') || b >= 0x80;
}

static void print_piece(const Tokenizer *t, FILE *out, const char *piece, int len) {
    if (piece_is_shown(t, piece, len)) fwrite(piece, 1, len, out);
}

/* ------------------------------------------------------------------------- */
/* Sampler: logits -> next token, bit-compatible with llama2.c for a seed     */

/* The steps, in Hugging Face transformers' order: the presence penalty on the
   logits, temperature, softmax, then top-k, top-p and min-p, each keeping part
   of what the one before kept, and one draw from what is left, renormalised.
   With the penalty, top-k and min-p off (their defaults) it is llama2.c's
   sampler, float for float. */
typedef struct {
    float prob;
    int index;
} ProbIndex;

typedef struct {
    int vocab_size;
    float temperature;      /* 0 = greedy */
    float topp;             /* nucleus sampling threshold; outside (0, 1) = off */
    int topk;               /* keep the topk most likely tokens; 0 or >= vocab_size = off */
    float minp;             /* keep the tokens at least minp times the likeliest one's probability; 0 = off */
    float presence_penalty; /* subtracted from the logit of each token already in the answer; 0 = off */
    uint64_t rng_state;
    ProbIndex *probindex;   /* scratch for top-k, top-p and min-p */
    void (*softmax)(float *x, int n); /* softmax(), or its fast twin from Part II */
    int (*argmax)(const float *x, int n); /* sample_argmax(), or its fast twin */
    /* the answer's distinct tokens, in the order they first came (kept only
       with a presence penalty; allocated at the first) */
    int *answer, n_answer;
    unsigned char *in_answer; /* [vocab_size]: 1 for the tokens in answer */
} Sampler;

/* A drawn token joins the answer, which the presence penalty looks at. */
static void add_to_answer(Sampler *s, int token) {
    if (s->presence_penalty == 0.0f) return;
    if (!s->in_answer) {
        s->in_answer = calloc(s->vocab_size, 1);
        s->answer = malloc(s->vocab_size * sizeof(int));
        if (!s->in_answer || !s->answer) fail("out of memory (the sampler's record of a %d-token vocabulary)", s->vocab_size);
    }
    if (s->in_answer[token]) return;
    s->in_answer[token] = 1;
    s->answer[s->n_answer++] = token;
}

/* Takes the answer back to its first n distinct tokens (n = 0: a new answer). */
static void truncate_answer(Sampler *s, int n) {
    while (s->n_answer > n) s->in_answer[s->answer[--s->n_answer]] = 0;
}

static void free_answer(Sampler *s) {
    free(s->answer), free(s->in_answer);
    s->answer = NULL, s->in_answer = NULL, s->n_answer = 0;
}

/* The presence penalty (OpenAI's and vLLM's): every token of the answer so far,
   however often it came, loses the penalty from its logit. */
static void penalize(const Sampler *s, float *logits) {
    for (int i = 0; i < s->n_answer; i++) logits[s->answer[i]] -= s->presence_penalty;
}

/* xorshift64* */
static uint32_t random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* uniform in [0, 1) with 24 bits */
static float random_f32(uint64_t *state) { return (random_u32(state) >> 8) / 16777216.0f; }

static int sample_argmax(const float *probs, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (probs[i] > probs[best]) best = i;
    return best;
}

/* Walks the CDF: the first index whose cumulative probability exceeds coin. */
static int sample_mult(const float *probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return n - 1;
}

/* Higher probability first; equal ones by index, as a stable sort would leave them. */
static int compare_prob_desc(const void *a, const void *b) {
    const ProbIndex *x = a, *y = b;
    if (x->prob != y->prob) return x->prob > y->prob ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The shortest start of the sorted candidates c[0..n) whose probabilities sum
   past limit; all n when rounding keeps the sum from passing it. Returns its
   length, and its probability in *total. */
static int nucleus_prefix(const ProbIndex *c, int n, float limit, float *total) {
    float cumulative_prob = 0.0f;
    int last = n - 1;
    for (int i = 0; i < n; i++) {
        cumulative_prob += c[i].prob;
        if (cumulative_prob > limit) {
            last = i;
            break;
        }
    }
    *total = cumulative_prob;
    return last + 1;
}

/* The nucleus: the smallest set of most likely tokens whose probabilities sum
   past topp, sorted into probindex, most likely first. Returns its size (0 when
   no token reaches the cutoff) and its probability in *total. Tokens below
   (1 - topp) / (n - 1) cannot be in it, so they are dropped before sorting. */
static int nucleus(const float *probs, int n, float topp, ProbIndex *probindex, float *total) {
    int n0 = 0;
    const float cutoff = (1.0f - topp) / (n - 1);
    for (int i = 0; i < n; i++) {
        if (probs[i] >= cutoff) {
            probindex[n0].index = i;
            probindex[n0].prob = probs[i];
            n0++;
        }
    }
    if (n0 == 0) return 0;
    qsort(probindex, n0, sizeof(ProbIndex), compare_prob_desc);
    return nucleus_prefix(probindex, n0, topp, total);
}

/* Moves heap[i] down until both its children rank below it in compare_prob_desc
   (the heap's root is the weakest of its tokens). */
static void sift_down(ProbIndex *heap, int n, int i) {
    for (;;) {
        int weakest = i, left = 2 * i + 1, right = left + 1;
        if (left < n && compare_prob_desc(&heap[left], &heap[weakest]) > 0) weakest = left;
        if (right < n && compare_prob_desc(&heap[right], &heap[weakest]) > 0) weakest = right;
        if (weakest == i) return;
        ProbIndex t = heap[i];
        heap[i] = heap[weakest], heap[weakest] = t;
        i = weakest;
    }
}

/* The k most likely tokens (equal ones by index, as compare_prob_desc ranks
   them) into c, most likely first; returns how many (fewer than k only when
   probabilities are NaN, which are skipped), their probability in *total. A heap
   of the best k so far, weakest at the root: one pass over the vocabulary, and
   only the k are sorted. */
static int top_k(const float *probs, int n, int k, ProbIndex *c, float *total) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!(probs[i] >= 0.0f)) continue;
        ProbIndex t = {probs[i], i};
        if (m < k) { /* still filling: the new one goes in at the bottom and rises */
            int j = m++;
            while (j > 0 && compare_prob_desc(&c[(j - 1) / 2], &t) < 0) c[j] = c[(j - 1) / 2], j = (j - 1) / 2;
            c[j] = t;
        } else if (compare_prob_desc(&t, &c[0]) < 0) {
            c[0] = t;
            sift_down(c, m, 0);
        }
    }
    qsort(c, m, sizeof(ProbIndex), compare_prob_desc);
    *total = 0.0f;
    for (int i = 0; i < m; i++) *total += c[i].prob;
    return m;
}

/* min-p over the candidates c[0..n), sorted: the start whose probabilities are
   at least minp times the first's; returns its length, its probability in *total. */
static int min_p_prefix(const ProbIndex *c, int n, float minp, float *total) {
    float threshold = minp * c[0].prob;
    int kept = 1;
    *total = c[0].prob;
    while (kept < n && c[kept].prob >= threshold) *total += c[kept++].prob;
    return kept;
}

/* min-p over the whole vocabulary: the tokens at least minp times as likely as
   the likeliest, into c in index order (no sort needed to draw from them). */
static int min_p(const float *probs, int n, float minp, ProbIndex *c, float *total) {
    float threshold = minp * probs[sample_argmax(probs, n)];
    int kept = 0;
    *total = 0.0f;
    for (int i = 0; i < n; i++)
        if (probs[i] >= threshold) c[kept].prob = probs[i], c[kept++].index = i, *total += probs[i];
    return kept;
}

/* The tokens top-k, then top-p, then min-p keep of probs, into s->probindex;
   returns how many (0: every token, as probs has them), their probability in
   *total. Top-p works on what top-k kept, renormalised: the nucleus passes
   topp times their total. Min-p keeps a token by its ratio to the likeliest,
   which renormalising does not change. */
static int candidates(Sampler *s, const float *probs, float *total) {
    int n = s->vocab_size, kept = 0;
    ProbIndex *c = s->probindex;
    int use_topk = s->topk > 0 && s->topk < n, use_topp = s->topp > 0 && s->topp < 1;
    if (use_topk) {
        kept = top_k(probs, n, s->topk, c, total);
        if (use_topp && kept > 0) kept = nucleus_prefix(c, kept, s->topp * *total, total);
    } else if (use_topp) {
        kept = nucleus(probs, n, s->topp, c, total);
    }
    if (s->minp > 0) kept = kept > 0 ? min_p_prefix(c, kept, s->minp, total) : min_p(probs, n, s->minp, c, total);
    return kept;
}

/* The token at coin (in [0, 1)) on the CDF of the candidates, renormalised. */
static int sample_candidates(Sampler *s, const float *probs, float coin) {
    float total;
    int kept = candidates(s, probs, &total);
    if (kept == 0) return sample_mult(probs, s->vocab_size, coin);
    float r = coin * total, cdf = 0.0f;
    for (int i = 0; i < kept; i++) {
        cdf += s->probindex[i].prob;
        if (r < cdf) return s->probindex[i].index;
    }
    return s->probindex[kept - 1].index;
}

/* Picks the next token; overwrites logits with probabilities when sampling
   (greedy: with the penalised logits). */
static int sample(Sampler *s, float *logits) {
    penalize(s, logits);
    if (s->temperature == 0.0f) return s->argmax(logits, s->vocab_size);
    for (int i = 0; i < s->vocab_size; i++) logits[i] /= s->temperature;
    s->softmax(logits, s->vocab_size);
    return sample_candidates(s, logits, random_f32(&s->rng_state));
}

/* The distribution sample() draws from (temperature > 0), written over the
   logits: the candidates' probabilities renormalised, 0 for the others.
   (Speculative sampling compares the draft's and the target's; Part III.) */
static void sampling_distribution(Sampler *s, float *logits) {
    int n = s->vocab_size;
    penalize(s, logits);
    for (int i = 0; i < n; i++) logits[i] /= s->temperature;
    s->softmax(logits, n);
    float total;
    int kept = candidates(s, logits, &total);
    if (kept == 0) return;
    memset(logits, 0, n * sizeof(float));
    for (int i = 0; i < kept; i++) logits[s->probindex[i].index] = s->probindex[i].prob / total;
}

/* ========================================================================= */
/* PART II: THE SPEED                                                        */
/*                                                                           */
/* Threads, fast kernels and batching. The promise: everything here computes */
/* exactly what Part I computes, bit for bit, only faster. Each fast kernel  */
/* adds up the same products in the same order as its plain twin (several    */
/* rows or tokens at once, one per lane, no fused multiply-add but expf's),  */
/* and forward_batch() gives each token of a batch the arithmetic forward()  */
/* would. test_all.c checks every kernel set the CPU has against Part I, and */
/* batches against one token at a time. -DRUN_PLAIN leaves this part out.    */
/* ========================================================================= */

/* Prompt tokens go through the layers together (Part II), and run_tokens()
   gives every token's logits, up to this many at a time. */
#define MAX_BATCH 64

/* Consecutive tokens of one sequence in a batch: tokens [first, first + n) at
   positions pos, pos + 1, ..., whose keys and values go to (and whose queries
   read) the caches keys and values. A batch of one sequence is one segment;
   batch mode's steps have one per sequence. */
typedef struct {
    KVCache *keys, *values;
    int first, n, pos;
} Segment;

#ifndef RUN_PLAIN
/* ------------------------------------------------------------------------- */
/* Threads: a pool started once; parallel_for() runs a task on all of them    */

/* A task does the units [begin, end) of some work; `thread` (0 for the caller)
   picks per-thread scratch space. */
typedef void (*Task)(void *ctx, int begin, int end, int thread);

typedef struct {
    int n_threads; /* the caller counts as one */
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Task task; /* the current job: its task, context and units */
    void *ctx;
    int n_units;
    atomic_int *next; /* [n_threads]: the first unit of each thread's share that no thread has taken yet */
    /* The job's generation (high 32 bits), whether it is closed (bit 31) and
       how many workers are inside it (low bits). A worker joins only an open
       job; the caller closes it once it is empty, so it never waits for a
       worker that is not even on a core, and rewrites the job only then. */
    atomic_ullong state;
    atomic_int stop;
} ThreadPool;

#define JOB_CLOSED (1ull << 31)

static ThreadPool pool = {.n_threads = 1, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Thread t's share of the job's units: [share_begin(t), share_begin(t + 1)). */
static int share_begin(int t) { return (int)((long long)pool.n_units * t / pool.n_threads); }

/* Takes units until none are left: first from this thread's own share, so
   that it reads the same weight rows token after token (they stay in its
   core's cache), then from the others' shares: a thread that runs faster, or
   whose partner is off its core, simply takes more. Each grab is a part of
   what is left of the share, so grabs shrink to one unit as the shares run
   out, and a thread rarely waits long for the other's last one. */
static void take_units(int thread) {
    for (int k = 0; k < pool.n_threads; k++) {
        int share = (thread + k) % pool.n_threads, end = share_begin(share + 1);
        int begin = atomic_load(&pool.next[share]);
        for (;;) {
            int grab = (end - begin) / (2 * pool.n_threads);
            if (grab < 1) grab = 1;
            if (begin >= end) break;
            if (!atomic_compare_exchange_weak(&pool.next[share], &begin, begin + grab)) continue;
            pool.task(pool.ctx, begin, begin + grab, thread);
            begin = atomic_load(&pool.next[share]);
        }
    }
}

static void *worker_main(void *arg) {
    int thread = (int)(intptr_t)arg;
    unsigned long long seen = 0; /* the last generation this worker looked at */
    for (;;) {
        /* spin a little first: during generation the next job comes within
           microseconds, far sooner than a sleeping thread wakes up */
        double start = seconds_now();
        for (int spin = 1; atomic_load(&pool.state) >> 32 == seen; spin++) {
            cpu_relax();
            if (spin % 1024 == 0 && seconds_now() - start > 0.005) break;
        }
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.state) >> 32 == seen && !atomic_load(&pool.stop)) pthread_cond_wait(&pool.wake, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
        if (atomic_load(&pool.stop)) return NULL;
        unsigned long long state = atomic_load(&pool.state);
        seen = state >> 32;
        while (!(state & JOB_CLOSED) && !atomic_compare_exchange_weak(&pool.state, &state, state + 1))
            if (state >> 32 != seen) break; /* a newer job: look at it on the next turn */
        if (state >> 32 != seen || (state & JOB_CLOSED)) continue;
        take_units(thread);
        atomic_fetch_sub(&pool.state, 1);
    }
}

/* Runs task over units [0, n_units) on all threads. Work below 200000
   multiply-adds (roughly) is done by the caller alone: waking the pool and
   waiting for the slower thread would cost more (the demo model decodes 6%
   faster on 2 threads than with 100000, stories15M as fast). */
static void parallel_for(Task task, void *ctx, int n_units, double work) {
    if (pool.n_threads == 1 || n_units < 2 || work < 200000) {
        task(ctx, 0, n_units, 0);
        return;
    }
    pool.task = task;
    pool.ctx = ctx;
    pool.n_units = n_units;
    for (int t = 0; t < pool.n_threads; t++) atomic_store(&pool.next[t], share_begin(t));
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.state, ((atomic_load(&pool.state) >> 32) + 1) << 32); /* a new, open, empty job */
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    take_units(0);
    /* close the job once no worker is inside; those inside are finishing a unit */
    unsigned long long state = atomic_load(&pool.state);
    for (;;) {
        if ((state & ~(~0ull << 31)) == 0 && atomic_compare_exchange_weak(&pool.state, &state, state | JOB_CLOSED)) break;
        cpu_relax();
        state = atomic_load(&pool.state);
    }
}

static void start_threads(int n) {
    pool.n_threads = n;
    if (n == 1) return;
    atomic_store(&pool.state, JOB_CLOSED); /* generation 0, which each worker starts having seen */
    pool.workers = xcalloc(n, sizeof(pthread_t));
    pool.next = xcalloc(n, sizeof(atomic_int));
    for (int i = 1; i < n; i++)
        if (pthread_create(&pool.workers[i], NULL, worker_main, (void *)(intptr_t)i) != 0)
            fail("cannot start thread %d of %d", i, n);
}

static void stop_threads(void) {
    if (pool.n_threads == 1) return;
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.stop, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i < pool.n_threads; i++) pthread_join(pool.workers[i], NULL);
    free(pool.workers);
    free(pool.next);
    pool.n_threads = 1;
    atomic_store(&pool.stop, 0);
}

/* Reads one byte of every page of megabytes [begin, end) of the checkpoint. */
static void touch_pages_task(void *ctx, int begin, int end, int thread) {
    const Checkpoint *ck = ctx;
    volatile uint8_t sink = 0;
    for (size_t offset = (size_t)begin << 20; offset < ((size_t)end << 20) && offset < ck->file_size; offset += 4096)
        sink ^= ck->data[offset];
    (void)sink, (void)thread;
}

/* Brings the whole checkpoint into memory before the first token, so that the
   prompt's speed is not that of page faults: the kernel maps the file in one
   call, then a read of each page settles it (microseconds each on a VM). */
static void prefault_checkpoint(const Checkpoint *ck) {
#ifdef MADV_POPULATE_READ
    madvise((void *)ck->data, ck->file_size, MADV_POPULATE_READ);
#else
    madvise((void *)ck->data, ck->file_size, MADV_WILLNEED);
#endif
    parallel_for(touch_pages_task, (void *)ck, (int)((ck->file_size + (1 << 20) - 1) >> 20), 1e9);
}

/* ------------------------------------------------------------------------- */
/* Asking for the KV cache ahead                                              */

/* The most of a unit of attention work's keys (and of its values) asked for
   ahead: enough for the short contexts of batch mode, little of the L2 cache. */
#define KV_UNIT_PREFETCH_BYTES 65536

/* The cache lines of the next unit of attention work, its keys and values in
   one layer and KV head: they lie in blocks pages apart, each too short a run
   for the hardware prefetcher to find. The unit before asks for them a few at
   a time as it runs (kv_prefetch_some()): with two threads reading the
   caches, attention ran 5-8% faster so than asking for them all at its start.
   A block's rows are a run of bytes (int8, and their scales another) or rows
   apart (fp32): pieces of `count` runs of `bytes`, `stride` apart. */
typedef struct {
    const char *start;
    size_t bytes, stride;
    int count;
} KVPiece;

/* The most blocks of one cache asked for ahead (KV_BLOCK positions each). */
#define KV_PREFETCH_BLOCKS 16

/* Positions a unit reads at a time, keys or values (a multiple of the 32 keys
   the AVX-512 scores of one or two queries take at once). Before each chunk
   of n it asks for n + n / 4 lines of the next unit's, so that the asking
   keeps pace with the reading instead of coming in bursts of a block's worth
   (with 64-byte int8 rows, about all of the next unit's lines by the end of
   its values; what is left, kv_prefetch_finish() asks for). Stories110M's
   units, 8 sequences from memory on 2 threads: 2.67 us a unit against 2.82
   with 64 lines before each block's run. */
#define KV_CHUNK 32

typedef struct {
    KVPiece piece[4 * KV_PREFETCH_BLOCKS]; /* keys and values, int8 rows and scales */
    int n_pieces;
    int at, run, line; /* the next line: of piece `at`, its run `run`, that run's line `line` */
} KVPrefetch;

/* Adds positions 0..n_pos-1 of one layer and KV head of a cache (up to
   KV_UNIT_PREFETCH_BYTES of rows and KV_PREFETCH_BLOCKS blocks) to what p
   asks for: twice, for the keys and the values. */
static void kv_prefetch_add(KVPrefetch *p, const KVCache *c, int layer, int kv_head, int n_pos) {
    size_t row_bytes = c->head_size * (c->f32 ? sizeof(float) : 1);
    if ((size_t)n_pos * row_bytes > KV_UNIT_PREFETCH_BYTES) n_pos = KV_UNIT_PREFETCH_BYTES / row_bytes;
    if (n_pos > KV_PREFETCH_BLOCKS * c->block_size) n_pos = KV_PREFETCH_BLOCKS * c->block_size;
    for (int t0 = 0; t0 < n_pos; t0 += c->block_size) {
        int n = n_pos - t0 < c->block_size ? n_pos - t0 : c->block_size;
        size_t first = cache_row_number(c, layer, kv_head, t0);
        if (c->f32) {
            p->piece[p->n_pieces++] = (KVPiece){(const char *)(c->f32 + first * c->head_size), row_bytes,
                                                row_bytes * c->n_kv_heads, n};
        } else {
            p->piece[p->n_pieces++] = (KVPiece){(const char *)(c->q + first * c->head_size), n * row_bytes, 0, 1};
            p->piece[p->n_pieces++] = (KVPiece){(const char *)(c->scale + first), n * sizeof(float), 0, 1};
        }
    }
}

/* Asks for up to `lines` more of p's lines (p NULL: none) to come into the L2
   cache; returns the last it asked for (NULL: it asked for none). Its place
   is a local for the call: stored in p and reloaded per line, it cost a unit
   of stories110M's attention about 0.5 microseconds of 2.2. */
static inline const void *kv_prefetch_some(KVPrefetch *p, int lines) {
    if (!p) return NULL;
    int at = p->at, run = p->run, line = p->line;
    uintptr_t asked = 0;
    while (lines > 0 && at < p->n_pieces) {
        const KVPiece *piece = &p->piece[at];
        uintptr_t start = (uintptr_t)piece->start + run * piece->stride, end = start + piece->bytes;
        uintptr_t next = (start & ~(uintptr_t)63) + 64 * (uintptr_t)line; /* of the run's first line on */
        for (; next < end && lines > 0; next += 64, line++, lines--) {
            __builtin_prefetch((const void *)next, 0, 2);
            asked = next;
        }
        if (next >= end) { /* the run is done: the piece's next run, or the next piece */
            line = 0;
            if (++run == piece->count) run = 0, at++;
        }
    }
    p->at = at, p->run = run, p->line = line;
    return (const void *)asked;
}

/* Asks for all p has left, and empties it for the next unit's pieces. */
static void kv_prefetch_finish(KVPrefetch *p) {
    kv_prefetch_some(p, INT_MAX);
    p->n_pieces = p->at = p->run = p->line = 0;
}

/* ------------------------------------------------------------------------- */
/* Kernel sets: the plain kernels of Part I, and fast twins for each kind of  */
/* CPU, one set chosen at start-up                                            */

/* How a set packs int8 matrices (pack_weights()): not at all; as w + 128,
   for vpdpbusd, which multiplies unsigned by signed bytes; or as they are. */
typedef enum { PACK_NONE = 0, PACK_PLUS_128, PACK_SIGNED } PackForm; /* 0: packs_q8 reads as a flag */

typedef struct {
    const char *name;
    int (*cpu_has)(void);
    void (*matvec)(float *out, const float *x, const float *w, int n, int begin, int end);
    QuantizeFn quantize;
    void (*matvec_q8)(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                      int begin, int end);
    void (*matvec_q4k)(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end);
    void (*matvec_q6k)(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end);
    void (*softmax)(float *x, int n);
    int (*argmax)(const float *x, int n);
    void (*swiglu)(float *hb, const float *hb2, int n);
    void (*rope)(float *v, int n, int head_size, const float *cos_pos, const float *sin_pos);
    /* rmsnorm() of the rows of T tokens, [T][n] */
    void (*rmsnorm_tokens)(float *out, const float *x, const float *weight, int T, int n, float eps);
    /* attention_head() for the n_heads query heads of n_tokens consecutive
       tokens (positions pos, pos + 1, ...) that share KV head kv_head of the
       layer; q and out are rows of dim floats from the first of those heads
       on; att holds 8 rows of att_stride floats, query16 room for one head's
       query in int16; the fast sets ask for ahead's lines as they go (NULL: none) */
    void (*attention_block)(float *out, const float *q, int n_tokens, int dim, int pos, const KVCache *keys,
                            const KVCache *values, int layer, int kv_head, float *att, size_t att_stride,
                            int16_t *query16, int n_heads, KVPrefetch *ahead);
    /* Batched matmuls, T > 1 tokens at once (and T = 1 for the int8 matrices
       a set that packs_q8 has packed), each weight read once for all:
       out[t * out_stride + i] = W[i] . x[t] for rows [begin, end). prepare_*
       lays the input out once (x [T][n], or quantize()'s int8 values and
       scales) in the set's own format, prepare_q8_tokens for the tokens
       [begin, end) (begin a multiple of 16), so that threads can share it;
       out_t is scratch. NULL: one token at a time through matvec / matvec_q8.
       The int8 ones take group sizes that are a multiple of q8_group_multiple. */
    void (*prepare_tokens)(float *x_t, const float *x, int n, int T);
    void (*matmul_tokens)(float *out, size_t out_stride, float *out_t, const float *x_t, const float *w, int n, int T,
                          int begin, int end);
    int q8_group_multiple;
    void (*prepare_q8_tokens)(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                              int begin, int end);
    void (*matmul_q8_tokens)(float *out, size_t out_stride, float *out_t, const void *scratch, const Matrix *w, int n,
                             int group_size, int T, int begin, int end);
    /* the same for q4k weights, on quantize()'s values and scales (group size
       Q4K_BLOCK) laid out by prepare_block_tokens() */
    void (*matmul_q4k_tokens)(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                              int begin, int end);
    /* and for q6k weights, the same way */
    void (*matmul_q6k_tokens)(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                              int begin, int end);
    /* matmul_q8_tokens reads int8 matrices packed at load (pack_weights()),
       in this form, and takes T = 1 too */
    PackForm packs_q8;
} KernelSet;

/* The int8 matrices of the vnni, avxvnni, avx2, dotprod and i8mm sets,
   copied at load (pack_weights()) in the order their kernels read them: per
   16 rows and 64 bytes of each, vector k holds every row's k-th 4 bytes, in
   the set's PackForm. Read in place, 16 rows side by side cost 16 shuffles
   per 64 bytes and 16 streams for the prefetchers; packed, one stream and
   none (the matmuls of an 8-token step at stories110M's shape on Zen 4: 4.95
   -> 3.95 ms, of one token 3.7 -> 3.2). Whole blocks of 16 rows, rows of
   whole 64-byte pieces, groups a multiple of 32. */
static int q8_packable(int n, int group_size) { return n % 64 == 0 && group_size >= 32 && group_size % 32 == 0; }

/* A packed block: 16 rows' weights, then their scales, group g's 16 side by side. */
static size_t q8_packed_block_bytes(int n, int group_size) { return (size_t)16 * n + (size_t)64 * (n / group_size); }

static void pack_q8_blocks(uint8_t *packed, const Matrix *w, int n, int first_block, int end_block, PackForm form) {
    uint32_t flip = form == PACK_PLUS_128 ? 0x80808080u : 0; /* + 128 in each byte */
    int groups = n / w->group_size;
    for (int block = first_block; block < end_block; block++) {
        uint8_t *out = packed + (size_t)block * q8_packed_block_bytes(n, w->group_size);
        for (int c = 0; c < n / 64; c++) {
            uint32_t *piece = (uint32_t *)(out + (size_t)1024 * c);
            for (int l = 0; l < 16; l++) {
                uint32_t words[16];
                memcpy(words, w->q + (size_t)(16 * block + l) * n + 64 * c, sizeof words);
                for (int k = 0; k < 16; k++) piece[16 * k + l] = words[k] ^ flip;
            }
        }
        float *scales = (float *)(out + (size_t)16 * n);
        for (int l = 0; l < 16; l++)
            for (int g = 0; g < groups; g++) scales[16 * g + l] = w->scale[(size_t)(16 * block + l) * groups + g];
    }
}

static int cpu_has_always(void) { return 1; }

static void attention_block_plain(float *out, const float *q, int n_tokens, int dim, int pos, const KVCache *keys,
                                  const KVCache *values, int layer, int kv_head, float *att, size_t att_stride,
                                  int16_t *query16, int n_heads, KVPrefetch *ahead) {
    (void)att_stride, (void)ahead;
    for (int t = 0; t < n_tokens; t++)
        for (int h = 0; h < n_heads; h++) {
            size_t offset = (size_t)t * dim + (size_t)h * keys->head_size;
            attention_head(out + offset, q + offset, keys, values, layer, kv_head, pos + t, att, query16);
        }
}

static void rmsnorm_tokens(float *out, const float *x, const float *weight, int T, int n, float eps) {
    for (int t = 0; t < T; t++) rmsnorm(out + (size_t)t * n, x + (size_t)t * n, weight, n, eps);
}

static const KernelSet plain_kernels = {
    .name = "plain", .cpu_has = cpu_has_always, .matvec = matvec, .quantize = quantize, .matvec_q8 = matvec_q8,
    .matvec_q4k = matvec_q4k, .matvec_q6k = matvec_q6k, .softmax = softmax, .argmax = sample_argmax, .swiglu = swiglu,
    .rope = rope, .rmsnorm_tokens = rmsnorm_tokens,
    .attention_block = attention_block_plain,
};

/* The sums of n int8 inputs over each run of `run` (32: the q4k sub-blocks,
   whose mins multiply them; 16: the q6k sub-blocks, whose -32 does). */
static void input_sums(int16_t *sums, const int8_t *x, int n, int run) {
    for (int s = 0; s < n / run; s++) {
        int sum = 0; /* at most 32 * 127 */
        for (int k = 0; k < run; k++) sum += x[run * s + k];
        sums[s] = (int16_t)sum;
    }
}

/* The batched q4k and q6k kernels' inputs: tokens [first, last) of T,
   quantized per block of 256, laid out per group of 8 tokens and per block.
   First each token's values as 8 vectors of 32 (vector u of token k at
   32 (8u + k)): value 64p + 32h + 4w + c of the block (p, c: 0-3; h: 0-1; w:
   0-7) is byte c of int32 lane p + 4 (w / 4) of vector 4h + w % 4. Then each
   int32 lane of vectors 0-3 holds values of one sub-block of 32 (2p), and the
   same one in all four, and so for 4-7 (2p + 1); see q4k_block_tokens_avx2().
   Then the sums over each 32 in pairs for each token (int16 [4][8][2]:
   sub-blocks 2p and 2p + 1 of token k at [p][k]); the sums over each 16 the
   same way ([8][8][2]); the 8 tokens' scales. A group's lanes past T repeat
   the last token. */
#define TOKEN_VALUES (8 * 256)
#define TOKEN_SUMS32 TOKEN_VALUES
#define TOKEN_SUMS16 (TOKEN_SUMS32 + 4 * 8 * 2 * 2)
#define TOKEN_SCALES (TOKEN_SUMS16 + 8 * 8 * 2 * 2)
#define TOKENS_BYTES (TOKEN_SCALES + 8 * 4)
static void prepare_block_tokens(void *scratch, const int8_t *xq, const float *xs, int n, int T, int first, int last) {
    int blocks = n / 256;
    for (int t = first; t < last; t++)
        for (int lane = t % 8; lane < (t == T - 1 ? 8 : t % 8 + 1); lane++)
            for (int b = 0; b < blocks; b++) {
                uint8_t *group = (uint8_t *)scratch + ((size_t)(t / 8) * blocks + b) * TOKENS_BYTES;
                const int8_t *x = xq + (size_t)t * n + 256 * b;
                int16_t sums16[16];
                input_sums(sums16, x, 256, 16);
                for (int p = 0; p < 4; p++)
                    for (int h = 0; h < 2; h++)
                        for (int w = 0; w < 8; w++)
                            memcpy(group + 32 * (8 * (4 * h + w % 4) + lane) + 4 * (p + 4 * (w / 4)), x + 64 * p + 32 * h + 4 * w, 4);
                for (int j = 0; j < 8; j++) {
                    int16_t sum32 = (int16_t)(sums16[2 * j] + sums16[2 * j + 1]);
                    memcpy(group + TOKEN_SUMS32 + 2 * (2 * (8 * (j / 2) + lane) + j % 2), &sum32, 2);
                }
                for (int h = 0; h < 16; h++) memcpy(group + TOKEN_SUMS16 + 2 * (2 * (8 * (h / 2) + lane) + h % 2), &sums16[h], 2);
                memcpy(group + TOKEN_SCALES + 4 * lane, &xs[(size_t)t * blocks + b], 4);
            }
}

/* The matvec kernels walk blocks of rows, 64 bytes of each at a time, and ask
   for data ahead of the hardware prefetcher: the same columns of the next block
   when a block is small (up to 24 KB), else a few lines further along each row. */
#define PREFETCH_BYTES 256
#define PREFETCH_NEXT_BLOCK_MAX (24 << 10)

/* Asks for the cache line `bytes` past p. A prefetch never faults, so that
   line may lie past the data; the address is computed as an integer, so that
   no out-of-bounds pointer is formed. */
static inline __attribute__((always_inline)) void prefetch(const void *p, size_t bytes) {
    __builtin_prefetch((const void *)((uintptr_t)p + bytes));
}

/* How far ahead, in bytes, to prefetch in blocks of `rows` rows of row_bytes. */
static inline __attribute__((always_inline)) size_t prefetch_ahead(size_t row_bytes, int rows) {
    return rows * row_bytes <= PREFETCH_NEXT_BLOCK_MAX ? rows * row_bytes : PREFETCH_BYTES;
}

/* The rows [begin, end) that the few-token kernels leave over (fewer than a
   vector of them), in the plain order: x_t[j * width + t] is token t's input j. */
static void few_tokens_plain(float *out, size_t out_stride, const float *x_t, int width, const float *w, int n, int T,
                             int begin, int end) {
    for (int i = begin; i < end; i++)
        for (int t = 0; t < T; t++) {
            float val = 0.0f;
            for (int j = 0; j < n; j++) val += w[(size_t)i * n + j] * x_t[(size_t)j * width + t];
            out[t * out_stride + i] = val;
        }
}

/* The fast kernels read the fp32 cache in place; the int8 cache's keys (and
   AVX-512's values) as they are, the rest dequantized a tile of positions at
   a time into a buffer of KV_TILE_FLOATS floats on the stack (16 KB: it
   stays in the L1 cache). Either way at most KV_CHUNK positions at a time,
   never past the end of a block. */
#define KV_TILE_FLOATS 4096
#define KV_PREFETCH_ROWS 16

/* The positions from t0 of n_keys up to the end of its block: a block's rows
   lie together. */
static inline int kv_run_length(const KVCache *c, int t0, int n_keys) {
    int n = n_keys - t0, to_block_end = c->block_size - t0 % c->block_size;
    return n < to_block_end ? n : to_block_end;
}

/* The int8 rows and scales of one KV head from position t0 on (to the end
   of its block), as stored. */
static inline void kv_q8_rows(const KVCache *c, int layer, int kv_head, int t0, const int8_t **rows,
                              const float **scales) {
    size_t first = cache_row_number(c, layer, kv_head, t0);
    *rows = c->q + first * c->head_size;
    *scales = c->scale + first;
}

/* The positions of the chunk that starts at t0, of n_keys: at most KV_CHUNK,
   within its block, and for int8 (read as it is or as a tile) at most what a
   tile holds, a multiple of 16 when 16 rows fit (heads up to 256). */
static inline int kv_chunk_length(const KVCache *c, int t0, int n_keys) {
    int n = kv_run_length(c, t0, n_keys);
    if (n > KV_CHUNK) n = KV_CHUNK;
    if (c->f32) return n;
    int per_tile = KV_TILE_FLOATS / c->head_size;
    if (per_tile >= 16) per_tile = per_tile / 16 * 16;
    return n < per_tile ? n : per_tile;
}

/* Rows t0 .. t0 + n - 1 of one KV head as floats, *stride apart: the fp32
   cache's own, or the int8 ones (consecutive rows) dequantized into tile as
   cache_row() does. */
static inline __attribute__((always_inline)) const float *
kv_tile(const KVCache *c, int layer, int kv_head, int t0, int n, float *tile, size_t *stride) {
    size_t first = cache_row_number(c, layer, kv_head, t0);
    *stride = c->f32 ? (size_t)c->n_kv_heads * c->head_size : (size_t)c->head_size;
    if (c->f32) return c->f32 + first * c->head_size;
    for (int t = 0; t < n; t++) {
        const int8_t *q = c->q + (first + t) * c->head_size;
        /* ask for the row KV_PREFETCH_ROWS on now, ahead of the hardware
           prefetcher (attention at the 1.1B shape's position 2000: about 4% faster) */
        for (int i = 0; i < c->head_size; i += 64) prefetch(q + i, KV_PREFETCH_ROWS * c->head_size);
        float scale = c->scale[first + t];
        for (int i = 0; i < c->head_size; i++) tile[t * c->head_size + i] = (float)q[i] * scale;
    }
    return tile;
}

/* att[h * att_stride + t] = q[h] . key_t for the keys [from, n_keys) that a
   fast kernel's blocks leave over, each summed as attention_head() sums it. */
static inline __attribute__((always_inline)) void
scores_tail(float *att, size_t att_stride, const float *const *q, int Q, const float *keys, int from, int n_keys,
            int head_size, size_t kv_dim) {
    for (int h = 0; h < Q; h++)
        for (int t = from; t < n_keys; t++) {
            float score = 0.0f;
            for (int i = 0; i < head_size; i++) score += keys[(size_t)t * kv_dim + i] * q[h][i];
            att[h * att_stride + t] = score;
        }
}

/* 2^(i/32) for i = 0..31, rounded to double: the table glibc's expf uses. */
static const double exp2_fraction[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

/* Two int8 values widened to int16 side by side in 32 bits, the first in the
   low half: the operand pairs of the pmaddwd-style int8 kernels. */
static inline int32_t int16_pair(const int8_t *v) {
    return (int32_t)((uint16_t)v[0] | (uint32_t)(uint16_t)v[1] << 16);
}

#if defined(__x86_64__)
/* The x86-64 kernels are compiled for these instruction sets whatever the
   build's -march, and called only when the CPU reports them. */
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")))
#define VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define AVXVNNI __attribute__((target("avx2,fma,avxvnni")))
#endif
#if defined(__aarch64__)
/* And ARM64's dot product and int8 matrix multiply sets: GCC compiles them
   per function, whatever the build's -march (so the inlined helpers they
   call carry the same target); clang's arm_neon.h (14) has their intrinsics
   only where the build targets the feature (-mcpu=apple-m1, say), so with
   clang the sets are there only then. */
#if !defined(__clang__) || defined(__ARM_FEATURE_DOTPROD)
#define HAVE_DOTPROD 1
#if defined(__clang__)
#define DOTPROD
#else
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#endif
#if defined(HAVE_DOTPROD) && (!defined(__clang__) || defined(__ARM_FEATURE_MATMUL_INT8))
#define HAVE_I8MM 1
#if defined(__clang__)
#define I8MM
#else
#define I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif
#endif
#endif

/* ------------------------------------------------------------------------- */
/* 8-lane kernels, written once with vector extensions (SSE, AVX2, NEON)      */

/* Always-inline bodies take on the target of the function they are inlined
   into: KERNEL_SET_8LANE compiles them for each instruction set, with the
   pieces that have no portable form (expf's fused steps, int8 dot products,
   the AVX2 transpose) as constant function pointers. Shuffles wider than 16
   bytes only in AVX2 code (GCC turns a shuffle wider than the registers into
   scalar moves); wide vectors go by pointer (their calling convention
   differs with and without AVX). */

typedef float f32x4 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef int16_t i16x16 __attribute__((vector_size(32)));
typedef int8_t i8x32 __attribute__((vector_size(32)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef uint64_t u64x8 __attribute__((vector_size(64)));

/* ------------------------------------------------------------------------- */
/* 1. Helpers                                                                  */

static inline __attribute__((always_inline)) f32x4 load4(const float *p) {
    f32x4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* In place: r[0..3] are 4 rows of 4 floats; afterwards r[c] holds column c. */
static inline __attribute__((always_inline)) void transpose4(f32x4 r[4]) {
    f32x4 t0 = __builtin_shufflevector(r[0], r[1], 0, 4, 1, 5), t1 = __builtin_shufflevector(r[0], r[1], 2, 6, 3, 7);
    f32x4 t2 = __builtin_shufflevector(r[2], r[3], 0, 4, 1, 5), t3 = __builtin_shufflevector(r[2], r[3], 2, 6, 3, 7);
    r[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
    r[1] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
    r[2] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
    r[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}

/* col[c] = column c of the 8x8 block at src (rows `stride` floats apart):
   four 4x4 transposes of 16-byte halves, whose results are then placed as the
   halves of 32-byte vectors (a plain store of two halves, not a shuffle). */
static inline void transpose8(f32x8 col[8], const float *src, size_t stride) {
    f32x4 a[8], b[8]; /* columns 0-3 and 4-7 of rows 0..7 */
    for (int k = 0; k < 8; k++) {
        a[k] = load4(src + k * stride);
        b[k] = load4(src + k * stride + 4);
    }
    transpose4(a);
    transpose4(a + 4);
    transpose4(b);
    transpose4(b + 4);
    for (int c = 0; c < 4; c++) {
        memcpy((char *)&col[c], &a[c], 16);
        memcpy((char *)&col[c] + 16, &a[4 + c], 16);
        memcpy((char *)&col[4 + c], &b[c], 16);
        memcpy((char *)&col[4 + c] + 16, &b[4 + c], 16);
    }
}

/* How the generic bodies receive their target's transpose8. */
typedef void (*TransposeFn)(f32x8 col[8], const float *src, size_t stride);

#if defined(__x86_64__)
/* transpose8 for AVX2, where 32-byte shuffles are single instructions: row k
   and row k + 4 share a register (one 16-byte half each), so that one 4x4
   transpose within each half gives whole 8-row columns: 16 shuffles instead
   of 32 plus the joins, and no store-then-reload of halves. */
static inline AVX2 void transpose8_avx2(f32x8 col[8], const float *src, size_t stride) {
    f32x8 lo[4], hi[4]; /* lo[k]: columns 0-3 of rows k | k + 4; hi[k]: columns 4-7 */
    for (int k = 0; k < 4; k++) {
        const float *upper = src + k * stride, *lower = src + (k + 4) * stride;
        lo[k] = __builtin_shufflevector(load4(upper), load4(lower), 0, 1, 2, 3, 4, 5, 6, 7);
        hi[k] = __builtin_shufflevector(load4(upper + 4), load4(lower + 4), 0, 1, 2, 3, 4, 5, 6, 7);
    }
    for (int half = 0; half < 2; half++) {
        f32x8 *r = half ? hi : lo;
        f32x8 t0 = __builtin_shufflevector(r[0], r[1], 0, 8, 1, 9, 4, 12, 5, 13);
        f32x8 t1 = __builtin_shufflevector(r[0], r[1], 2, 10, 3, 11, 6, 14, 7, 15);
        f32x8 t2 = __builtin_shufflevector(r[2], r[3], 0, 8, 1, 9, 4, 12, 5, 13);
        f32x8 t3 = __builtin_shufflevector(r[2], r[3], 2, 10, 3, 11, 6, 14, 7, 15);
        col[4 * half + 0] = __builtin_shufflevector(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
        col[4 * half + 1] = __builtin_shufflevector(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
        col[4 * half + 2] = __builtin_shufflevector(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
        col[4 * half + 3] = __builtin_shufflevector(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
    }
}
#endif

/* transpose8 of a block of rows x cols (<= 8 each), zeros elsewhere: for the
   tails of rows and columns, without reading past them. */
static inline __attribute__((always_inline)) void
transpose8_partial(f32x8 col[8], const float *src, size_t stride, int rows, int cols, TransposeFn transpose) {
    float buf[8][8] = {{0}};
    for (int k = 0; k < rows; k++) memcpy(buf[k], src + k * stride, cols * sizeof(float));
    transpose(col, buf[0], 8);
}

/* Lane k of the result: the sum of the four lanes of v[k] (integers: exact in any order). */
static inline __attribute__((always_inline)) i32x4 sum_lanes4(const i32x4 v[4]) {
    i32x4 ab = __builtin_shufflevector(v[0], v[1], 0, 4, 1, 5) + __builtin_shufflevector(v[0], v[1], 2, 6, 3, 7);
    i32x4 cd = __builtin_shufflevector(v[2], v[3], 0, 4, 1, 5) + __builtin_shufflevector(v[2], v[3], 2, 6, 3, 7);
    return __builtin_shufflevector(ab, cd, 0, 1, 4, 5) + __builtin_shufflevector(ab, cd, 2, 3, 6, 7);
}

/* ------------------------------------------------------------------------- */
/* 2. Per-target pieces                                                        */

/* expf() of 8 floats: *y = exp(*x). ExpFn is how the generic bodies receive the target's. */
typedef void (*ExpFn)(f32x8 *y, const f32x8 *x);

/* a * b + c in one rounding, 8 doubles; Fma8Fn: how expf8_body gets it. */
typedef void (*Fma8Fn)(f64x8 *out, const f64x8 *a, const f64x8 *b, const f64x8 *c);

/* 2^((k mod 32) / 32) for each lane's k, from exp2_fraction; Exp2FractionFn:
   how expf8_body gets it (AVX-512 has a two-table permute for it). */
typedef void (*Exp2FractionFn)(f64x8 *out, const u64x8 *k);

/* Whether any lane of a mask is set; AnyLaneFn: how expf8_body gets the
   target's one instruction for it (a generic test is a branch per lane). */
typedef int (*AnyLaneFn)(const i32x8 *mask);

static inline __attribute__((always_inline)) void exp2_fraction_lanes(f64x8 *out, const u64x8 *k) {
    for (int i = 0; i < 8; i++) (*out)[i] = exp2_fraction[(*k)[i] & 31];
}

/* glibc's expf, 8 lanes, bit for bit, as glibc builds it with fused
   multiply-adds (x86-64 with FMA, ARM64): in double precision, x * 32/ln2 =
   k + r with |r| <= 1/2, and exp(x) = 2^(k/32) * 2^(r/32), the latter a cubic
   in r. Its main path covers [-103.28, 88.72], below -103.97 it gives 0; the
   lanes left (NaN, overflow, the edge of underflow) go to expf() itself. */
static inline __attribute__((always_inline)) void expf8_body(f32x8 *y, const f32x8 *x, Fma8Fn fma8,
                                                             Exp2FractionFn exp2_fraction_of, AnyLaneFn any_lane) {
    const f64x8 zero = {0}, inv_ln2_32 = zero + 0x1.71547652b82fep+5;
    const f64x8 round_shift = zero + 0x1.8p+52; /* adding it rounds to an integer */
    const f64x8 c0 = zero + 0x1.c6af84b912394p-20, c1 = zero + 0x1.ebfce50fac4f3p-13;
    const f64x8 c2 = zero + 0x1.62e42ff0c52d6p-6, one = zero + 1.0;
    f64x8 xd = __builtin_convertvector(*x, f64x8), kd, r, z, poly, fraction;
    fma8(&kd, &inv_ln2_32, &xd, &round_shift); /* k in the low bits */
    u64x8 k = (u64x8)kd;
    f64x8 minus_k = round_shift - kd;
    fma8(&r, &inv_ln2_32, &xd, &minus_k);
    /* 2^(k/32) = 2^((k mod 32)/32) from the table, times 2^floor(k/32) added to its exponent */
    exp2_fraction_of(&fraction, &k);
    f64x8 scale = (f64x8)((u64x8)fraction + ((k & ~(uint64_t)31) << 47));
    fma8(&z, &r, &c0, &c1);
    f64x8 r2 = r * r;
    fma8(&poly, &r, &c2, &one);
    fma8(&poly, &z, &r2, &poly);
    f32x8 result = __builtin_convertvector(poly * scale, f32x8);
    i32x8 main_path = (*x >= -0x1.9d1d9ep+6f) & (*x <= 0x1.62e42ep+6f);
    i32x8 zero_lanes = *x < -0x1.9fe368p+6f;
    result = (f32x8)((i32x8)result & main_path);
    i32x8 rest = ~(main_path | zero_lanes);
    if (any_lane(&rest))
        for (int i = 0; i < 8; i++)
            if (rest[i]) result[i] = expf((*x)[i]);
    *y = result;
}

#if defined(__x86_64__)
/* Portable: libm itself, lane by lane. The SSE set uses it: on a CPU without
   FMA, glibc's expf is built without fused steps, which expf8_body does not
   reproduce. */
static void expf8_libm(f32x8 *y, const f32x8 *x) {
    for (int i = 0; i < 8; i++) (*y)[i] = expf((*x)[i]);
}

static inline __attribute__((always_inline)) AVX2 void fma8_avx2(f64x8 *out, const f64x8 *a, const f64x8 *b,
                                                                  const f64x8 *c) {
    __m256d h[3][2], result[2];
    memcpy(h[0], a, sizeof *a), memcpy(h[1], b, sizeof *b), memcpy(h[2], c, sizeof *c);
    for (int i = 0; i < 2; i++) result[i] = _mm256_fmadd_pd(h[0][i], h[1][i], h[2][i]);
    memcpy(out, result, sizeof result);
}

static inline __attribute__((always_inline)) AVX2 int any_lane_avx2(const i32x8 *mask) {
    return _mm256_movemask_ps((__m256)*mask) != 0;
}

static inline __attribute__((always_inline)) AVX2 void expf8_avx2(f32x8 *y, const f32x8 *x) {
    expf8_body(y, x, fma8_avx2, exp2_fraction_lanes, any_lane_avx2);
}
#endif

#if defined(__aarch64__)
static inline __attribute__((always_inline)) void fma8_neon(f64x8 *out, const f64x8 *a, const f64x8 *b,
                                                          const f64x8 *c) {
    float64x2_t h[3][4], result[4];
    memcpy(h[0], a, sizeof *a), memcpy(h[1], b, sizeof *b), memcpy(h[2], c, sizeof *c);
    for (int i = 0; i < 4; i++) result[i] = vfmaq_f64(h[2][i], h[0][i], h[1][i]);
    memcpy(out, result, sizeof result);
}

static inline __attribute__((always_inline)) int any_lane_neon(const i32x8 *mask) {
    uint32x4_t half[2];
    memcpy(half, mask, sizeof half);
    return vmaxvq_u32(vorrq_u32(half[0], half[1])) != 0;
}

static inline __attribute__((always_inline)) void expf8_neon(f32x8 *y, const f32x8 *x) {
    expf8_body(y, x, fma8_neon, exp2_fraction_lanes, any_lane_neon);
}
#endif

/* int8 dot products of 8 rows with x over len bytes (a multiple of 16): row
   r starts at w + r * n; lane r of *total is its exact total. Dot8Fn: how
   the generic bodies get it. */
typedef void (*Dot8Fn)(i32x8 *total, const int8_t *w, size_t n, const int8_t *x, int len);

/* Lane r of *total: the sum of the four lanes of acc[r]. */
static inline __attribute__((always_inline)) void totals8(i32x8 *total, const i32x4 acc[8]) {
    i32x4 halves[2] = {sum_lanes4(acc), sum_lanes4(acc + 4)};
    memcpy(total, halves, sizeof *total);
}

/* acc += for 8 tokens, (x_a * w_a + x_b * w_b) where x holds each token's two
   int16 values a, b side by side and w_pair holds w_a in its low and w_b in its
   high 16 bits (the pmaddwd instruction). PairFn: how the bodies get it. */
typedef void (*PairFn)(i32x8 *acc, const int16_t *x, int32_t w_pair);

/* Blocks of a q4k or q6k row that the decode kernels take at once, keeping
   what they share on the stack (the inputs' sub-block sums; avx2: 8 rows'
   partial sums, 26 KB; sse: the inputs as int16, 32 KB): a row of 16384
   values; wider rows go a chunk at a time. */
#define BLOCKS_PER_CHUNK 64

/* How far ahead of a q4k or q6k block (or an int8 row's 64 bytes, in
   matvec_q8_rows()) the decode kernels ask for data: 4 KB,
   past what the hardware prefetcher fetches alone (a timing loop of the q4k
   kernel on 2 threads of Zen 3, weights from memory: 1.3x the bytes per
   second of no prefetch, 1.1x of 2 KB ahead). */
#define BLOCK_PREFETCH_BYTES 4096

/* Rows of a q4k or q6k matrix taken together by the batched kernels: each
   of their blocks is unpacked once (16 rows: 7.5-8 KB for q4k) while every group
   of 8 tokens passes over it, so the tokens' inputs for one block (2.4 KB a
   group) are read from memory once per 16 rows rather than once per row. */
#define ROW_TILE 16

#if defined(__x86_64__)
/* Lane r: the sum of the 8 lanes of acc[r]. */
static inline __attribute__((always_inline)) AVX2 __m256i
row_totals_avx2(const __m256i acc[8]) {
    __m256i rows01 = _mm256_hadd_epi32(acc[0], acc[1]), rows23 = _mm256_hadd_epi32(acc[2], acc[3]);
    __m256i rows45 = _mm256_hadd_epi32(acc[4], acc[5]), rows67 = _mm256_hadd_epi32(acc[6], acc[7]);
    __m256i rows0123 = _mm256_hadd_epi32(rows01, rows23), rows4567 = _mm256_hadd_epi32(rows45, rows67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(rows0123, rows4567, 0x20),
                            _mm256_permute2x128_si256(rows0123, rows4567, 0x31));
}

/* acc[r] += 16 bytes of row r times x, widened to int16. */
static inline __attribute__((always_inline)) AVX2 void
add16_avx2(__m256i acc[8], const int8_t *w, size_t n, const int8_t *x) {
    __m256i x16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x));
    for (int r = 0; r < 8; r++) {
        __m256i w16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + r * n)));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(w16, x16));
    }
}

/* One step of a row's int8 dot product, 32 bytes: acc's lanes += the sums
   of w times x, 4 bytes a lane. AVX2: exactly, vpmaddubsw (unsigned by signed
   bytes) getting |w| and x with w's sign (a pair of products fits its int16:
   quantize() gives -127..127). VNNI: vpdpbusd adds four products at once and
   gets w + 128, so the lanes hold 128 * sum(x) more, which the caller takes
   off. Q8StepFn: how matvec_q8_rows() gets it. */
typedef __m256i (*Q8StepFn)(__m256i acc, __m256i w, __m256i x);

static inline __attribute__((always_inline)) AVX2 __m256i q8_step_avx2(__m256i acc, __m256i w, __m256i x) {
    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

static inline __attribute__((always_inline)) VNNI __m256i q8_step_vnni(__m256i acc, __m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(acc, _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)), x);
}

/* 32 bytes of each row at a time (q8_step_avx2()). The rows' sums stay in
   registers until one reduction at the end: that, not the multiplies, limits
   small groups. */
static inline __attribute__((always_inline)) AVX2 void
dot8_avx2(i32x8 *total, const int8_t *w, size_t n, const int8_t *x, int len) {
    __m256i acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_si256();
    int k = 0;
    for (; k + 32 <= len; k += 32) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + k));
        for (int r = 0; r < 8; r++) acc[r] = q8_step_avx2(acc[r], _mm256_loadu_si256((const __m256i *)(w + r * n + k)), xv);
    }
    if (k < len) add16_avx2(acc, w + k, n, x + k); /* 16 bytes left */
    *total = (i32x8)row_totals_avx2(acc);
}

/* dot8_avx2() with VNNI (q8_step_vnni()): 128 * sum(x), the same for every
   row, is taken off at the end. */
static inline __attribute__((always_inline)) VNNI void
dot8_vnni(i32x8 *total, const int8_t *w, size_t n, const int8_t *x, int len) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i acc[8], x_sum = _mm256_setzero_si256();
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_si256();
    int k = 0;
    for (; k + 32 <= len; k += 32) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + k));
        x_sum = _mm256_dpbusd_epi32(x_sum, ones, xv);
        for (int r = 0; r < 8; r++) acc[r] = q8_step_vnni(acc[r], _mm256_loadu_si256((const __m256i *)(w + r * n + k)), xv);
    }
    if (k < len) add16_avx2(acc, w + k, n, x + k); /* 16 bytes left: no bias */
    __m128i bias = _mm_add_epi32(_mm256_castsi256_si128(x_sum), _mm256_extracti128_si256(x_sum, 1));
    bias = _mm_add_epi32(bias, _mm_shuffle_epi32(bias, 0x4E));
    bias = _mm_slli_epi32(_mm_add_epi32(bias, _mm_shuffle_epi32(bias, 0xB1)), 7);
    *total = (i32x8)_mm256_sub_epi32(row_totals_avx2(acc), _mm256_set_m128i(bias, bias));
}

/* acc += the scales times the dot products of q's unsigned bytes (q4k 0-15,
   q6k 0-63) with x's signed ones, per int32 lane: with AVX2, vpmaddubsw's
   pair sums (at most 2 * 63 * 128) times the scales by vpmaddwd, a lane's
   scale in both its int16 halves; with VNNI, vpdpbusd's sums of four (at
   most 4 * 63 * 128, so they fit the low int16 half of their lane) times the
   scales by vpdpwssd, a lane's scale in its low half and 0 in its high half,
   so the sign bits above the sum multiply 0. The same integers either way. */
typedef __m256i (*ScaledDotFn)(__m256i acc, __m256i q, __m256i x, __m256i scales);

static inline __attribute__((always_inline)) AVX2 __m256i scaled_dot_avx2(__m256i acc, __m256i q, __m256i x,
                                                                           __m256i scales) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scales));
}

static inline __attribute__((always_inline)) VNNI __m256i scaled_dot_vnni(__m256i acc, __m256i q, __m256i x,
                                                                           __m256i scales) {
    return _mm256_dpwssd_epi32(acc, _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x), scales);
}

/* A q4k block's 6-bit scales (low 8 lanes) and mins (high 8) as int16, from
   the 12 packed bytes (see q4k_scale_min()), 16 at a time: the low 6 bits of
   bytes 0-3 (scales 0-3) and 4-7 (mins 0-3); the low and high nibbles of bytes
   8-11 (scales and mins 4-7), with the top 2 bits of bytes 0-3 and 4-7 above
   them. The 16 bytes read end inside the block. */
static inline __attribute__((always_inline)) AVX2 __m256i q4k_scales_mins_avx2(const uint8_t *packed) {
    __m128i bytes = _mm_loadu_si128((const __m128i *)packed);
    __m128i low = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    __m128i top = _mm_shuffle_epi8(bytes, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    __m128i six_bits = _mm_and_si128(low, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    __m128i high_nibbles = _mm_and_si128(_mm_srli_epi16(low, 4), _mm_setr_epi32(0, 0, 0, 0x0f0f0f0f));
    __m128i top_bits = _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)); /* bits 6-7 to 4-5 */
    return _mm256_cvtepu8_epi16(_mm_or_si128(_mm_or_si128(six_bits, high_nibbles), top_bits));
}

/* A q4k block's scales, scale j in every int32 lane of scales[j] as a
   ScaledDotFn takes it (in both int16 halves, or with low_halves in the low
   one), and its mins as 8 int16. */
static inline __attribute__((always_inline)) AVX2 void q4k_scales_avx2(const uint8_t *packed, __m256i scales[8],
                                                                       __m128i *mins, int low_halves) {
    __m256i wide = q4k_scales_mins_avx2(packed);
    *mins = _mm256_extracti128_si256(wide, 1);
    __m256i all = _mm256_permute2x128_si256(wide, wide, 0x00); /* scales 0-7 in both halves */
    for (int j = 0; j < 8; j++) {
        int word = 2 * j | (2 * j + 1) << 8; /* the bytes of int16 lane j */
        scales[j] = _mm256_shuffle_epi8(all, _mm256_set1_epi32(word | (low_halves ? (int)0x80800000 : word << 16)));
    }
}

/* The finite fp16 numbers in the low 16 bits of h's lanes, as half_to_float()
   makes them (the same bits). */
static inline __attribute__((always_inline)) AVX2 __m256 halves_to_floats_avx2(__m256i h) {
    __m256i magnitude = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
    __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(magnitude), _mm256_set1_ps(0x1p112f));
    return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

/* Lane t: the sum of the 4 lanes of m[t]. */
static inline __attribute__((always_inline)) AVX2 __m256i lane_totals4(const __m128i m[8]) {
    __m128i low = _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]));
    __m128i high = _mm_hadd_epi32(_mm_hadd_epi32(m[4], m[5]), _mm_hadd_epi32(m[6], m[7]));
    return _mm256_set_m128i(high, low);
}

/* The first `count` (at most 8) of out[0], out[stride], out[2 stride], ...
   as 8 lanes, the rest 0; and back. The q4k and q6k kernels keep 8 rows' or
   8 tokens' float sums in the lanes of one vector. */
static inline __attribute__((always_inline)) AVX2 __m256 load_lanes(const float *out, size_t stride, int count) {
    float lanes[8] = {0};
    for (int k = 0; k < 8 && k < count; k++) lanes[k] = out[k * stride];
    return _mm256_loadu_ps(lanes);
}

static inline __attribute__((always_inline)) AVX2 void store_lanes(float *out, size_t stride, int count, __m256 val) {
    float lanes[8];
    _mm256_storeu_ps(lanes, val);
    for (int k = 0; k < 8 && k < count; k++) out[k * stride] = lanes[k];
}

/* matvec_q4k() for x86, 8 rows at a time. A pair of sub-blocks is 32 bytes
   of 4-bit values; `dot` multiplies them (unsigned, 0-15) by the int8 inputs
   and applies the sub-block's scale (AVX2: vpmaddubsw and vpmaddwd; VNNI:
   vpdpbusd and vpdpwssd). Each row's blocks leave 8 partial integer sums in a
   vector, kept per block; then the 8 rows take the 8 lanes of the totals and
   of the floats, each lane combining its row's blocks in the plain kernel's
   order, so the results are its bits, without a sum across a vector per block.
   The inputs' sub-block sums, for the mins, are the same for every row: taken
   once per chunk of blocks. Rows past `end` repeat the last row. */
static inline __attribute__((always_inline)) AVX2 void
matvec_q4k_body(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end,
                ScaledDotFn dot, int low_halves) {
    const __m256i low_nibbles = _mm256_set1_epi8(15);
    int blocks = n / Q4K_BLOCK;
    for (int c0 = 0; c0 < blocks; c0 += BLOCKS_PER_CHUNK) {
        int c1 = blocks - c0 < BLOCKS_PER_CHUNK ? blocks : c0 + BLOCKS_PER_CHUNK;
        int16_t x_sums[BLOCKS_PER_CHUNK * 8];
        input_sums(x_sums, xq + (size_t)Q4K_BLOCK * c0, Q4K_BLOCK * (c1 - c0), 32);
        for (int first = begin; first < end; first += 8) {
            __m256i dots[BLOCKS_PER_CHUNK][8];
            __m128i min_products[BLOCKS_PER_CHUNK][8];
            uint32_t scale_halves[BLOCKS_PER_CHUNK][8]; /* each block's d and dmin */
            for (int r = 0; r < 8; r++) {
                int i = first + r < end ? first + r : end - 1;
                const uint8_t *block = w->q4k + ((size_t)i * blocks + c0) * Q4K_BLOCK_BYTES;
                for (int b = c0; b < c1; b++, block += Q4K_BLOCK_BYTES) {
                    const int8_t *x = xq + (size_t)Q4K_BLOCK * b;
                    __m256i acc = _mm256_setzero_si256(), scales[8];
                    __m128i mins;
                    for (int line = 0; line < Q4K_BLOCK_BYTES; line += 64) prefetch(block + line, BLOCK_PREFETCH_BYTES);
                    q4k_scales_avx2(block + 4, scales, &mins, low_halves);
                    for (int pair = 0; pair < 4; pair++) {
                        __m256i q = _mm256_loadu_si256((const __m256i *)(block + 16 + 32 * pair));
                        __m256i lo = _mm256_and_si256(q, low_nibbles);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_nibbles);
                        __m256i x_lo = _mm256_loadu_si256((const __m256i *)(x + 64 * pair));
                        __m256i x_hi = _mm256_loadu_si256((const __m256i *)(x + 64 * pair + 32));
                        acc = dot(acc, lo, x_lo, scales[2 * pair]);
                        acc = dot(acc, hi, x_hi, scales[2 * pair + 1]);
                    }
                    dots[b - c0][r] = acc;
                    min_products[b - c0][r] =
                        _mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)(x_sums + 8 * (b - c0))));
                    memcpy(&scale_halves[b - c0][r], block, 4);
                }
            }
            __m256 val = load_lanes(out + first, 1, c0 ? end - first : 0); /* the earlier chunks' sums */
            for (int b = c0; b < c1; b++) {
                __m256i halves = _mm256_loadu_si256((const __m256i *)scale_halves[b - c0]);
                __m256 d = halves_to_floats_avx2(halves), dmin = halves_to_floats_avx2(_mm256_srli_epi32(halves, 16));
                __m256 dot = _mm256_cvtepi32_ps(row_totals_avx2(dots[b - c0]));
                __m256 min_total = _mm256_cvtepi32_ps(lane_totals4(min_products[b - c0]));
                __m256 block_sum = _mm256_sub_ps(_mm256_mul_ps(d, dot), _mm256_mul_ps(dmin, min_total));
                val = _mm256_add_ps(val, _mm256_mul_ps(_mm256_set1_ps(xs[b]), block_sum));
            }
            store_lanes(out + first, 1, end - first, val);
        }
    }
}

static AVX2 void matvec_q4k_avx2(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                                 int end) {
    matvec_q4k_body(out, xq, xs, w, n, begin, end, scaled_dot_avx2, 0);
}

static VNNI void matvec_q4k_vnni(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                                 int end) {
    matvec_q4k_body(out, xq, xs, w, n, begin, end, scaled_dot_vnni, 1);
}

/* out[v] = int32 lane v of rows 0-3, then lane v + 4 of rows 0-3: the
   weights' side of prepare_block_tokens()' order, from 4 vectors of 32
   consecutive values each (int32 lane w: values 4w to 4w + 3). */
static inline __attribute__((always_inline)) AVX2 void interleave_rows_avx2(const __m256i rows[4], __m256i out[4]) {
    __m256i rows01_low = _mm256_unpacklo_epi32(rows[0], rows[1]), rows23_low = _mm256_unpacklo_epi32(rows[2], rows[3]);
    __m256i rows01_high = _mm256_unpackhi_epi32(rows[0], rows[1]), rows23_high = _mm256_unpackhi_epi32(rows[2], rows[3]);
    out[0] = _mm256_unpacklo_epi64(rows01_low, rows23_low);
    out[1] = _mm256_unpackhi_epi64(rows01_low, rows23_low);
    out[2] = _mm256_unpacklo_epi64(rows01_high, rows23_high);
    out[3] = _mm256_unpackhi_epi64(rows01_high, rows23_high);
}

/* A q4k block unpacked for q4k_block_tokens_avx2(): its 4-bit values in
   prepare_block_tokens()' order (q[0-3] from the low nibbles: int32 lane L
   holds values of sub-block 2 (L % 4); q[4-7] from the high nibbles: sub-block
   2 (L % 4) + 1); the matching scales in both int16 halves of each int32 lane
   (scales[0] for q[0-3], scales[1] for q[4-7]); the mins of sub-blocks 2p and
   2p + 1 as an int16 pair in every int32 lane of min_pairs[p]; d and dmin. */
typedef struct {
    __m256i q[8], scales[2], min_pairs[4];
    __m256 d, dmin;
} Q4kUnpacked;

static inline __attribute__((always_inline)) AVX2 void q4k_unpack_avx2(const uint8_t *block, Q4kUnpacked *u) {
    const __m256i low_nibbles = _mm256_set1_epi8(15);
    __m256i packed[4], interleaved[4];
    for (int p = 0; p < 4; p++) packed[p] = _mm256_loadu_si256((const __m256i *)(block + 16 + 32 * p));
    interleave_rows_avx2(packed, interleaved);
    for (int v = 0; v < 4; v++) {
        u->q[v] = _mm256_and_si256(interleaved[v], low_nibbles);
        u->q[4 + v] = _mm256_and_si256(_mm256_srli_epi16(interleaved[v], 4), low_nibbles);
    }
    __m256i wide = q4k_scales_mins_avx2(block + 4);
    __m256i all = _mm256_permute2x128_si256(wide, wide, 0x00); /* scales 0-7 in both halves */
    u->scales[0] = _mm256_shuffle_epi8(all, _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0,
                                                             1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
    u->scales[1] = _mm256_shuffle_epi8(all, _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2,
                                                             3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
    __m128i min_vector = _mm256_extracti128_si256(wide, 1);
    __m256i min_pairs = _mm256_set_m128i(min_vector, min_vector);
    for (int pair = 0; pair < 4; pair++)
        u->min_pairs[pair] = _mm256_permutevar8x32_epi32(min_pairs, _mm256_set1_epi32(pair));
    uint32_t halves;
    memcpy(&halves, block, 4);
    __m256i both = _mm256_set1_epi32((int)halves);
    u->d = halves_to_floats_avx2(both);
    u->dmin = halves_to_floats_avx2(_mm256_srli_epi32(both, 16));
}

/* One q4k block times the inputs of 8 tokens (prepare_block_tokens()), token
   k in lane k: d times the integer dot product minus dmin times the mins'
   products, as the plain kernel combines them. Each int16 lane of
   vpmaddubsw's products belongs to one sub-block, the same in q[0-3] (and in
   q[4-7]), so the products of four vectors are added as int16 (at most
   4 * 2 * 15 * 127 < 2^15) before one vpmaddwd applies the scales: 10
   multiplies per token and block instead of 16. The mins' products come 8
   tokens at a time from the sums' pairs. */
static inline __attribute__((always_inline)) AVX2 __m256 q4k_block_sum_avx2(const Q4kUnpacked *u, const uint8_t *in,
                                                                          const __m256i acc[8]) {
    __m256i mins = _mm256_setzero_si256();
    for (int pair = 0; pair < 4; pair++) {
        __m256i sums = _mm256_loadu_si256((const __m256i *)(in + TOKEN_SUMS32 + 32 * pair));
        mins = _mm256_add_epi32(mins, _mm256_madd_epi16(sums, u->min_pairs[pair]));
    }
    __m256 dots = _mm256_cvtepi32_ps(row_totals_avx2(acc));
    return _mm256_sub_ps(_mm256_mul_ps(u->d, dots), _mm256_mul_ps(u->dmin, _mm256_cvtepi32_ps(mins)));
}

static inline __attribute__((always_inline)) AVX2 __m256 q4k_block_tokens_avx2(const Q4kUnpacked *u, const uint8_t *in) {
    __m256i acc[8];
    for (int k = 0; k < 8; k++) {
        __m256i products[2];
        for (int h = 0; h < 2; h++) {
            products[h] = _mm256_setzero_si256();
            for (int v = 4 * h; v < 4 * h + 4; v++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(in + 32 * (8 * v + k)));
                products[h] = _mm256_add_epi16(products[h], _mm256_maddubs_epi16(u->q[v], xv));
            }
        }
        acc[k] = _mm256_add_epi32(_mm256_madd_epi16(products[0], u->scales[0]),
                                  _mm256_madd_epi16(products[1], u->scales[1]));
    }
    return q4k_block_sum_avx2(u, in, acc);
}

/* q4k_block_tokens_avx2() with VNNI: vpdpbusd adds the products of four
   vectors in each int32 lane (16 products of one sub-block, at most
   16 * 15 * 128 = 30720, so the sum fits the lane's low int16 half), and
   vpdpwssd multiplies that half by the scale, 0 by the sign bits above it:
   8 multiplies and 2 scale steps per token and block where AVX2 has 10 and
   7 adds. */
static inline __attribute__((always_inline)) VNNI __m256 q4k_block_tokens_vnni(const Q4kUnpacked *u, const uint8_t *in) {
    const __m256i low_halves = _mm256_set1_epi32(0xffff);
    __m256i scales[2] = {_mm256_and_si256(u->scales[0], low_halves), _mm256_and_si256(u->scales[1], low_halves)};
    __m256i acc[8];
    for (int k = 0; k < 8; k++) {
        acc[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i sums = _mm256_setzero_si256();
            for (int v = 4 * h; v < 4 * h + 4; v++)
                sums = _mm256_dpbusd_epi32(sums, u->q[v], _mm256_loadu_si256((const __m256i *)(in + 32 * (8 * v + k))));
            acc[k] = _mm256_dpwssd_epi32(acc[k], sums, scales[h]);
        }
    }
    return q4k_block_sum_avx2(u, in, acc);
}

/* A q6k block's 6-bit values q (0-63) in q[v], v = 4 * half + m holding
   values 128 half + 32 m + (0-31) (see q6k_values()). */
static inline __attribute__((always_inline)) AVX2 void q6k_values_avx2(const uint8_t *block, __m256i q[8]) {
    const __m256i low_nibbles = _mm256_set1_epi8(15), high_pair = _mm256_set1_epi8(0x30);
    for (int half = 0; half < 2; half++) {
        __m256i low0 = _mm256_loadu_si256((const __m256i *)(block + 64 * half));
        __m256i low1 = _mm256_loadu_si256((const __m256i *)(block + 64 * half + 32));
        __m256i high = _mm256_loadu_si256((const __m256i *)(block + Q6K_HIGH_BITS + 32 * half));
        q[4 * half] = _mm256_or_si256(_mm256_and_si256(low0, low_nibbles),
                                      _mm256_and_si256(_mm256_slli_epi16(high, 4), high_pair));
        q[4 * half + 1] = _mm256_or_si256(_mm256_and_si256(low1, low_nibbles),
                                          _mm256_and_si256(_mm256_slli_epi16(high, 2), high_pair));
        q[4 * half + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), low_nibbles),
                                          _mm256_and_si256(high, high_pair));
        q[4 * half + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), low_nibbles),
                                          _mm256_and_si256(_mm256_srli_epi16(high, 2), high_pair));
    }
}

/* q6k_values_avx2(), and the scales of the two sub-blocks of q[v], 2 v and
   2 v + 1, in the low and high 4 int32 lanes of scales[v] (the lanes of the
   low and high 16 values) as a ScaledDotFn takes them (in both int16 halves,
   or with low_halves in the low one, sign-extended from int8 either way);
   all 16 scales as int16 in *all_scales. */
static inline __attribute__((always_inline)) AVX2 void q6k_unpack_avx2(const uint8_t *block, __m256i q[8],
                                                                       __m256i scales[8], __m256i *all_scales,
                                                                       int low_halves) {
    q6k_values_avx2(block, q);
    __m128i packed = _mm_loadu_si128((const __m128i *)(block + Q6K_SCALES));
    *all_scales = _mm256_cvtepi8_epi16(packed);
    long long high_bytes = low_halves ? (long long)0x8000800080008000ULL : 0; /* 0x80: pshufb writes 0 */
    for (int v = 0; v < 8; v++) {
        long long lo = 0x0101010101010101LL * (2 * v), hi = 0x0101010101010101LL * (2 * v + 1);
        if (low_halves) lo = lo & 0x00ff00ff00ff00ffLL, hi = hi & 0x00ff00ff00ff00ffLL;
        scales[v] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(packed, _mm_set_epi64x(hi | high_bytes, lo | high_bytes)));
    }
}

/* matvec_q6k() for x86, 8 rows at a time as in matvec_q4k_body(): `dot`
   applies the sub-blocks' scales to q . x, 32 values (q unsigned, 0-63) at a
   time. The -32 is taken apart, as 32 times the scales times the inputs' sums
   over each 16 (at most 32 * 256 * 128 * 128 = 2^27 per block): sum scale
   (q - 32) . x = sum scale q . x - 32 sum scale sum x. The integers are exact
   either way; the rows take the lanes of the totals and of the floats, each
   combining its blocks as the plain kernel does, so the results are its bits.
   Rows past `end` repeat the last row. */
static inline __attribute__((always_inline)) AVX2 void
matvec_q6k_body(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end,
                ScaledDotFn dot, int low_halves) {
    int blocks = n / Q6K_BLOCK;
    for (int c0 = 0; c0 < blocks; c0 += BLOCKS_PER_CHUNK) {
        int c1 = blocks - c0 < BLOCKS_PER_CHUNK ? blocks : c0 + BLOCKS_PER_CHUNK;
        int16_t x_sums[BLOCKS_PER_CHUNK * 16];
        input_sums(x_sums, xq + (size_t)Q6K_BLOCK * c0, Q6K_BLOCK * (c1 - c0), 16);
        for (int first = begin; first < end; first += 8) {
            __m256i dots[BLOCKS_PER_CHUNK][8];
            uint32_t d_halves[BLOCKS_PER_CHUNK][8];
            for (int r = 0; r < 8; r++) {
                int i = first + r < end ? first + r : end - 1;
                const uint8_t *block = w->q6k + ((size_t)i * blocks + c0) * Q6K_BLOCK_BYTES;
                for (int b = c0; b < c1; b++, block += Q6K_BLOCK_BYTES) {
                    const int8_t *x = xq + (size_t)Q6K_BLOCK * b;
                    __m256i q[8], scales[8], all_scales, acc = _mm256_setzero_si256();
                    for (int line = 0; line < Q6K_BLOCK_BYTES; line += 64) prefetch(block + line, BLOCK_PREFETCH_BYTES);
                    q6k_unpack_avx2(block, q, scales, &all_scales, low_halves);
                    for (int v = 0; v < 8; v++)
                        acc = dot(acc, q[v], _mm256_loadu_si256((const __m256i *)(x + 32 * v)), scales[v]);
                    __m256i sums = _mm256_loadu_si256((const __m256i *)(x_sums + 16 * (b - c0)));
                    dots[b - c0][r] = _mm256_sub_epi32(acc, _mm256_slli_epi32(_mm256_madd_epi16(all_scales, sums), 5));
                    d_halves[b - c0][r] = block[Q6K_D] | (uint32_t)block[Q6K_D + 1] << 8;
                }
            }
            __m256 val = load_lanes(out + first, 1, c0 ? end - first : 0); /* the earlier chunks' sums */
            for (int b = c0; b < c1; b++) {
                __m256 d = halves_to_floats_avx2(_mm256_loadu_si256((const __m256i *)d_halves[b - c0]));
                __m256 dot = _mm256_cvtepi32_ps(row_totals_avx2(dots[b - c0]));
                val = _mm256_add_ps(val, _mm256_mul_ps(_mm256_set1_ps(xs[b]), _mm256_mul_ps(d, dot)));
            }
            store_lanes(out + first, 1, end - first, val);
        }
    }
}

static AVX2 void matvec_q6k_avx2(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                                 int end) {
    matvec_q6k_body(out, xq, xs, w, n, begin, end, scaled_dot_avx2, 0);
}

static VNNI void matvec_q6k_vnni(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                                 int end) {
    matvec_q6k_body(out, xq, xs, w, n, begin, end, scaled_dot_vnni, 1);
}

/* A q6k block unpacked for q6k_block_tokens_avx2(): its 6-bit values in
   prepare_block_tokens()' order (int32 lane L of q[0-3] holds values of
   sub-block 4 (L % 4) + L / 4 of 16, of q[4-7] sub-block 4 (L % 4) + 2 + L / 4);
   the matching scales in both int16 halves of each int32 lane (scales[0] for
   q[0-3], scales[1] for q[4-7]); the scales of sub-blocks 2v and 2v + 1 as an
   int16 pair in every int32 lane of scale_pairs[v]; d. */
typedef struct {
    __m256i q[8], scales[2], scale_pairs[8];
    __m256 d;
} Q6kUnpacked;

static inline __attribute__((always_inline)) AVX2 void q6k_unpack_tokens_avx2(const uint8_t *block, Q6kUnpacked *u) {
    __m256i q[8], rows[4];
    q6k_values_avx2(block, q);
    for (int h = 0; h < 2; h++) {
        for (int p = 0; p < 4; p++) rows[p] = q[2 * p + h];
        interleave_rows_avx2(rows, u->q + 4 * h);
    }
    __m128i packed = _mm_loadu_si128((const __m128i *)(block + Q6K_SCALES));
    __m256i all_scales = _mm256_cvtepi8_epi16(packed);
    u->scales[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(packed, _mm_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, 1, 1, 5, 5, 9, 9, 13, 13)));
    u->scales[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(packed, _mm_setr_epi8(2, 2, 6, 6, 10, 10, 14, 14, 3, 3, 7, 7, 11, 11, 15, 15)));
    for (int v = 0; v < 8; v++) u->scale_pairs[v] = _mm256_permutevar8x32_epi32(all_scales, _mm256_set1_epi32(v));
    u->d = halves_to_floats_avx2(_mm256_set1_epi32(block[Q6K_D] | block[Q6K_D + 1] << 8));
}

/* One q6k block times the inputs of 8 tokens, token k in lane k: d times the
   integer dot product. The products of two vectors whose int16 lanes belong
   to the same sub-blocks are added as int16 (at most 2 * 2 * 63 * 127 < 2^15)
   before vpmaddwd applies the scales: 12 multiplies per token and block
   instead of 16. The -32 comes 8 tokens at a time from the sums' pairs. */
static inline __attribute__((always_inline)) AVX2 __m256 q6k_block_sum_avx2(const Q6kUnpacked *u, const uint8_t *in,
                                                                          const __m256i acc[8]) {
    __m256i offsets = _mm256_setzero_si256();
    for (int v = 0; v < 8; v++) {
        __m256i sums = _mm256_loadu_si256((const __m256i *)(in + TOKEN_SUMS16 + 32 * v));
        offsets = _mm256_add_epi32(offsets, _mm256_madd_epi16(sums, u->scale_pairs[v]));
    }
    __m256i totals = _mm256_sub_epi32(row_totals_avx2(acc), _mm256_slli_epi32(offsets, 5));
    return _mm256_mul_ps(u->d, _mm256_cvtepi32_ps(totals));
}

static inline __attribute__((always_inline)) AVX2 __m256 q6k_block_tokens_avx2(const Q6kUnpacked *u, const uint8_t *in) {
    __m256i acc[8];
    for (int k = 0; k < 8; k++) {
        acc[k] = _mm256_setzero_si256();
        for (int v = 0; v < 8; v += 2) {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(in + 32 * (8 * v + k)));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(in + 32 * (8 * (v + 1) + k)));
            __m256i products = _mm256_add_epi16(_mm256_maddubs_epi16(u->q[v], x0), _mm256_maddubs_epi16(u->q[v + 1], x1));
            acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(products, u->scales[v / 4]));
        }
    }
    return q6k_block_sum_avx2(u, in, acc);
}

/* q6k_block_tokens_avx2() with VNNI: vpdpbusd adds the products of four
   vectors in each int32 lane (16 products of one sub-block, at most
   16 * 63 * 128, past int16), and vpmulld applies the scales: 8 multiplies
   and 2 scale steps per token and block where AVX2 has 12 and 8 adds. */
static inline __attribute__((always_inline)) VNNI __m256 q6k_block_tokens_vnni(const Q6kUnpacked *u, const uint8_t *in) {
    __m256i scales[2] = {_mm256_srai_epi32(u->scales[0], 16), _mm256_srai_epi32(u->scales[1], 16)}; /* as int32 */
    __m256i acc[8];
    for (int k = 0; k < 8; k++) {
        acc[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i sums = _mm256_setzero_si256();
            for (int v = 4 * h; v < 4 * h + 4; v++)
                sums = _mm256_dpbusd_epi32(sums, u->q[v], _mm256_loadu_si256((const __m256i *)(in + 32 * (8 * v + k))));
            acc[k] = _mm256_add_epi32(acc[k], _mm256_mullo_epi32(sums, scales[h]));
        }
    }
    return q6k_block_sum_avx2(u, in, acc);
}

typedef __m256 (*Q4kBlockTokensFn)(const Q4kUnpacked *u, const uint8_t *in);
typedef __m256 (*Q6kBlockTokensFn)(const Q6kUnpacked *u, const uint8_t *in);

/* matvec_q4k_avx2() or matvec_q6k_avx2() for T <= MAX_BATCH tokens at once:
   out[t * out_stride + i] = W[i] . x[t] for rows [begin, end), the tokens'
   inputs laid out by prepare_block_tokens(). Rows go in tiles (ROW_TILE),
   each block of the tile unpacked once for every group of 8 tokens, the next
   block prefetched; 8 tokens take the lanes of the floats, each lane adding
   up its blocks in order as the plain kernel does. */
static inline __attribute__((always_inline)) AVX2 void
matmul_blocks_tokens_avx2(float *out, size_t out_stride, const void *tokens, const uint8_t *weights, int q6k, int n,
                          int T, int begin, int end, Q4kBlockTokensFn q4k_block, Q6kBlockTokensFn q6k_block) {
    size_t block_bytes = q6k ? Q6K_BLOCK_BYTES : Q4K_BLOCK_BYTES;
    int blocks = n / 256, groups = (T + 7) / 8;
    for (int tile = begin; tile < end; tile += ROW_TILE) {
        int rows = end - tile < ROW_TILE ? end - tile : ROW_TILE;
        __m256 val[MAX_BATCH / 8][ROW_TILE];
        for (int g = 0; g < groups; g++)
            for (int r = 0; r < rows; r++) val[g][r] = _mm256_setzero_ps();
        for (int b = 0; b < blocks; b++) {
            union {
                Q4kUnpacked q4k;
                Q6kUnpacked q6k;
            } u[ROW_TILE];
            for (int r = 0; r < rows; r++) {
                const uint8_t *block = weights + ((size_t)(tile + r) * blocks + b) * block_bytes;
                for (size_t line = 0; line < block_bytes; line += 64) prefetch(block + line, block_bytes);
                if (q6k) q6k_unpack_tokens_avx2(block, &u[r].q6k);
                else q4k_unpack_avx2(block, &u[r].q4k);
            }
            for (int g = 0; g < groups; g++) {
                const uint8_t *in = (const uint8_t *)tokens + ((size_t)g * blocks + b) * TOKENS_BYTES;
                __m256 x_scales = _mm256_loadu_ps((const float *)(in + TOKEN_SCALES));
                for (int r = 0; r < rows; r++) {
                    __m256 block_sum = q6k ? q6k_block(&u[r].q6k, in) : q4k_block(&u[r].q4k, in);
                    val[g][r] = _mm256_add_ps(val[g][r], _mm256_mul_ps(x_scales, block_sum));
                }
            }
        }
        for (int g = 0; g < groups; g++)
            for (int r = 0; r < rows; r++)
                store_lanes(out + (size_t)8 * g * out_stride + tile + r, out_stride, T - 8 * g, val[g][r]);
    }
}

static AVX2 void matmul_q4k_tokens_avx2(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n,
                                        int T, int begin, int end) {
    matmul_blocks_tokens_avx2(out, out_stride, tokens, w->q4k, 0, n, T, begin, end, q4k_block_tokens_avx2,
                              q6k_block_tokens_avx2);
}

static AVX2 void matmul_q6k_tokens_avx2(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n,
                                        int T, int begin, int end) {
    matmul_blocks_tokens_avx2(out, out_stride, tokens, w->q6k, 1, n, T, begin, end, q4k_block_tokens_avx2,
                              q6k_block_tokens_avx2);
}

static VNNI void matmul_q4k_tokens_vnni(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n,
                                        int T, int begin, int end) {
    matmul_blocks_tokens_avx2(out, out_stride, tokens, w->q4k, 0, n, T, begin, end, q4k_block_tokens_vnni,
                              q6k_block_tokens_vnni);
}

static VNNI void matmul_q6k_tokens_vnni(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n,
                                        int T, int begin, int end) {
    matmul_blocks_tokens_avx2(out, out_stride, tokens, w->q6k, 1, n, T, begin, end, q4k_block_tokens_vnni,
                              q6k_block_tokens_vnni);
}

static AVX2 void pair_avx2(i32x8 *acc, const int16_t *x, int32_t w_pair) {
    __m256i products = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x), _mm256_set1_epi32(w_pair));
    *acc = (i32x8)_mm256_add_epi32((__m256i)*acc, products);
}

/* SSE2 has no sign extension of bytes: interleave a byte with itself and
   shift the 16-bit result right arithmetically. */
static inline __attribute__((always_inline)) void dot8_sse(i32x8 *total, const int8_t *w, size_t n, const int8_t *x,
                                                          int len) {
    i32x4 acc[8] = {{0}};
    for (int k = 0; k < len; k += 16) {
        __m128i xv = _mm_loadu_si128((const __m128i *)(x + k));
        __m128i x_lo = _mm_srai_epi16(_mm_unpacklo_epi8(xv, xv), 8), x_hi = _mm_srai_epi16(_mm_unpackhi_epi8(xv, xv), 8);
        for (int r = 0; r < 8; r++) {
            __m128i wv = _mm_loadu_si128((const __m128i *)(w + r * n + k));
            __m128i w_lo = _mm_srai_epi16(_mm_unpacklo_epi8(wv, wv), 8),
                    w_hi = _mm_srai_epi16(_mm_unpackhi_epi8(wv, wv), 8);
            acc[r] += (i32x4)_mm_add_epi32(_mm_madd_epi16(w_lo, x_lo), _mm_madd_epi16(w_hi, x_hi));
        }
    }
    totals8(total, acc);
}

static void pair_sse(i32x8 *acc, const int16_t *x, int32_t w_pair) {
    __m128i halves[2], wv = _mm_set1_epi32(w_pair);
    memcpy(halves, acc, sizeof halves);
    halves[0] = _mm_add_epi32(halves[0], _mm_madd_epi16(_mm_loadu_si128((const __m128i *)x), wv));
    halves[1] = _mm_add_epi32(halves[1], _mm_madd_epi16(_mm_loadu_si128((const __m128i *)(x + 8)), wv));
    memcpy(acc, halves, sizeof halves);
}

/* The 4 int32 lanes of v added up. */
static inline __attribute__((always_inline)) int32_t lane_sum_sse(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
    return _mm_cvtsi128_si32(v);
}

/* n int8 inputs as int16 (SSE2 has neither a byte multiply nor a byte sign
   extension: the decode kernels below multiply int16, with inputs widened
   once for all rows). */
static inline __attribute__((always_inline)) void widen_inputs_sse(int16_t *out, const int8_t *x, int n) {
    for (int k = 0; k < n; k += 16) {
        __m128i xv = _mm_loadu_si128((const __m128i *)(x + k));
        _mm_storeu_si128((__m128i *)(out + k), _mm_srai_epi16(_mm_unpacklo_epi8(xv, xv), 8));
        _mm_storeu_si128((__m128i *)(out + k + 8), _mm_srai_epi16(_mm_unpackhi_epi8(xv, xv), 8));
    }
}

/* The products of 16 unsigned byte values (q4k 0-15, q6k 0-63) with 16
   int16 inputs, as int16 (exact: at most 63 * 128), added to sum. */
static inline __attribute__((always_inline)) __m128i products16_sse(__m128i sum, __m128i q, const int16_t *x) {
    __m128i low = _mm_unpacklo_epi8(q, _mm_setzero_si128()), high = _mm_unpackhi_epi8(q, _mm_setzero_si128());
    sum = _mm_add_epi16(sum, _mm_mullo_epi16(low, _mm_loadu_si128((const __m128i *)x)));
    return _mm_add_epi16(sum, _mm_mullo_epi16(high, _mm_loadu_si128((const __m128i *)(x + 8))));
}

/* One q4k block times the inputs x (widened) with their sums over each 32:
   d times the integer dot product minus dmin times the mins' products, as
   matvec_q4k() combines them. A sub-block's 32 products add up as int16 in 8
   lanes (at most 4 * 15 * 128), then pmaddwd applies its scale. */
static inline __attribute__((always_inline)) float q4k_block_sse(const uint8_t *block, const int16_t *x,
                                                                 const int16_t *x_sums) {
    const __m128i low_nibbles = _mm_set1_epi8(15);
    int scale[8], min[8];
    for (int j = 0; j < 8; j++) q4k_scale_min(block + 4, j, &scale[j], &min[j]);
    __m128i acc = _mm_setzero_si128();
    for (int pair = 0; pair < 4; pair++) {
        __m128i q0 = _mm_loadu_si128((const __m128i *)(block + 16 + 32 * pair));
        __m128i q1 = _mm_loadu_si128((const __m128i *)(block + 32 + 32 * pair));
        __m128i lo = products16_sse(_mm_setzero_si128(), _mm_and_si128(q0, low_nibbles), x + 64 * pair);
        lo = products16_sse(lo, _mm_and_si128(q1, low_nibbles), x + 64 * pair + 16);
        __m128i hi = products16_sse(_mm_setzero_si128(), _mm_and_si128(_mm_srli_epi16(q0, 4), low_nibbles),
                                    x + 64 * pair + 32);
        hi = products16_sse(hi, _mm_and_si128(_mm_srli_epi16(q1, 4), low_nibbles), x + 64 * pair + 48);
        acc = _mm_add_epi32(acc, _mm_madd_epi16(lo, _mm_set1_epi16((short)scale[2 * pair])));
        acc = _mm_add_epi32(acc, _mm_madd_epi16(hi, _mm_set1_epi16((short)scale[2 * pair + 1])));
    }
    __m128i mins = _mm_setr_epi16((short)min[0], (short)min[1], (short)min[2], (short)min[3], (short)min[4],
                                  (short)min[5], (short)min[6], (short)min[7]);
    int32_t min_total = lane_sum_sse(_mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)x_sums)));
    return half_to_float(block) * (float)lane_sum_sse(acc) - half_to_float(block + 2) * (float)min_total;
}

/* One q6k block times the inputs x (widened) with their sums over each 16: d
   times the integer dot product, as matvec_q6k() takes it. The 6-bit values q
   (0-63) are unpacked 16 at a time (see q6k_values()), a sub-block's products
   add up as int16 (two per lane, at most 2 * 63 * 128), pmaddwd applies its
   scale, and the -32 comes once per block from the inputs' sums. */
static inline __attribute__((always_inline)) float q6k_block_sse(const uint8_t *block, const int16_t *x,
                                                                 const int16_t *x_sums) {
    const __m128i low_nibbles = _mm_set1_epi8(15), high_pair = _mm_set1_epi8(0x30);
    /* the 16 int8 scales as int16: sub-blocks 0-7, then 8-15 */
    __m128i packed = _mm_loadu_si128((const __m128i *)(block + Q6K_SCALES));
    __m128i scales0 = _mm_srai_epi16(_mm_unpacklo_epi8(packed, packed), 8);
    __m128i scales1 = _mm_srai_epi16(_mm_unpackhi_epi8(packed, packed), 8);
    const __m128i *sums = (const __m128i *)x_sums;
    __m128i offsets = _mm_add_epi32(_mm_madd_epi16(scales0, _mm_loadu_si128(sums)),
                                    _mm_madd_epi16(scales1, _mm_loadu_si128(sums + 1)));
    __m128i acc = _mm_setzero_si128();
    for (int half = 0; half < 2; half++) {
        const uint8_t *low = block + 64 * half, *high = block + Q6K_HIGH_BITS + 32 * half;
        for (int m = 0; m < 4; m++)
            for (int part = 0; part < 2; part++) { /* values 128 half + 32 m + 16 part + (0-15) */
                __m128i low_bits = _mm_loadu_si128((const __m128i *)(low + 32 * (m % 2) + 16 * part));
                __m128i high_bits = _mm_loadu_si128((const __m128i *)(high + 16 * part));
                low_bits = _mm_and_si128(m < 2 ? low_bits : _mm_srli_epi16(low_bits, 4), low_nibbles);
                /* bit pair m to bits 4-5 (16-bit shifts: the bits kept stay within their byte) */
                high_bits = m < 2 ? _mm_slli_epi16(high_bits, 4 - 2 * m) : _mm_srli_epi16(high_bits, 2 * m - 4);
                __m128i q = _mm_or_si128(low_bits, _mm_and_si128(high_bits, high_pair));
                __m128i products = products16_sse(_mm_setzero_si128(), q, x + 128 * half + 32 * m + 16 * part);
                int sub = 8 * half + 2 * m + part;
                acc = _mm_add_epi32(acc, _mm_madd_epi16(products, _mm_set1_epi16((int8_t)block[Q6K_SCALES + sub])));
            }
    }
    int32_t dot = lane_sum_sse(acc) - 32 * lane_sum_sse(offsets);
    return half_to_float(block + Q6K_D) * (float)dot;
}

/* matvec_q4k() or matvec_q6k() for SSE2, a row at a time, through
   q4k_block_sse() or q6k_block_sse(): the integer totals are the plain
   kernels', and each row adds up its blocks as they do. The inputs (widened)
   and their sums over each sub-block are the same for every row: taken once
   per chunk of blocks. */
static inline __attribute__((always_inline)) void matvec_blocks_sse(float *out, const int8_t *xq, const float *xs,
                                                                    const uint8_t *weights, int q6k, int n, int begin,
                                                                    int end) {
    size_t block_bytes = q6k ? Q6K_BLOCK_BYTES : Q4K_BLOCK_BYTES;
    int blocks = n / 256, run = q6k ? 16 : 32;
    for (int c0 = 0; c0 < blocks; c0 += BLOCKS_PER_CHUNK) {
        int c1 = blocks - c0 < BLOCKS_PER_CHUNK ? blocks : c0 + BLOCKS_PER_CHUNK;
        int16_t x_sums[BLOCKS_PER_CHUNK * 16], x16[BLOCKS_PER_CHUNK * 256];
        input_sums(x_sums, xq + (size_t)256 * c0, 256 * (c1 - c0), run);
        widen_inputs_sse(x16, xq + (size_t)256 * c0, 256 * (c1 - c0));
        for (int i = begin; i < end; i++) {
            const uint8_t *block = weights + ((size_t)i * blocks + c0) * block_bytes;
            float val = c0 ? out[i] : 0.0f; /* the earlier chunks' sum */
            for (int b = c0; b < c1; b++, block += block_bytes) {
                const int16_t *x = x16 + 256 * (b - c0), *sums = x_sums + 256 / run * (b - c0);
                for (size_t line = 0; line < block_bytes; line += 64) prefetch(block + line, BLOCK_PREFETCH_BYTES);
                val += xs[b] * (q6k ? q6k_block_sse(block, x, sums) : q4k_block_sse(block, x, sums));
            }
            out[i] = val;
        }
    }
}

static void matvec_q4k_sse(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    matvec_blocks_sse(out, xq, xs, w->q4k, 0, n, begin, end);
}

static void matvec_q6k_sse(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    matvec_blocks_sse(out, xq, xs, w->q6k, 1, n, begin, end);
}
#endif

#if defined(__aarch64__)
/* vmull_s8: 8 exact int16 products; vpadalq_s16 adds neighbouring pairs into int32. */
static inline __attribute__((always_inline)) void dot8_neon(i32x8 *total, const int8_t *w, size_t n, const int8_t *x,
                                                           int len) {
    int32x4_t acc[8];
    for (int r = 0; r < 8; r++) acc[r] = vdupq_n_s32(0);
    for (int k = 0; k < len; k += 16) {
        int8x16_t xv = vld1q_s8(x + k);
        for (int r = 0; r < 8; r++) {
            int8x16_t wv = vld1q_s8(w + r * n + k);
            acc[r] = vpadalq_s16(acc[r], vmull_s8(vget_low_s8(wv), vget_low_s8(xv)));
            acc[r] = vpadalq_s16(acc[r], vmull_high_s8(wv, xv));
        }
    }
    i32x4 sums[8];
    memcpy(sums, acc, sizeof sums);
    totals8(total, sums);
}

/* pmaddwd's job on NEON: widening products of 4 tokens' pairs, then the pairs added (vpaddq). */
static void pair_neon(i32x8 *acc, const int16_t *x, int32_t w_pair) {
    int32x4_t halves[2];
    int16x8_t wv = vreinterpretq_s16_s32(vdupq_n_s32(w_pair));
    memcpy(halves, acc, sizeof halves);
    for (int h = 0; h < 2; h++) {
        int16x8_t xv = vld1q_s16(x + 8 * h);
        int32x4_t sums = vpaddq_s32(vmull_s16(vget_low_s16(xv), vget_low_s16(wv)), vmull_high_s16(xv, wv));
        halves[h] = vaddq_s32(halves[h], sums);
    }
    memcpy(acc, halves, sizeof halves);
}

/* A q4k block's 6-bit scales (bytes 0-7) and mins (8-15) from the 12 packed
   bytes (see q4k_scale_min()): the low 6 bits of bytes 0-3 (scales 0-3) and
   4-7 (mins 0-3); the low and high nibbles of bytes 8-11 (scales and mins
   4-7), with the top 2 bits of bytes 0-3 and 4-7 above them. A table index
   past 15 gives 0. The 16 bytes read end inside the block. */
static inline uint8x16_t q4k_scales_mins_neon(const uint8_t *packed) { /* inline where the target allows */
    static const uint8_t low_order[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11};
    static const uint8_t top_order[16] = {255, 255, 255, 255, 0, 1, 2, 3, 255, 255, 255, 255, 4, 5, 6, 7};
    static const uint8_t six_bit_mask[16] = {63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0};
    static const uint8_t high_nibble_mask[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15};
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vqtbl1q_u8(bytes, vld1q_u8(low_order)), top = vqtbl1q_u8(bytes, vld1q_u8(top_order));
    uint8x16_t six_bits = vandq_u8(low, vld1q_u8(six_bit_mask));
    uint8x16_t high_nibbles = vandq_u8(vshrq_n_u8(low, 4), vld1q_u8(high_nibble_mask));
    uint8x16_t top_bits = vandq_u8(vshrq_n_u8(top, 2), vdupq_n_u8(0x30)); /* bits 6-7 to 4-5 */
    return vorrq_u8(vorrq_u8(six_bits, high_nibbles), top_bits);
}

/* The products of 32 q4k values (0-15) with 32 int8 inputs, each int16 lane
   the sum of four (at most 4 * 15 * 128). */
static inline __attribute__((always_inline)) int16x8_t products32_neon(int8x16_t q0, int8x16_t q1, const int8_t *x) {
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t sum = vmull_s8(vget_low_s8(q0), vget_low_s8(x0));
    sum = vmlal_high_s8(sum, q0, x0);
    sum = vmlal_s8(sum, vget_low_s8(q1), vget_low_s8(x1));
    return vmlal_high_s8(sum, q1, x1);
}

/* A q4k block's integer dot product with 256 int8 inputs, each sub-block's
   products times its scale (the mins apart): the one step a set changes. */
typedef int32_t (*Q4kDotFn)(const uint8_t *block, const int8_t *x, const int16_t scales[8]);

/* matvec_q4k() for NEON, a row at a time: vmull_s8 multiplies the 4-bit
   values by the inputs, a sub-block's products add up as int16 in 8 lanes,
   and vmlal applies its scale, into four sums (four chains of adds that can
   overlap). The integer totals are the plain kernel's, and each row combines
   its blocks as it does. The inputs' sub-block sums, for the mins, are the
   same for every row: taken once per chunk of blocks. */
static inline __attribute__((always_inline)) int32_t q4k_dot_neon(const uint8_t *block, const int8_t *x,
                                                                 const int16_t scales[8]) {
    int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int pair = 0; pair < 4; pair++) {
        uint8x16_t q0 = vld1q_u8(block + 16 + 32 * pair), q1 = vld1q_u8(block + 32 + 32 * pair);
        int16x8_t lo = products32_neon(vreinterpretq_s8_u8(vandq_u8(q0, vdupq_n_u8(15))),
                                       vreinterpretq_s8_u8(vandq_u8(q1, vdupq_n_u8(15))), x + 64 * pair);
        int16x8_t hi = products32_neon(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)),
                                       x + 64 * pair + 32);
        acc[0] = vmlal_n_s16(acc[0], vget_low_s16(lo), scales[2 * pair]);
        acc[1] = vmlal_high_n_s16(acc[1], lo, scales[2 * pair]);
        acc[2] = vmlal_n_s16(acc[2], vget_low_s16(hi), scales[2 * pair + 1]);
        acc[3] = vmlal_high_n_s16(acc[3], hi, scales[2 * pair + 1]);
    }
    return vaddvq_s32(vaddq_s32(vaddq_s32(acc[0], acc[1]), vaddq_s32(acc[2], acc[3])));
}

static inline __attribute__((always_inline)) void matvec_q4k_body(float *out, const int8_t *xq, const float *xs,
                                                                  const Matrix *w, int n, int begin, int end,
                                                                  Q4kDotFn block_dot) {
    int blocks = n / Q4K_BLOCK;
    for (int c0 = 0; c0 < blocks; c0 += BLOCKS_PER_CHUNK) {
        int c1 = blocks - c0 < BLOCKS_PER_CHUNK ? blocks : c0 + BLOCKS_PER_CHUNK;
        int16_t x_sums[BLOCKS_PER_CHUNK * 8];
        input_sums(x_sums, xq + (size_t)Q4K_BLOCK * c0, Q4K_BLOCK * (c1 - c0), 32);
        for (int i = begin; i < end; i++) {
            const uint8_t *block = w->q4k + ((size_t)i * blocks + c0) * Q4K_BLOCK_BYTES;
            float val = c0 ? out[i] : 0.0f; /* the earlier chunks' sum */
            for (int b = c0; b < c1; b++, block += Q4K_BLOCK_BYTES) {
                for (int line = 0; line < Q4K_BLOCK_BYTES; line += 64) prefetch(block + line, BLOCK_PREFETCH_BYTES);
                uint8x16_t scales_mins = q4k_scales_mins_neon(block + 4);
                int16_t scales[8];
                vst1q_s16(scales, vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(scales_mins))));
                int16x8_t mins = vreinterpretq_s16_u16(vmovl_high_u8(scales_mins));
                int16x8_t sums = vld1q_s16(x_sums + 8 * (b - c0));
                int32_t dot = block_dot(block, xq + (size_t)Q4K_BLOCK * b, scales);
                int32_t min_total = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(mins), vget_low_s16(sums)), mins, sums));
                val += xs[b] * (half_to_float(block) * (float)dot - half_to_float(block + 2) * (float)min_total);
            }
            out[i] = val;
        }
    }
}

static void matvec_q4k_neon(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    matvec_q4k_body(out, xq, xs, w, n, begin, end, q4k_dot_neon);
}

/* matvec_q6k() for NEON, a row at a time as matvec_q4k_neon(): the values
   q - 32 unpacked 16 at a time (see q6k_values()), a sub-block of 16
   multiplied into 8 int16 lanes (two products each, at most 2 * 32 * 128),
   then scaled. The -32 is in the values, so the inputs' sums are not needed
   and rows of any width go in one pass. */
static void matvec_q6k_neon(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin, int end) {
    int blocks = n / Q6K_BLOCK;
    for (int i = begin; i < end; i++) {
        const uint8_t *block = w->q6k + (size_t)i * blocks * Q6K_BLOCK_BYTES;
        float val = 0.0f;
        for (int b = 0; b < blocks; b++, block += Q6K_BLOCK_BYTES) {
            const int8_t *x = xq + (size_t)Q6K_BLOCK * b;
            for (int line = 0; line < Q6K_BLOCK_BYTES; line += 64) prefetch(block + line, BLOCK_PREFETCH_BYTES);
            int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
            for (int half = 0; half < 2; half++) {
                const uint8_t *low = block + 64 * half, *high = block + Q6K_HIGH_BITS + 32 * half;
                for (int m = 0; m < 4; m++)
                    for (int part = 0; part < 2; part++) { /* values 128 half + 32 m + 16 part + (0-15) */
                        uint8x16_t low_bits = vld1q_u8(low + 32 * (m % 2) + 16 * part);
                        uint8x16_t high_bits = vld1q_u8(high + 16 * part);
                        low_bits = m < 2 ? vandq_u8(low_bits, vdupq_n_u8(15)) : vshrq_n_u8(low_bits, 4);
                        high_bits = vandq_u8(vshlq_u8(high_bits, vdupq_n_s8((int8_t)(4 - 2 * m))), vdupq_n_u8(0x30));
                        int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low_bits, high_bits)), vdupq_n_s8(32));
                        int8x16_t xv = vld1q_s8(x + 128 * half + 32 * m + 16 * part);
                        int16x8_t products = vmlal_high_s8(vmull_s8(vget_low_s8(q), vget_low_s8(xv)), q, xv);
                        int16_t scale = (int8_t)block[Q6K_SCALES + 8 * half + 2 * m + part];
                        acc[2 * part] = vmlal_n_s16(acc[2 * part], vget_low_s16(products), scale);
                        acc[2 * part + 1] = vmlal_high_n_s16(acc[2 * part + 1], products, scale);
                    }
            }
            int32_t dot = vaddvq_s32(vaddq_s32(vaddq_s32(acc[0], acc[1]), vaddq_s32(acc[2], acc[3])));
            val += xs[b] * (half_to_float(block + Q6K_D) * (float)dot);
        }
        out[i] = val;
    }
}

/* out[m] = int32 lane m of rows 0-3: a 4x4 transpose, the weights' side of
   prepare_block_tokens()' order for one 16-byte half of its vectors. */
static inline __attribute__((always_inline)) void interleave_rows_neon(const int8x16_t rows[4], int8x16_t out[4]) {
    int32x4_t r01_even = vtrn1q_s32(vreinterpretq_s32_s8(rows[0]), vreinterpretq_s32_s8(rows[1]));
    int32x4_t r01_odd = vtrn2q_s32(vreinterpretq_s32_s8(rows[0]), vreinterpretq_s32_s8(rows[1]));
    int32x4_t r23_even = vtrn1q_s32(vreinterpretq_s32_s8(rows[2]), vreinterpretq_s32_s8(rows[3]));
    int32x4_t r23_odd = vtrn2q_s32(vreinterpretq_s32_s8(rows[2]), vreinterpretq_s32_s8(rows[3]));
    out[0] = vreinterpretq_s8_s64(vtrn1q_s64(vreinterpretq_s64_s32(r01_even), vreinterpretq_s64_s32(r23_even)));
    out[1] = vreinterpretq_s8_s64(vtrn1q_s64(vreinterpretq_s64_s32(r01_odd), vreinterpretq_s64_s32(r23_odd)));
    out[2] = vreinterpretq_s8_s64(vtrn2q_s64(vreinterpretq_s64_s32(r01_even), vreinterpretq_s64_s32(r23_even)));
    out[3] = vreinterpretq_s8_s64(vtrn2q_s64(vreinterpretq_s64_s32(r01_odd), vreinterpretq_s64_s32(r23_odd)));
}

/* A q4k or q6k block unpacked for the NEON batched kernels: its values in
   prepare_block_tokens()' order, vector v in q[v][0] and q[v][1] (16 bytes
   each: int32 lane p of half H holds values of q4k sub-block 2p + v / 4, or
   of q6k sub-block 4p + 2 (v / 4) + H); the scales as int16, four lanes each,
   matching the products of a half's low 8 bytes (lanes p = 0, 1) in
   scales[s][0] and of its high 8 (p = 2, 3) in scales[s][1], s = v / 4 for
   q4k, 2 (v / 4) + H for q6k; q4k's mins of sub-blocks 2p and 2p + 1 as int16
   pairs in min_pairs[p]; d and dmin (q4k). */
typedef struct {
    int8x16_t q[8][2];
    int16x8_t scales[4][2], min_pairs[4];
    float32x4_t d, dmin;
} BlockUnpackedNeon;

static inline __attribute__((always_inline)) void q4k_unpack_neon(const uint8_t *block, BlockUnpackedNeon *u) {
    static const uint8_t scale_order[2][16] = {{0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6},
                                               {1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7}};
    static const uint8_t min_order[2][16] = {{8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11},
                                             {12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15}};
    for (int half = 0; half < 2; half++) {
        int8x16_t rows[4], packed[4];
        for (int p = 0; p < 4; p++) rows[p] = vld1q_s8((const int8_t *)block + 16 + 32 * p + 16 * half);
        interleave_rows_neon(rows, packed);
        for (int m = 0; m < 4; m++) {
            uint8x16_t bytes = vreinterpretq_u8_s8(packed[m]);
            u->q[m][half] = vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(15)));
            u->q[4 + m][half] = vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4));
        }
    }
    uint8x16_t scales_mins = q4k_scales_mins_neon(block + 4);
    for (int h = 0; h < 2; h++) {
        uint8x16_t scales = vqtbl1q_u8(scales_mins, vld1q_u8(scale_order[h]));
        u->scales[h][0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(scales)));
        u->scales[h][1] = vreinterpretq_s16_u16(vmovl_high_u8(scales));
        uint8x16_t mins = vqtbl1q_u8(scales_mins, vld1q_u8(min_order[h]));
        u->min_pairs[2 * h] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        u->min_pairs[2 * h + 1] = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    }
    u->d = vdupq_n_f32(half_to_float(block));
    u->dmin = vdupq_n_f32(half_to_float(block + 2));
}

static inline __attribute__((always_inline)) void q6k_unpack_tokens_neon(const uint8_t *block, BlockUnpackedNeon *u) {
    /* for scales[s]: sub-blocks s, 4 + s, 8 + s and 12 + s, four lanes each */
    static const uint8_t scale_order[4][16] = {{0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12},
                                               {1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13, 13, 13, 13},
                                               {2, 2, 2, 2, 6, 6, 6, 6, 10, 10, 10, 10, 14, 14, 14, 14},
                                               {3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15, 15}};
    int8_t values[Q6K_BLOCK];
    q6k_values(block, values);
    for (int h = 0; h < 2; h++)
        for (int half = 0; half < 2; half++) {
            int8x16_t rows[4], out[4];
            for (int p = 0; p < 4; p++) rows[p] = vld1q_s8(values + 64 * p + 32 * h + 16 * half);
            interleave_rows_neon(rows, out);
            for (int m = 0; m < 4; m++) u->q[4 * h + m][half] = out[m];
            int8x16_t scales = vqtbl1q_s8(vld1q_s8((const int8_t *)block + Q6K_SCALES), vld1q_u8(scale_order[2 * h + half]));
            u->scales[2 * h + half][0] = vmovl_s8(vget_low_s8(scales));
            u->scales[2 * h + half][1] = vmovl_high_s8(scales);
        }
    u->d = vdupq_n_f32(half_to_float(block + Q6K_D));
}

/* The float steps of block_tokens_neon() (and the dotprod set's): each
   token's integer dot product (the lanes of dots[k] added up) times d, less
   (q4k) dmin times the mins' products with the inputs' sums. Inline where
   the caller's target allows it (not always_inline: see DOTPROD). */
static inline void block_floats_neon(const BlockUnpackedNeon *u, const uint8_t *in, int q6k, const int32x4_t dots[8],
                                     float32x4_t sums[2]) {
    for (int i = 0; i < 2; i++) {
        float32x4_t dot = vcvtq_f32_s32(vpaddq_s32(vpaddq_s32(dots[4 * i], dots[4 * i + 1]),
                                                   vpaddq_s32(dots[4 * i + 2], dots[4 * i + 3])));
        sums[i] = vmulq_f32(u->d, dot);
        if (q6k) continue;
        int32x4_t mins = vdupq_n_s32(0); /* tokens 4i to 4i + 3 */
        for (int p = 0; p < 4; p++) {
            int16x8_t x_sums = vld1q_s16((const int16_t *)(in + TOKEN_SUMS32 + 32 * p + 16 * i));
            mins = vaddq_s32(mins, vpaddq_s32(vmull_s16(vget_low_s16(x_sums), vget_low_s16(u->min_pairs[p])),
                                              vmull_high_s16(x_sums, u->min_pairs[p])));
        }
        sums[i] = vsubq_f32(sums[i], vmulq_f32(u->dmin, vcvtq_f32_s32(mins)));
    }
}

/* One q4k or q6k block times the inputs of 8 tokens (prepare_block_tokens()),
   tokens 0-3 in sums[0] and 4-7 in sums[1], as the plain kernels combine
   them: q4k d times the integer dot product minus dmin times the mins'
   products, q6k d times the dot product. Each int16 lane of the byte products
   belongs to one sub-block, so products add up as int16 (q4k: eight, at most
   8 * 15 * 128; q6k: four, at most 4 * 32 * 128) before vmlal applies the
   scales. */
static inline __attribute__((always_inline)) void block_tokens_neon(const BlockUnpackedNeon *u, const uint8_t *in,
                                                                    int q6k, float32x4_t sums[2]) {
    int32x4_t dots[8];
    for (int k = 0; k < 8; k++) {
        int32x4_t acc[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int h = 0; h < 2; h++) {
            int16x8_t pairs[2][2] = {{vdupq_n_s16(0), vdupq_n_s16(0)}, {vdupq_n_s16(0), vdupq_n_s16(0)}};
            for (int m = 0; m < 4; m++)
                for (int half = 0; half < 2; half++) {
                    int8x16_t x = vld1q_s8((const int8_t *)in + 32 * (8 * (4 * h + m) + k) + 16 * half);
                    int16x8_t *p = pairs[q6k ? half : 0];
                    p[0] = vmlal_s8(p[0], vget_low_s8(u->q[4 * h + m][half]), vget_low_s8(x));
                    p[1] = vmlal_high_s8(p[1], u->q[4 * h + m][half], x);
                }
            for (int half = 0; half < (q6k ? 2 : 1); half++) {
                const int16x8_t *scales = u->scales[q6k ? 2 * h + half : h];
                for (int i = 0; i < 2; i++) {
                    acc[0] = vmlal_s16(acc[0], vget_low_s16(pairs[half][i]), vget_low_s16(scales[i]));
                    acc[1] = vmlal_high_s16(acc[1], pairs[half][i], scales[i]);
                }
            }
        }
        dots[k] = vaddq_s32(acc[0], acc[1]);
    }
    block_floats_neon(u, in, q6k, dots, sums);
}

/* matvec_q4k_neon() or matvec_q6k_neon() for T <= MAX_BATCH tokens at once,
   as matmul_blocks_tokens_avx2() does it: rows in tiles, each block unpacked
   once for every group of 8 tokens, 8 tokens in the lanes of two vectors,
   each lane adding up its blocks in order as the plain kernel does. */
typedef void (*BlockTokensFn)(const BlockUnpackedNeon *u, const uint8_t *in, int q6k, float32x4_t sums[2]);

static inline __attribute__((always_inline)) void
matmul_blocks_tokens_neon(float *out, size_t out_stride, const void *tokens, const uint8_t *weights, int q6k, int n,
                          int T, int begin, int end, BlockTokensFn block_tokens) {
    size_t block_bytes = q6k ? Q6K_BLOCK_BYTES : Q4K_BLOCK_BYTES;
    int blocks = n / 256, groups = (T + 7) / 8;
    for (int tile = begin; tile < end; tile += ROW_TILE) {
        int rows = end - tile < ROW_TILE ? end - tile : ROW_TILE;
        float32x4_t val[MAX_BATCH / 8][ROW_TILE][2];
        for (int g = 0; g < groups; g++)
            for (int r = 0; r < rows; r++) val[g][r][0] = val[g][r][1] = vdupq_n_f32(0.0f);
        for (int b = 0; b < blocks; b++) {
            BlockUnpackedNeon u[ROW_TILE];
            for (int r = 0; r < rows; r++) {
                const uint8_t *block = weights + ((size_t)(tile + r) * blocks + b) * block_bytes;
                for (size_t line = 0; line < block_bytes; line += 64) prefetch(block + line, block_bytes);
                if (q6k) q6k_unpack_tokens_neon(block, &u[r]);
                else q4k_unpack_neon(block, &u[r]);
            }
            for (int g = 0; g < groups; g++) {
                const uint8_t *in = (const uint8_t *)tokens + ((size_t)g * blocks + b) * TOKENS_BYTES;
                const float *x_scales = (const float *)(in + TOKEN_SCALES);
                for (int r = 0; r < rows; r++) {
                    float32x4_t sums[2];
                    block_tokens(&u[r], in, q6k, sums);
                    for (int i = 0; i < 2; i++)
                        val[g][r][i] = vaddq_f32(val[g][r][i], vmulq_f32(vld1q_f32(x_scales + 4 * i), sums[i]));
                }
            }
        }
        for (int g = 0; g < groups; g++)
            for (int r = 0; r < rows; r++) {
                float lanes[8];
                vst1q_f32(lanes, val[g][r][0]), vst1q_f32(lanes + 4, val[g][r][1]);
                for (int k = 0; k < 8 && k < T - 8 * g; k++) out[(size_t)(8 * g + k) * out_stride + tile + r] = lanes[k];
            }
    }
}

static void matmul_q4k_tokens_neon(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                                   int begin, int end) {
    matmul_blocks_tokens_neon(out, out_stride, tokens, w->q4k, 0, n, T, begin, end, block_tokens_neon);
}

static void matmul_q6k_tokens_neon(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                                   int begin, int end) {
    matmul_blocks_tokens_neon(out, out_stride, tokens, w->q6k, 1, n, T, begin, end, block_tokens_neon);
}
#endif

/* ------------------------------------------------------------------------- */
/* 3. Generic bodies                                                           */

/* matvec() for B blocks of 8 rows from row i (B = 1 or 2 independent
   chains of adds): each 8x8 block of weights is transposed so that lane r adds
   row r's products in column order. (Two named blocks rather than an array
   indexed by b: GCC then keeps everything in registers.) */
static inline __attribute__((always_inline)) void
matvec_rows(float *out, const float *x, const float *w, int n, int i, int B, size_t ahead,
            TransposeFn transpose) {
    const float *block0 = w + (size_t)i * n, *block1 = block0 + (size_t)8 * n;
    f32x8 acc0 = {0}, acc1 = {0}, col0[8], col1[8];
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        if (j % 16 == 0)
            for (int k = 0; k < 8 * B; k++) prefetch(block0 + (size_t)k * n + j, ahead);
        transpose(col0, block0 + j, n);
        if (B == 2) transpose(col1, block1 + j, n);
        for (int c = 0; c < 8; c++) {
            acc0 += col0[c] * x[j + c];
            if (B == 2) acc1 += col1[c] * x[j + c];
        }
    }
    if (j < n) {
        transpose8_partial(col0, block0 + j, n, 8, n - j, transpose);
        if (B == 2) transpose8_partial(col1, block1 + j, n, 8, n - j, transpose);
        for (int c = 0; c < n - j; c++) {
            acc0 += col0[c] * x[j + c];
            if (B == 2) acc1 += col1[c] * x[j + c];
        }
    }
    memcpy(out + i, &acc0, sizeof acc0);
    if (B == 2) memcpy(out + i + 8, &acc1, sizeof acc1);
}

/* matvec(): 8 * B rows at a time (B = 2 where registers allow), then 8,
   then the plain loop. */
static inline __attribute__((always_inline)) void
matvec_body(float *out, const float *x, const float *w, int n, int begin, int end, int B,
            TransposeFn transpose) {
    size_t ahead = prefetch_ahead(n * sizeof(float), 8 * B);
    int i = begin;
    for (; i + 8 * B <= end; i += 8 * B) matvec_rows(out, x, w, n, i, B, ahead, transpose);
    if (i + 8 <= end) {
        matvec_rows(out, x, w, n, i, 1, ahead, transpose);
        i += 8;
    }
    matvec(out, x, w, n, i, end);
}

/* The layout prepare_tokens8() makes: tokens padded with zeros to width, a
   multiple of 8, in vectors of 8 tokens v = t / 8, each vector's values
   contiguous over the columns: x_t[(v * n + j) * 8 + t % 8]. (Rows of all 64
   tokens, 256 bytes apart, would map a column block onto a quarter of L1's sets.) */
static int token_width(int T) { return (T + 7) / 8 * 8; }

/* R rows by V vectors of 8 tokens of out_t[row][t] = W[row] . x[t] (rows
   `width` apart, token_width(T)), for the columns [jb, je): added to what
   out_t holds unless jb == 0. One weight, broadcast, meets V vectors of
   tokens: R * V independent sums in registers. */
static inline __attribute__((always_inline)) void
tokens_block8(float *out_t, const float *x_t, const float *w, int n, int width, int row, int R, int v0, int V, int jb,
              int je) {
    f32x8 acc[6][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) {
            if (jb == 0)
                acc[r][v] = (f32x8){0};
            else
                memcpy(&acc[r][v], out_t + (size_t)(row + r) * width + 8 * (v0 + v), sizeof(f32x8));
        }
    for (int j = jb; j < je; j++) {
        f32x8 xv[2];
        for (int v = 0; v < V; v++) memcpy(&xv[v], x_t + ((size_t)(v0 + v) * n + j) * 8, sizeof(f32x8));
        for (int r = 0; r < R; r++) {
            float wr = w[(size_t)(row + r) * n + j];
            for (int v = 0; v < V; v++) acc[r][v] += xv[v] * wr;
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            memcpy(out_t + (size_t)(row + r) * width + 8 * (v0 + v), &acc[r][v], sizeof(f32x8));
}

/* out[t * out_stride + i] = out_t[i * width + t] (width = token_width(T))
   for rows [begin, end) and tokens [0, T): the batched kernels' sums, back to
   one row per token, by 8x8 transposes. (Rows only as wide as the tokens: fewer
   tokens, less scratch to write and read.) */
static inline __attribute__((always_inline)) void
tokens_to_rows(float *out, size_t out_stride, const float *out_t, int T, int begin, int end, TransposeFn transpose) {
    int i = begin, width = token_width(T);
    for (; i + 8 <= end; i += 8) {
        int t = 0;
        for (; t + 8 <= T; t += 8) {
            f32x8 col[8]; /* col[c]: token t + c of rows i..i+7 */
            transpose(col, out_t + (size_t)i * width + t, width);
            for (int c = 0; c < 8; c++) memcpy(out + (size_t)(t + c) * out_stride + i, &col[c], sizeof(f32x8));
        }
        for (; t < T; t++)
            for (int r = i; r < i + 8; r++) out[(size_t)t * out_stride + r] = out_t[(size_t)r * width + t];
    }
    for (; i < end; i++)
        for (int t = 0; t < T; t++) out[(size_t)t * out_stride + i] = out_t[(size_t)i * width + t];
}

/* Batched matvec for a few tokens (T <= 4, one vector of them, mostly
   padding): rows in lanes as in matvec_rows, each transposed 8x8 block of
   weights serving all T tokens, T independent sums in column order. */
static inline __attribute__((always_inline)) void
few_tokens_rows8(float *out, size_t out_stride, const float *x_t, const float *w, int n, int T, int begin, int end,
                 TransposeFn transpose) {
    size_t ahead = prefetch_ahead(n * sizeof(float), 8);
    int i = begin;
    for (; i + 8 <= end; i += 8) {
        const float *block = w + (size_t)i * n;
        f32x8 acc[4] = {{0}}, col[8];
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            if (j % 16 == 0)
                for (int k = 0; k < 8; k++) prefetch(block + (size_t)k * n + j, ahead);
            transpose(col, block + j, n);
            for (int c = 0; c < 8; c++)
                for (int t = 0; t < T; t++) acc[t] += col[c] * x_t[(j + c) * 8 + t];
        }
        if (j < n) {
            transpose8_partial(col, block + j, n, 8, n - j, transpose);
            for (int c = 0; c < n - j; c++)
                for (int t = 0; t < T; t++) acc[t] += col[c] * x_t[(j + c) * 8 + t];
        }
        for (int t = 0; t < T; t++) memcpy(out + t * out_stride + i, &acc[t], sizeof acc[t]);
    }
    few_tokens_plain(out, out_stride, x_t, 8, w, n, T, i, end);
}

/* Rows [begin, end) of out[t][i] = W[i] . x[t]: columns in blocks of 256, so
   that the block of x_t (256 x 64 floats) stays in cache while all the rows
   pass; within a block, R rows at a time (their weights stay in L1) by every
   token vector. Partial sums wait in out_t, transposed into out at the end. */
static inline __attribute__((always_inline)) void
matmul_tokens_body(float *out, size_t out_stride, float *out_t, const float *x_t, const float *w, int n, int T,
                   int begin, int end, int R, int V, TransposeFn transpose) {
    int width = token_width(T), vectors = width / 8;
    switch (T) { /* a constant T keeps the sums in registers */
    case 2: few_tokens_rows8(out, out_stride, x_t, w, n, 2, begin, end, transpose); return;
    case 3: few_tokens_rows8(out, out_stride, x_t, w, n, 3, begin, end, transpose); return;
    case 4: few_tokens_rows8(out, out_stride, x_t, w, n, 4, begin, end, transpose); return;
    }
    for (int jb = 0; jb < n; jb += 256) {
        int je = jb + 256 < n ? jb + 256 : n;
        int i = begin;
        for (; i + R <= end; i += R) {
            int v0 = 0;
            for (; v0 + V <= vectors; v0 += V) tokens_block8(out_t, x_t, w, n, width, i, R, v0, V, jb, je);
            for (; v0 < vectors; v0++) tokens_block8(out_t, x_t, w, n, width, i, R, v0, 1, jb, je);
        }
        for (; i < end; i++)
            for (int v0 = 0; v0 < vectors; v0++) tokens_block8(out_t, x_t, w, n, width, i, 1, v0, 1, jb, je);
    }
    tokens_to_rows(out, out_stride, out_t, T, begin, end, transpose);
}

/* quantize() for group sizes that are a multiple of 8, 8 values at a time: the
   same maximum (NaN never wins a > comparison), the same division and the same
   rounding. Truncation goes through int32, exact for |v| <= 256; larger values
   and NaN give 0 in quantize(), so they are set to 0 first. */
static inline __attribute__((always_inline)) void
quantize_body(int8_t *q, float *scale, const float *x, int n, int group_size) {
    if (group_size % 8) {
        quantize(q, scale, x, n, group_size);
        return;
    }
    const i32x8 abs_mask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff,
                            0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    const f32x8 one = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int g = 0; g < n / group_size; g++) {
        const float *group = x + g * group_size;
        f32x8 lane_max = {0};
        for (int i = 0; i < group_size; i += 8) {
            f32x8 a;
            memcpy(&a, group + i, sizeof a);
            a = (f32x8)((i32x8)a & abs_mask);
            i32x8 greater = a > lane_max;
            lane_max = (f32x8)(((i32x8)a & greater) | ((i32x8)lane_max & ~greater));
        }
        float max_abs = 0.0f;
        for (int k = 0; k < 8; k++)
            if (lane_max[k] > max_abs) max_abs = lane_max[k];
        float s = max_abs / 127.0f;
        scale[g] = s;
        for (int i = 0; i < group_size; i += 8) {
            f32x8 v = {0};
            if (s > 0) {
                memcpy(&v, group + i, sizeof v);
                v /= s;
            }
            i32x8 small = (f32x8)((i32x8)v & abs_mask) <= 256.0f; /* false for NaN */
            v = (f32x8)((i32x8)v & small);
            f32x8 r = __builtin_convertvector(__builtin_convertvector(v, i32x8), f32x8); /* truncf */
            i32x8 up = (f32x8)((i32x8)(v - r) & abs_mask) >= 0.5f;
            i32x8 positive = v > 0.0f;
            f32x8 step = (f32x8)(((i32x8)one & positive) | ((i32x8)(-one) & ~positive));
            r += (f32x8)((i32x8)step & up);
            i32x8 in_range = small & (r >= -127.0f) & (r <= 127.0f);
            i8x32 bytes = (i8x32)(__builtin_convertvector(r, i32x8) & in_range);
            /* the low byte of each int32 (little-endian): exact, as |r| <= 127 */
            i8x8 qi = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
            memcpy(q + g * group_size + i, &qi, sizeof qi);
        }
    }
}

/* matvec_q8(), 8 rows at a time (one per lane) for group sizes that are a
   multiple of 16: each row's integer dot product per group is exact in any
   order; the float sum over groups runs in the plain order. Each 64-byte line
   of the rows ahead is prefetched once, by the group that starts in it. */
static inline __attribute__((always_inline)) void
matvec_q8_groups(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size, int begin,
                 int end, Dot8Fn dot8) {
    int i = begin, groups = n / group_size;
    size_t ahead = prefetch_ahead(n, 8);
    if (group_size % 16 == 0)
        for (; i + 8 <= end; i += 8) {
            const int8_t *block = w->q + (size_t)i * n;
            const float *block_scale = w->scale + (size_t)i * groups;
            f32x8 val = {0};
            for (int g = 0; g < groups; g++) {
                const int8_t *group = block + g * group_size;
                for (int r = 0; r < 8; r++)
                    for (int k = (64 - g * group_size % 64) % 64; k < group_size; k += 64)
                        prefetch(group + (size_t)r * n + k, ahead);
                i32x8 ival;
                dot8(&ival, group, n, xq + g * group_size, group_size);
                f32x8 ws;
                for (int r = 0; r < 8; r++) ws[r] = block_scale[(size_t)r * groups + g];
                val += __builtin_convertvector(ival, f32x8) * ws * xs[g];
            }
            memcpy(out + i, &val, sizeof val);
        }
    matvec_q8(out, xq, xs, w, n, group_size, i, end);
}

/* The common group sizes as constants: the compiler then unrolls dot8 and the
   prefetches into straight code: with avx2, stories15M (group size 32)
   decodes 1.4x as fast, stories110M (64) 1.2x. */
static inline __attribute__((always_inline)) void
matvec_q8_body(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size, int begin,
               int end, Dot8Fn dot8) {
    if (group_size == 32) matvec_q8_groups(out, xq, xs, w, n, 32, begin, end, dot8);
    else if (group_size == 64) matvec_q8_groups(out, xq, xs, w, n, 64, begin, end, dot8);
    else matvec_q8_groups(out, xq, xs, w, n, group_size, begin, end, dot8);
}

/* The layout prepare_q8_pairs_body() makes in its scratch: the int8 inputs as
   int16, two values of a token side by side, by vectors of 8 tokens (padded
   with zeros to width) as in prepare_tokens: x2[((t / 8) * n / 2 + j / 2) * 8 +
   t % 8][j % 2]; then the scales xs_t[g * width + t]. */
static const float *q8_token_scales(const void *scratch, int n, int width) {
    return (const float *)((const char *)scratch + (size_t)n * width * sizeof(int16_t));
}

/* Weights of R rows are turned into int16 pairs in pieces of at most this many
   values of a group (a buffer on the stack). */
#define Q8_PIECE 512

/* The integer part of R rows by V vectors of 8 tokens: acc += the dot products
   of the converted weights w16[r][0..len) with the tokens' values from pair
   p0 on. The weight pair is broadcast; one pmaddwd does 8 tokens x 2 values. */
static inline __attribute__((always_inline)) void
q8_pairs_block(i32x8 acc_mem[6][MAX_BATCH / 8], int16_t w16[6][Q8_PIECE], const int16_t *x2, int pairs, int p0, int len,
               int R, int v0, int V, PairFn pair) {
    i32x8 acc[6][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) acc[r][v] = acc_mem[r][v0 + v];
    for (int p = 0; p < len / 2; p++) {
        for (int r = 0; r < R; r++) {
            int32_t w_pair;
            memcpy(&w_pair, &w16[r][2 * p], sizeof w_pair);
            for (int v = 0; v < V; v++) pair(&acc[r][v], x2 + ((size_t)(v0 + v) * pairs + p0 + p) * 16, w_pair);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) acc_mem[r][v0 + v] = acc[r][v];
}

/* R rows (a constant) of out_t[row][t] = W[row] . x[t] for int8 weights: per
   group, the exact integer sums for all tokens, then val += ival * w_scale *
   x_scale as in the plain kernel, one token per lane. */
static inline __attribute__((always_inline)) void
q8_pairs_rows(float *out_t, const void *scratch, const Matrix *w, int n, int group_size, int T, int row, int R, int V,
              PairFn pair) {
    int width = token_width(T), vectors = width / 8, groups = n / group_size;
    const int16_t *x2 = scratch;
    const float *xs_t = q8_token_scales(scratch, n, width);
    int16_t w16[6][Q8_PIECE];
    i32x8 acc_mem[6][MAX_BATCH / 8];
    size_t ahead = prefetch_ahead(n, R);
    for (int g = 0; g < groups; g++) {
        for (int r = 0; r < R; r++)
            for (int v = 0; v < vectors; v++) acc_mem[r][v] = (i32x8){0};
        for (int j0 = g * group_size; j0 < (g + 1) * group_size; j0 += Q8_PIECE) {
            int len = (g + 1) * group_size - j0 < Q8_PIECE ? (g + 1) * group_size - j0 : Q8_PIECE;
            for (int r = 0; r < R; r++) {
                const int8_t *src = w->q + (size_t)(row + r) * n + j0;
                /* each line of the next R rows: the rows are too short a run each
                   for the hardware prefetcher (8 tokens: 1.2x as fast) */
                for (int k = (64 - j0 % 64) % 64; k < len; k += 64) prefetch(src + k, ahead);
                for (int k = 0; k < len; k++) w16[r][k] = src[k];
            }
            int v0 = 0;
            for (; v0 + V <= vectors; v0 += V) q8_pairs_block(acc_mem, w16, x2, n / 2, j0 / 2, len, R, v0, V, pair);
            for (; v0 < vectors; v0++) q8_pairs_block(acc_mem, w16, x2, n / 2, j0 / 2, len, R, v0, 1, pair);
        }
        for (int r = 0; r < R; r++) {
            float *val = out_t + (size_t)(row + r) * width;
            float ws = w->scale[(size_t)(row + r) * groups + g];
            for (int v = 0; v < vectors; v++) {
                f32x8 sum = {0}, x_scale;
                if (g > 0) memcpy(&sum, val + 8 * v, sizeof sum);
                memcpy(&x_scale, xs_t + (size_t)g * width + 8 * v, sizeof x_scale);
                sum += __builtin_convertvector(acc_mem[r][v], f32x8) * ws * x_scale;
                memcpy(val + 8 * v, &sum, sizeof sum);
            }
        }
    }
}

static inline __attribute__((always_inline)) void
matmul_q8_tokens_body(float *out, size_t out_stride, float *out_t, const void *scratch, const Matrix *w, int n,
                      int group_size, int T, int begin, int end, int R, int V, PairFn pair, TransposeFn transpose) {
    int i = begin;
    for (; i + R <= end; i += R) q8_pairs_rows(out_t, scratch, w, n, group_size, T, i, R, V, pair);
    for (; i < end; i++) q8_pairs_rows(out_t, scratch, w, n, group_size, T, i, 1, V, pair);
    tokens_to_rows(out, out_stride, out_t, T, begin, end, transpose);
}

/* x[i] = exp(x[i] - max(x)), softmax()'s first steps: the maximum (a NaN
   x[0] stays; a later NaN never wins a > comparison; which of +0 and -0 wins
   does not matter, exp of either difference being the same), then the
   exponentials 8 at a time. */
static inline __attribute__((always_inline)) void exp_shifted_body(float *x, int n, ExpFn exp8) {
    float max_val = x[0];
    f32x8 lane_max = {max_val, max_val, max_val, max_val, max_val, max_val, max_val, max_val};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 v;
        memcpy(&v, x + i, sizeof v);
        i32x8 greater = v > lane_max;
        lane_max = (f32x8)(((i32x8)v & greater) | ((i32x8)lane_max & ~greater));
    }
    for (int k = 0; k < 8; k++)
        if (lane_max[k] > max_val) max_val = lane_max[k];
    for (; i < n; i++)
        if (x[i] > max_val) max_val = x[i];
    for (i = 0; i + 8 <= n; i += 8) {
        f32x8 v;
        memcpy(&v, x + i, sizeof v);
        v -= max_val;
        exp8(&v, &v);
        memcpy(x + i, &v, sizeof v);
    }
    for (; i < n; i++) x[i] = expf(x[i] - max_val);
}

/* x[i] /= sum, 8 at a time. */
static inline __attribute__((always_inline)) void divide_body(float *x, int n, float sum) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 v;
        memcpy(&v, x + i, sizeof v);
        v /= sum;
        memcpy(x + i, &v, sizeof v);
    }
    for (; i < n; i++) x[i] /= sum;
}

/* softmax(): the sum in the plain order (a chain of dependent adds). */
static inline __attribute__((always_inline)) void softmax_body(float *x, int n, ExpFn exp8) {
    exp_shifted_body(x, n, exp8);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i];
    divide_body(x, n, sum);
}

/* sample_argmax(), 8 at a time. Each lane keeps the first index of its
   largest value, starting from x[0] (so that, as in the plain scan, a NaN
   there is never beaten and NaNs elsewhere never win); the first index is
   then the lowest of the lanes that hold the largest value. */
static inline __attribute__((always_inline)) int argmax_body(const float *x, int n) {
    f32x8 best;
    i32x8 at = {0}, index = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int l = 0; l < 8; l++) best[l] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8, index += 8) {
        f32x8 v;
        memcpy(&v, x + i, sizeof v);
        i32x8 greater = v > best;
        best = (f32x8)(((i32x8)v & greater) | ((i32x8)best & ~greater));
        at = (index & greater) | (at & ~greater);
    }
    int lane = 0;
    for (int l = 1; l < 8; l++)
        if (best[l] > best[lane] || (best[l] == best[lane] && at[l] < at[lane])) lane = l;
    int result = at[lane];
    float max = best[lane];
    for (; i < n; i++)
        if (x[i] > max) max = x[i], result = i;
    return result;
}

/* rmsnorm() of T tokens' rows, 8 tokens at a time with token t in lane t:
   each sum of squares is a chain of adds in rmsnorm()'s order, and the 8
   chains run side by side instead of one after another. */
static inline __attribute__((always_inline)) void
rmsnorm_tokens_body(float *out, const float *x, const float *weight, int T, int n, float eps, TransposeFn transpose) {
    int t0 = 0;
    for (; t0 + 8 <= T; t0 += 8) {
        const float *rows = x + (size_t)t0 * n;
        f32x8 ss = {0}, col[8];
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            transpose(col, rows + i, n);
            for (int k = 0; k < 8; k++) ss += col[k] * col[k];
        }
        for (; i < n; i++)
            for (int t = 0; t < 8; t++) ss[t] += rows[(size_t)t * n + i] * rows[(size_t)t * n + i];
        for (int t = 0; t < 8; t++) {
            float scale = ss[t];
            scale /= n;
            scale += eps;
            scale = 1.0f / sqrtf(scale);
            const float *row = rows + (size_t)t * n;
            float *dst = out + (size_t)(t0 + t) * n;
            for (int j = 0; j < n; j++) dst[j] = weight[j] * (scale * row[j]);
        }
    }
    rmsnorm_tokens(out + (size_t)t0 * n, x + (size_t)t0 * n, weight, T - t0, n, eps);
}

/* swiglu(): hb = hb * (1 / (1 + exp(-hb))) * hb2, 8 at a time. */
static inline __attribute__((always_inline)) void swiglu_body(float *hb, const float *hb2, int n, ExpFn exp8) {
    const f32x8 one = {1, 1, 1, 1, 1, 1, 1, 1};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 val, up, e;
        memcpy(&val, hb + i, sizeof val);
        memcpy(&up, hb2 + i, sizeof up);
        e = -val;
        exp8(&e, &e);
        val *= one / (one + e);
        val *= up;
        memcpy(hb + i, &val, sizeof val);
    }
    swiglu(hb + i, hb2 + i, n - i);
}

/* rope(), 4 pairs at a time: each lane's value times its pair's cosine, its
   neighbour's times the sine, subtracted in the first of the pair and added in
   the second, as rope() does. Head sizes not a multiple of 8 go to rope(). */
static inline __attribute__((always_inline)) void rope_body(float *v, int n, int head_size, const float *cos_pos,
                                                            const float *sin_pos) {
    if (head_size % 8) {
        rope(v, n, head_size, cos_pos, sin_pos);
        return;
    }
    for (float *head = v; head < v + n; head += head_size)
        for (int i = 0; i < head_size; i += 8) {
            f32x4 cos4, sin4;
            f32x8 x;
            memcpy(&cos4, cos_pos + i / 2, sizeof cos4);
            memcpy(&sin4, sin_pos + i / 2, sizeof sin4);
            memcpy(&x, head + i, sizeof x);
            f32x8 fcr = __builtin_shufflevector(cos4, cos4, 0, 0, 1, 1, 2, 2, 3, 3);
            f32x8 fci = __builtin_shufflevector(sin4, sin4, 0, 0, 1, 1, 2, 2, 3, 3);
            f32x8 neighbour = __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6);
            f32x8 own = x * fcr, other = neighbour * fci;
            x = __builtin_shufflevector(own - other, other + own, 0, 9, 2, 11, 4, 13, 6, 15);
            memcpy(head + i, &x, sizeof x);
        }
}

/* att[h * att_stride + t] = q[h] . key_t for Q queries and the keys t0 .. t0 +
   8 * B - 1, each summed as in attention_head(): blocks of 8 keys transposed
   (key t in lane t) once for all Q queries; B * Q chains of adds side by side. */
static inline __attribute__((always_inline)) void
scores_keys(float *att, size_t att_stride, const float *const *q, int Q, const float *keys, int t0, int head_size,
            size_t kv_dim, int B, TransposeFn transpose) {
    const float *block0 = keys + t0 * kv_dim, *block1 = block0 + 8 * kv_dim;
    f32x8 acc0[4], acc1[4], col0[8], col1[8];
    for (int h = 0; h < Q; h++) acc0[h] = acc1[h] = (f32x8){0};
    for (int j = 0; j < head_size; j += 8) {
        int cols = head_size - j < 8 ? head_size - j : 8;
        if (cols == 8) {
            transpose(col0, block0 + j, kv_dim);
            if (B == 2) transpose(col1, block1 + j, kv_dim);
        } else {
            transpose8_partial(col0, block0 + j, kv_dim, 8, cols, transpose);
            if (B == 2) transpose8_partial(col1, block1 + j, kv_dim, 8, cols, transpose);
        }
        for (int c = 0; c < cols; c++)
            for (int h = 0; h < Q; h++) {
                acc0[h] += col0[c] * q[h][j + c];
                if (B == 2) acc1[h] += col1[c] * q[h][j + c];
            }
    }
    for (int h = 0; h < Q; h++) {
        memcpy(att + h * att_stride + t0, &acc0[h], sizeof(f32x8));
        if (B == 2) memcpy(att + h * att_stride + t0 + 8, &acc1[h], sizeof(f32x8));
    }
}

/* The scores for keys 0 .. n_keys - 1 of up to 4 queries: 16 keys at a time
   (2 * Q chains of adds), then 8; the last few keys by the plain loop. */
static inline __attribute__((always_inline)) void
scores_body(float *att, size_t att_stride, const float *const *q, int Q, const float *keys, int n_keys, int head_size,
            size_t kv_dim, TransposeFn transpose) {
    int t = 0;
    for (; t + 16 <= n_keys; t += 16) scores_keys(att, att_stride, q, Q, keys, t, head_size, kv_dim, 2, transpose);
    for (; t + 8 <= n_keys; t += 8) scores_keys(att, att_stride, q, Q, keys, t, head_size, kv_dim, 1, transpose);
    scores_tail(att, att_stride, q, Q, keys, t, n_keys, head_size, kv_dim);
}

/* out[g][i] = sum over t < n_keys[g] of a[g][t] * value_t[i] for G (1 or 2)
   queries (n_keys[0] <= n_keys[G - 1]) and the dimensions i0 .. i0 + 8 * V - 1,
   t in order, from 0.0f or (more) from out: lanes are dimensions, G * V chains
   of adds side by side, each value row loaded once for the G queries. */
static inline __attribute__((always_inline)) void
weighted_values_dims(float *const *out, const float *const *a, const int *n_keys, int G, const float *values,
                     size_t stride, int i0, int V, int more) {
    f32x8 acc[2][4];
    for (int g = 0; g < G; g++)
        for (int v = 0; v < V; v++) { /* one vector at a time, so that the sums stay in registers */
            acc[g][v] = (f32x8){0};
            if (more) memcpy(&acc[g][v], out[g] + i0 + 8 * v, sizeof acc[g][v]);
        }
    int t = 0;
    for (; t < n_keys[0]; t++)
        for (int v = 0; v < V; v++) {
            f32x8 value;
            memcpy(&value, values + t * stride + i0 + 8 * v, sizeof value);
            for (int g = 0; g < G; g++) acc[g][v] += value * a[g][t];
        }
    for (; t < n_keys[G - 1]; t++)
        for (int v = 0; v < V; v++) {
            f32x8 value;
            memcpy(&value, values + t * stride + i0 + 8 * v, sizeof value);
            acc[G - 1][v] += value * a[G - 1][t];
        }
    for (int g = 0; g < G; g++)
        for (int v = 0; v < V; v++) memcpy(out[g] + i0 + 8 * v, &acc[g][v], sizeof acc[g][v]);
}

/* All head_size dimensions: 32 at a time (16 for two queries), then 8, then
   one by one. */
static inline __attribute__((always_inline)) void
weighted_values_body(float *const *out, const float *const *a, const int *n_keys, int G, const float *values,
                     size_t stride, int head_size, int more) {
    int i = 0;
    if (G == 1)
        for (; i + 32 <= head_size; i += 32) weighted_values_dims(out, a, n_keys, 1, values, stride, i, 4, more);
    else
        for (; i + 16 <= head_size; i += 16) weighted_values_dims(out, a, n_keys, 2, values, stride, i, 2, more);
    for (; i + 8 <= head_size; i += 8) weighted_values_dims(out, a, n_keys, G, values, stride, i, 1, more);
    for (; i < head_size; i++)
        for (int g = 0; g < G; g++) {
            float sum = more ? out[g][i] : 0.0f;
            for (int t = 0; t < n_keys[g]; t++) sum += a[g][t] * values[t * stride + i];
            out[g][i] = sum;
        }
}

/* Bytes [j, j + 32) (or up to head_size) of 8 int8 rows of head_size bytes,
   rows from n_rows on as zeros, transposed as 4-byte columns by the set's
   float transpose (which copies bits as they are, 4-byte aligned here):
   col[c] holds bytes 4c .. 4c + 3 of row k in lane k. */
static inline __attribute__((always_inline)) void q8_columns8(f32x8 col[8], const int8_t *rows, int head_size, int j,
                                                              int n_rows, TransposeFn transpose) {
    if (n_rows == 8 && head_size - j >= 32) {
        if (j % 64 == 0) /* each row's line KV_PREFETCH_ROWS on, as kv_tile() asks */
            for (int k = 0; k < 8; k++) prefetch(rows + (size_t)k * head_size + j, KV_PREFETCH_ROWS * (size_t)head_size);
        transpose(col, (const float *)(const void *)(rows + j), head_size / 4);
        return;
    }
    float buf[8][8] = {{0}}; /* the last few keys, or a head's last bytes */
    for (int k = 0; k < n_rows; k++)
        memcpy(buf[k], rows + (size_t)k * head_size + j, head_size - j < 32 ? head_size - j : 32);
    transpose(col, buf[0], 8);
}

/* attention_head()'s integer dot products of Q queries, as int16 pairs
   (quantize_query_pairs()), with int8 keys t0 .. t0 + 8 B - 1 of head_size
   bytes (a multiple of 4), of them the first n_rows (below 8 only when B is
   1), then scaled. Each 4-byte column of the transposed keys splits into its
   bytes 0 and 2 and its bytes 1 and 3 as int16 pairs, for the set's pair(). */
static inline __attribute__((always_inline)) void
scores_q8_keys8(float *att, size_t att_stride, const int32_t *const *query, const float *query_scale, int Q,
                const int8_t *keys, const float *scales, int t0, int n_rows, int head_size, int B,
                TransposeFn transpose, PairFn pair) {
    const int8_t *block0 = keys + (size_t)t0 * head_size, *block1 = B == 2 ? block0 + 8 * (size_t)head_size : block0;
    i32x8 acc0[4], acc1[4];
    f32x8 scale0 = {0}, scale1 = {0};
    memcpy(&scale0, scales + t0, n_rows * sizeof(float));
    if (B == 2) memcpy(&scale1, scales + t0 + 8, sizeof scale1);
    for (int h = 0; h < Q; h++) acc0[h] = acc1[h] = (i32x8){0};
    for (int j = 0; j < head_size; j += 32) {
        int words = head_size - j < 32 ? (head_size - j) / 4 : 8;
        f32x8 col0[8], col1[8];
        q8_columns8(col0, block0, head_size, j, n_rows, transpose);
        if (B == 2) q8_columns8(col1, block1, head_size, j, 8, transpose);
        for (int c = 0; c < words; c++) {
            i16x16 even0 = ((i16x16)col0[c] << 8) >> 8, odd0 = (i16x16)col0[c] >> 8, even1 = even0, odd1 = odd0;
            if (B == 2) even1 = ((i16x16)col1[c] << 8) >> 8, odd1 = (i16x16)col1[c] >> 8;
            for (int h = 0; h < Q; h++) {
                int32_t pair_even = query[h][j / 2 + 2 * c], pair_odd = query[h][j / 2 + 2 * c + 1];
                pair(&acc0[h], (const int16_t *)&even0, pair_even);
                pair(&acc0[h], (const int16_t *)&odd0, pair_odd);
                if (B == 2) {
                    pair(&acc1[h], (const int16_t *)&even1, pair_even);
                    pair(&acc1[h], (const int16_t *)&odd1, pair_odd);
                }
            }
        }
    }
    for (int h = 0; h < Q; h++) {
        f32x8 score0 = __builtin_convertvector(acc0[h], f32x8) * (query_scale[h] * scale0);
        memcpy(att + h * att_stride + t0, &score0, n_rows * sizeof(float));
        if (B == 2) {
            f32x8 score1 = __builtin_convertvector(acc1[h], f32x8) * (query_scale[h] * scale1);
            memcpy(att + h * att_stride + t0 + 8, &score1, sizeof score1);
        }
    }
}

/* The scores of n_keys int8 keys for up to 4 queries: 16 at a time, then 8,
   then the last few as a block of 8 with rows missing. */
static inline __attribute__((always_inline)) void
scores_q8_body8(float *att, size_t att_stride, const int32_t *const *query, const float *query_scale, int Q,
                const int8_t *keys, const float *scales, int n_keys, int head_size, TransposeFn transpose,
                PairFn pair) {
    int t = 0;
    for (; t + 16 <= n_keys; t += 16)
        scores_q8_keys8(att, att_stride, query, query_scale, Q, keys, scales, t, 8, head_size, 2, transpose, pair);
    for (; t + 8 <= n_keys; t += 8)
        scores_q8_keys8(att, att_stride, query, query_scale, Q, keys, scales, t, 8, head_size, 1, transpose, pair);
    if (t < n_keys)
        scores_q8_keys8(att, att_stride, query, query_scale, Q, keys, scales, t, n_keys - t, head_size, 1, transpose,
                        pair);
}

static inline __attribute__((always_inline)) void
scores_q8_group_body(float *att, size_t att_stride, const int32_t *const *query, const float *query_scale, int count,
                     const int8_t *keys, const float *scales, int n_keys, int head_size, TransposeFn transpose,
                     PairFn pair) {
    switch (count) {
    case 1: scores_q8_body8(att, att_stride, query, query_scale, 1, keys, scales, n_keys, head_size, transpose, pair); break;
    case 2: scores_q8_body8(att, att_stride, query, query_scale, 2, keys, scales, n_keys, head_size, transpose, pair); break;
    default: scores_q8_body8(att, att_stride, query, query_scale, 4, keys, scales, n_keys, head_size, transpose, pair); break;
    }
}

/* scores_body for `count` queries (query[] padded to 4 with copies of the
   last): 1, 2 or 4 as constants, which keep the sums in registers. */
static inline __attribute__((always_inline)) void
scores_group_body(float *att, size_t att_stride, const float *const *query, int count, const float *keys, int n_keys,
                  int head_size, size_t stride, TransposeFn transpose) {
    switch (count) {
    case 1: scores_body(att, att_stride, query, 1, keys, n_keys, head_size, stride, transpose); break;
    case 2: scores_body(att, att_stride, query, 2, keys, n_keys, head_size, stride, transpose); break;
    default: scores_body(att, att_stride, query, 4, keys, n_keys, head_size, stride, transpose); break;
    }
}

/* softmax_body of each query's scores, up to its last position. */
static inline __attribute__((always_inline)) void softmax_rows_body(float *att, size_t att_stride, const int *last,
                                                                    int count, ExpFn exp8) {
    for (int k = 0; k < count; k++) softmax_body(att + k * att_stride, last[k] + 1, exp8);
}

/* The values of the positions [t0, t_end) (rows `stride` apart) weighted into
   each query's out: two queries at a time when both see some of them. */
static inline __attribute__((always_inline)) void
weighted_values_tile(float *const *out, const float *att, size_t att_stride, const int *last, int count,
                     const float *rows, size_t stride, int head_size, int t0, int t_end) {
    int seen[4]; /* of these positions, by each query; never decreasing */
    const float *a[4];
    for (int k = 0; k < count; k++) {
        seen[k] = last[k] + 1 < t_end ? last[k] + 1 - t0 : t_end - t0;
        a[k] = att + k * att_stride + t0;
    }
    for (int k = 0; k < count;)
        if (seen[k] <= 0) {
            k++;
        } else if (k + 1 < count) {
            weighted_values_body(out + k, a + k, seen + k, 2, rows, stride, head_size, t0 > 0);
            k += 2;
        } else {
            weighted_values_body(out + k, a + k, seen + k, 1, rows, stride, head_size, t0 > 0);
            k++;
        }
}

/* A kernel set's three steps of attention for a group of queries over a tile of
   cached rows: the scores (query[] padded to the group's size with copies of
   the last), each query's softmax up to its last position, the weighted values. */
typedef void (*ScoresFn)(float *att, size_t att_stride, const float *const *query, int count, const float *keys,
                         int n_keys, int head_size, size_t stride);
typedef void (*SoftmaxRowsFn)(float *att, size_t att_stride, const int *last, int count);
typedef void (*ValuesFn)(float *const *out, const float *att, size_t att_stride, const int *last, int count,
                         const float *rows, size_t stride, int head_size, int t0, int t_end);
/* The scores, and the weighted values, straight from an int8 cache's rows
   (consecutive, one scale each; head sizes a multiple of 4), where a kernel
   set has them (NULL where a tile dequantized first is faster: the 8-lane
   sets' values). The scores take each query as int16 pairs
   (quantize_query_pairs()) and its scale. */
typedef void (*ScoresQ8Fn)(float *att, size_t att_stride, const int32_t *const *query_pairs, const float *query_scale,
                           int count, const int8_t *keys, const float *scales, int n_keys, int head_size);
typedef void (*ValuesQ8Fn)(float *const *out, const float *att, size_t att_stride, const int *last, int count,
                           const int8_t *rows, const float *scales, int head_size, int t0, int t_end);

/* The widest query head the fast kernels score against int8 keys: their
   integer sums stay within int32 (512 x 32767 x 127 < 2^31). */
#define MAX_Q8_SCORE_HEAD 512

/* quantize_query() 4 values at a time (the same maximum, product and
   rounding), written as int16 pairs in the order the kernels take them: of
   each 4 values a, b, c, d, the pair (a, c) and then (b, d), for a key's
   bytes 0 and 2 and bytes 1 and 3. */
static inline __attribute__((always_inline)) float quantize_query_pairs(int32_t *pairs, const float *q, int n) {
    const i32x4 abs_mask = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    f32x4 lane_max = {0};
    for (int i = 0; i < n; i += 4) {
        f32x4 a;
        memcpy(&a, q + i, sizeof a);
        a = (f32x4)((i32x4)a & abs_mask);
        i32x4 greater = a > lane_max;
        lane_max = (f32x4)(((i32x4)a & greater) | ((i32x4)lane_max & ~greater));
    }
    float max_abs = 0.0f;
    for (int k = 0; k < 4; k++)
        if (lane_max[k] > max_abs) max_abs = lane_max[k];
    float inverse = max_abs > 0 ? 32767.0f / max_abs : 0.0f;
    for (int i = 0; i < n; i += 4) {
        f32x4 v;
        memcpy(&v, q + i, sizeof v);
        v *= inverse;
        i32x4 in_range = (f32x4)((i32x4)v & abs_mask) < 32767.5f; /* false for NaN */
        v = (v + 0x1.8p23f) - 0x1.8p23f;
        i32x4 r = __builtin_convertvector((f32x4)((i32x4)v & in_range), i32x4);
        pairs[i / 2] = (int32_t)((uint32_t)(uint16_t)r[0] | (uint32_t)(uint16_t)r[2] << 16);
        pairs[i / 2 + 1] = (int32_t)((uint32_t)(uint16_t)r[1] | (uint32_t)(uint16_t)r[3] << 16);
    }
    return max_abs / 32767.0f;
}

/* attention_head() for the n_heads query heads of n_tokens consecutive tokens
   that share KV head kv_head, `group` queries (at most 8) at a time: each
   chunk of keys, then of values (kv_chunk_length()), is read once for the
   group, from the int8 cache's rows as they are where the set can, else as a
   tile (kv_tile()). Head sizes not a multiple of head_step, or above
   max_head_size, go to Part I's loop, and so do int8 keys the set cannot
   score. */
static inline __attribute__((always_inline)) void
attention_block_body(float *out, const float *q, int n_tokens, int dim, int pos, const KVCache *keys,
                     const KVCache *values, int layer, int kv_head, float *att, size_t att_stride, int16_t *query16,
                     int n_heads, KVPrefetch *ahead, int group, int head_step, int max_head_size, ScoresFn scores,
                     SoftmaxRowsFn softmax_rows, ValuesFn weighted_values, ScoresQ8Fn scores_q8,
                     ValuesQ8Fn weighted_values_q8) {
    int head_size = keys->head_size;
    int direct_keys = !keys->f32 && scores_q8 && head_size % 4 == 0 && head_size <= MAX_Q8_SCORE_HEAD;
    if (head_size % head_step || head_size > max_head_size || (!keys->f32 && !direct_keys)) {
        attention_block_plain(out, q, n_tokens, dim, pos, keys, values, layer, kv_head, att, att_stride, query16,
                              n_heads, ahead);
        return;
    }
    float tile[KV_TILE_FLOATS], divisor = sqrtf(head_size), query_scale[8];
    int32_t query_pairs[8][MAX_Q8_SCORE_HEAD / 2];
    const int32_t *pairs[8];
    int n_q = n_tokens * n_heads;
    for (int first = 0; first < n_q; first += group) {
        int count = n_q - first < group ? n_q - first : group, last[8];
        const float *query[8];
        float *query_out[8];
        for (int k = 0; k < count; k++) { /* query first + k: a head of a token (heads within tokens) */
            int token = (first + k) / n_heads, head = (first + k) % n_heads;
            query[k] = q + (size_t)token * dim + head * head_size;
            query_out[k] = out + (size_t)token * dim + head * head_size;
            last[k] = pos + token; /* causal: the last position this query sees */
        }
        for (int k = 0; k < count && direct_keys; k++) {
            query_scale[k] = quantize_query_pairs(query_pairs[k], query[k], head_size);
            pairs[k] = query_pairs[k];
        }
        for (int k = count; k < group; k++) {
            query[k] = query[count - 1];
            if (direct_keys) pairs[k] = pairs[count - 1], query_scale[k] = query_scale[count - 1];
        }
        /* scores up to the latest position any of them sees */
        int n_keys = last[count - 1] + 1, direct_values = !values->f32 && weighted_values_q8;
        for (int t0 = 0, n; t0 < n_keys; t0 += n) {
            n = kv_chunk_length(keys, t0, n_keys);
            kv_prefetch_some(ahead, n + n / 4);
            if (direct_keys) { /* the rows as they are */
                const int8_t *rows;
                const float *scales;
                kv_q8_rows(keys, layer, kv_head, t0, &rows, &scales);
                scores_q8(att + t0, att_stride, pairs, query_scale, count, rows, scales, n, head_size);
                continue;
            }
            size_t stride;
            const float *rows = kv_tile(keys, layer, kv_head, t0, n, tile, &stride);
            scores(att + t0, att_stride, query, count, rows, n, head_size, stride);
        }
        for (int k = 0; k < count; k++)
            for (int t = 0; t <= last[k]; t++) att[k * att_stride + t] /= divisor;
        softmax_rows(att, att_stride, last, count);
        for (int t0 = 0, n; t0 < n_keys; t0 += n) {
            n = kv_chunk_length(values, t0, n_keys);
            kv_prefetch_some(ahead, n + n / 4);
            if (direct_values) {
                const int8_t *rows;
                const float *scales;
                kv_q8_rows(values, layer, kv_head, t0, &rows, &scales);
                weighted_values_q8(query_out, att, att_stride, last, count, rows, scales, head_size, t0, t0 + n);
                continue;
            }
            size_t stride;
            const float *rows = kv_tile(values, layer, kv_head, t0, n, tile, &stride);
            weighted_values(query_out, att, att_stride, last, count, rows, stride, head_size, t0, t0 + n);
        }
    }
}

/* The batched kernels' inputs, laid out once per matmul (the same for every 8-lane target). */
static void prepare_tokens8(float *x_t, const float *x, int n, int T) {
    int width = token_width(T);
    for (int t0 = 0; t0 < width; t0 += 8) /* each vector of 8 tokens: their value j side by side */
        for (int j = 0; j < n; j++)
            for (int t = t0; t < t0 + 8; t++) x_t[((size_t)t0 * n + j * 8) + t - t0] = t < T ? x[(size_t)t * n + j] : 0.0f;
}

/* The 4-byte slots are moved as floats: 8 tokens' values j.. widened (16 of
   them, 8 pairs each), then transposed so that each pair has 8 tokens side
   by side. */
static inline __attribute__((always_inline)) void
prepare_q8_pairs_body(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T, int begin,
                      int end, TransposeFn transpose) {
    int width = token_width(T), groups = n / group_size;
    int32_t *x2 = scratch;
    float *xs_t = (float *)q8_token_scales(scratch, n, width);
    end = end < width ? end : width;
    for (int t0 = begin; t0 < end; t0 += 8) {
        int rows = T - t0 < 8 ? T - t0 : 8;
        int32_t *block = x2 + (size_t)t0 * n / 2;
        int j = 0;
        for (; j + 16 <= n; j += 16) {
            float wide[8][8] = {{0}};
            for (int t = 0; t < rows; t++) {
                i8x16 bytes;
                memcpy(&bytes, xq + (size_t)(t0 + t) * n + j, sizeof bytes);
                i16x16 values = __builtin_convertvector(bytes, i16x16);
                memcpy(wide[t], &values, sizeof values);
            }
            f32x8 col[8];
            transpose(col, wide[0], 8);
            for (int c = 0; c < 8; c++) memcpy(block + (size_t)(j / 2 + c) * 8, &col[c], sizeof col[c]);
        }
        for (; j < n; j += 2)
            for (int t = 0; t < 8; t++) block[(size_t)j / 2 * 8 + t] = t < rows ? int16_pair(xq + (size_t)(t0 + t) * n + j) : 0;
        for (int g = 0; g < groups; g++)
            for (int t = t0; t < t0 + 8; t++) xs_t[(size_t)g * width + t] = t < T ? xs[(size_t)t * groups + g] : 0.0f;
    }
}

#if defined(__x86_64__) || defined(HAVE_DOTPROD)
/* The batched int8 kernels' input, made once per matmul by prepare_q8_*:
   the values [n / per_slot][width] in 4-byte slots (or, for
   q8_pairs_layout(), [n / 8][8 tokens] in 8-byte ones), then per group and
   token the scales [groups][width] and (VNNI) the biases [groups][width]. */
typedef struct {
    const int32_t *x;
    const float *scale;
    const int32_t *bias;
} Q8Tokens;

static Q8Tokens q8_tokens_layout(const void *scratch, int n, int group_size, int T, int per_slot) {
    int width = (T + 15) / 16 * 16, groups = n / group_size;
    const int32_t *x = scratch;
    const float *scale = (const float *)(x + (size_t)n / per_slot * width);
    return (Q8Tokens){x, scale, (const int32_t *)(scale + (size_t)groups * width)};
}

/* The layout q8_tokens_layout(scratch, n, group_size, T, 4) describes, for
   the tokens [begin, end): token t's values j..j + 3 in the slot x[j / 4 *
   width + t], its scales, and (biased) 128 times each group's sum; the
   tokens from T to the next multiple of 8, zeros, which q8_slots_row_256()
   reads 8 tokens at a time (and leaves out of its output). */
static inline __attribute__((always_inline)) void
prepare_q8_slots_body(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T, int begin,
                      int end, int biased) {
    int width = (T + 15) / 16 * 16, groups = n / group_size;
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 4);
    int32_t *x = (int32_t *)in.x, *bias = (int32_t *)in.bias;
    float *scale = (float *)in.scale;
    for (int t = begin; t < end && t < (T + 7) / 8 * 8; t++) {
        const int8_t *v = xq + (size_t)t * n;
        for (int j = 0; j < n; j += 4) {
            int32_t word = 0;
            if (t < T) memcpy(&word, v + j, sizeof word);
            x[(size_t)j / 4 * width + t] = word;
        }
        for (int g = 0; g < groups; g++) {
            scale[(size_t)g * width + t] = t < T ? xs[(size_t)t * groups + g] : 0.0f;
            if (!biased) continue;
            int32_t sum = 0;
            if (t < T)
                for (int k = 0; k < group_size; k++) sum += v[g * group_size + k];
            bias[(size_t)g * width + t] = 128 * sum;
        }
    }
}
#endif

#if defined(__x86_64__)
/* ------------------------------------------------------------------------- */
/* AVX-512 (and VNNI) kernels: 16 lanes, 16x16 transposes                     */

/* r[0..15] are 16 rows of 16 floats; afterwards r[m] holds column m. */
static inline AVX512 void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        u[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        u[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        u[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
        u[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    }
    /* u[4a + c], 128-bit lane L, holds rows 4a..4a+3 of column 4L + c */
    for (int c = 0; c < 4; c++) {
        __m512 lo0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), lo1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 hi0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE), hi1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(lo0, lo1, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(lo0, lo1, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(hi0, hi1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(hi0, hi1, 0xDD);
    }
}

/* dst[c * dst_stride + r] = src[r * src_stride + c] for a rows x cols block, by
   16x16 tiles. */
static AVX512 void transpose_tiles(float *dst, size_t dst_stride, const float *src, size_t src_stride, int rows,
                                   int cols) {
    for (int r0 = 0; r0 < rows; r0 += 16) {
        for (int c0 = 0; c0 < cols; c0 += 16) {
            int nr = rows - r0 < 16 ? rows - r0 : 16, nc = cols - c0 < 16 ? cols - c0 : 16;
            __mmask16 col_mask = (__mmask16)((1u << nc) - 1), row_mask = (__mmask16)((1u << nr) - 1);
            __m512 t[16];
            for (int k = 0; k < 16; k++)
                t[k] = k < nr ? _mm512_maskz_loadu_ps(col_mask, src + (r0 + k) * src_stride + c0) : _mm512_setzero_ps();
            transpose16(t);
            for (int k = 0; k < nc; k++) {
                if (nr == 16) _mm512_storeu_ps(dst + (c0 + k) * dst_stride + r0, t[k]); /* masked stores are slow on some CPUs */
                else _mm512_mask_storeu_ps(dst + (c0 + k) * dst_stride + r0, row_mask, t[k]);
            }
        }
    }
}

/* expf8_body's pieces: the fused multiply-add of 8 doubles, and the table
   lookup as two permutes of its four 8-double rows. */
static inline __attribute__((always_inline)) AVX512 void fma8_avx512(f64x8 *out, const f64x8 *a, const f64x8 *b,
                                                                    const f64x8 *c) {
    *out = (f64x8)_mm512_fmadd_pd((__m512d)*a, (__m512d)*b, (__m512d)*c);
}

static inline __attribute__((always_inline)) AVX512 void exp2_fraction_avx512(f64x8 *out, const u64x8 *k) {
    __m512i i = _mm512_and_si512((__m512i)*k, _mm512_set1_epi64(31));
    const __m512i *table = (const __m512i *)exp2_fraction;
    __m512i low = _mm512_permutex2var_epi64(_mm512_loadu_si512(table), i, _mm512_loadu_si512(table + 1));
    __m512i high = _mm512_permutex2var_epi64(_mm512_loadu_si512(table + 2), i, _mm512_loadu_si512(table + 3));
    *out = (f64x8)_mm512_mask_blend_epi64(_mm512_test_epi64_mask(i, _mm512_set1_epi64(16)), low, high);
}

static inline __attribute__((always_inline)) AVX512 void expf8_avx512(f32x8 *y, const f32x8 *x) {
    expf8_body(y, x, fma8_avx512, exp2_fraction_avx512, any_lane_avx2);
}
static AVX512 void softmax_avx512(float *x, int n) { softmax_body(x, n, expf8_avx512); }
static AVX512 void swiglu_avx512(float *hb, const float *hb2, int n) { swiglu_body(hb, hb2, n, expf8_avx512); }

/* softmax() of up to 8 rows of att, row k up to position last[k]
   (last[] never decreases). A sum in the plain order is a chain of dependent
   adds; here the rows' sums advance together, one per lane, over 16x16
   transposed blocks. */
static AVX512 void softmax_rows_avx512(float *att, size_t att_stride, const int *last, int count) {
    for (int k = 0; k < count; k++) exp_shifted_body(att + k * att_stride, last[k] + 1, expf8_avx512);
    __m512 lane_sum = _mm512_setzero_ps(); /* lane k: row k's sum so far */
    int t = 0;
    for (; t + 16 <= last[0] + 1; t += 16) {
        __m512 r[16];
        for (int k = 0; k < 16; k++) r[k] = k < count ? _mm512_loadu_ps(att + k * att_stride + t) : _mm512_setzero_ps();
        transpose16(r);
        for (int c = 0; c < 16; c++) lane_sum = _mm512_add_ps(lane_sum, r[c]);
    }
    float sum[16];
    _mm512_storeu_ps(sum, lane_sum);
    for (int k = 0; k < count; k++) {
        float *a = att + k * att_stride;
        for (int i = t; i <= last[k]; i++) sum[k] += a[i];
        divide_body(a, last[k] + 1, sum[k]);
    }
}

/* Attention scores of Q queries that share one KV head, for head sizes 16,
   32, ... 128: att[h * att_stride + t] = q[h] . key_t for t < n_keys, summed as
   attention_head() sums them. Each block of 16 keys is transposed once (key t
   in lane t) and then serves all Q queries. */
static inline __attribute__((always_inline)) AVX512 void
scores_avx512(float *att, size_t att_stride, const float *const *q, int Q, const float *keys, int n_keys, int head_size,
            size_t kv_dim) {
    int t = 0;
    for (; t + 16 <= n_keys; t += 16) {
        const float *block = keys + t * kv_dim;
        __m512 columns[128]; /* columns[j]: dimension j of the 16 keys */
        for (int j = 0; j < head_size; j += 16) {
            for (int k = 0; k < 16; k++) {
                /* the cache rows are far apart: ask for the next block's now */
                prefetch(block + k * kv_dim + j, 16 * kv_dim * sizeof(float));
                columns[j + k] = _mm512_loadu_ps(block + k * kv_dim + j);
            }
            transpose16(columns + j);
        }
        __m512 acc[8];
        for (int h = 0; h < Q; h++) acc[h] = _mm512_setzero_ps();
        for (int j = 0; j < head_size; j++)
            for (int h = 0; h < Q; h++) acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(columns[j], _mm512_set1_ps(q[h][j])));
        for (int h = 0; h < Q; h++) _mm512_storeu_ps(att + h * att_stride + t, acc[h]);
    }
    scores_tail(att, att_stride, q, Q, keys, t, n_keys, head_size, kv_dim);
}

/* Values 16 v .. 16 v + 15 of row t of a tile, rows `stride` apart: fp32
   rows, or (q_rows not NULL) int8 ones widened, converted and scaled as
   cache_row() does. */
static inline __attribute__((always_inline)) AVX512 __m512
value_row16(const float *rows, const int8_t *q_rows, const float *scales, size_t stride, int t, int v) {
    if (!q_rows) return _mm512_loadu_ps(rows + (size_t)t * stride + 16 * v);
    __m128i bytes = _mm_loadu_si128((const __m128i *)(q_rows + (size_t)t * stride + 16 * v));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), _mm512_set1_ps(scales[t]));
}

/* out[k] = sum over t <= last[k] of att[k][t] * value_t, t in order, for G
   queries and value rows of 16 * V values (value_row16()), over the tile
   [t0, t_end): from zero in the first tile, from out in the next; the sums
   stay in registers while the rows stream past, each loaded once for the G
   (last[] never decreases, so they run together up to the first one's last
   position). */
static inline __attribute__((always_inline)) AVX512 void
weighted_values_group(float *const *out, const float *att, size_t att_stride, const int *last, int G,
                      const float *rows, const int8_t *q_rows, const float *scales, size_t stride, int V, int t0,
                      int t_end) {
    __m512 acc[4][8];
    for (int g = 0; g < G; g++)
        for (int v = 0; v < V; v++) acc[g][v] = t0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out[g] + 16 * v);
    int together_end = last[0] + 1 < t_end ? last[0] + 1 : t_end;
    for (int t = t0; t < together_end; t++) {
        for (int v = 0; v < V; v++) /* each line of the row KV_PREFETCH_ROWS on */
            if (!q_rows) prefetch(rows + (size_t)(t - t0) * stride + 16 * v, KV_PREFETCH_ROWS * stride * sizeof(float));
            else if (v % 4 == 0) prefetch(q_rows + (size_t)(t - t0) * stride + 16 * v, KV_PREFETCH_ROWS * stride);
        for (int v = 0; v < V; v++) {
            __m512 value = value_row16(rows, q_rows, scales, stride, t - t0, v);
            for (int g = 0; g < G; g++)
                acc[g][v] = _mm512_add_ps(acc[g][v], _mm512_mul_ps(_mm512_set1_ps(att[g * att_stride + t]), value));
        }
    }
    for (int g = 1; g < G; g++) {
        int end = last[g] + 1 < t_end ? last[g] + 1 : t_end;
        for (int t = last[0] + 1 > t0 ? last[0] + 1 : t0; t < end; t++)
            for (int v = 0; v < V; v++)
                acc[g][v] = _mm512_add_ps(acc[g][v], _mm512_mul_ps(_mm512_set1_ps(att[g * att_stride + t]),
                                                                 value_row16(rows, q_rows, scales, stride, t - t0, v)));
    }
    for (int g = 0; g < G; g++)
        for (int v = 0; v < V; v++) _mm512_storeu_ps(out[g] + 16 * v, acc[g][v]);
}

/* weighted_values_group for n_q queries: 4 at a time when 4 * V sums fit in
   registers (V <= 4), else 2. */
static inline __attribute__((always_inline)) AVX512 void
weighted_values(float *const *out, const float *att, size_t att_stride, const int *last, int n_q, const float *rows,
                const int8_t *q_rows, const float *scales, size_t stride, int V, int t0, int t_end) {
    int k = 0;
    if (V <= 4)
        for (; k + 4 <= n_q; k += 4)
            weighted_values_group(out + k, att + k * att_stride, att_stride, last + k, 4, rows, q_rows, scales, stride,
                                  V, t0, t_end);
    for (; k + 2 <= n_q; k += 2)
        weighted_values_group(out + k, att + k * att_stride, att_stride, last + k, 2, rows, q_rows, scales, stride, V,
                              t0, t_end);
    for (; k < n_q; k++)
        weighted_values_group(out + k, att + k * att_stride, att_stride, last + k, 1, rows, q_rows, scales, stride, V,
                              t0, t_end);
}

/* weighted_values with V = head_size / 16 constant. */
static inline __attribute__((always_inline)) AVX512 void
weighted_values_head(float *const *out, const float *att, size_t att_stride, const int *last, int n_q,
                     const float *rows, const int8_t *q_rows, const float *scales, size_t stride, int head_size,
                     int t0, int t_end) {
    switch (head_size / 16) {
    case 1: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 1, t0, t_end); break;
    case 2: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 2, t0, t_end); break;
    case 3: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 3, t0, t_end); break;
    case 4: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 4, t0, t_end); break;
    case 5: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 5, t0, t_end); break;
    case 6: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 6, t0, t_end); break;
    case 7: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 7, t0, t_end); break;
    default: weighted_values(out, att, att_stride, last, n_q, rows, q_rows, scales, stride, 8, t0, t_end); break;
    }
}

static AVX512 void weighted_values_avx512(float *const *out, const float *att, size_t att_stride, const int *last,
                                          int n_q, const float *rows, size_t stride, int head_size, int t0,
                                          int t_end) {
    weighted_values_head(out, att, att_stride, last, n_q, rows, NULL, NULL, stride, head_size, t0, t_end);
}

/* The same from int8 rows of head_size bytes and their scales. */
static AVX512 void weighted_values_q8_avx512(float *const *out, const float *att, size_t att_stride, const int *last,
                                             int n_q, const int8_t *rows, const float *scales, int head_size, int t0,
                                             int t_end) {
    weighted_values_head(out, att, att_stride, last, n_q, NULL, rows, scales, head_size, head_size, t0, t_end);
}

/* scores_avx512 for `count` queries, as 1, 2, 4 or 8 (query[] is padded):
   a constant count keeps the sums in registers. */
static AVX512 void scores_group_avx512(float *att, size_t att_stride, const float *const *query, int count,
                                       const float *keys, int n_keys, int head_size, size_t stride) {
    switch (count) {
    case 1: scores_avx512(att, att_stride, query, 1, keys, n_keys, head_size, stride); break;
    case 2: scores_avx512(att, att_stride, query, 2, keys, n_keys, head_size, stride); break;
    case 3: case 4: scores_avx512(att, att_stride, query, 4, keys, n_keys, head_size, stride); break;
    default: scores_avx512(att, att_stride, query, 8, keys, n_keys, head_size, stride); break;
    }
}

/* The 4-byte words [j / 4, j / 4 + words) (words <= 16) of 16 int8 rows of
   head_size bytes, rows from n_rows on as zeros, transposed: columns[c]
   holds bytes j + 4c .. j + 4c + 3 of row k in lane k (little-endian: byte
   b of the word in bits 8b .. 8b + 7). Each row's line `ahead` bytes on is
   asked for (none if 0). */
static inline __attribute__((always_inline)) AVX512 void
q8_columns(__m512 columns[16], const int8_t *rows, int head_size, int j, int words, int n_rows, size_t ahead) {
    for (int k = 0; k < 16; k++) {
        if (k >= n_rows) {
            columns[k] = _mm512_setzero_ps();
            continue;
        }
        const int8_t *p = rows + (size_t)k * head_size + j;
        if (ahead) prefetch(p, ahead);
        columns[k] = words == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << words) - 1), p);
    }
    transpose16(columns);
}

/* scores_q8_keys8() 16 keys to a vector: keys t0 .. t0 + 16 B - 1 (of them
   the first n_rows, fewer than 16 only when B is 1), each 16 rows' 64-byte
   pieces transposed (q8_columns()); B * Q integer sums. */
static inline __attribute__((always_inline)) AVX512 void
scores_q8_keys(float *att, size_t att_stride, const int32_t *const *query, const float *query_scale, int Q,
               const int8_t *keys, const float *scales, int t0, int n_rows, int head_size, int B, size_t ahead) {
    const int8_t *block0 = keys + (size_t)t0 * head_size, *block1 = B == 2 ? block0 + 16 * (size_t)head_size : block0;
    __mmask16 rows_mask = n_rows >= 16 ? 0xffff : (__mmask16)((1u << n_rows) - 1);
    __m512 scale0 = _mm512_maskz_loadu_ps(rows_mask, scales + t0), scale1 = scale0;
    __m512i acc0[8], acc1[8];
    if (B == 2) scale1 = _mm512_loadu_ps(scales + t0 + 16);
    for (int h = 0; h < Q; h++) acc0[h] = acc1[h] = _mm512_setzero_si512();
    for (int j = 0; j < head_size; j += 64) {
        int words = head_size - j < 64 ? (head_size - j) / 4 : 16;
        __m512 columns0[16], columns1[16];
        q8_columns(columns0, block0, head_size, j, words, n_rows, ahead);
        if (B == 2) q8_columns(columns1, block1, head_size, j, words, 16, ahead);
        for (int c = 0; c < words; c++) {
            __m512i column0 = _mm512_castps_si512(columns0[c]), column1 = column0;
            if (B == 2) column1 = _mm512_castps_si512(columns1[c]);
            __m512i even0 = _mm512_srai_epi16(_mm512_slli_epi16(column0, 8), 8), odd0 = _mm512_srai_epi16(column0, 8);
            __m512i even1 = _mm512_srai_epi16(_mm512_slli_epi16(column1, 8), 8), odd1 = _mm512_srai_epi16(column1, 8);
            for (int h = 0; h < Q; h++) {
                __m512i pair_even = _mm512_set1_epi32(query[h][j / 2 + 2 * c]);
                __m512i pair_odd = _mm512_set1_epi32(query[h][j / 2 + 2 * c + 1]);
                acc0[h] = _mm512_add_epi32(acc0[h], _mm512_add_epi32(_mm512_madd_epi16(even0, pair_even),
                                                                     _mm512_madd_epi16(odd0, pair_odd)));
                if (B == 2)
                    acc1[h] = _mm512_add_epi32(acc1[h], _mm512_add_epi32(_mm512_madd_epi16(even1, pair_even),
                                                                         _mm512_madd_epi16(odd1, pair_odd)));
            }
        }
    }
    for (int h = 0; h < Q; h++) {
        __m512 scale = _mm512_set1_ps(query_scale[h]);
        _mm512_mask_storeu_ps(att + h * att_stride + t0, rows_mask,
                              _mm512_mul_ps(_mm512_cvtepi32_ps(acc0[h]), _mm512_mul_ps(scale, scale0)));
        if (B == 2)
            _mm512_storeu_ps(att + h * att_stride + t0 + 16,
                             _mm512_mul_ps(_mm512_cvtepi32_ps(acc1[h]), _mm512_mul_ps(scale, scale1)));
    }
}

/* The scores of n_keys int8 keys: 32 at a time for one or two queries (whose
   sums are few), else 16; the last few as a block of 16 with rows missing.
   Each block asks for the next one's rows when they are among these keys. */
static inline __attribute__((always_inline)) AVX512 void
scores_q8_avx512(float *att, size_t att_stride, const int32_t *const *query, const float *query_scale, int Q,
                 const int8_t *keys, const float *scales, int n_keys, int head_size) {
    int t = 0;
    if (Q <= 2)
        for (; t + 32 <= n_keys; t += 32)
            scores_q8_keys(att, att_stride, query, query_scale, Q, keys, scales, t, 16, head_size, 2,
                           t + 64 <= n_keys ? 32 * (size_t)head_size : 0);
    for (; t + 16 <= n_keys; t += 16)
        scores_q8_keys(att, att_stride, query, query_scale, Q, keys, scales, t, 16, head_size, 1,
                       t + 32 <= n_keys ? 16 * (size_t)head_size : 0);
    if (t < n_keys)
        scores_q8_keys(att, att_stride, query, query_scale, Q, keys, scales, t, n_keys - t, head_size, 1, 0);
}

static AVX512 void scores_group_q8_avx512(float *att, size_t att_stride, const int32_t *const *query,
                                          const float *query_scale, int count, const int8_t *keys,
                                          const float *scales, int n_keys, int head_size) {
    switch (count) {
    case 1: scores_q8_avx512(att, att_stride, query, query_scale, 1, keys, scales, n_keys, head_size); break;
    case 2: scores_q8_avx512(att, att_stride, query, query_scale, 2, keys, scales, n_keys, head_size); break;
    case 3: case 4: scores_q8_avx512(att, att_stride, query, query_scale, 4, keys, scales, n_keys, head_size); break;
    default: scores_q8_avx512(att, att_stride, query, query_scale, 8, keys, scales, n_keys, head_size); break;
    }
}

/* The attention driver, 8 queries at a time, for head sizes 16, 32, ... 128. */
static AVX512 void attention_block_avx512(float *out, const float *q, int n_tokens, int dim, int pos,
                                          const KVCache *keys, const KVCache *values, int layer, int kv_head,
                                          float *att, size_t att_stride, int16_t *query16, int n_heads,
                                          KVPrefetch *ahead) {
    attention_block_body(out, q, n_tokens, dim, pos, keys, values, layer, kv_head, att, att_stride, query16, n_heads,
                         ahead, 8, 16, 128, scores_group_avx512, softmax_rows_avx512, weighted_values_avx512,
                         scores_group_q8_avx512, weighted_values_q8_avx512);
}

/* Batched matvec with one token per lane: out_t[i][t] = W[i] . x[t], where the
   input is transposed (x_t[j][t]) and tokens are padded to `width`, a multiple
   of 16 up to 64. R rows and V = width / 16 vectors of tokens make R x V
   accumulators; columns [jb, je) are added to what out_t holds (zero if jb == 0). */
static inline __attribute__((always_inline)) AVX512 void
tokens_block(float *out_t, const float *x_t, const float *w, int n, int width, int row, int R, int V, int jb, int je) {
    __m512 acc[6][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            acc[r][v] = jb == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out_t + (size_t)(row + r) * width + 16 * v);
    for (int j = jb; j < je; j++) {
        if (j % 16 == 0) /* a new cache line of these rows: ask for the next rows' line now */
            for (int r = 0; r < R; r++) prefetch(w + (size_t)(row + r) * n + j, (size_t)R * n * sizeof(float));
        __m512 xv[4];
        for (int v = 0; v < V; v++) xv[v] = _mm512_loadu_ps(x_t + (size_t)j * width + 16 * v);
        for (int r = 0; r < R; r++) {
            __m512 wr = _mm512_set1_ps(w[(size_t)(row + r) * n + j]);
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(wr, xv[v]));
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) _mm512_storeu_ps(out_t + (size_t)(row + r) * width + 16 * v, acc[r][v]);
}

static AVX512 void matmul_tokens_rows(float *out_t, const float *x_t, const float *w, int n, int width, int begin, int end, int V) {
    /* a block of columns of x_t stays in cache while every row uses it */
    for (int jb = 0; jb < n; jb += 256) {
        int je = jb + 256 < n ? jb + 256 : n, i = begin;
        for (; i + 6 <= end; i += 6) tokens_block(out_t, x_t, w, n, width, i, 6, V, jb, je);
        for (; i < end; i++) tokens_block(out_t, x_t, w, n, width, i, 1, V, jb, je);
    }
}

/* matvec() for a few tokens (T <= 8), whose lanes above would be mostly
   padding: 16 rows at a time, one per lane; each 16x16 block of weights is
   transposed so that lane r adds row r's products in column order, and serves
   all T tokens, T independent sums (so more tokens come almost free). */
static inline __attribute__((always_inline)) AVX512 void
few_tokens_rows(float *out, size_t out_stride, const float *x_t, int width, const float *w, int n, int T, int begin,
                int end) {
    size_t ahead = prefetch_ahead(n * sizeof(float), 16);
    int i = begin;
    for (; i + 16 <= end; i += 16) {
        const float *block = w + (size_t)i * n;
        __m512 acc[8];
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        for (int j = 0; j < n; j += 16) {
            int cols = n - j < 16 ? n - j : 16;
            __m512 r[16];
            for (int k = 0; k < 16; k++) {
                prefetch(block + (size_t)k * n + j, ahead);
                const float *p = block + (size_t)k * n + j;
                r[k] = cols == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << cols) - 1), p);
            }
            transpose16(r);
            if (cols == 16) /* the whole block, unrolled */
                for (int c = 0; c < 16; c++)
                    for (int t = 0; t < T; t++)
                        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(r[c], _mm512_set1_ps(x_t[(size_t)(j + c) * width + t])));
            else
                for (int c = 0; c < cols; c++)
                    for (int t = 0; t < T; t++)
                        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(r[c], _mm512_set1_ps(x_t[(size_t)(j + c) * width + t])));
        }
        for (int t = 0; t < T; t++) _mm512_storeu_ps(out + t * out_stride + i, acc[t]);
    }
    few_tokens_plain(out, out_stride, x_t, width, w, n, T, i, end);
}

static AVX512 void matvec_avx512(float *out, const float *x, const float *w, int n, int begin, int end) {
    few_tokens_rows(out, 0, x, 1, w, n, 1, begin, end);
}

/* Rows [begin, end) of out[t][i] = W[i] . x[t] for T tokens, via out_t. */
static AVX512 void matmul_tokens_avx512(float *out, size_t out_stride, float *out_t, const float *x_t, const float *w,
                               int n, int T, int begin, int end) {
    int V = (T + 15) / 16, width = 16 * V;
    switch (T) { /* a constant T keeps the sums in registers */
    case 2: few_tokens_rows(out, out_stride, x_t, width, w, n, 2, begin, end); return;
    case 3: few_tokens_rows(out, out_stride, x_t, width, w, n, 3, begin, end); return;
    case 4: few_tokens_rows(out, out_stride, x_t, width, w, n, 4, begin, end); return;
    case 5: few_tokens_rows(out, out_stride, x_t, width, w, n, 5, begin, end); return;
    case 6: few_tokens_rows(out, out_stride, x_t, width, w, n, 6, begin, end); return;
    case 7: few_tokens_rows(out, out_stride, x_t, width, w, n, 7, begin, end); return;
    case 8: few_tokens_rows(out, out_stride, x_t, width, w, n, 8, begin, end); return;
    }
    switch (V) { /* constant V lets the compiler keep the accumulators in registers */
    case 1: matmul_tokens_rows(out_t, x_t, w, n, width, begin, end, 1); break;
    case 2: matmul_tokens_rows(out_t, x_t, w, n, width, begin, end, 2); break;
    case 3: matmul_tokens_rows(out_t, x_t, w, n, width, begin, end, 3); break;
    default: matmul_tokens_rows(out_t, x_t, w, n, width, begin, end, 4); break;
    }
    transpose_tiles(out + begin, out_stride, out_t + (size_t)begin * width, width, end - begin, T);
}

/* quantize() for group sizes that are a multiple of 16: the same maximum, the
   same division and the same rounding, 16 values at a time. */
static AVX512 void quantize_avx512(int8_t *q, float *scale, const float *x, int n, int group_size) {
    if (group_size % 16) {
        quantize(q, scale, x, n, group_size);
        return;
    }
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int g = 0; g < n / group_size; g++) {
        const float *group = x + g * group_size;
        __m512 max_abs = _mm512_setzero_ps();
        for (int i = 0; i < group_size; i += 16) max_abs = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(group + i)), max_abs);
        float s = _mm512_reduce_max_ps(max_abs) / 127.0f;
        scale[g] = s;
        __m512 sv = _mm512_set1_ps(s);
        for (int i = 0; i < group_size; i += 16) {
            __m512 v = s > 0 ? _mm512_div_ps(_mm512_loadu_ps(group + i), sv) : _mm512_setzero_ps();
            __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r)), half, _CMP_GE_OQ);
            __m512 step = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_sub_ps(_mm512_setzero_ps(), one), one);
            r = _mm512_mask_add_ps(r, up, r, step);
            /* as quantize(): NaN, and values past +-127 (a subnormal scale), give 0 */
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(r), _mm512_set1_ps(127.0f), _CMP_LE_OQ), r);
            _mm_storeu_si128((__m128i *)(q + g * group_size + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
        }
    }
}

/* acc[r][v] = the integer dot products of weights [j0, j1) of rows row.. with
   the tokens of vectors v0.. */
typedef void (*Q8GroupDots)(__m512i acc[6][2], const int32_t *x, const int8_t *w, int n, int width, int R, int v0,
                            int V, int j0, int j1);

static inline __attribute__((always_inline)) VNNI void
group_dots_vnni(__m512i acc[6][2], const int32_t *x, const int8_t *w, int n, int width, int R, int v0, int V, int j0,
                int j1) {
    for (int j = j0; j < j1; j += 4) {
        if (j % 64 == 0) /* a new cache line of these rows: ask for the next rows' line now */
            for (int r = 0; r < R; r++) prefetch(w + (size_t)r * n + j, (size_t)R * n);
        __m512i xv[2];
        for (int v = 0; v < V; v++) xv[v] = _mm512_loadu_si512(x + (size_t)(j / 4) * width + 16 * (v0 + v));
        for (int r = 0; r < R; r++) {
            int32_t four;
            memcpy(&four, w + (size_t)r * n + j, 4);
            __m512i w_unsigned = _mm512_xor_si512(_mm512_set1_epi32(four), _mm512_set1_epi8((char)0x80));
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], w_unsigned, xv[v]);
        }
    }
}

static inline __attribute__((always_inline)) AVX512 void
group_dots_madd(__m512i acc[6][2], const int32_t *x, const int8_t *w, int n, int width, int R, int v0, int V, int j0,
                int j1) {
    for (int jb = j0; jb < j1; jb += 64) {
        int len = j1 - jb < 64 ? j1 - jb : 64;
        int32_t pairs[6][32]; /* weights jb.. of each row as int16 pairs */
        for (int r = 0; r < R; r++) {
            const int8_t *src = w + (size_t)r * n + jb;
            prefetch(src, (size_t)R * n);
            int k = 0;
            for (; k + 32 <= len; k += 32)
                _mm512_storeu_si512(pairs[r] + k / 2, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(src + k))));
            for (; k < len; k += 2) pairs[r][k / 2] = int16_pair(src + k);
        }
        const int32_t *xp = x + (size_t)(jb / 2) * width + 16 * v0; /* the tokens' pair jb / 2 + p */
        for (int p = 0; p < len / 2; p++, xp += width) {
            __m512i xv[2];
            for (int v = 0; v < V; v++) xv[v] = _mm512_loadu_si512(xp + 16 * v);
            for (int r = 0; r < R; r++) {
                __m512i pair = _mm512_set1_epi32(pairs[r][p]);
                for (int v = 0; v < V; v++) acc[r][v] = _mm512_add_epi32(acc[r][v], _mm512_madd_epi16(pair, xv[v]));
            }
        }
    }
}

/* Batched int8 matvec, one token per lane: out_t[i][t] = W[i] . x[t], each
   weight broadcast against 16 tokens' inputs, 4 bytes per token. VNNI: 4 int8
   inputs against w + 128 (vpdpbusd multiplies unsigned by signed bytes), less
   128 * sum(x) per group; without: 2 inputs widened to int16 (vpmaddwd). The
   dot products are exact, the float sum over groups the plain kernel's. */
static inline __attribute__((always_inline)) AVX512 void
q8_tokens_block(float *out_t, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int row, int R,
                int v0, int V, Q8GroupDots group_dots) {
    int groups = n / group_size;
    __m512 val[6][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) val[r][v] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
        __m512i acc[6][2];
        for (int r = 0; r < R; r++)
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_si512();
        group_dots(acc, in.x, w->q + (size_t)row * n, n, width, R, v0, V, g * group_size, (g + 1) * group_size);
        for (int v = 0; v < V; v++) {
            size_t at = (size_t)g * width + 16 * (v0 + v);
            __m512i bias = in.bias ? _mm512_loadu_si512(in.bias + at) : _mm512_setzero_si512();
            __m512 x_scale = _mm512_loadu_ps(in.scale + at);
            for (int r = 0; r < R; r++) {
                __m512 ival = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], bias));
                __m512 ws = _mm512_set1_ps(w->scale[(size_t)(row + r) * groups + g]);
                val[r][v] = _mm512_add_ps(val[r][v], _mm512_mul_ps(_mm512_mul_ps(ival, ws), x_scale));
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) _mm512_storeu_ps(out_t + (size_t)(row + r) * width + 16 * (v0 + v), val[r][v]);
}

/* Rows [begin, end) for all T tokens, in blocks of 6 rows by V (1 or 2)
   vectors of 16 tokens: constant sizes keep the sums in registers, 12 integer
   and 12 float ones. (6 by 2 measured fastest: more vectors would widen the
   weights less often, but leave fewer registers for rows.) */
static inline __attribute__((always_inline)) AVX512 void
q8_tokens_rows(float *out_t, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int begin, int end,
               int v0, int V, Q8GroupDots dots) {
    int i = begin;
    for (; i + 6 <= end; i += 6) q8_tokens_block(out_t, in, w, n, group_size, width, i, 6, v0, V, dots);
    for (; i < end; i++) q8_tokens_block(out_t, in, w, n, group_size, width, i, 1, v0, V, dots);
}

/* The whole batch, 2 vectors of tokens at a time. */
static inline __attribute__((always_inline)) AVX512 void
matmul_q8_tokens_rows(float *out, size_t out_stride, float *out_t, Q8Tokens in, const Matrix *w, int n,
                      int group_size, int T, int begin, int end, Q8GroupDots dots) {
    int width = (T + 15) / 16 * 16;
    for (int v0 = 0; v0 < width / 16; v0 += 2) {
        if (v0 + 2 <= width / 16) q8_tokens_rows(out_t, in, w, n, group_size, width, begin, end, v0, 2, dots);
        else q8_tokens_rows(out_t, in, w, n, group_size, width, begin, end, v0, 1, dots);
    }
    transpose_tiles(out + begin, out_stride, out_t + (size_t)begin * width, width, end - begin, T);
}

/* Whether prepare_q8_vnni() lays out T tokens' inputs in pairs of words for
   matmul_q8_pairs_vnni() (up to 8 tokens: batch mode's steps), rather than in
   4-byte slots with one token per lane. */
static int q8_pairs_layout(int T, int group_size) { return T <= 8 && group_size % 8 == 0; }

/* One row for up to 8 tokens: lane 2t + k holds token t and the k-th of two
   neighbouring 4-byte words. Each 8 bytes of the row, as w + 128 (vpdpbusd
   multiplies unsigned by signed bytes), are broadcast against the 8 tokens'
   same 8 bytes; a group's two lanes per token, less 128 * sum(x), are its
   exact dot product, and the float steps per group are the plain kernel's. */
static inline __attribute__((always_inline)) VNNI void
q8_pairs_row_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                  int row, int T) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int64_t *x = (const int64_t *)in.x;
    const int8_t *weights = w->q + (size_t)row * n;
    int groups = n / group_size;
    __m256 val = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++, weights += group_size, x += group_size) {
        /* each 64-byte line of the row once, by the group that starts in it */
        for (int k = (64 - g * group_size % 64) % 64; k < group_size; k += 64)
            prefetch(weights + k, BLOCK_PREFETCH_BYTES);
        __m512i acc = _mm512_setzero_si512();
        for (int p = 0; p < group_size / 8; p++) {
            int64_t pair;
            memcpy(&pair, weights + 8 * p, sizeof pair);
            acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(_mm512_set1_epi64(pair), flip),
                                      _mm512_loadu_si512(x + 8 * p));
        }
        __m256i sums = _mm512_cvtepi64_epi32(_mm512_add_epi32(acc, _mm512_srli_epi64(acc, 32))); /* per token */
        __m256i bias = _mm256_loadu_si256((const __m256i *)(in.bias + (size_t)g * width));
        __m256 ival = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, bias));
        __m256 ws = _mm256_set1_ps(w->scale[(size_t)row * groups + g]);
        val = _mm256_add_ps(val, _mm256_mul_ps(_mm256_mul_ps(ival, ws), _mm256_loadu_ps(in.scale + (size_t)g * width)));
    }
    store_lanes(out + row, out_stride, T, val);
}

/* vpdpbusd with the int32 at p broadcast to every lane as its memory operand
   ({1to16}), which costs nothing. GCC 12 makes _mm512_set1_epi32(*p) a
   vpbroadcastd of its own (clang 14 folds it), and on Zen 4 a broadcast per
   vpdpbusd halves their rate. */
static inline __attribute__((always_inline)) VNNI __m512i dpbusd_broadcast(__m512i acc, __m512i a, const int32_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*p));
    return acc;
}

/* One group's float steps for 16 rows and one token (its slot `at` in the
   layout): the exact sum less 128 * sum(x), times the rows' scales, times
   the token's, as the plain kernel multiplies them. */
static inline __attribute__((always_inline)) VNNI __m512 q8_group_term(__m512i sums, Q8Tokens in, size_t at,
                                                                     const float *row_scales) {
    __m512 ival = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, _mm512_set1_epi32(in.bias[at])));
    return _mm512_mul_ps(_mm512_mul_ps(ival, _mm512_load_ps(row_scales)), _mm512_set1_ps(in.scale[at]));
}

/* Sixteen packed rows for tokens first .. first + T - 1, at most `lanes` (1, 4,
   8 or 12) of them (first is 0 in the pairs layout; the layouts hold zeros up to
   a multiple of 8), lane l for row + l: vpdpbusd takes vector k against a
   token's 4 inputs there, broadcast. Less 128 * sum(x), each group's sums are
   exact, and its float steps the plain kernel's. The sums and the outputs
   stay in registers (8 tokens on Zen 4: a step's matmuls 7-10% faster than
   with the outputs in memory; 12 tokens still fit, 24 of the 32). */
static inline __attribute__((always_inline)) VNNI void
q8_rows16_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
               int row, int first, int T, int pairs, int lanes) {
    const uint8_t *block = w->packed + (size_t)row / 16 * q8_packed_block_bytes(n, group_size);
    const __m512i *pieces = (const __m512i *)block;
    const float *scales = (const float *)(block + (size_t)16 * n); /* group g's: 16 floats at 16 * g */
    uintptr_t ahead = (uintptr_t)block + BLOCK_PREFETCH_BYTES; /* an address only: maybe past the copy */
    __m512 val[12];
    __m512i acc[12];
    for (int t = 0; t < lanes; t++) val[t] = _mm512_setzero_ps(), acc[t] = _mm512_setzero_si512();
    for (int c = 0; c < n / 64; c++) {
        /* the 16 vectors of 64 columns: for 1 or 4 tokens loaded at once, in
           flight together (one token: loaded as used, generate was 5-10%
           slower); for 8 or 12 each as it is used, the registers holding
           the sums and the outputs */
        __m512i v[16];
        if (lanes <= 4)
            for (int k = 0; k < 16; k++) v[k] = _mm512_load_si512(pieces + 16 * c + k);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            /* token first + t's 4 inputs at 64 * c + 4 * k: x[2 * t] (pairs) or x[t] */
            const int32_t *x = pairs ? in.x + (size_t)(8 * c + k / 2) * 16 + k % 2
                                     : in.x + (size_t)(16 * c + k) * width + first;
            if (first == 0) /* the first pass asks for the lines 4 KB ahead (for the next
                               block's, 32 KB or more ahead: 1.1B shape decode 15% slower on Zen 5) */
                __builtin_prefetch((const void *)(ahead + (size_t)1024 * c + 64 * k), 0, 3);
            if (lanes >= 8) v[k] = _mm512_load_si512(pieces + 16 * c + k);
#pragma GCC unroll 12
            for (int t = 0; t < lanes; t++) acc[t] = dpbusd_broadcast(acc[t], v[k], x + (pairs ? 2 * t : t));
            int done = 64 * c + 4 * k + 4;
            if (done % group_size) continue;
            int g = done / group_size - 1;
            for (int t = 0; t < lanes; t++) {
                val[t] = _mm512_add_ps(val[t], q8_group_term(acc[t], in, (size_t)g * width + first + t, scales + 16 * g));
                acc[t] = _mm512_setzero_si512();
            }
        }
    }
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + (size_t)(first + t) * out_stride + row, val[t]);
}

/* q8_rows16_vnni() for more than 8 tokens (not the pairs layout): each 64
   columns' 16 vectors loaded once, then 8 tokens at a time against them
   (past T the layout's zeros), the sums and outputs of the tokens not in
   hand waiting in memory. */
static inline __attribute__((always_inline)) VNNI void
q8_rows16_passes_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                      int row, int T) {
    const uint8_t *block = w->packed + (size_t)row / 16 * q8_packed_block_bytes(n, group_size);
    const __m512i *pieces = (const __m512i *)block;
    const float *scales = (const float *)(block + (size_t)16 * n);
    uintptr_t next = (uintptr_t)block + q8_packed_block_bytes(n, group_size);
    int n_tokens = (T + 7) / 8 * 8;
    float val[MAX_BATCH][16];
    int32_t sums[MAX_BATCH][16]; /* groups wider than 64 bytes: the sums so far */
    for (int t = 0; t < n_tokens; t++)
        _mm512_storeu_ps(val[t], _mm512_setzero_ps()), memset(sums[t], 0, sizeof sums[t]);
    for (int c = 0; c < n / 64; c++) {
        __m512i v[16];
        for (int k = 0; k < 16; k++) v[k] = _mm512_load_si512(pieces + 16 * c + k);
        for (int t0 = 0; t0 < n_tokens; t0 += 8) {
            __m512i acc[8];
            for (int t = 0; t < 8; t++)
                acc[t] = 64 * c % group_size ? _mm512_loadu_si512(sums[t0 + t]) : _mm512_setzero_si512();
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) {
                const int32_t *x = in.x + (size_t)(16 * c + k) * width + t0;
                /* the next block's lines: compute sets the pace at 16 tokens or more (4 KB ahead not measured) */
                if (t0 == 0) __builtin_prefetch((const void *)(next + (size_t)1024 * c + 64 * k), 0, 2);
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) acc[t] = dpbusd_broadcast(acc[t], v[k], x + t);
                int done = 64 * c + 4 * k + 4;
                if (done % group_size) continue;
                int g = done / group_size - 1;
                for (int t = 0; t < 8; t++) {
                    __m512 term = q8_group_term(acc[t], in, (size_t)g * width + t0 + t, scales + 16 * g);
                    _mm512_storeu_ps(val[t0 + t], _mm512_add_ps(_mm512_loadu_ps(val[t0 + t]), term));
                    acc[t] = _mm512_setzero_si512();
                }
            }
            if ((64 * c + 64) % group_size)
                for (int t = 0; t < 8; t++) _mm512_storeu_si512(sums[t0 + t], acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(out + (size_t)t * out_stride + row, _mm512_loadu_ps(val[t]));
}

/* The block's 16 rows for T tokens: up to 12 in one pass (1, 4, 8 or 12 lanes
   of tokens as a constant, from token 0); more 8 at a time, and when 1 to 4
   are left past a multiple of 8, those 1 or 4 at a time in a second pass over
   the block (in L1 or L2 by then), so that vpdpbusd is spent on at most 3
   padding tokens, not 7. (The 1.1B shape's matmuls at 12 tokens: 39-41 ms in
   one pass against 49-51 in two.) */
static inline __attribute__((always_inline)) VNNI void
q8_rows16_lanes_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                     int row, int T, int pairs) {
    if (T <= 8) { /* decoding and small batches */
        if (T == 1) q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, 0, 1, pairs, 1);
        else if (T <= 4) q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, 0, T, pairs, 4);
        else q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, 0, T, pairs, 8);
        return;
    }
    if (T <= 12) { /* the 8 answering tokens of a -b 8 step and a few of a prompt, say */
        q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, 0, T, pairs, 12);
        return;
    }
    int rest = T % 8 <= 4 ? T % 8 : 0; /* for the second pass; 5 to 7 left over go as 8 */
    q8_rows16_passes_vnni(out, out_stride, in, w, n, group_size, width, row, T - rest);
    if (rest == 1) q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, T - rest, 1, pairs, 1);
    else if (rest) q8_rows16_vnni(out, out_stride, in, w, n, group_size, width, row, T - rest, rest, pairs, 4);
}

/* q8_rows16_lanes_vnni() for the packed blocks of 16 rows in [begin, end) (begin a
   multiple of 16); returns the first row left. */
static inline __attribute__((always_inline)) VNNI int
q8_blocks16_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int T,
                 int begin, int end, int pairs) {
    int width = (T + 15) / 16 * 16, row = begin;
    if (!w->packed) return row;
    for (; row + 16 <= end; row += 16) {
        /* the common group size as a constant: the float steps' tests fold away */
        if (group_size == 64) q8_rows16_lanes_vnni(out, out_stride, in, w, n, 64, width, row, T, pairs);
        else q8_rows16_lanes_vnni(out, out_stride, in, w, n, group_size, width, row, T, pairs);
    }
    return row;
}

/* The batched int8 matmul for up to 8 tokens: the packed blocks of 16 rows,
   the rest a row at a time, in order (a forerunner that read 16 rows side by
   side, 64 bytes of each in turn, reached half the speed on Zen 4 or less). */
static VNNI void matmul_q8_pairs_vnni(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n,
                                      int group_size, int T, int begin, int end) {
    int width = (T + 15) / 16 * 16;
    for (int row = q8_blocks16_vnni(out, out_stride, in, w, n, group_size, T, begin, end, 1); row < end; row++) {
        /* the common group size as a constant: the compiler unrolls the group's loop */
        if (group_size == 64) q8_pairs_row_vnni(out, out_stride, in, w, n, 64, width, row, T);
        else q8_pairs_row_vnni(out, out_stride, in, w, n, group_size, width, row, T);
    }
}

/* The packed blocks of 16 rows; the rest, up to 8 tokens a row at a time,
   more with one token per lane. */
static VNNI void matmul_q8_tokens_vnni(float *out, size_t out_stride, float *out_t, const void *scratch,
                                       const Matrix *w, int n, int group_size, int T, int begin, int end) {
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 4);
    if (q8_pairs_layout(T, group_size)) {
        matmul_q8_pairs_vnni(out, out_stride, in, w, n, group_size, T, begin, end);
        return;
    }
    int row = q8_blocks16_vnni(out, out_stride, in, w, n, group_size, T, begin, end, 0);
    if (row < end) matmul_q8_tokens_rows(out, out_stride, out_t, in, w, n, group_size, T, row, end, group_dots_vnni);
}

static AVX512 void matmul_q8_tokens_madd(float *out, size_t out_stride, float *out_t, const void *scratch,
                                         const Matrix *w, int n, int group_size, int T, int begin, int end) {
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 2);
    in.bias = NULL;
    matmul_q8_tokens_rows(out, out_stride, out_t, in, w, n, group_size, T, begin, end, group_dots_madd);
}

/* prepare_q8_vnni() for q8_pairs_layout(), all T (<= 8) tokens at once: each
   64 bytes of the 8 rows (zeros from token T on) transposed as 8x8 words of 8
   bytes, so that the tokens' same 8 bytes lie side by side; each group's
   bias, 128 times its values' sum, from vpsadbw's sums of the bytes + 128. */
static AVX512 void prepare_q8_pairs_vnni(int8_t *x, int32_t *bias, int width, const int8_t *xq, int n,
                                         int group_size, int T) {
    const __m512i zero = _mm512_setzero_si512(), flip = _mm512_set1_epi8((char)0x80);
    const __m256i offset = _mm256_set1_epi32(128 * group_size);
    __m512i sums = zero; /* of the current group, one token per 64-bit lane */
    for (int j0 = 0; j0 < n; j0 += 64) {
        int pieces = n - j0 < 64 ? (n - j0) / 8 : 8;
        __mmask64 bytes = pieces == 8 ? ~0ull : (1ull << (8 * pieces)) - 1;
        __m512i r[8], lo[4], hi[4];
        for (int t = 0; t < 8; t++) r[t] = t < T ? _mm512_maskz_loadu_epi8(bytes, xq + (size_t)t * n + j0) : zero;
        for (int k = 0; k < 4; k++) { /* 128-bit lane L: tokens 2k, 2k + 1 of piece 2L (lo) and 2L + 1 (hi) */
            lo[k] = _mm512_unpacklo_epi64(r[2 * k], r[2 * k + 1]);
            hi[k] = _mm512_unpackhi_epi64(r[2 * k], r[2 * k + 1]);
        }
        for (int half = 0; half < 2; half++) { /* pieces 4 * half .. 4 * half + 3 */
            for (int odd = 0; odd < 2; odd++) {
                const __m512i *v = odd ? hi : lo;
                __m512i a = half ? _mm512_shuffle_i64x2(v[0], v[1], 0xEE) : _mm512_shuffle_i64x2(v[0], v[1], 0x44);
                __m512i b = half ? _mm512_shuffle_i64x2(v[2], v[3], 0xEE) : _mm512_shuffle_i64x2(v[2], v[3], 0x44);
                r[4 * half + odd] = _mm512_shuffle_i64x2(a, b, 0x88);
                r[4 * half + 2 + odd] = _mm512_shuffle_i64x2(a, b, 0xDD);
            }
        }
        for (int c = 0; c < pieces; c++) { /* r[c]: piece c of tokens 0..7 */
            int j = j0 + 8 * c;
            _mm512_storeu_si512(x + (size_t)j * 8, r[c]);
            sums = _mm512_add_epi64(sums, _mm512_sad_epu8(_mm512_xor_si512(r[c], flip), zero));
            if ((j + 8) % group_size == 0) {
                __m256i sum = _mm256_sub_epi32(_mm512_cvtepi64_epi32(sums), offset);
                _mm256_storeu_si256((__m256i *)(bias + (size_t)(j / group_size) * width), _mm256_slli_epi32(sum, 7));
                sums = zero;
            }
        }
    }
}

/* VNNI layout: 4 int8 values of a token per slot (by 32-bit transposes), or
   for q8_pairs_layout() 8 values of each of 8 tokens side by side; the
   scales, and 128 * each group's sum. */
static AVX512 void prepare_q8_vnni(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                                   int begin, int end) {
    int width = (T + 15) / 16 * 16, groups = n / group_size, rows = (end < T ? end : T) - begin;
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 4);
    int32_t *bias = (int32_t *)in.bias;
    float *scale = (float *)in.scale;
    if (q8_pairs_layout(T, group_size)) { /* all the tokens, by the unit that starts at token 0 */
        if (begin > 0) return;
        prepare_q8_pairs_vnni((int8_t *)in.x, bias, width, xq, n, group_size, T);
        for (int t = T; t < 8; t++)
            for (int g = 0; g < groups; g++) scale[(size_t)g * width + t] = 0;
        transpose_tiles(scale, width, xs, groups, T, groups);
        return;
    }
    transpose_tiles((float *)in.x + begin, width, (const float *)(xq + (size_t)begin * n), n / 4, rows, n / 4);
    /* zeros up to a multiple of 8 tokens, which q8_rows16_passes_vnni() takes as tokens */
    for (int t = T > begin ? T : begin; t < (T + 7) / 8 * 8 && t < end; t++) {
        for (int j = 0; j < n / 4; j++) ((int32_t *)in.x)[(size_t)j * width + t] = 0;
        for (int g = 0; g < groups; g++) bias[(size_t)g * width + t] = 0, scale[(size_t)g * width + t] = 0;
    }
    transpose_tiles(scale + begin, width, xs + (size_t)begin * groups, groups, rows, groups);
    for (int t = begin; t < begin + rows; t++)
        for (int g = 0; g < groups; g++) {
            int32_t sum = 0;
            for (int k = 0; k < group_size; k++) sum += xq[(size_t)t * n + g * group_size + k];
            bias[(size_t)g * width + t] = 128 * sum;
        }
}

/* vpmaddwd layout: 2 int8 values of a token widened to int16 per slot, and the scales. */
static AVX512 void prepare_q8_madd(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                                   int begin, int end) {
    int width = (T + 15) / 16 * 16, groups = n / group_size, rows = (end < T ? end : T) - begin;
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 2);
    int32_t *x = (int32_t *)in.x;
    for (int j = 0; j < n; j += 2)
        for (int t = begin; t < begin + rows; t++) x[(size_t)j / 2 * width + t] = int16_pair(xq + (size_t)t * n + j);
    transpose_tiles((float *)in.scale + begin, width, xs + (size_t)begin * groups, groups, rows, groups);
    if (begin + rows == T) /* the lanes past the last token: scales of 0, not what the buffer held */
        for (int g = 0; g < groups; g++) memset((float *)in.scale + (size_t)g * width + T, 0, (width - T) * sizeof(float));
}

static AVX512 void prepare_tokens_avx512(float *x_t, const float *x, int n, int T) {
    transpose_tiles(x_t, (T + 15) / 16 * 16, x, n, T, n);
}

static int cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_vnni(void) { return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni"); }

#endif

/* ------------------------------------------------------------------------- */
/* Each target's kernel set                                                   */

/* The kernel set of one target, built from the bodies above with its pieces
   (transpose8, an 8-lane expf, pair): V vectors of 8 tokens per batched
   block (and 8 * V rows per matvec step), R rows per batched fp32 block and
   R8 per int8 one; q8_fn, quantize_fn and attention_fn are its matvec_q8,
   quantize and attention_block; prepare_q8_fn and q8_tokens_fn its batched
   int8 matmul (the pairs kernel made here, prepare_q8_pairs_##set and
   matmul_q8_tokens_##set, or one that packs), packs its PackForm. */
#define KERNEL_SET_8LANE(set, TARGET, cpu, V, R, R8, transpose, exp8, pair, q8_fn, quantize_fn, attention_fn, q4k_fn, \
                         q4k_tokens_fn, q6k_fn, q6k_tokens_fn, prepare_q8_fn, q8_tokens_fn, packs) \
    static TARGET void matvec_##set(float *out, const float *x, const float *w, int n, int begin, int end) { \
        matvec_body(out, x, w, n, begin, end, V, transpose); \
    } \
    static TARGET void matmul_tokens_##set(float *out, size_t out_stride, float *out_t, const float *x_t, \
                                           const float *w, int n, int T, int begin, int end) { \
        matmul_tokens_body(out, out_stride, out_t, x_t, w, n, T, begin, end, R, V, transpose); \
    } \
    static TARGET void prepare_q8_pairs_##set(void *scratch, const int8_t *xq, const float *xs, int n, \
                                              int group_size, int T, int begin, int end) { \
        prepare_q8_pairs_body(scratch, xq, xs, n, group_size, T, begin, end, transpose); \
    } \
    static TARGET void matmul_q8_tokens_##set(float *out, size_t out_stride, float *out_t, const void *scratch, \
                                              const Matrix *w, int n, int group_size, int T, int begin, int end) { \
        matmul_q8_tokens_body(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end, R8, V, pair, \
                              transpose); \
    } \
    static TARGET void softmax_##set(float *x, int n) { softmax_body(x, n, exp8); } \
    static TARGET int argmax_##set(const float *x, int n) { return argmax_body(x, n); } \
    static TARGET void rmsnorm_tokens_##set(float *out, const float *x, const float *weight, int T, int n, float eps) { \
        rmsnorm_tokens_body(out, x, weight, T, n, eps, transpose); \
    } \
    static TARGET void swiglu_##set(float *hb, const float *hb2, int n) { swiglu_body(hb, hb2, n, exp8); } \
    static TARGET void rope_##set(float *v, int n, int head_size, const float *cos_pos, const float *sin_pos) { \
        rope_body(v, n, head_size, cos_pos, sin_pos); \
    } \
    static const KernelSet set##_kernels = { \
        .name = #set, .cpu_has = cpu, .matvec = matvec_##set, .quantize = quantize_fn, \
        .matvec_q8 = q8_fn, .matvec_q4k = q4k_fn, .matvec_q6k = q6k_fn, .softmax = softmax_##set, \
        .argmax = argmax_##set, .swiglu = swiglu_##set, .rope = rope_##set, .rmsnorm_tokens = rmsnorm_tokens_##set, \
        .attention_block = attention_fn, .prepare_tokens = prepare_tokens8, .matmul_tokens = matmul_tokens_##set, \
        .q8_group_multiple = 2, .prepare_q8_tokens = prepare_q8_fn, .matmul_q8_tokens = q8_tokens_fn, \
        .matmul_q4k_tokens = q4k_tokens_fn, .matmul_q6k_tokens = q6k_tokens_fn, .packs_q8 = packs, \
    };

/* The 8-lane quantize() and attention of one target: queries 4 at a time,
   any head size whose int8 rows fit a tile. */
#define QUANTIZE_ATTENTION_8LANE(set, TARGET, transpose, exp8, pair) \
    static TARGET void quantize_##set(int8_t *q, float *scale, const float *x, int n, int group_size) { \
        quantize_body(q, scale, x, n, group_size); \
    } \
    static TARGET void scores_##set(float *att, size_t att_stride, const float *const *query, int count, \
                                    const float *keys, int n_keys, int head_size, size_t stride) { \
        scores_group_body(att, att_stride, query, count, keys, n_keys, head_size, stride, transpose); \
    } \
    static TARGET void softmax_rows_##set(float *att, size_t att_stride, const int *last, int count) { \
        softmax_rows_body(att, att_stride, last, count, exp8); \
    } \
    static TARGET void weighted_values_##set(float *const *out, const float *att, size_t att_stride, \
                                             const int *last, int count, const float *rows, size_t stride, \
                                             int head_size, int t0, int t_end) { \
        weighted_values_tile(out, att, att_stride, last, count, rows, stride, head_size, t0, t_end); \
    } \
    static TARGET void scores_q8_##set(float *att, size_t att_stride, const int32_t *const *query, \
                                       const float *query_scale, int count, const int8_t *keys, \
                                       const float *scales, int n_keys, int head_size) { \
        scores_q8_group_body(att, att_stride, query, query_scale, count, keys, scales, n_keys, head_size, \
                             transpose, pair); \
    } \
    static TARGET void attention_block_##set(float *out, const float *q, int n_tokens, int dim, int pos, \
                                             const KVCache *keys, const KVCache *values, int layer, int kv_head, \
                                             float *att, size_t att_stride, int16_t *query16, int n_heads, \
                                             KVPrefetch *ahead) { \
        attention_block_body(out, q, n_tokens, dim, pos, keys, values, layer, kv_head, att, att_stride, query16, \
                             n_heads, ahead, 4, 1, KV_TILE_FLOATS, scores_##set, softmax_rows_##set, \
                             weighted_values_##set, scores_q8_##set, NULL); \
    }

#if defined(__x86_64__)
static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static void matvec_q8_sse(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                          int begin, int end) {
    matvec_q8_body(out, xq, xs, w, n, group_size, begin, end, dot8_sse);
}

/* Baseline x86-64 (SSE2): 16 xmm registers, each f32x8 takes two, so 4 rows x
   1 vector of tokens; expf() per lane; Part I's quantize and attention (the
   8-lane ones spill: stories110M int8 prefill 94 against 130 tok/s). */
KERNEL_SET_8LANE(sse, , cpu_has_always, 1, 4, 4, transpose8, expf8_libm, pair_sse, matvec_q8_sse, quantize,
                 attention_block_plain, matvec_q4k_sse, NULL, matvec_q6k_sse, NULL, prepare_q8_pairs_sse,
                 matmul_q8_tokens_sse, PACK_NONE)

/* Groups of a row that matvec_q8_rows() takes at once, keeping each group's
   partial sums for 8 rows on the stack (32 KB): rows of 8192 values in
   groups of 64 (the 1.1B shape's widest, 5632, in one go). */
#define Q8_ROW_GROUPS 128

/* matvec_q8() for group sizes that are a multiple of 32, 8 rows at a time,
   each read in order, Q8_ROW_GROUPS groups of it at a time: reading 8 rows
   side by side, 64 bytes of each in turn (matvec_q8_groups()), went at half
   the speed on Zen 4 (stories110M: 1.6x the tokens per second this way).
   Each row's groups leave a vector of partial sums each; then the 8 rows take
   the 8 lanes of each group's totals, and the float sum over groups runs in
   the plain order. with_bias: `step` adds 128 * sum(x) per group, taken off
   here. */
static inline __attribute__((always_inline)) AVX2 void
matvec_q8_rows(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size, int begin,
               int end, Q8StepFn step, int with_bias) {
    int groups = n / group_size, rows_end = begin + (end - begin) / 8 * 8;
    for (int g0 = 0; g0 < groups; g0 += Q8_ROW_GROUPS) {
        int g1 = groups - g0 < Q8_ROW_GROUPS ? groups : g0 + Q8_ROW_GROUPS;
        int32_t bias[Q8_ROW_GROUPS] = {0};
        for (int g = g0; g < g1 && with_bias; g++)
            for (int k = 0; k < group_size; k++) bias[g - g0] += 128 * xq[g * group_size + k];
        for (int i = begin; i < rows_end; i += 8) {
            __m256i partial[Q8_ROW_GROUPS][8];
            for (int r = 0; r < 8; r++) {
                const int8_t *row = w->q + (size_t)(i + r) * n;
                for (int g = g0; g < g1; g++) {
                    __m256i acc = _mm256_setzero_si256();
                    for (int k = g * group_size; k < (g + 1) * group_size; k += 32) {
                        if (k % 64 == 0) prefetch(row + k, BLOCK_PREFETCH_BYTES);
                        acc = step(acc, _mm256_loadu_si256((const __m256i *)(row + k)),
                                   _mm256_loadu_si256((const __m256i *)(xq + k)));
                    }
                    partial[g - g0][r] = acc;
                }
            }
            f32x8 val = {0};
            if (g0) memcpy(&val, out + i, sizeof val); /* the earlier chunks' sums */
            for (int g = g0; g < g1; g++) {
                i32x8 ival = (i32x8)_mm256_sub_epi32(row_totals_avx2(partial[g - g0]), _mm256_set1_epi32(bias[g - g0]));
                f32x8 ws;
                for (int r = 0; r < 8; r++) ws[r] = w->scale[(size_t)(i + r) * groups + g];
                val += __builtin_convertvector(ival, f32x8) * ws * xs[g];
            }
            memcpy(out + i, &val, sizeof val);
        }
    }
    matvec_q8(out, xq, xs, w, n, group_size, rows_end, end);
}

/* Rows of 512 bytes or more a row at a time; shorter ones side by side (8
   of them within 4 KB read as fast that way, with fewer steps: stories15M's
   288-wide matrices decoded 30% slower on 2 threads row by row). The common
   group size as a constant: the compiler unrolls each group's steps. The
   AVX-512 sets use these 256-bit kernels too: decoding is bound by memory,
   and 8 rows at a time read it faster than 16. */
static AVX2 void matvec_q8_avx2(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                                int begin, int end) {
    if (n < 512 || group_size % 32) matvec_q8_body(out, xq, xs, w, n, group_size, begin, end, dot8_avx2);
    else if (group_size == 64) matvec_q8_rows(out, xq, xs, w, n, 64, begin, end, q8_step_avx2, 0);
    else matvec_q8_rows(out, xq, xs, w, n, group_size, begin, end, q8_step_avx2, 0);
}

static VNNI void matvec_q8_vnni(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                                int begin, int end) {
    if (n < 512 || group_size % 32) matvec_q8_body(out, xq, xs, w, n, group_size, begin, end, dot8_vnni);
    else if (group_size == 64) matvec_q8_rows(out, xq, xs, w, n, 64, begin, end, q8_step_vnni, 1);
    else matvec_q8_rows(out, xq, xs, w, n, group_size, begin, end, q8_step_vnni, 1);
}

/* The packed int8 blocks (pack_weights()) in 256-bit registers, for the avx2
   and avxvnni sets: of vector k of 64 columns, the first 32 bytes hold rows
   0-7's 4 bytes each, the last 32 rows 8-15's, and each token's same 4
   inputs, broadcast, meet them. A set's piece: q8_weights once per 32 bytes
   of weights, q8_dot4 per token. avx2 (w packed as it is): vpmaddubsw on |w|
   and x with w's sign (a pair of products fits its int16: quantize() gives
   -127..127), then vpmaddwd by ones: exact. avxvnni (w + 128): vpdpbusd, so
   the sums hold 128 * sum(x) more, which the layout's bias takes off. */
typedef struct {
    __m256i magnitude, sign;
} Q8Weights;
typedef Q8Weights (*Q8WeightsFn)(__m256i packed);
typedef __m256i (*Q8Dot4Fn)(__m256i acc, Q8Weights w, __m256i x);

static inline __attribute__((always_inline)) AVX2 Q8Weights q8_weights_avx2(__m256i packed) {
    return (Q8Weights){_mm256_abs_epi8(packed), packed};
}

static inline __attribute__((always_inline)) AVX2 __m256i q8_dot4_avx2(__m256i acc, Q8Weights w, __m256i x) {
    __m256i pairs = _mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x, w.sign));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

static inline __attribute__((always_inline)) AVXVNNI Q8Weights q8_weights_avxvnni(__m256i packed) {
    return (Q8Weights){packed, packed};
}

static inline __attribute__((always_inline)) AVXVNNI __m256i q8_dot4_avxvnni(__m256i acc, Q8Weights w, __m256i x) {
    return _mm256_dpbusd_avx_epi32(acc, w.magnitude, x);
}

/* One group's float steps for 8 rows and one token (its slot `at`): the
   exact sum (less the bias where the set's dot adds it), times the rows'
   scales, times the token's, as the plain kernel multiplies them. */
static inline __attribute__((always_inline)) AVX2 __m256 q8_group_term8(__m256i sums, Q8Tokens in, size_t at,
                                                                      const float *row_scales, int biased) {
    if (biased) sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(in.bias[at]));
    __m256 ival = _mm256_cvtepi32_ps(sums);
    return _mm256_mul_ps(_mm256_mul_ps(ival, _mm256_loadu_ps(row_scales)), _mm256_set1_ps(in.scale[at]));
}

/* Packed rows for the L tokens first .. first + L - 1 (L a constant: 1, 2
   or 8, all of them tokens of the batch), the block's 16 rows in one pass
   (halves 2: each line read once, for 1 or 2 tokens) or rows 8 * half ..
   8 * half + 7 (halves 1: for 8 tokens, whose sums then fit the 16
   registers with the weights'). The sums stay in registers, the outputs in
   memory until the end. The first pass over the block asks for the lines
   4 KB ahead, into L1 as the hardware prefetcher would (asking for the next
   block's, 32 KB or more ahead, into L2, decoded the 1.1B shape 15% slower
   on Zen 5 with these kernels). */
static inline __attribute__((always_inline)) AVX2 void
q8_rows16_256(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int row,
              int first, int L, int halves, int half, Q8WeightsFn weights, Q8Dot4Fn dot4, int biased) {
    const uint8_t *block = w->packed + (size_t)row / 16 * q8_packed_block_bytes(n, group_size);
    const __m256i *pieces = (const __m256i *)block;
    const float *scales = (const float *)(block + (size_t)16 * n); /* group g's: 16 floats at 16 * g */
    uintptr_t ahead = (uintptr_t)block + BLOCK_PREFETCH_BYTES; /* an address only: maybe past the copy */
    __m256i acc[8][2];
    float val[8][16];
    for (int t = 0; t < L; t++)
        for (int h = 0; h < halves; h++) acc[t][h] = _mm256_setzero_si256();
    for (int c = 0; c < n / 64; c++) {
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            if (first == 0 && half == 0) /* the lines BLOCK_PREFETCH_BYTES ahead, in this block or the next */
                __builtin_prefetch((const void *)(ahead + (size_t)1024 * c + 64 * k), 0, 3);
            Q8Weights wk[2];
            for (int h = 0; h < halves; h++) wk[h] = weights(_mm256_load_si256(pieces + 2 * (16 * c + k) + half + h));
            const int32_t *x = in.x + (size_t)(16 * c + k) * width + first;
#pragma GCC unroll 8
            for (int t = 0; t < L; t++) {
                __m256i xt = _mm256_set1_epi32(x[t]);
                for (int h = 0; h < halves; h++) acc[t][h] = dot4(acc[t][h], wk[h], xt);
            }
            int done = 64 * c + 4 * k + 4;
            if (done % group_size) continue;
            int g = done / group_size - 1;
            for (int t = 0; t < L; t++)
                for (int h = 0; h < halves; h++) {
                    float *v = val[t] + 8 * h;
                    __m256 term = q8_group_term8(acc[t][h], in, (size_t)g * width + first + t,
                                                 scales + 16 * g + 8 * (half + h), biased);
                    /* the first group's term added to +0, as the plain kernel does (-0 + 0 is +0) */
                    _mm256_storeu_ps(v, _mm256_add_ps(g ? _mm256_loadu_ps(v) : _mm256_setzero_ps(), term));
                    acc[t][h] = _mm256_setzero_si256();
                }
        }
    }
    for (int t = 0; t < L; t++)
        memcpy(out + (size_t)(first + t) * out_stride + row + 8 * half, val[t], 8 * halves * sizeof(float));
}

/* A row that is in no packed block, for all T tokens, 8 per vector (the
   layout's slots side by side): its 4 bytes at a time in the set's packed
   form (w + 128 where the dot adds the bias), broadcast. */
static inline __attribute__((always_inline)) AVX2 void
q8_slots_row_256(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                 int row, int T, Q8WeightsFn weights, Q8Dot4Fn dot4, int biased) {
    const int8_t *q = w->q + (size_t)row * n;
    int groups = n / group_size;
    for (int t0 = 0; t0 < T; t0 += 8) {
        __m256 val = _mm256_setzero_ps();
        __m256i acc = _mm256_setzero_si256();
        for (int j = 0; j < n; j += 4) {
            uint32_t word;
            memcpy(&word, q + j, sizeof word);
            Q8Weights wj = weights(_mm256_set1_epi32((int32_t)(biased ? word ^ 0x80808080u : word)));
            acc = dot4(acc, wj, _mm256_loadu_si256((const __m256i *)(in.x + (size_t)j / 4 * width + t0)));
            if ((j + 4) % group_size) continue;
            int g = (j + 4) / group_size - 1;
            size_t at = (size_t)g * width + t0;
            if (biased) acc = _mm256_sub_epi32(acc, _mm256_loadu_si256((const __m256i *)(in.bias + at)));
            __m256 ival = _mm256_cvtepi32_ps(acc);
            __m256 term = _mm256_mul_ps(_mm256_mul_ps(ival, _mm256_set1_ps(w->scale[(size_t)row * groups + g])),
                                        _mm256_loadu_ps(in.scale + at));
            val = _mm256_add_ps(val, term);
            acc = _mm256_setzero_si256();
        }
        store_lanes(out + (size_t)t0 * out_stride + row, out_stride, T - t0, val);
    }
}

/* q8_rows16_256() with the common group size as a constant: the float
   steps' tests fold away. */
static inline __attribute__((always_inline)) AVX2 void
q8_pass_256(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int row,
            int first, int L, int halves, int half, Q8WeightsFn weights, Q8Dot4Fn dot4, int biased) {
    if (group_size == 64)
        q8_rows16_256(out, out_stride, in, w, n, 64, width, row, first, L, halves, half, weights, dot4, biased);
    else
        q8_rows16_256(out, out_stride, in, w, n, group_size, width, row, first, L, halves, half, weights, dot4, biased);
}

/* The packed blocks of 16 rows in [begin, end) (begin a multiple of 16), in
   passes of 8 tokens, each half of the block in turn, then the last 1 to 7
   tokens 2 at a time with the whole block (a decoding step: one); then the
   rows left, one at a time. */
static inline __attribute__((always_inline)) AVX2 void
matmul_q8_packed_body(float *out, size_t out_stride, const void *scratch, const Matrix *w, int n, int group_size,
                      int T, int begin, int end, Q8WeightsFn weights, Q8Dot4Fn dot4, int biased) {
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 4);
    int width = (T + 15) / 16 * 16, row = begin;
    for (; w->packed && row + 16 <= end; row += 16) {
        int first = 0;
        for (; first + 8 <= T; first += 8)
            for (int half = 0; half < 2; half++)
                q8_pass_256(out, out_stride, in, w, n, group_size, width, row, first, 8, 1, half, weights, dot4, biased);
        for (; first < T; first += 2) {
            if (T - first == 1)
                q8_pass_256(out, out_stride, in, w, n, group_size, width, row, first, 1, 2, 0, weights, dot4, biased);
            else
                q8_pass_256(out, out_stride, in, w, n, group_size, width, row, first, 2, 2, 0, weights, dot4, biased);
        }
    }
    for (; row < end; row++) q8_slots_row_256(out, out_stride, in, w, n, group_size, width, row, T, weights, dot4, biased);
}

/* KERNEL_SET_8LANE(avx2) makes these, the int8 kernels of the pairs layout */
static AVX2 void prepare_q8_pairs_avx2(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                                       int begin, int end);
static AVX2 void matmul_q8_tokens_avx2(float *out, size_t out_stride, float *out_t, const void *scratch,
                                       const Matrix *w, int n, int group_size, int T, int begin, int end);

/* The avx2 and avxvnni sets' int8 matmuls: the slots layout and the packed
   blocks where pack_weights() packs (q8_packable()), the pairs layout and its
   kernel elsewhere. */
static AVX2 void prepare_q8_packed_avx2(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                                        int begin, int end) {
    if (q8_packable(n, group_size)) prepare_q8_slots_body(scratch, xq, xs, n, group_size, T, begin, end, 0);
    else prepare_q8_pairs_avx2(scratch, xq, xs, n, group_size, T, begin, end);
}

static AVX2 void matmul_q8_packed_avx2(float *out, size_t out_stride, float *out_t, const void *scratch,
                                       const Matrix *w, int n, int group_size, int T, int begin, int end) {
    if (q8_packable(n, group_size))
        matmul_q8_packed_body(out, out_stride, scratch, w, n, group_size, T, begin, end, q8_weights_avx2, q8_dot4_avx2, 0);
    else matmul_q8_tokens_avx2(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end);
}

static AVXVNNI void prepare_q8_packed_avxvnni(void *scratch, const int8_t *xq, const float *xs, int n, int group_size,
                                              int T, int begin, int end) {
    if (q8_packable(n, group_size)) prepare_q8_slots_body(scratch, xq, xs, n, group_size, T, begin, end, 1);
    else prepare_q8_pairs_avx2(scratch, xq, xs, n, group_size, T, begin, end);
}

static AVXVNNI void matmul_q8_packed_avxvnni(float *out, size_t out_stride, float *out_t, const void *scratch,
                                             const Matrix *w, int n, int group_size, int T, int begin, int end) {
    if (q8_packable(n, group_size))
        matmul_q8_packed_body(out, out_stride, scratch, w, n, group_size, T, begin, end, q8_weights_avxvnni,
                              q8_dot4_avxvnni, 1);
    else matmul_q8_tokens_avx2(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end);
}

/* AVX2 (+FMA for expf8_avx2 only): 16 ymm registers, so 6 rows x 2 vectors of
   tokens of sums; int8 matrices packed. */
QUANTIZE_ATTENTION_8LANE(avx2, AVX2, transpose8_avx2, expf8_avx2, pair_avx2)
KERNEL_SET_8LANE(avx2, AVX2, cpu_has_avx2, 2, 6, 6, transpose8_avx2, expf8_avx2, pair_avx2, matvec_q8_avx2,
                 quantize_avx2, attention_block_avx2, matvec_q4k_avx2, matmul_q4k_tokens_avx2, matvec_q6k_avx2,
                 matmul_q6k_tokens_avx2, prepare_q8_packed_avx2, matmul_q8_packed_avx2, PACK_SIGNED)

/* AVX-VNNI: CPUID leaf 7, subleaf 1, EAX bit 4 (__builtin_cpu_supports has
   no name for it in clang 14). */
static int cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    return cpu_has_avx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}

/* AVX2 with AVX-VNNI (vpdpbusd on 256-bit registers, no AVX-512): the avx2
   set but for its int8 matmuls. */
static const KernelSet avxvnni_kernels = {
    .name = "avxvnni", .cpu_has = cpu_has_avxvnni, .matvec = matvec_avx2, .quantize = quantize_avx2,
    .matvec_q8 = matvec_q8_avx2, .matvec_q4k = matvec_q4k_avx2, .matvec_q6k = matvec_q6k_avx2,
    .softmax = softmax_avx2, .argmax = argmax_avx2, .swiglu = swiglu_avx2, .rope = rope_avx2,
    .rmsnorm_tokens = rmsnorm_tokens_avx2, .attention_block = attention_block_avx2, .prepare_tokens = prepare_tokens8,
    .matmul_tokens = matmul_tokens_avx2, .q8_group_multiple = 2, .prepare_q8_tokens = prepare_q8_packed_avxvnni,
    .matmul_q8_tokens = matmul_q8_packed_avxvnni, .matmul_q4k_tokens = matmul_q4k_tokens_avx2,
    .matmul_q6k_tokens = matmul_q6k_tokens_avx2, .packs_q8 = PACK_PLUS_128,
};

/* 8 tokens or fewer go to the avx2 set's pairs kernel, whose 8 lanes do not pad
   them to 16 (the matmuls of 8 tokens at stories110M's shape 15.4 -> 12.0 ms). */
static AVX512 void prepare_q8_tokens_avx512(void *scratch, const int8_t *xq, const float *xs, int n, int group_size,
                                            int T, int begin, int end) {
    if (T <= 8) prepare_q8_pairs_avx2(scratch, xq, xs, n, group_size, T, begin, end);
    else prepare_q8_madd(scratch, xq, xs, n, group_size, T, begin, end);
}

static AVX512 void matmul_q8_tokens_avx512(float *out, size_t out_stride, float *out_t, const void *scratch,
                                           const Matrix *w, int n, int group_size, int T, int begin, int end) {
    if (T <= 8) matmul_q8_tokens_avx2(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end);
    else matmul_q8_tokens_madd(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end);
}

static const KernelSet avx512_kernels = {
    .name = "avx512", .cpu_has = cpu_has_avx512, .matvec = matvec_avx512, .quantize = quantize_avx512,
    .matvec_q8 = matvec_q8_avx2, .matvec_q4k = matvec_q4k_avx2, .matvec_q6k = matvec_q6k_avx2,
    .softmax = softmax_avx512, .argmax = argmax_avx2, .swiglu = swiglu_avx512, .rope = rope_avx2,
    .rmsnorm_tokens = rmsnorm_tokens_avx2, .attention_block = attention_block_avx512,
    .prepare_tokens = prepare_tokens_avx512, .matmul_tokens = matmul_tokens_avx512, .q8_group_multiple = 2,
    .prepare_q8_tokens = prepare_q8_tokens_avx512, .matmul_q8_tokens = matmul_q8_tokens_avx512,
    .matmul_q4k_tokens = matmul_q4k_tokens_avx2, .matmul_q6k_tokens = matmul_q6k_tokens_avx2,
};

static const KernelSet vnni_kernels = {
    .name = "vnni", .cpu_has = cpu_has_vnni, .matvec = matvec_avx512, .quantize = quantize_avx512,
    .matvec_q8 = matvec_q8_vnni, .matvec_q4k = matvec_q4k_vnni, .matvec_q6k = matvec_q6k_vnni,
    .softmax = softmax_avx512, .argmax = argmax_avx2, .swiglu = swiglu_avx512, .rope = rope_avx2,
    .rmsnorm_tokens = rmsnorm_tokens_avx2, .attention_block = attention_block_avx512,
    .prepare_tokens = prepare_tokens_avx512, .matmul_tokens = matmul_tokens_avx512, .q8_group_multiple = 4,
    .prepare_q8_tokens = prepare_q8_vnni, .matmul_q8_tokens = matmul_q8_tokens_vnni,
    .matmul_q4k_tokens = matmul_q4k_tokens_vnni, .matmul_q6k_tokens = matmul_q6k_tokens_vnni,
    .packs_q8 = PACK_PLUS_128,
};
#endif

#if defined(__aarch64__)
static void matvec_q8_neon(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int group_size,
                           int begin, int end) {
    matvec_q8_body(out, xq, xs, w, n, group_size, begin, end, dot8_neon);
}

/* NEON: 32 q registers, so 6 rows x 2 vectors of tokens (int8: 4 x 2); expf
   with NEON's fused multiply-add. */
QUANTIZE_ATTENTION_8LANE(neon, , transpose8, expf8_neon, pair_neon)
KERNEL_SET_8LANE(neon, , cpu_has_always, 2, 6, 4, transpose8, expf8_neon, pair_neon, matvec_q8_neon, quantize_neon,
                 attention_block_neon, matvec_q4k_neon, matmul_q4k_tokens_neon, matvec_q6k_neon,
                 matmul_q6k_tokens_neon, prepare_q8_pairs_neon, matmul_q8_tokens_neon, PACK_NONE)

/* ARMv8.2's dot product (sdot: 4 products of signed bytes added to each
   int32 lane) and ARMv8.6's int8 matrix multiply (smmla: a 2x8 by 8x2 block
   of signed bytes into a 2x2 one of int32), on the packed blocks the vnni
   and avx2 sets read (pack_weights(), w as it is): the same layout and the
   same order of sums as those sets' kernels, in NEON's 128-bit registers. */

#if defined(HAVE_DOTPROD)
/* One group's float steps for 4 rows and one token (its slot `at`) into
   out, as q8_rows16_256() takes them: the exact sum times the rows' scales,
   times the token's, added to the earlier groups' (the first to +0). */
static inline __attribute__((always_inline)) DOTPROD void q8_group_term4_neon(float *out, int32x4_t sums, Q8Tokens in,
                                                                             size_t at, const float *row_scales,
                                                                             int g) {
    float32x4_t term = vmulq_f32(vmulq_f32(vcvtq_f32_s32(sums), vld1q_f32(row_scales)), vdupq_n_f32(in.scale[at]));
    vst1q_f32(out, vaddq_f32(g ? vld1q_f32(out) : vdupq_n_f32(0.0f), term));
}

/* A row in no packed block (past the last multiple of 16, or where the tests
   leave a matrix unpacked), for all T tokens from the slots, in Part I's order. */
static void q8_slots_row_plain(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size,
                               int width, int row, int T) {
    const int8_t *q = w->q + (size_t)row * n;
    int groups = n / group_size;
    for (int t = 0; t < T; t++) {
        float val = 0.0f;
        for (int g = 0; g < groups; g++) {
            int32_t ival = 0;
            for (int j = g * group_size; j < (g + 1) * group_size; j += 4) {
                int8_t x[4];
                memcpy(x, in.x + (size_t)j / 4 * width + t, sizeof x);
                for (int c = 0; c < 4; c++) ival += (int32_t)x[c] * q[j + c];
            }
            val += (float)ival * w->scale[(size_t)row * groups + g] * in.scale[(size_t)g * width + t];
        }
        out[(size_t)t * out_stride + row] = val;
    }
}

/* q8_rows16_256() with sdot: for the L tokens from `first` (a constant: 1,
   2 or 8), `quads` vectors of 4 rows from row + 4 * quad0 (4: the whole
   block, each line read once, for 1 or 2 tokens; 2: half of it, for 8
   tokens, whose 16 sums then fit the 32 registers with the weights'). */
static inline __attribute__((always_inline)) DOTPROD void
q8_rows16_dotprod(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                  int row, int first, int L, int quads, int quad0) {
    const uint8_t *block = w->packed + (size_t)row / 16 * q8_packed_block_bytes(n, group_size);
    const float *scales = (const float *)(block + (size_t)16 * n);
    uintptr_t ahead = (uintptr_t)block + BLOCK_PREFETCH_BYTES; /* an address only: maybe past the copy */
    int32x4_t acc[8][4];
    for (int t = 0; t < L; t++)
        for (int q = 0; q < quads; q++) acc[t][q] = vdupq_n_s32(0);
    for (int c = 0; c < n / 64; c++) {
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            if (first == 0 && quad0 == 0) __builtin_prefetch((const void *)(ahead + (size_t)1024 * c + 64 * k), 0, 3);
            int8x16_t wq[4];
            const int8_t *wk = (const int8_t *)block + (size_t)64 * (16 * c + k) + 16 * quad0;
            for (int q = 0; q < quads; q++) wq[q] = vld1q_s8(wk + 16 * q);
            const int32_t *x = in.x + (size_t)(16 * c + k) * width + first;
#pragma GCC unroll 8
            for (int t = 0; t < L; t++) {
                int8x16_t xt = vreinterpretq_s8_s32(vld1q_dup_s32(x + t));
                for (int q = 0; q < quads; q++) acc[t][q] = vdotq_s32(acc[t][q], wq[q], xt);
            }
            int done = 64 * c + 4 * k + 4;
            if (done % group_size) continue;
            int g = done / group_size - 1;
            for (int t = 0; t < L; t++)
                for (int q = 0; q < quads; q++) {
                    q8_group_term4_neon(out + (size_t)(first + t) * out_stride + row + 4 * (quad0 + q), acc[t][q], in,
                                        (size_t)g * width + first + t, scales + 16 * g + 4 * (quad0 + q), g);
                    acc[t][q] = vdupq_n_s32(0);
                }
        }
    }
}

/* q8_rows16_dotprod() with the common group size as a constant. */
static inline __attribute__((always_inline)) DOTPROD void
q8_pass_dotprod(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                int row, int first, int L, int quads, int quad0) {
    if (group_size == 64) q8_rows16_dotprod(out, out_stride, in, w, n, 64, width, row, first, L, quads, quad0);
    else q8_rows16_dotprod(out, out_stride, in, w, n, group_size, width, row, first, L, quads, quad0);
}

/* The dotprod set's q4k and q6k kernels: sdot adds 4 byte products into each
   int32 lane, so a sub-block's products need no int16 step before its scale
   (as matvec_q4k_neon() and block_tokens_neon() take them); the integer dot
   product of a block is the same number, so the floats are Part I's. */
static DOTPROD int32_t q4k_dot_dotprod(const uint8_t *block, const int8_t *x, const int16_t scales[8]) {
    int32x4_t acc[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int pair = 0; pair < 4; pair++) {
        uint8x16_t q0 = vld1q_u8(block + 16 + 32 * pair), q1 = vld1q_u8(block + 32 + 32 * pair);
        int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(q0, vdupq_n_u8(15)));
        int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(q1, vdupq_n_u8(15)));
        int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
        const int8_t *xp = x + 64 * pair;
        int32x4_t lo = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo0, vld1q_s8(xp)), lo1, vld1q_s8(xp + 16));
        int32x4_t hi = vdotq_s32(vdotq_s32(vdupq_n_s32(0), hi0, vld1q_s8(xp + 32)), hi1, vld1q_s8(xp + 48));
        acc[0] = vmlaq_n_s32(acc[0], lo, scales[2 * pair]);
        acc[1] = vmlaq_n_s32(acc[1], hi, scales[2 * pair + 1]);
    }
    return vaddvq_s32(vaddq_s32(acc[0], acc[1]));
}

/* The neon driver with sdot's block step, called per block (a dotprod
   function does not inline into it). */
static void matvec_q4k_dotprod(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                               int end) {
    matvec_q4k_body(out, xq, xs, w, n, begin, end, q4k_dot_dotprod);
}

static DOTPROD void matvec_q6k_dotprod(float *out, const int8_t *xq, const float *xs, const Matrix *w, int n, int begin,
                                       int end) {
    int blocks = n / Q6K_BLOCK;
    for (int i = begin; i < end; i++) {
        const uint8_t *block = w->q6k + (size_t)i * blocks * Q6K_BLOCK_BYTES;
        float val = 0.0f;
        for (int b = 0; b < blocks; b++, block += Q6K_BLOCK_BYTES) {
            const int8_t *x = xq + (size_t)Q6K_BLOCK * b;
            for (int line = 0; line < Q6K_BLOCK_BYTES; line += 64)
                __builtin_prefetch((const void *)((uintptr_t)block + line + BLOCK_PREFETCH_BYTES));
            int32x4_t acc[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
            for (int half = 0; half < 2; half++) {
                const uint8_t *low = block + 64 * half, *high = block + Q6K_HIGH_BITS + 32 * half;
                for (int m = 0; m < 4; m++)
                    for (int part = 0; part < 2; part++) { /* values 128 half + 32 m + 16 part + (0-15) */
                        uint8x16_t low_bits = vld1q_u8(low + 32 * (m % 2) + 16 * part);
                        uint8x16_t high_bits = vld1q_u8(high + 16 * part);
                        low_bits = m < 2 ? vandq_u8(low_bits, vdupq_n_u8(15)) : vshrq_n_u8(low_bits, 4);
                        high_bits = vandq_u8(vshlq_u8(high_bits, vdupq_n_s8((int8_t)(4 - 2 * m))), vdupq_n_u8(0x30));
                        int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low_bits, high_bits)), vdupq_n_s8(32));
                        int8x16_t xv = vld1q_s8(x + 128 * half + 32 * m + 16 * part);
                        int32_t scale = (int8_t)block[Q6K_SCALES + 8 * half + 2 * m + part];
                        acc[part] = vmlaq_n_s32(acc[part], vdotq_s32(vdupq_n_s32(0), q, xv), scale);
                    }
            }
            int32_t dot = vaddvq_s32(vaddq_s32(acc[0], acc[1]));
            val += xs[b] * (half_to_float(block + Q6K_D) * (float)dot);
        }
        out[i] = val;
    }
}

/* block_tokens_neon() with sdot: each int32 lane's sums of a sub-block (q4k:
   its 4 vectors in both halves, 8 sdot; q6k: 4 vectors of one half) times
   its scale as int32. A call per block, token group and row (a dotprod
   function does not inline into the neon driver); building its 2 or 4
   scale vectors, 3 instructions each, is small beside its 8 x 18-20. */
static DOTPROD void block_tokens_dotprod(const BlockUnpackedNeon *u, const uint8_t *in, int q6k, float32x4_t sums[2]) {
    int32x4_t scales[4]; /* lane p: int16 lane 4 (p % 2) of u->scales[s][p / 2], as int32 */
    for (int s = 0; s < (q6k ? 4 : 2); s++) {
        int16x8_t even = vuzp1q_s16(u->scales[s][0], u->scales[s][1]);
        scales[s] = vmovl_s16(vget_low_s16(vuzp1q_s16(even, even)));
    }
    int32x4_t dots[8];
    for (int k = 0; k < 8; k++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            int32x4_t sub[2] = {vdupq_n_s32(0), vdupq_n_s32(0)}; /* q4k: both halves in sub[0] */
            for (int m = 0; m < 4; m++)
                for (int half = 0; half < 2; half++) {
                    int8x16_t x = vld1q_s8((const int8_t *)in + 32 * (8 * (4 * h + m) + k) + 16 * half);
                    sub[q6k ? half : 0] = vdotq_s32(sub[q6k ? half : 0], u->q[4 * h + m][half], x);
                }
            for (int half = 0; half < (q6k ? 2 : 1); half++)
                acc = vmlaq_s32(acc, sub[half], scales[q6k ? 2 * h + half : h]);
        }
        dots[k] = acc;
    }
    block_floats_neon(u, in, q6k, dots, sums);
}

static void matmul_q4k_tokens_dotprod(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                                      int begin, int end) {
    matmul_blocks_tokens_neon(out, out_stride, tokens, w->q4k, 0, n, T, begin, end, block_tokens_dotprod);
}

static void matmul_q6k_tokens_dotprod(float *out, size_t out_stride, const void *tokens, const Matrix *w, int n, int T,
                                      int begin, int end) {
    matmul_blocks_tokens_neon(out, out_stride, tokens, w->q6k, 1, n, T, begin, end, block_tokens_dotprod);
}

/* The tokens left after the passes of 8 (all of them when decoding), 2 at a
   time with the whole block. */
static inline __attribute__((always_inline)) DOTPROD void
q8_tail_dotprod(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                int row, int first, int T) {
    for (; first < T; first += 2) {
        if (T - first == 1) q8_pass_dotprod(out, out_stride, in, w, n, group_size, width, row, first, 1, 4, 0);
        else q8_pass_dotprod(out, out_stride, in, w, n, group_size, width, row, first, 2, 4, 0);
    }
}

static void prepare_q8_packed_dotprod(void *scratch, const int8_t *xq, const float *xs, int n, int group_size, int T,
                                      int begin, int end) {
    if (q8_packable(n, group_size)) prepare_q8_slots_body(scratch, xq, xs, n, group_size, T, begin, end, 0);
    else prepare_q8_pairs_neon(scratch, xq, xs, n, group_size, T, begin, end);
}

/* How a set runs 8 tokens from `first` through rows 8 * half .. 8 * half + 7
   of a packed block. */
typedef void (*Q8Pass8Fn)(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size,
                          int width, int row, int first, int half);

static inline __attribute__((always_inline)) DOTPROD void
q8_pass8_dotprod(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width,
                 int row, int first, int half) {
    q8_pass_dotprod(out, out_stride, in, w, n, group_size, width, row, first, 8, 2, 2 * half);
}

/* matmul_q8_packed_body() for NEON: passes of 8 tokens over each half of a
   block (pass8), the rest with q8_tail_dotprod(), rows past the blocks one at
   a time. */
static inline __attribute__((always_inline)) DOTPROD void
matmul_q8_packed_neon(float *out, size_t out_stride, float *out_t, const void *scratch, const Matrix *w, int n,
                      int group_size, int T, int begin, int end, Q8Pass8Fn pass8) {
    if (!q8_packable(n, group_size)) {
        matmul_q8_tokens_neon(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end);
        return;
    }
    Q8Tokens in = q8_tokens_layout(scratch, n, group_size, T, 4);
    int width = (T + 15) / 16 * 16, row = begin;
    for (; w->packed && row + 16 <= end; row += 16) {
        int first = 0;
        for (; first + 8 <= T; first += 8)
            for (int half = 0; half < 2; half++) pass8(out, out_stride, in, w, n, group_size, width, row, first, half);
        q8_tail_dotprod(out, out_stride, in, w, n, group_size, width, row, first, T);
    }
    for (; row < end; row++) q8_slots_row_plain(out, out_stride, in, w, n, group_size, width, row, T);
}

static DOTPROD void matmul_q8_packed_dotprod(float *out, size_t out_stride, float *out_t, const void *scratch,
                                             const Matrix *w, int n, int group_size, int T, int begin, int end) {
    matmul_q8_packed_neon(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end, q8_pass8_dotprod);
}
#endif

#if defined(HAVE_I8MM)
/* 8 tokens from `first` through rows 8 * half .. 8 * half + 7 of a packed
   block with smmla, 8 bytes of a row at a time: words k and k + 1 of rows
   (2i, 2i + 1), zipped, meet the same words of tokens (2j, 2j + 1), zipped,
   into acc[i][j] = {r0.t0, r0.t1, r1.t0, r1.t1}; a group's sums are then
   unzipped into each token's 4 rows. 16 smmla and 8 zips for 512 products,
   where sdot takes 32. */
static inline __attribute__((always_inline)) I8MM void
q8_rows8_i8mm(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int row,
              int first, int half) {
    const uint8_t *block = w->packed + (size_t)row / 16 * q8_packed_block_bytes(n, group_size);
    const float *scales = (const float *)(block + (size_t)16 * n);
    uintptr_t ahead = (uintptr_t)block + BLOCK_PREFETCH_BYTES;
    int32x4_t acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_s32(0);
    for (int c = 0; c < n / 64; c++) {
#pragma GCC unroll 8
        for (int k = 0; k < 16; k += 2) {
            if (first == 0 && half == 0) {
                __builtin_prefetch((const void *)(ahead + (size_t)1024 * c + 64 * k), 0, 3);
                __builtin_prefetch((const void *)(ahead + (size_t)1024 * c + 64 * k + 64), 0, 3);
            }
            const int8_t *wk = (const int8_t *)block + (size_t)64 * (16 * c + k) + 32 * half;
            const int32_t *xk = in.x + (size_t)(16 * c + k) * width + first;
            int8x16_t rows[4], tokens[4];
            for (int v = 0; v < 2; v++) {
                int32x4_t a = vreinterpretq_s32_s8(vld1q_s8(wk + 16 * v));
                int32x4_t b = vreinterpretq_s32_s8(vld1q_s8(wk + 64 + 16 * v)); /* word k + 1 */
                rows[2 * v] = vreinterpretq_s8_s32(vzip1q_s32(a, b));
                rows[2 * v + 1] = vreinterpretq_s8_s32(vzip2q_s32(a, b));
                int32x4_t x0 = vld1q_s32(xk + 4 * v), x1 = vld1q_s32(xk + width + 4 * v);
                tokens[2 * v] = vreinterpretq_s8_s32(vzip1q_s32(x0, x1));
                tokens[2 * v + 1] = vreinterpretq_s8_s32(vzip2q_s32(x0, x1));
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = vmmlaq_s32(acc[i][j], rows[i], tokens[j]);
            int done = 64 * c + 4 * k + 8;
            if (done % group_size) continue;
            int g = done / group_size - 1;
            for (int j = 0; j < 4; j++)
                for (int p = 0; p < 2; p++) {
                    int t = first + 2 * j + p;
                    for (int v = 0; v < 2; v++) { /* rows 4v .. 4v + 3 of the half */
                        int32x4_t sums = p ? vuzp2q_s32(acc[2 * v][j], acc[2 * v + 1][j])
                                           : vuzp1q_s32(acc[2 * v][j], acc[2 * v + 1][j]);
                        q8_group_term4_neon(out + (size_t)t * out_stride + row + 8 * half + 4 * v, sums, in,
                                            (size_t)g * width + t, scales + 16 * g + 8 * half + 4 * v, g);
                    }
                }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_s32(0);
        }
    }
}

static inline __attribute__((always_inline)) I8MM void
q8_pass8_i8mm(float *out, size_t out_stride, Q8Tokens in, const Matrix *w, int n, int group_size, int width, int row,
              int first, int half) {
    if (group_size == 64) q8_rows8_i8mm(out, out_stride, in, w, n, 64, width, row, first, half);
    else q8_rows8_i8mm(out, out_stride, in, w, n, group_size, width, row, first, half);
}

/* matmul_q8_packed_dotprod() with smmla's passes of 8 tokens. */
static I8MM void matmul_q8_packed_i8mm(float *out, size_t out_stride, float *out_t, const void *scratch,
                                       const Matrix *w, int n, int group_size, int T, int begin, int end) {
    matmul_q8_packed_neon(out, out_stride, out_t, scratch, w, n, group_size, T, begin, end, q8_pass8_i8mm);
}
#endif

#if defined(HAVE_DOTPROD)
/* Linux reports the features in the auxiliary vector (HWCAP_ASIMDDP,
   HWCAP2_I8MM), macOS by sysctl; a build that targets one has it. */
static int cpu_has_dotprod(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return 1;
#elif defined(__linux__)
    return getauxval(AT_HWCAP) >> 20 & 1; /* HWCAP_ASIMDDP */
#elif defined(__APPLE__)
    int has = 0;
    size_t size = sizeof has;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &has, &size, NULL, 0) == 0 && has;
#else
    return 0;
#endif
}

/* The dotprod and i8mm sets: the neon set but for the matmuls of int8 (on
   packed blocks, with q8_tokens_fn), q4k and q6k weights. */
#define NEON_DOT_KERNELS(set, cpu, q8_tokens_fn) \
    static const KernelSet set##_kernels = { \
        .name = #set, .cpu_has = cpu, .matvec = matvec_neon, .quantize = quantize_neon, \
        .matvec_q8 = matvec_q8_neon, .matvec_q4k = matvec_q4k_dotprod, .matvec_q6k = matvec_q6k_dotprod, \
        .softmax = softmax_neon, .argmax = argmax_neon, .swiglu = swiglu_neon, .rope = rope_neon, \
        .rmsnorm_tokens = rmsnorm_tokens_neon, .attention_block = attention_block_neon, \
        .prepare_tokens = prepare_tokens8, .matmul_tokens = matmul_tokens_neon, .q8_group_multiple = 2, \
        .prepare_q8_tokens = prepare_q8_packed_dotprod, .matmul_q8_tokens = q8_tokens_fn, \
        .matmul_q4k_tokens = matmul_q4k_tokens_dotprod, .matmul_q6k_tokens = matmul_q6k_tokens_dotprod, \
        .packs_q8 = PACK_SIGNED, \
    };

NEON_DOT_KERNELS(dotprod, cpu_has_dotprod, matmul_q8_packed_dotprod)
#endif

#if defined(HAVE_I8MM)
static int cpu_has_i8mm(void) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
    return cpu_has_dotprod();
#elif defined(__linux__)
    return cpu_has_dotprod() && (getauxval(AT_HWCAP2) >> 13 & 1); /* HWCAP2_I8MM */
#elif defined(__APPLE__)
    int has = 0;
    size_t size = sizeof has;
    return cpu_has_dotprod() && sysctlbyname("hw.optional.arm.FEAT_I8MM", &has, &size, NULL, 0) == 0 && has;
#else
    return 0;
#endif
}

/* The dotprod set with smmla for 8 tokens at a time. */
NEON_DOT_KERNELS(i8mm, cpu_has_i8mm, matmul_q8_packed_i8mm)
#endif
#endif

/* Every set this build has, slowest first. */
static const KernelSet *const kernel_sets[] = {
    &plain_kernels,
#if defined(__x86_64__)
    &sse_kernels, &avx2_kernels, &avxvnni_kernels, &avx512_kernels, &vnni_kernels,
#endif
#if defined(__aarch64__)
    &neon_kernels,
#if defined(HAVE_DOTPROD)
    &dotprod_kernels,
#endif
#if defined(HAVE_I8MM)
    &i8mm_kernels,
#endif
#endif
};
#define N_KERNEL_SETS ((int)(sizeof kernel_sets / sizeof kernel_sets[0]))

/* The set the model runs with. */
static const KernelSet *kernels = &plain_kernels;

/* The fastest set the CPU has, or the one named by `cap` (RUN_KERNELS). */
static const KernelSet *choose_kernels(const char *cap) {
    const KernelSet *best = &plain_kernels;
    char have[256] = "";
    for (int i = 0; i < N_KERNEL_SETS; i++) {
        if (!kernel_sets[i]->cpu_has()) continue;
        best = kernel_sets[i];
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", have[0] ? ", " : "", best->name);
        if (cap && strcmp(cap, best->name) == 0) return best;
    }
    if (cap) fail("RUN_KERNELS=%s: not a kernel set this CPU has (it has: %s)", cap, have);
    return best;
}

/* ------------------------------------------------------------------------- */
/* Batches: matmul and attention for many tokens, split across the threads    */

/* The rows a batched matmul takes at a time into its thread's out_t: 256 rows
   of 64 tokens are 64 KB, which stay in the L2 cache. */
#define OUT_T_ROWS 256

/* forward_batch()'s buffers; the KV cache, RoPE tables and logits are the run state's. */
typedef struct {
    RunState *s;
    float *x;   /* residual stream [MAX_BATCH][dim] */
    float *xb;  /* normalised x, then attention output [MAX_BATCH][max(dim, q_dim)] */
    /* A layer's attention (q, k, v, xb2) and its feed-forward (hb, hb2) never
       hold values at the same time: they share the buffer `halves`. */
    float *halves;
    float *q;   /* queries [MAX_BATCH][q_dim] */
    float *k;   /* keys [MAX_BATCH][kv_dim], on their way into the cache */
    float *v;   /* values [MAX_BATCH][kv_dim] */
    float *xb2; /* attention's output projection [MAX_BATCH][dim] */
    float *hb;  /* feed-forward gate [MAX_BATCH][hidden_dim] */
    float *hb2; /* feed-forward up [MAX_BATCH][hidden_dim] */
    float *att; /* attention scores, per thread a row for each of 8 queries [n_threads][8][n_pos] */
    int16_t *query16; /* per thread one head's query in int16 [n_threads][head_size] */
    int8_t *xq;      /* int8, q4k and q6k weights: matmul inputs in int8 [MAX_BATCH][widest] */
    float *xq_scale; /* and their scales [MAX_BATCH][widest / smallest_group] */
    float *x_t;         /* a batched fp32 matmul's input, as the kernel set lays it out [widest][MAX_BATCH] */
    void *q8_tokens;    /* the same for int8 (prepare_q8_tokens), q4k and q6k (prepare_block_tokens()) */
    float *out_t;       /* batched matmuls' outputs before transposing back, per thread [OUT_T_ROWS][MAX_BATCH] */
} Batch;

/* Batch buffers start on a cache line, so that 64-byte loads of the tokens do
   not straddle two (stories110M int8 prefill 6-10% faster), and are touched
   now, so that the first prompt does not pay for the pages' first touch. */
static void *batch_buffer(size_t count, size_t size) {
    void *p = xaligned(count, size, 64);
    memset(p, 0, count * size);
    return p;
}

static void init_batch(Batch *b, const Config *c, RunState *s, int n_threads) {
    size_t widest = widest_input(c);
    size_t head_size = c->head_size, q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    *b = (Batch){.s = s};
    b->x = batch_buffer(MAX_BATCH * (size_t)c->dim, sizeof(float));
    b->xb = batch_buffer(MAX_BATCH * (q_dim > (size_t)c->dim ? q_dim : (size_t)c->dim), sizeof(float));
    size_t attention_half = MAX_BATCH * (q_dim + 2 * kv_dim + c->dim), feed_forward_half = MAX_BATCH * 2 * (size_t)c->hidden_dim;
    b->halves = batch_buffer(attention_half > feed_forward_half ? attention_half : feed_forward_half, sizeof(float));
    b->q = b->halves;
    b->k = b->q + MAX_BATCH * q_dim;
    b->v = b->k + MAX_BATCH * kv_dim;
    b->xb2 = b->v + MAX_BATCH * kv_dim;
    b->hb = b->halves;
    b->hb2 = b->hb + MAX_BATCH * (size_t)c->hidden_dim;
    b->att = batch_buffer((size_t)n_threads * 8 * s->n_pos, sizeof(float));
    b->query16 = batch_buffer((size_t)n_threads * head_size, sizeof(int16_t));
    if (c->smallest_group) { /* int8, q4k or q6k matrices */
        size_t groups = widest / c->smallest_group;
        b->xq = batch_buffer(MAX_BATCH * widest, 1);
        b->xq_scale = batch_buffer(MAX_BATCH * groups, sizeof(float));
        /* int8: values in 4-byte slots for every 2 of them at most, plus two numbers per group and
           token; q4k and q6k: TOKENS_BYTES per 8 tokens and 256 values, under 2 bytes a value */
        _Static_assert(TOKENS_BYTES <= 2 * 8 * 256, "the q4k and q6k inputs' layout fits the int8 one's room");
        /* the kernels' scratch is left untouched: a set writes only part of it
           (VNNI's layout about half; packed int8 rows need no out_t), and pages
           never written do not count in the RSS */
        b->q8_tokens = xaligned(MAX_BATCH * (2 * widest + 8 * groups), 1, 64);
    }
    if (c->fp32_matrices) b->x_t = batch_buffer(MAX_BATCH * widest, sizeof(float));
    b->out_t = xaligned((size_t)n_threads * OUT_T_ROWS * MAX_BATCH, sizeof(float), 64);
}

typedef struct {
    const Matrix *w;
    uint8_t *packed;
    int n, blocks, parts; /* the blocks of 16 rows, in `parts` runs */
    int release;          /* w is the checkpoint's, whose pages can go */
} PackJob;

/* Gives back the checkpoint's pages within [p, p + bytes), with `lead` and
   `trail` also the pages it shares with what lies before and after it. A
   private file mapping reads a page again from the file when it is touched,
   and with it up to 64 KB about it (fault-around), or the whole 2 MB piece the
   kernel holds it in: a shared page goes only once nothing in it will be read. */
static void release_pages(const void *p, size_t bytes, int lead, int trail) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = ((uintptr_t)p + (lead ? 0 : page - 1)) / page * page;
    uintptr_t end = ((uintptr_t)p + bytes + (trail ? page - 1 : 0)) / page * page;
    if (first < end) madvise((void *)first, end - first, MADV_DONTNEED);
}

/* Units are runs of blocks of 16 rows, one per thread (each run's edges are
   pages that stay until the matrix is done). The checkpoint's copy of a run
   goes 256 KB or more at a time (a block of 16 rows at least), once packed, so
   that the weights are in memory about once (peak RSS: the file and that much
   per thread, less than the KV cache and buffers made next). Each release
   interrupts the other threads' CPUs to flush their TLBs: in 32 KB steps that
   took a third of the 1.1B shape's load. */
static void pack_task(void *ctx, int begin, int end, int thread) {
    PackJob *job = ctx;
    size_t n = job->n, groups = n / job->w->group_size;
    int first_block = (int)((long long)begin * job->blocks / job->parts), end_block = (int)((long long)end * job->blocks / job->parts);
    int step = job->release ? (int)((256 << 10) / (16 * n) + 1) : end_block - first_block;
    (void)thread;
    for (int first = first_block; first < end_block; first += step) {
        int last = end_block - first < step ? end_block : first + step;
        pack_q8_blocks(job->packed, job->w, job->n, first, last, kernels->packs_q8);
        if (!job->release) continue;
        /* all of the run so far: the pieces' edges too */
        release_pages(job->w->q + 16 * first_block * n, 16 * (last - first_block) * n, 0, 0);
        release_pages(job->w->scale + 16 * first_block * groups, 16 * (last - first_block) * groups * sizeof(float), 0, 0);
    }
}

/* The bytes of w's packed copy: its whole blocks of 16 rows of n values; 0
   where the kernel does not apply. */
static size_t q8_packed_bytes(const Matrix *w, int rows, int n) {
    if (!w->q || !q8_packable(n, w->group_size)) return 0;
    return (size_t)rows / 16 * q8_packed_block_bytes(n, w->group_size);
}

/* Packs w into packed (q8_packed_bytes() of it). release: w lies in the
   checkpoint's mapping, and the pages of what is packed are given back. */
static void pack_q8_matrix(uint8_t *packed, const Matrix *w, int rows, int n, int release) {
    size_t bytes = q8_packed_bytes(w, rows, n);
    PackJob job = {w, packed, n, rows / 16, pool.n_threads, release};
    parallel_for(pack_task, &job, job.parts, 64.0 * bytes);
    if (release) { /* what the units' edges shared */
        release_pages(w->q, (size_t)rows / 16 * 16 * n, 0, 0);
        release_pages(w->scale, (size_t)rows / 16 * 16 * (n / w->group_size) * sizeof(float), 0, 0);
    }
}

typedef struct {
    Matrix *w;
    int rows, n;
} MatmulMatrix;

/* The matrices the matmuls take, with their shapes, in the file's order (the
   layout's; a shared classifier is the token embedding there); returns the
   count, at most matrix_count(). */
static int list_matrices(Checkpoint *ck, MatmulMatrix *list) {
    const Config *c = &ck->config;
    Weights *w = &ck->weights;
    Matrix *per_layer[CLASSIFIER + 1] = {[WQ] = w->wq, [WK] = w->wk, [WV] = w->wv, [WO] = w->wo,
                                         [W1] = w->w1, [W2] = w->w2, [W3] = w->w3};
    int n, count = 0;
    const Tensor *layout = layout_of(c, &n);
    for (int i = 0; i < n; i++) {
        Tensor t = layout[i];
        TensorShape shape = tensor_shape(c, t);
        Matrix *first = per_layer[t];
        if (t == CLASSIFIER || (t == TOKEN_EMBEDDING && c->shared_classifier)) first = &w->classifier;
        for (uint64_t k = 0; first && k < shape.count; k++)
            list[count++] = (MatmulMatrix){per_layer[t] ? first + k : first, (int)shape.rows, (int)shape.cols};
    }
    return count;
}

/* What a packed matrix no longer needs of the file: its packed rows' values
   (span 0) and their scales (span 1), [begin, end) each. */
static void unneeded_span(const MatmulMatrix *m, int k, uintptr_t *begin, uintptr_t *end) {
    size_t rows = (size_t)m->rows / 16 * 16;
    *begin = k ? (uintptr_t)m->w->scale : (uintptr_t)m->w->q;
    *end = *begin + (k ? rows * (m->n / m->w->group_size) * sizeof(float) : rows * m->n);
}

/* Whether the file's bytes [from, to) all lie in what the matrices of list
   packed so far no longer need (a norm beside a matrix is read every token). */
static int unneeded(const MatmulMatrix *list, int count, uintptr_t from, uintptr_t to) {
    while (from < to) {
        uintptr_t next = from;
        for (int i = 0; i < count && next == from; i++)
            for (int k = 0; k < 2 && list[i].w->packed; k++) {
                uintptr_t begin, end;
                unneeded_span(&list[i], k, &begin, &end);
                if (begin <= from && from < end) next = end;
            }
        if (next == from) return 0;
        from = next;
    }
    return 1;
}

/* The pages of list[i]'s packed rows and scales, with those it shares with
   its neighbours in the file when nothing else in them is still needed. */
static void release_packed(const MatmulMatrix *list, int count, int i) {
    if (!list[i].w->packed) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int k = 0; k < 2; k++) {
        uintptr_t begin, end;
        unneeded_span(&list[i], k, &begin, &end);
        int lead = unneeded(list, count, begin / page * page, begin);
        int trail = unneeded(list, count, end, (end + page - 1) / page * page);
        release_pages((const void *)begin, end - begin, lead, trail);
    }
}

/* Every matmul's int8 matrix, packed where the kernel set reads them so, in
   the file's order: a matrix's pages at its edges go once its neighbours are
   packed too (were they read again, each would map 64 KB about it back). */
static void pack_weights(Checkpoint *ck) {
    if (!kernels->packs_q8) return;
    MatmulMatrix *list = xmalloc(matrix_count(&ck->config) * sizeof *list);
    int count = list_matrices(ck, list);
    size_t total = 0;
    for (int i = 0; i < count; i++) total += q8_packed_bytes(list[i].w, list[i].rows, list[i].n);
    if (total == 0) {
        free(list);
        return;
    }
#ifdef MADV_NOHUGEPAGE
    /* from now on the file is read in small pages: a 2 MB one would map pages
       given back again */
    madvise((void *)ck->data, ck->file_size, MADV_NOHUGEPAGE);
#endif
    /* one buffer, in small pages: as fast to stream here, and they come one at
       a time (a 2 MB one at its first byte), so the copy grows as the file's goes */
    ck->packed = xaligned(total, 1, (size_t)sysconf(_SC_PAGESIZE));
#ifdef MADV_NOHUGEPAGE
    madvise(ck->packed, total, MADV_NOHUGEPAGE); /* where transparent huge pages are always on */
#endif
    for (size_t i = 0, at = 0; i < (size_t)count; i++) {
        size_t bytes = q8_packed_bytes(list[i].w, list[i].rows, list[i].n);
        if (bytes) {
            pack_q8_matrix(ck->packed + at, list[i].w, list[i].rows, list[i].n, 1);
            list[i].w->packed = ck->packed + at;
        }
        at += bytes;
        if (i > 0) release_packed(list, count, i - 1);
    }
    release_packed(list, count, count - 1);
    free(list);
    if (ck->config.shared_classifier) ck->weights.token_embedding.packed = ck->weights.classifier.packed;
}

static void free_packed_weights(Checkpoint *ck) {
    MatmulMatrix *list = xmalloc(matrix_count(&ck->config) * sizeof *list);
    int count = list_matrices(ck, list);
    for (int i = 0; i < count; i++) list[i].w->packed = NULL;
    free(list);
    ck->weights.token_embedding.packed = NULL;
    free(ck->packed), ck->packed = NULL;
}

/* embed() of a table that may be packed (a classifier shared with the
   embedding), reading the rows packed there from the copy. */
static void embed_packed(float *out, const Matrix *table, int token, int dim, int rows) {
    if (!table->packed || token >= rows / 16 * 16) {
        embed(out, table, token, dim);
        return;
    }
    int gs = table->group_size, lane = token % 16, flip = kernels->packs_q8 == PACK_PLUS_128 ? 0x80 : 0;
    const uint8_t *block = table->packed + (size_t)(token / 16) * q8_packed_block_bytes(dim, gs);
    const float *scales = (const float *)(block + (size_t)16 * dim);
    for (int i = 0; i < dim; i++) {
        int8_t q = (int8_t)(block[(size_t)1024 * (i / 64) + 64 * (i % 64 / 4) + 4 * lane + i % 4] ^ flip);
        out[i] = q * scales[16 * (i / gs) + lane];
    }
}

static void free_batch(Batch *b) {
    free(b->x); free(b->xb); free(b->halves); free(b->att);
    free(b->query16); free(b->xq); free(b->xq_scale); free(b->x_t); free(b->q8_tokens); free(b->out_t);
}

/* One weight matrix applied to every token of a batch: out[t][0..d) = W x[t],
   W being [d][n], fp32, int8, q4k or q6k. */
typedef struct {
    const Matrix *w;
    float *out; /* [T][d] */
    int d;
} Projection;

typedef struct {
    Batch *b;
    const float *x; /* [T][n] */
    int n, T, group_size;
    int batched; /* the kernel set's batched matmul runs, on the prepared input */
    const Projection *proj;
    int count;
} MatmulJob;

/* Units are tokens, each row quantized on its own. */
static void quantize_task(void *ctx, int begin, int end, int thread) {
    MatmulJob *job = ctx;
    Batch *b = job->b;
    int n = job->n, gs = job->group_size;
    (void)thread;
    kernels->quantize(b->xq + (size_t)begin * n, b->xq_scale + (size_t)begin * (n / gs), job->x + (size_t)begin * n,
                      (end - begin) * n, gs);
}

/* Units are blocks of 16 quantized tokens, laid out for the batched kernel. */
static void prepare_task(void *ctx, int begin, int end, int thread) {
    MatmulJob *job = ctx;
    Batch *b = job->b;
    int n = job->n, first = 16 * begin, last = 16 * end < job->T ? 16 * end : job->T;
    (void)thread;
    if (job->proj[0].w->q4k || job->proj[0].w->q6k)
        prepare_block_tokens(b->q8_tokens, b->xq, b->xq_scale, n, job->T, first, last);
    else kernels->prepare_q8_tokens(b->q8_tokens, b->xq, b->xq_scale, n, job->group_size, job->T, first, 16 * end);
}

/* Rows [begin, end) of one projection. The batched int8 and fp32 kernels see
   them as a matrix of their own, rows [0, end - begin), so that out_t, the
   thread's scratch, holds OUT_T_ROWS rows whatever the matrix. */
static void project_rows(MatmulJob *job, const Projection *proj, float *out_t, int begin, int end) {
    Batch *b = job->b;
    const Matrix *w = proj->w;
    int n = job->n, T = job->T, gs = job->group_size, d = proj->d;
    if (job->batched && w->q4k) {
        kernels->matmul_q4k_tokens(proj->out, d, b->q8_tokens, w, n, T, begin, end);
    } else if (job->batched && w->q6k) {
        kernels->matmul_q6k_tokens(proj->out, d, b->q8_tokens, w, n, T, begin, end);
    } else if (job->batched) { /* int8 or fp32 */
        for (int row = begin; row < end; row += OUT_T_ROWS) {
            int rows = end - row < OUT_T_ROWS ? end - row : OUT_T_ROWS;
            if (w->q) {
                Matrix part = *w;
                part.q += (size_t)row * n;
                if (part.packed) part.packed += (size_t)row / 16 * q8_packed_block_bytes(n, gs);
                part.scale += (size_t)row * (n / gs);
                kernels->matmul_q8_tokens(proj->out + row, d, out_t, b->q8_tokens, &part, n, gs, T, 0, rows);
            } else {
                kernels->matmul_tokens(proj->out + row, d, out_t, b->x_t, w->f32 + (size_t)row * n, n, T, 0, rows);
            }
        }
    } else {
        for (int t = 0; t < T; t++) {
            float *out = proj->out + (size_t)t * d;
            if (!gs) {
                kernels->matvec(out, job->x + (size_t)t * n, w->f32, n, begin, end);
                continue;
            }
            const int8_t *xq = b->xq + (size_t)t * n;
            const float *xs = b->xq_scale + (size_t)t * (n / gs);
            if (w->q4k) kernels->matvec_q4k(out, xq, xs, w, n, begin, end);
            else if (w->q6k) kernels->matvec_q6k(out, xq, xs, w, n, begin, end);
            else kernels->matvec_q8(out, xq, xs, w, n, gs, begin, end);
        }
    }
}

/* Units are blocks of 16 rows, numbered through the projections in turn. */
static void matmul_task(void *ctx, int begin, int end, int thread) {
    MatmulJob *job = ctx;
    float *out_t = job->b->out_t + (size_t)thread * OUT_T_ROWS * MAX_BATCH;
    int first = 0; /* the first unit of projection p */
    for (int p = 0; p < job->count && first < end; p++) {
        int blocks = (job->proj[p].d + 15) / 16;
        int lo = begin > first ? begin - first : 0, hi = end - first < blocks ? end - first : blocks;
        if (lo < hi) project_rows(job, &job->proj[p], out_t, 16 * lo, 16 * hi < job->proj[p].d ? 16 * hi : job->proj[p].d);
        first += blocks;
    }
}

/* Applies `count` projections that share the input x [T][n]: the input is
   prepared (quantized, or laid out for the batched kernels) once for all that
   take it in the same form. */
static void matmul(Batch *b, const float *x, int n, int T, const Projection *proj, int count) {
    int group_size = input_group_size(proj[0].w), same = 1;
    int blocks_of_256 = proj[0].w->q4k || proj[0].w->q6k; /* q4k and q6k take the same prepared input */
    while (same < count && input_group_size(proj[same].w) == group_size &&
           !(proj[same].w->q4k || proj[same].w->q6k) == !blocks_of_256) same++;
    if (same < count) {
        matmul(b, x, n, T, proj, same);
        matmul(b, x, n, T, proj + same, count - same);
        return;
    }
    MatmulJob job = {b, x, n, T, group_size, 0, proj, count};
    if (group_size) {
        job.batched = (T > 1 || proj[0].w->packed) &&
                      (blocks_of_256 ? kernels->matmul_q4k_tokens && kernels->matmul_q6k_tokens
                                     : kernels->matmul_q8_tokens && group_size % kernels->q8_group_multiple == 0);
        /* a division and some twenty other steps per value: as slow as about 16
           multiply-adds; the layout, a few moves per value */
        parallel_for(quantize_task, &job, T, 16.0 * T * n);
        if (job.batched) parallel_for(prepare_task, &job, (T + 15) / 16, 4.0 * T * n);
    } else {
        job.batched = T > 1 && kernels->matmul_tokens;
        if (job.batched) kernels->prepare_tokens(b->x_t, x, n, T);
    }
    int blocks = 0;
    for (int p = 0; p < count; p++) blocks += (proj[p].d + 15) / 16;
    parallel_for(matmul_task, &job, blocks, 16.0 * blocks * n * T);
}

typedef struct {
    float *out;
    const float *x, *weight;
    int dim, T;
    float eps;
} NormJob;

/* Units are blocks of 8 tokens, which the kernel set takes side by side. */
static void norm_task(void *ctx, int begin, int end, int thread) {
    NormJob *job = ctx;
    int first = 8 * begin, last = 8 * end < job->T ? 8 * end : job->T;
    (void)thread;
    kernels->rmsnorm_tokens(job->out + (size_t)first * job->dim, job->x + (size_t)first * job->dim, job->weight,
                            last - first, job->dim, job->eps);
}

/* rmsnorm() of each of T tokens' rows, on all threads when there are many: a
   block of 8 costs about one chain of dim adds (each as slow as four
   multiply-adds) and 8 rows scaled. */
static void rmsnorm_batch(float *out, const float *x, const float *weight, int T, int dim, float eps) {
    NormJob job = {out, x, weight, dim, T, eps};
    parallel_for(norm_task, &job, (T + 7) / 8, 12.0 * ((T + 7) / 8) * dim);
}

typedef struct {
    float *hb;
    const float *hb2;
    int n;
} SwigluJob;

/* Units are blocks of 256 values. */
static void swiglu_task(void *ctx, int begin, int end, int thread) {
    SwigluJob *job = ctx;
    int from = 256 * begin, to = 256 * end < job->n ? 256 * end : job->n;
    (void)thread;
    kernels->swiglu(job->hb + from, job->hb2 + from, to - from);
}

/* swiglu() over the whole batch, on all threads (an expf costs about 20 multiply-adds). */
static void swiglu_batch(float *hb, const float *hb2, int n) {
    SwigluJob job = {hb, hb2, n};
    parallel_for(swiglu_task, &job, (n + 255) / 256, 20.0 * n);
}

typedef struct {
    Batch *b;
    const Checkpoint *ck;
    const Segment *segments;
    const int *segment_of; /* [T]: each token's segment */
    int layer;
} RopeStoreJob;

/* Units are tokens: each token's q and k turned by RoPE (after the biases and
   q/k norms of the models that have them), its k and v stored at its position
   in its segment's caches. */
static void rope_store_task(void *ctx, int begin, int end, int thread) {
    RopeStoreJob *job = ctx;
    const Config *c = &job->ck->config;
    const Weights *w = &job->ck->weights;
    Batch *b = job->b;
    int l = job->layer, head_size = c->head_size;
    int q_dim = head_size * c->n_heads, kv_dim = head_size * c->n_kv_heads;
    (void)thread;
    for (int t = begin; t < end; t++) {
        const Segment *seg = &job->segments[job->segment_of[t]];
        int pos = seg->pos + t - seg->first;
        float *q = b->q + (size_t)t * q_dim, *k = b->k + (size_t)t * kv_dim, *v = b->v + (size_t)t * kv_dim;
        const float *cos_pos = b->s->rope_cos + (size_t)pos * head_size / 2;
        const float *sin_pos = b->s->rope_sin + (size_t)pos * head_size / 2;
        if (c->qkv_bias) {
            add(q, w->bq + (size_t)l * q_dim, q_dim);
            add(k, w->bk + (size_t)l * kv_dim, kv_dim);
            add(v, w->bv + (size_t)l * kv_dim, kv_dim);
        }
        if (c->qk_norm) {
            rmsnorm_heads(q, c->n_heads, w->q_norm + (size_t)l * head_size, head_size, c->norm_eps);
            rmsnorm_heads(k, c->n_kv_heads, w->k_norm + (size_t)l * head_size, head_size, c->norm_eps);
        }
        kernels->rope(q, q_dim, head_size, cos_pos, sin_pos);
        kernels->rope(k, kv_dim, head_size, cos_pos, sin_pos);
        cache_store(seg->keys, l, pos, k, kernels->quantize);
        cache_store(seg->values, l, pos, v, kernels->quantize);
    }
}

/* RoPE and the cache stores of layer l for the segments' T tokens, on all
   threads when there are several: about 4 multiply-adds a value turned, and
   for the int8 cache (every segment's caches are of one type) a quantization
   (some 16) for each value stored. */
static void rope_store_batch(Batch *b, const Checkpoint *ck, int l, const Segment *segments, int n_segments, int T) {
    const Config *c = &ck->config;
    int q_dim = c->head_size * c->n_heads, kv_dim = c->head_size * c->n_kv_heads;
    int segment_of[MAX_BATCH];
    for (int i = 0; i < n_segments; i++)
        for (int t = segments[i].first; t < segments[i].first + segments[i].n; t++) segment_of[t] = i;
    RopeStoreJob job = {b, ck, segments, segment_of, l};
    double per_token = 4.0 * (q_dim + kv_dim) + (segments[0].keys->q ? 32.0 : 2.0) * kv_dim;
    parallel_for(rope_store_task, &job, T, per_token * T);
}

/* A unit's tokens: [first, first + n) of segment `segment`. */
typedef struct {
    int segment, first, n;
} TokenBlock;

typedef struct {
    Batch *b;
    const Config *c;
    const Segment *segments;
    const TokenBlock *blocks;
    int layer, n_units;
} AttentionJob;

/* Tokens in one unit of attention work: enough that a unit has 8 queries
   sharing its KV head, which the fast attention_block takes at once. */
static int attention_tokens_per_unit(const Config *c) {
    int heads_per_kv = c->n_heads / c->n_kv_heads;
    return heads_per_kv >= 8 ? 1 : 8 / heads_per_kv;
}

/* Units are the (block of tokens, KV head) pairs of the batch; each does the
   query heads that share that KV head (grouped-query attention). */
static void attention_task(void *ctx, int begin, int end, int thread) {
    AttentionJob *job = ctx;
    const Config *c = job->c;
    Batch *b = job->b;
    RunState *s = b->s;
    int head_size = c->head_size, heads_per_kv = c->n_heads / c->n_kv_heads, q_dim = head_size * c->n_heads;
    KVPrefetch ahead = {.n_pieces = 0};
    for (int unit = begin; unit < end; unit++) {
        kv_prefetch_finish(&ahead); /* what the unit before left */
        /* the next unit's keys and values, while this one runs; past the grab's
           end too, as that unit most often starts this thread's next grab
           (then with the lines asked for while this one runs, not all) */
        if (unit + 1 < job->n_units) {
            const TokenBlock *next = &job->blocks[(unit + 1) / c->n_kv_heads];
            const Segment *next_seg = &job->segments[next->segment];
            int n_pos = next_seg->pos + next->first - next_seg->first + next->n;
            kv_prefetch_add(&ahead, next_seg->keys, job->layer, (unit + 1) % c->n_kv_heads, n_pos);
            kv_prefetch_add(&ahead, next_seg->values, job->layer, (unit + 1) % c->n_kv_heads, n_pos);
        }
        const TokenBlock *block = &job->blocks[unit / c->n_kv_heads];
        const Segment *seg = &job->segments[block->segment];
        int kv_head = unit % c->n_kv_heads;
        size_t first_head = (size_t)block->first * q_dim + (size_t)kv_head * heads_per_kv * head_size;
        kernels->attention_block(b->xb + first_head, b->q + first_head, block->n, q_dim,
                                 seg->pos + block->first - seg->first, seg->keys, seg->values, job->layer, kv_head,
                                 b->att + (size_t)thread * 8 * s->n_pos, s->n_pos, b->query16 + (size_t)thread * head_size,
                                 heads_per_kv, &ahead);
    }
}

/* Causal attention of layer l for every segment's tokens, all heads, on all
   threads: reads q, writes xb. */
static void attention(Batch *b, const Config *c, int layer, const Segment *segments, int n_segments) {
    TokenBlock blocks[MAX_BATCH];
    int n_blocks = 0, per_unit = attention_tokens_per_unit(c);
    double work = 0;
    for (int i = 0; i < n_segments; i++) {
        const Segment *seg = &segments[i];
        for (int t = 0; t < seg->n; t += per_unit)
            blocks[n_blocks++] = (TokenBlock){i, seg->first + t, seg->n - t < per_unit ? seg->n - t : per_unit};
        /* two passes (scores, values) over keys and values that, when decoding, come
           from memory (the weights read since have pushed them out of the caches):
           measured at stories110M's shape, as slow as about 8 multiply-adds */
        work += 8.0 * seg->n * c->n_heads * (seg->pos + seg->n) * c->head_size;
    }
    AttentionJob job = {b, c, segments, blocks, layer, n_blocks * c->n_kv_heads};
    parallel_for(attention_task, &job, job.n_units, work);
}

/* ------------------------------------------------------------------------- */
/* forward_batch(): forward() for many tokens at once                         */

/* Moves the rows of x and q of the tokens classify[0..n) (in increasing order,
   so that none is overwritten before it moves) to rows 0..n-1, each as a
   segment of its own in kept[n]. */
static void keep_classified(Batch *b, const Config *c, const Segment *segments, const int *classify, int n,
                            Segment *kept) {
    int dim = c->dim, q_dim = c->head_size * c->n_heads, i = 0;
    for (int k = 0; k < n; k++) {
        int t = classify[k];
        while (t >= segments[i].first + segments[i].n) i++;
        memmove(b->x + (size_t)k * dim, b->x + (size_t)t * dim, dim * sizeof(float));
        memmove(b->q + (size_t)k * q_dim, b->q + (size_t)t * q_dim, q_dim * sizeof(float));
        kept[k] = (Segment){segments[i].keys, segments[i].values, k, 1, segments[i].pos + t - segments[i].first};
    }
}

/* Runs tokens[0..T) (T <= MAX_BATCH) through the model, the segments' tokens
   at their positions with their caches: the steps of forward(), each for the
   whole batch and on all threads. Each weight is read once per batch instead
   of once per token. The logits of the tokens classify[0..n_classify) go to
   logits [n_classify][vocab_size]. */
static void forward_segments(const Checkpoint *ck, Batch *b, const int *tokens, int T, const Segment *segments,
                             int n_segments, const int *classify, int n_classify, float *logits) {
    const Config *c = &ck->config;
    const Weights *w = &ck->weights;
    int dim = c->dim, hidden_dim = c->hidden_dim;
    int q_dim = c->head_size * c->n_heads, kv_dim = c->head_size * c->n_kv_heads;
    Segment kept[MAX_BATCH];
    int front[MAX_BATCH]; /* rows 0, 1, ...: where keep_classified() puts the tokens to classify */

    for (int t = 0; t < T; t++) embed_packed(b->x + (size_t)t * dim, &w->token_embedding, tokens[t], dim, c->vocab_size);

    for (int l = 0; l < c->n_layers; l++) {
        rmsnorm_batch(b->xb, b->x, w->rms_att + (size_t)l * dim, T, dim, c->norm_eps);
        Projection qkv[3] = {{&w->wq[l], b->q, q_dim}, {&w->wk[l], b->k, kv_dim}, {&w->wv[l], b->v, kv_dim}};
        matmul(b, b->xb, dim, T, qkv, 3);
        rope_store_batch(b, ck, l, segments, n_segments, T);
        if (l == c->n_layers - 1 && n_classify < T) {
            /* the last layer's keys and values are stored: past them, only the
               tokens to classify matter (a prompt's others are done) */
            if (n_classify == 0) return;
            keep_classified(b, c, segments, classify, n_classify, kept);
            segments = kept, n_segments = T = n_classify;
            for (int k = 0; k < n_classify; k++) front[k] = k;
            classify = front;
        }
        attention(b, c, l, segments, n_segments);
        Projection wo = {&w->wo[l], b->xb2, dim};
        matmul(b, b->xb, q_dim, T, &wo, 1);
        add(b->x, b->xb2, T * dim);

        rmsnorm_batch(b->xb, b->x, w->rms_ffn + (size_t)l * dim, T, dim, c->norm_eps);
        Projection gate_up[2] = {{&w->w1[l], b->hb, hidden_dim}, {&w->w3[l], b->hb2, hidden_dim}};
        matmul(b, b->xb, dim, T, gate_up, 2);
        swiglu_batch(b->hb, b->hb2, T * hidden_dim);
        Projection down = {&w->w2[l], b->xb, dim};
        matmul(b, b->hb, hidden_dim, T, &down, 1);
        add(b->x, b->xb, T * dim);
    }
    if (n_classify == 0) return;
    for (int k = 0; k < n_classify; k++) /* the rows to classify, together */
        memcpy(b->xb + (size_t)k * dim, b->x + (size_t)classify[k] * dim, dim * sizeof(float));
    rmsnorm_batch(b->xb, b->xb, w->rms_final, n_classify, dim, c->norm_eps);
    Projection classifier = {&w->classifier, logits, c->vocab_size};
    matmul(b, b->xb, dim, n_classify, &classifier, 1);
}

/* forward_segments() for tokens[0..T) of the run state's sequence at positions
   pos..pos+T-1. `logits`: NULL for none, the run state's s->logits for the last
   token's, or a buffer of [T][vocab_size] for every token's (speculative
   decoding checks them all). */
static float *forward_batch(const Checkpoint *ck, Batch *b, const int *tokens, int T, int pos, float *logits) {
    RunState *s = b->s;
    Segment all = {&s->key_cache, &s->value_cache, 0, T, pos};
    int classify[MAX_BATCH];
    int first = logits == s->logits ? T - 1 : 0, n_classify = logits ? T - first : 0;
    for (int k = 0; k < n_classify; k++) classify[k] = first + k;
    forward_segments(ck, b, tokens, T, &all, 1, classify, n_classify, logits);
    return logits;
}

/* Any number of tokens from position pos on, in batches; the last one's logits. */
static float *forward_tokens(const Checkpoint *ck, Batch *b, const int *tokens, int n, int pos) {
    float *logits = NULL;
    for (int done = 0; done < n; done += MAX_BATCH) {
        int batch = n - done < MAX_BATCH ? n - done : MAX_BATCH;
        logits = forward_batch(ck, b, tokens + done, batch, pos + done, done + batch == n ? b->s->logits : NULL);
    }
    return logits;
}

#endif /* RUN_PLAIN: end of Part II */
/* ========================================================================= */
/* PART III: GENERATE, CHAT, COMMAND LINE                                    */
/* ========================================================================= */

typedef enum { GENERATE, CHAT, TOKENIZE, PERPLEXITY, BATCH, SERVE, N_MODES } Mode;

/* What the command line asks for; the defaults are llama2.c's. */
typedef struct {
    const char *checkpoint, *tokenizer, *prompt, *prompt_file, *system_prompt, *draft;
    Mode mode;
    float temperature, topp, minp, presence_penalty;
    long long topk, seed, steps, threads, lookup, max_draft, roll;
    long long batch, pool; /* batch mode and serve: sequences at once, KV pool positions (0: the default) */
    const char *host, *api_key; /* serve: the address to listen on, the key requests need (or NULL) */
    long long port, queue, body_limit; /* serve: the port, requests waiting at most, a body's most bytes */
    long long answer_tokens; /* chat: an answer's most tokens (0: the context) */
    int steps_given; /* perplexity's windows are the whole context unless -n says otherwise */
    int thinking;    /* -e: Qwen3 chat thinks (1, the default) or not (0) */
    CacheType cache;
} Options;

/* The model with its run state, and (Part II) its batch buffers. */
typedef struct {
    Checkpoint ck;
    RunState state;
#ifndef RUN_PLAIN
    Batch batch;
#endif
} Model;

/* Chooses the kernel set (RUN_KERNELS caps it) and starts the threads, once
   for every model; returns the sampler's softmax and argmax (Part I's, or
   their fast twins). */
typedef struct {
    void (*softmax)(float *x, int n);
    int (*argmax)(const float *x, int n);
} SamplingKernels;

static SamplingKernels start_compute(int n_threads) {
    const char *cap = getenv("RUN_KERNELS");
#ifdef RUN_PLAIN
    if (cap && strcmp(cap, "plain") != 0) fail("RUN_KERNELS=%s: this build has only the plain kernels (RUN_PLAIN)", cap);
    (void)n_threads;
    return (SamplingKernels){softmax, sample_argmax};
#else
    kernels = choose_kernels(cap);
    start_threads(n_threads);
    return (SamplingKernels){kernels->softmax, kernels->argmax};
#endif
}

static void stop_compute(void) {
#ifndef RUN_PLAIN
    stop_threads();
#endif
}

/* Readies the model for positions 0 .. n_pos - 1, with a KV cache of that
   type (n_blocks: as init_run_state()), and brings its weights into memory. */
static void start_model(Model *m, int n_pos, int n_blocks, CacheType cache) {
#ifndef RUN_PLAIN
    /* before the KV cache is allocated: on Linux 6.18 (Firecracker), memory
       written before MADV_POPULATE_READ ran was 30x slower to write again */
    prefault_checkpoint(&m->ck);
    pack_weights(&m->ck); /* while the file is in memory and before the caches are: a lower peak */
#endif
    init_run_state(&m->state, &m->ck.config, n_pos, n_blocks, cache);
#ifndef RUN_PLAIN
    init_batch(&m->batch, &m->ck.config, &m->state, pool.n_threads);
#endif
}

static void stop_model(Model *m) {
#ifndef RUN_PLAIN
    free_batch(&m->batch);
    free_packed_weights(&m->ck);
#endif
    free_run_state(&m->state);
}

/* Runs tokens[0..n) at positions pos.. and returns the last one's logits; with
   all_logits ([n][vocab_size], n <= MAX_BATCH), every token's go there.
   Part II's batched forward when it is built, else forward() one at a time. */
static float *run_tokens(Model *m, const int *tokens, int n, int pos, float *all_logits) {
#ifdef RUN_PLAIN
    float *logits = NULL;
    for (int i = 0; i < n; i++) {
        logits = forward(&m->ck, &m->state, tokens[i], pos + i);
        if (all_logits) memcpy(all_logits + (size_t)i * m->ck.config.vocab_size, logits, m->ck.config.vocab_size * sizeof(float));
    }
    return logits;
#else
    if (all_logits) return forward_batch(&m->ck, &m->batch, tokens, n, pos, all_logits);
    return forward_tokens(&m->ck, &m->batch, tokens, n, pos);
#endif
}

/* Runs the segments' tokens (tokens[0..T), T <= MAX_BATCH), each sequence's
   at its positions in its caches; the logits of tokens classify[0..n_classify)
   (in increasing order) go to logits [n_classify][vocab_size]. Part II's forward_segments() when it
   is built, else forward() a token at a time with each segment's caches. */
static void run_segments(Model *m, const int *tokens, int T, const Segment *segments, int n_segments,
                         const int *classify, int n_classify, float *logits) {
#ifdef RUN_PLAIN
    RunState *s = &m->state;
    KVCache keys = s->key_cache, values = s->value_cache;
    int vocab = m->ck.config.vocab_size, k = 0;
    for (int i = 0; i < n_segments; i++) {
        s->key_cache = *segments[i].keys, s->value_cache = *segments[i].values;
        for (int t = segments[i].first; t < segments[i].first + segments[i].n; t++) {
            float *out = forward(&m->ck, s, tokens[t], segments[i].pos + t - segments[i].first);
            if (k < n_classify && classify[k] == t) memcpy(logits + (size_t)k++ * vocab, out, vocab * sizeof(float));
        }
    }
    s->key_cache = keys, s->value_cache = values;
    (void)T;
#else
    forward_segments(&m->ck, &m->batch, tokens, T, segments, n_segments, classify, n_classify, logits);
#endif
}

/* A growing list of token ids. */
typedef struct {
    int *ids;
    int n, cap;
} TokenList;

static void append_ids(TokenList *l, const int *ids, int n) {
    if (l->n + n > l->cap) {
        l->cap = 2 * (l->n + n);
        l->ids = realloc(l->ids, (size_t)l->cap * sizeof(int));
        if (!l->ids) fail("out of memory (%d tokens)", l->n + n);
    }
    memcpy(l->ids + l->n, ids, (size_t)n * sizeof(int));
    l->n += n;
}

/* A growing run of bytes: an answer's text, a connection's input and output. */
typedef struct {
    char *data;
    size_t len, cap;
} Bytes;

static void reserve_bytes(Bytes *b, size_t more) {
    if (b->len + more <= b->cap) return;
    if (more > SIZE_MAX / 4 - b->len) fail("out of memory (%zu bytes)", b->len);
    b->cap = 2 * (b->len + more);
    b->data = realloc(b->data, b->cap);
    if (!b->data) fail("out of memory (%zu bytes)", b->cap);
}

static void append_bytes(Bytes *b, const void *data, size_t n) {
    reserve_bytes(b, n + 1);
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0'; /* so the text can be read as a string */
}

__attribute__((format(printf, 2, 3))) static void append_format(Bytes *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    reserve_bytes(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += n;
}

/* ------------------------------------------------------------------------- */
/* Decoding, plain or speculative                                             */

/* Speculative decoding: a smaller model (-d) or the text itself (-l, prompt
   lookup) drafts the next few tokens, and the model checks them all in one
   batched pass, which reads its weights once, keeping those it would have
   produced and one of its own. At -t > 0 with -d, speculative sampling (Leviathan
   et al., Chen et al.) keeps the model's distribution exactly; greedy, or with
   -l, the text is the same byte for byte as without a draft. */
enum { MAX_DRAFT = 32 };
/* Greedy decoding with a draft model stops drafting at a token the draft gives
   less than this probability (demo model, its draft, -k 6: 0.3 was the fastest
   of 0.2 to 0.5, about 8% faster than no limit). */
#define DRAFT_MIN_PROB 0.3f

typedef struct {
    Model *draft;      /* -d, or NULL */
    int lookup;        /* -l: the longest n-gram matched, 0 = off */
    int max_draft;     /* -k: tokens drafted per step */
    TokenList seq;     /* the context: seq.ids[i] at position i; the last may be drawn, not yet run */
    int draft_pos;     /* the draft model's cache holds seq[0..draft_pos) */
    int n_keep;        /* a context shift keeps seq[0..n_keep): BOS and the (system) prompt */
    long dropped;      /* tokens dropped by context shifts: seq.n + dropped have been seen */
    int shifts;        /* context shifts so far */
    float *logits;     /* the model's logits for the pending token and each drafted one */
    float *draft_probs; /* [max_draft][vocab]: the distribution each drafted token was drawn from */
    long drafted, accepted;
} Decoder;

/* Prompt lookup: the tokens that followed the latest earlier occurrence of the
   longest n-gram (up to d->lookup tokens) that ends the text; at most `limit`. */
static int draft_from_text(const Decoder *d, int *out, int limit) {
    const int *s = d->seq.ids;
    int n = d->seq.n;
    for (int len = d->lookup < n - 1 ? d->lookup : n - 1; len >= 1; len--) {
        for (int end = n - 1; end >= len; end--) { /* an earlier n-gram ending before s[end] */
            if (memcmp(s + end - len, s + n - len, (size_t)len * sizeof(int)) != 0) continue;
            int k = 0;
            while (k < limit && end + k < n) out[k] = s[end + k], k++;
            return k;
        }
    }
    return 0;
}

/* The draft model's guesses: it catches up on the text, then draws `limit`
   tokens one at a time, keeping each one's distribution for the check. Each
   guess is in the answer (the presence penalty's) for the next, as it will be
   if the model keeps it; the answer is as it was on return. */
static int draft_from_model(Decoder *d, Sampler *sampler, int *out, int limit) {
    Model *dm = d->draft;
    int vocab = dm->ck.config.vocab_size, answer_before = sampler->n_answer, k;
    float *logits = run_tokens(dm, d->seq.ids + d->draft_pos, d->seq.n - d->draft_pos, d->draft_pos, NULL);
    d->draft_pos = d->seq.n;
    for (k = 0; k < limit; k++) {
        float *q = d->draft_probs + (size_t)k * vocab;
        memcpy(q, logits, vocab * sizeof(float));
        if (sampler->temperature == 0.0f) {
            out[k] = sample(sampler, q);
            /* greedy: a token the draft itself doubts is mostly rejected, and
               costs a draft step and a checked token for nothing */
            sampler->softmax(q, vocab);
            if (q[out[k]] < DRAFT_MIN_PROB) break;
        } else {
            sampling_distribution(sampler, q);
            out[k] = sample_mult(q, vocab, random_f32(&sampler->rng_state));
        }
        add_to_answer(sampler, out[k]);
        if (k + 1 < limit) logits = run_tokens(dm, &out[k], 1, d->draft_pos++, NULL);
    }
    truncate_answer(sampler, answer_before);
    return k;
}

/* Context shift, when the context is full: keeps seq[0..n_keep) (at most half
   the context), drops the oldest half of the rest and moves the others down, in
   the model's cache and the draft's (shift_cache(): keys rotated, not
   recomputed). The approximation: the states of the tokens kept were computed,
   past the first layer, while the dropped tokens were in view. */
static void shift_context(Model *m, Decoder *d) {
    int window = m->state.n_pos;
    int keep = d->n_keep < window / 2 ? d->n_keep : window / 2;
    int drop = (window - keep + 1) / 2;
    if (keep < d->n_keep && d->shifts == 0)
        fprintf(stderr, "run: context shift: the start it keeps (BOS and the prompt, or chat's system prompt) is %d "
                "tokens, more than half the context (%d): keeping its first %d\n", d->n_keep, window, keep);
    shift_cache(&m->state, &m->ck.config, keep, drop, window);
    if (d->draft && d->draft_pos > keep + drop) {
        shift_cache(&d->draft->state, &d->draft->ck.config, keep, drop, d->draft_pos);
        d->draft_pos -= drop;
    } else if (d->draft_pos > keep) {
        d->draft_pos = keep;
    }
    memmove(d->seq.ids + keep, d->seq.ids + keep + drop, (size_t)(d->seq.n - keep - drop) * sizeof(int));
    d->seq.n -= drop;
    d->dropped += drop;
    d->shifts++;
}

/* Runs tokens[0..n) after the context (every token of which has been run),
   appends them to it, shifting it whenever it is full; the last one's logits. */
static float *feed(Model *m, Decoder *d, const int *tokens, int n) {
    float *logits = NULL;
    if (d->draft_pos > d->seq.n) d->draft_pos = d->seq.n; /* drafts past the context are forgotten */
    while (n > 0) {
        if (d->seq.n == m->state.n_pos) shift_context(m, d);
        int room = m->state.n_pos - d->seq.n, run = n < room ? n : room;
        logits = run_tokens(m, tokens, run, d->seq.n, NULL);
        append_ids(&d->seq, tokens, run);
        tokens += run, n -= run;
    }
    return logits;
}

/* One step: runs the pending token (the last of d->seq) and any drafted ones
   through the model, and writes to out the accepted drafted tokens, then one
   drawn by the model, at most max_new (>= 1); returns how many. Drafts stay
   inside the context, so the context shifts (first thing here, when the
   pending token has no room) at the same tokens with or without them. */
static int decode_step(Model *m, Decoder *d, Sampler *sampler, long max_new, int *out) {
    if (d->seq.n > m->state.n_pos) shift_context(m, d);
    int pos = d->seq.n - 1, vocab = m->ck.config.vocab_size;
    int pending = d->seq.ids[pos];
    add_to_answer(sampler, pending); /* drawn, so in the answer (the answer's first token joins it here) */
    int limit = m->state.n_pos - 1 - pos < d->max_draft ? m->state.n_pos - 1 - pos : d->max_draft;
    if (limit > max_new - 1) limit = (int)(max_new - 1);
    int drafted[MAX_DRAFT + 1], n_drafted = 0;
    if (limit > 0 && d->draft) n_drafted = draft_from_model(d, sampler, drafted + 1, limit);
    else if (limit > 0 && d->lookup) n_drafted = draft_from_text(d, drafted + 1, limit);
    if (n_drafted == 0) {
        out[0] = sample(sampler, run_tokens(m, &pending, 1, pos, NULL));
        add_to_answer(sampler, out[0]);
        return 1;
    }
    drafted[0] = pending;
    run_tokens(m, drafted, n_drafted + 1, pos, d->logits);
    d->drafted += n_drafted;

    int exact = sampler->temperature == 0.0f || !d->draft; /* one-hot drafts: the model's own draw decides */
    int n = 0;
    for (;; n++) {
        float *p = d->logits + (size_t)n * vocab;
        if (n == n_drafted || exact) {
            out[n] = sample(sampler, p);
            add_to_answer(sampler, out[n]);
            if (n == n_drafted || out[n] != drafted[n + 1]) break;
            continue;
        }
        /* keep the drafted token with probability min(1, p/q); else draw from
           max(0, p - q), renormalised */
        const float *q = d->draft_probs + (size_t)n * vocab;
        int t = drafted[n + 1];
        sampling_distribution(sampler, p);
        if (random_f32(&sampler->rng_state) * q[t] < p[t]) {
            out[n] = t;
            add_to_answer(sampler, t);
            continue;
        }
        float total = 0;
        for (int i = 0; i < vocab; i++) total += p[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
        /* total is 0 only when rounding made p and q equal: then keep the draft's token */
        out[n] = total > 0 ? sample_mult(p, vocab, random_f32(&sampler->rng_state) * total) : t;
        add_to_answer(sampler, out[n]);
        break;
    }
    d->accepted += n;
    /* the draft model's cache is valid up to the last accepted token */
    if (d->draft && d->draft_pos > pos + 1 + n) d->draft_pos = pos + 1 + n;
    return n + 1;
}

static void report_speed(const Decoder *d, int prompt_tokens, double prompt_seconds, int generated,
                         double generate_seconds) {
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s",
            prompt_tokens, prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0.0,
            generated, generate_seconds > 0 ? generated / generate_seconds : 0.0);
    if (d->draft || d->lookup)
        fprintf(stderr, "; drafted: %ld, accepted: %ld (%.0f%%)", d->drafted, d->accepted,
                d->drafted ? 100.0 * d->accepted / d->drafted : 0.0);
    if (d->shifts) fprintf(stderr, "; context shifts: %d", d->shifts);
    fprintf(stderr, "\n");
}

/* Prints the model's answer. first was drawn after the context's last token;
   each token is printed, then appended to the context, until one of stop_ids
   (not printed), max_new tokens or a closed stdout (EPIPE); decode_step() runs
   the model for the next ones. Returns how many were printed; *stopped: whether
   a stop token ended it. */
static long print_answer(Model *m, Decoder *d, const Tokenizer *tok, Sampler *sampler, int first, long max_new,
                         const int *stop_ids, int n_stop, int *stopped) {
    int next[MAX_DRAFT + 1] = {first}, n_next = 1, prev = d->seq.ids[d->seq.n - 1];
    long printed = 0;
    *stopped = 0;
    for (;;) {
        int shown = 0;
        for (; shown < n_next && printed < max_new && !ferror(stdout); shown++, printed++) {
            for (int k = 0; k < n_stop; k++) *stopped |= next[shown] == stop_ids[k];
            if (*stopped) break;
            int len;
            const char *piece = decode(tok, prev, next[shown], &len);
            print_piece(tok, stdout, piece, len);
            fflush(stdout);
            prev = next[shown];
        }
        append_ids(&d->seq, next, shown);
        if (*stopped || printed == max_new || ferror(stdout)) return printed;
        n_next = decode_step(m, d, sampler, max_new - printed, next);
    }
}

/* Prints the prompt's pieces, then sampled ones, until `steps` tokens have
   been run or the model emits a stop token; past the context, the context
   shifts (shift_context()). The prompt goes through the model in batches; the
   text is the same as feeding it one token at a time. */
static void generate(Model *m, Decoder *d, const Tokenizer *tok, Sampler *sampler, const char *prompt, int steps) {
    const Config *c = &m->ck.config;
    int n_prompt;
    int *prompt_tokens = encode_prompt(tok, prompt, &n_prompt);
    if (n_prompt > c->seq_len) {
        fprintf(stderr, "run: the prompt is %d tokens, the context %d: keeping the first %d\n",
                n_prompt, c->seq_len, c->seq_len);
        n_prompt = c->seq_len;
    }
    /* the prompt's own pieces (after BOS), as far as the steps reach */
    for (int i = tok->bos_id >= 0; i < n_prompt && i <= steps; i++) {
        int len;
        const char *piece = decode(tok, i ? prompt_tokens[i - 1] : -1, prompt_tokens[i], &len);
        print_piece(tok, stdout, piece, len);
    }
    fflush(stdout);
    double start = seconds_now(), prompt_done = start;
    long generated = 0;
    if (n_prompt <= steps) {
        d->n_keep = n_prompt; /* a context shift keeps the prompt (up to half the context) */
        int first = sample(sampler, feed(m, d, prompt_tokens, n_prompt)), stopped;
        prompt_done = seconds_now();
        /* tokens number n_prompt to `steps` (from 0) */
        generated = print_answer(m, d, tok, sampler, first, steps + 1L - n_prompt, tok->stop_ids, tok->n_stop, &stopped);
    }
    printf("\n");
    fflush(stdout);
    report_speed(d, n_prompt <= steps ? n_prompt : 0, prompt_done - start, (int)generated, seconds_now() - prompt_done);
    free(prompt_tokens);
}

/* Reads one line from stdin without its newline; NULL at end of input. */
static char *read_line(const char *prompt) {
    fputs(prompt, stdout);
    fflush(stdout);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    return line;
}

static char *format_string(const char *fmt, const char *a, const char *b) {
    int n = snprintf(NULL, 0, fmt, a, b);
    if (n < 0) fail("the prompt is too long (%zu bytes)", strlen(a) + strlen(b));
    char *out = xmalloc((size_t)n + 1);
    snprintf(out, (size_t)n + 1, fmt, a, b);
    return out;
}

static void append_text(TokenList *l, const Tokenizer *tok, const char *text, size_t len) {
    int n, *ids = encode(tok, text, len, 0, 0, &n);
    append_ids(l, ids, n);
    free(ids);
}

/* <|start_header_id|>{role}<|end_header_id|>\n\n{content}, the content trimmed
   of white space as Hugging Face's template does; no <|eot_id|>. */
static void append_message(TokenList *l, const Tokenizer *tok, const char *role,
                           const char *content) {
    append_ids(l, &tok->turn_start_id, 1);
    append_text(l, tok, role, strlen(role));
    append_ids(l, &tok->end_header_id, 1);
    size_t begin = 0, end = strlen(content);
    while (begin < end && isspace((unsigned char)content[begin])) begin++;
    while (end > begin && isspace((unsigned char)content[end - 1])) end--;
    char *text = xmalloc(end - begin + 3);
    memcpy(text, "\n\n", 2);
    memcpy(text + 2, content + begin, end - begin);
    append_text(l, tok, text, end - begin + 2);
    free(text);
}

/* <|im_start|>{role}\n{content}<|im_end|>\n, the content as it is (ChatML as
   Qwen's template renders it: "{role}\n{content}" is one text to encode). */
static void append_chatml_message(TokenList *l, const Tokenizer *tok, const char *role, const char *content) {
    append_ids(l, &tok->turn_start_id, 1);
    char *text = format_string("%s\n%s", role, content);
    append_text(l, tok, text, strlen(text));
    free(text);
    append_ids(l, &tok->turn_end_id, 1);
    append_text(l, tok, "\n", 1);
}

/* The id of the added token with this text (Qwen3's <think>), or -1. */
static int added_token_id(const Tokenizer *tok, const char *text) {
    for (int id = tok->first_special; id < tok->vocab_size; id++)
        if (strcmp(piece_text(tok, id), text) == 0) return id;
    return -1;
}

/* The tokens of one user turn, up to where the assistant's answer starts.
   Llama 2: [INST] ... [/INST] (with the system prompt in <<SYS>> on the first
   turn), encoded with BOS. Llama 3: <|begin_of_text|> on the first turn, the
   system and user messages, then the assistant's header. ChatML (Qwen): the
   system message on the first turn, the user's, then <|im_start|>assistant\n,
   and with thinking off Qwen3's empty <think>\n\n</think>\n\n. *n_system (if
   not NULL) gets how many of the tokens are BOS and the system prompt, which a
   context shift keeps. */
static TokenList chat_turn(const Tokenizer *tok, int turn, const char *system_prompt, const char *user_prompt,
                           int thinking, int *n_system) {
    TokenList l = {0};
    int has_system = turn == 0 && system_prompt[0];
    if (tok->chat == CHATML) {
        if (n_system) *n_system = 0;
        if (has_system) {
            append_chatml_message(&l, tok, "system", system_prompt);
            if (n_system) *n_system = l.n;
        }
        append_chatml_message(&l, tok, "user", user_prompt);
        append_ids(&l, &tok->turn_start_id, 1);
        append_text(&l, tok, "assistant\n", strlen("assistant\n"));
        if (!thinking) {
            int think = added_token_id(tok, "<think>"), end_think = added_token_id(tok, "</think>");
            append_ids(&l, &think, 1);
            append_text(&l, tok, "\n\n", 2);
            append_ids(&l, &end_think, 1);
            append_text(&l, tok, "\n\n", 2);
        }
        return l;
    }
    if (n_system) *n_system = turn == 0 && tok->bos_id >= 0; /* BOS */
    if (tok->kind == SENTENCEPIECE) {
        char *head = has_system ? format_string("[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s", system_prompt, "")
                                : format_string("[INST] %s%s", "", "");
        char *rendered = format_string("%s%s [/INST]", head, user_prompt);
        l.ids = encode(tok, rendered, strlen(rendered), 1, 0, &l.n);
        l.cap = l.n;
        if (has_system && n_system) { /* the head's own tokens, as far as the turn's agree (BPE merges across) */
            int n_head;
            int *head_ids = encode(tok, head, strlen(head), 1, 0, &n_head);
            int same = 0;
            while (same < n_head && same < l.n && head_ids[same] == l.ids[same]) same++;
            *n_system = same;
            free(head_ids);
        }
        free(head), free(rendered);
        return l;
    }
    if (turn == 0) append_ids(&l, &tok->bos_id, 1);
    if (has_system) {
        append_message(&l, tok, "system", system_prompt);
        append_ids(&l, &tok->turn_end_id, 1);
        if (n_system) *n_system = l.n;
    }
    append_message(&l, tok, "user", user_prompt);
    append_ids(&l, &tok->turn_end_id, 1);
    append_message(&l, tok, "assistant", "");
    return l;
}

/* An answer as Qwen3's template renders it among earlier turns, from the
   role on: "assistant\n", the answer's text after its last </think> (and the
   newlines after that), <|im_end|> and "\n". */
static TokenList chatml_answer_text(const Tokenizer *tok, const char *answer, size_t n) {
    static const char role[] = "assistant\n";
    const char *from = answer;
    for (const char *p = answer; p + 8 <= answer + n; p++)
        if (memcmp(p, "</think>", 8) == 0) from = p + 8;
    if (from != answer)
        while (from < answer + n && *from == '\n') from++;
    size_t len = strlen(role) + (size_t)(answer + n - from);
    char *text = xmalloc(len + 1);
    memcpy(text, role, strlen(role));
    memcpy(text + strlen(role), from, answer + n - from);
    TokenList l = {0};
    append_text(&l, tok, text, len);
    append_ids(&l, &tok->turn_end_id, 1);
    append_text(&l, tok, "\n", 1);
    free(text);
    return l;
}

/* The same for an answer as token ids. */
static TokenList chatml_answer(const Tokenizer *tok, const int *answer, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) len += piece_len(tok, answer[i]);
    char *text = xmalloc(len + 1);
    len = 0;
    for (int i = 0; i < n; i++) {
        memcpy(text + len, piece_text(tok, answer[i]), piece_len(tok, answer[i]));
        len += piece_len(tok, answer[i]);
    }
    TokenList l = chatml_answer_text(tok, text, len);
    free(text);
    return l;
}

/* Ends a ChatML answer: from role_start (the token after its <|im_start|>) on,
   the context becomes chatml_answer()'s tokens, as the template would render
   the conversation so far. Most are there already; from the first that
   differs, the cache is rewound and refilled. seq[0..run) has been through
   the model (a cut answer's last token has not). Returns the last logits. */
static float *end_chatml_answer(Model *m, Decoder *d, const Tokenizer *tok, int role_start, int answer_start, int run) {
    TokenList history = chatml_answer(tok, d->seq.ids + answer_start, d->seq.n - answer_start);
    int same = 0;
    while (role_start + same < run && same < history.n && d->seq.ids[role_start + same] == history.ids[same]) same++;
    d->seq.n = role_start + same;
    float *logits = feed(m, d, history.ids + same, history.n - same);
    free(history.ids);
    return logits;
}

/* Whether a byte-level tokenizer has the tokens of its chat template. */
static int has_chat_tokens(const Tokenizer *tok) {
    return tok->turn_start_id >= 0 && tok->turn_end_id >= 0 && (tok->chat == CHATML || tok->end_header_id >= 0);
}

/* Chat in the model family's template. The assistant answers until EOS
   (Llama 2) or a stop token such as <|eot_id|> (Llama 3) or <|im_end|>
   (ChatML); the end of the answer (EOS, <|eot_id|>, or <|im_end|> and "\n")
   goes into the context, and every turn continues in the same KV cache. A
   ChatML answer stays in it as Qwen3's template renders earlier turns, without
   its thinking (end_chatml_answer()). When the context is full, it shifts
   (shift_context()), keeping BOS and the system prompt; an answer as long as
   the context, or as answer_tokens (-a), is cut there. */
static void chat(Model *m, Decoder *d, const Tokenizer *tok, Sampler *sampler, const char *cli_user_prompt,
                 const char *cli_system_prompt, int thinking, long long answer_tokens) {
    if (tok->kind == BYTE_LEVEL_BPE && !has_chat_tokens(tok))
        fail("the tokenizer has no chat tokens (<|start_header_id|>, <|end_header_id|>, <|eot_id|> or <|im_start|>, "
             "<|im_end|>): cannot chat");
    int end_of_answer = tok->kind == SENTENCEPIECE ? EOS_ID : tok->turn_end_id;
    /* Llama 2's answer ends at EOS only (as llama2.c's chat); the others' at any stop id */
    const int *stop_ids = tok->kind == SENTENCEPIECE ? &end_of_answer : tok->stop_ids;
    int n_stop = tok->kind == SENTENCEPIECE ? 1 : tok->n_stop;
    char *system_prompt = NULL;
    if (cli_system_prompt) system_prompt = strdup(cli_system_prompt);
    else system_prompt = read_line("Enter system prompt (optional): ");
    if (!system_prompt) system_prompt = strdup("");
    if (!system_prompt) fail("out of memory");

    for (int turn = 0;; turn++) {
        char *user_prompt = turn == 0 && cli_user_prompt ? strdup(cli_user_prompt) : read_line("User: ");
        if (!user_prompt) {
            printf("\n");
            break;
        }
        int n_system;
        TokenList prompt = chat_turn(tok, turn, system_prompt, user_prompt, thinking, &n_system);
        free(user_prompt);
        if (turn == 0) d->n_keep = n_system;
        printf("Assistant: ");
        fflush(stdout);
        truncate_answer(sampler, 0); /* the presence penalty looks at this answer only */
        int shifts = d->shifts, role = prompt.n; /* ChatML: the answer's role, after the last <|im_start|> */
        while (role > 0 && prompt.ids[role - 1] != tok->turn_start_id) role--;
        int first = sample(sampler, feed(m, d, prompt.ids, prompt.n)), ended;
        int answer_start = d->seq.n, role_start = answer_start - (prompt.n - role);
        free(prompt.ids);
        /* an answer is at most as long as the context (past that it could not
           see its own beginning, and a model that never stops would not end),
           and as -a says */
        int longest = m->state.n_pos;
        long most = answer_tokens > 0 && answer_tokens < longest ? answer_tokens : longest;
        long printed = print_answer(m, d, tok, sampler, first, most, stop_ids, n_stop, &ended);
        printf("\n");
        fflush(stdout);
        if (ferror(stdout)) break; /* the reader is gone */
        /* the end of the answer belongs to the context (where the model's stop
           token was); llama2.c draws a token here that it never uses, and so do
           we, so a seed gives the same chat. A cut answer's last token was
           drawn, not yet run; it goes in with the end. */
        if (!ended && printed == longest)
            fprintf(stderr, "run: the answer reached the context's length (%d tokens); cutting it there\n", longest);
        int run = ended ? d->seq.n : d->seq.n - 1;
        if (tok->chat == CHATML && d->shifts == shifts) {
            sample(sampler, end_chatml_answer(m, d, tok, role_start, answer_start, run));
        } else {
            TokenList end = {0};
            if (run < d->seq.n) append_ids(&end, d->seq.ids + run, 1);
            append_ids(&end, &end_of_answer, 1);
            if (tok->chat == CHATML) append_text(&end, tok, "\n", 1);
            d->seq.n = run;
            sample(sampler, feed(m, d, end.ids, end.n));
            free(end.ids);
        }
    }
    free(system_prompt);
}

/* ------------------------------------------------------------------------- */
/* Perplexity                                                                 */

/* -log softmax(logits)[target], the model's surprise at `target`: the log of
   the sum of exp(logits) minus the target's logit. In double, with the max
   taken out before exp() (log-sum-exp), so no sum overflows or loses the
   small terms. */
static double negative_log_likelihood(const float *logits, int n, int target) {
    float max_val = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > max_val) max_val = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - max_val);
    return max_val + log(sum) - logits[target];
}

/* How well the model predicts a text. The text, encoded without BOS, is cut
   into consecutive chunks of window - 1 tokens (window: -n, by default and at
   most the context); each chunk runs after BOS (start_id()) from position 0,
   and each of its tokens is scored by -log p(token | BOS and the chunk's
   tokens before it), from the plain softmax of the logits. Prints "perplexity
   P nll N bpb B tokens T": N the mean over the T tokens, P = exp(N), and B
   bits per byte of the text.
   The logits come MAX_BATCH tokens at a time, so a window never needs
   [window][vocab]. The model starts here, for the positions a window uses. */
static void perplexity(Model *m, const Tokenizer *tok, const char *text, const Options *o) {
    int vocab = m->ck.config.vocab_size, seq_len = m->ck.config.seq_len;
    int window = !o->steps_given || o->steps == 0 || o->steps > seq_len ? seq_len : (int)o->steps;
    if (window < 2) fail("-n %d: a perplexity window needs 2 positions at least (BOS and a token)", window);
    size_t text_bytes = strlen(text);
    int n_tokens;
    int *ids = encode(tok, text, text_bytes, 0, 0, &n_tokens);
    if (n_tokens == 0 || text_bytes == 0)
        fail("%s%s: the text is empty (no tokens to score)", o->prompt_file ? "-f " : "-i",
             o->prompt_file ? o->prompt_file : "");
    int chunk = window - 1;
    int n_windows = n_tokens / chunk + (n_tokens % chunk != 0);
    start_compute((int)o->threads);
    start_model(m, n_tokens < chunk ? n_tokens : chunk, 0, o->cache);
    float *logits = xmalloc((size_t)MAX_BATCH * vocab * sizeof(float));
    int input[MAX_BATCH];
    int show_progress = isatty(STDERR_FILENO);
    double total_nll = 0.0, start = seconds_now();
    for (int w = 0; w < n_windows; w++) {
        const int *scored = ids + (size_t)w * chunk;
        int len = n_tokens - w * chunk < chunk ? n_tokens - w * chunk : chunk;
        /* the input at position p is start_id() or scored[p - 1]; its logits score scored[p] */
        for (int done = 0; done < len; done += MAX_BATCH) {
            int piece = len - done < MAX_BATCH ? len - done : MAX_BATCH;
            for (int i = 0; i < piece; i++) input[i] = done + i == 0 ? start_id(tok) : scored[done + i - 1];
            run_tokens(m, input, piece, done, logits);
            for (int i = 0; i < piece; i++)
                total_nll += negative_log_likelihood(logits + (size_t)i * vocab, vocab, scored[done + i]);
        }
        if (show_progress) fprintf(stderr, "\rperplexity: window %d of %d", w + 1, n_windows);
    }
    double seconds = seconds_now() - start;
    if (show_progress) fprintf(stderr, "\n");
    double nll = total_nll / n_tokens;
    printf("perplexity %.8g nll %.8g bpb %.8g tokens %d\n", exp(nll), nll, total_nll / (M_LN2 * text_bytes), n_tokens);
    fflush(stdout);
    fprintf(stderr, "scored: %d tokens, %.1f tok/s; windows: %d of %d positions at most\n", n_tokens,
            seconds > 0 ? n_tokens / seconds : 0.0, n_windows, window);
    stop_model(m);
    stop_compute();
    free(logits);
    free(ids);
}

/* ------------------------------------------------------------------------- */
/* Batch mode: many prompts, continuous batching over a paged KV cache        */

/* -m batch reads a JSON object a line (-f), runs up to -b of them at once and
   writes a JSON object a line as each finishes. Every step runs one batched
   forward over the next token of each sequence that is answering and chunks of
   prompts, so the weights are read once for all of them; a sequence that ends
   leaves at once and a waiting prompt takes its place. The kernels give a token
   the same bits whatever else is in the batch, so each answer is the text that
   generate (or, with "system", chat) prints for its prompt alone.

   In reading order: the JSON reader (which the server shares), the block pool
   and its prefix table, the scheduler (which the server shares too), then
   batch() itself. */

/* One line of the batch file. Its strings point into the line's decoded text. */
typedef struct {
    int line;               /* from 1 */
    const char *id;         /* "id" as given, a string; NULL: a number (id_number), or absent (the line number) */
    long long id_number;
    int has_id;
    const char *prompt;
    const char *system;     /* NULL: no chat template */
    long long n, seed, topk;
    float temperature, topp, minp, presence_penalty;
} Request;

/* A strict JSON reader, RFC 8259's grammar with text in UTF-8, for batch
   mode's lines and the server's request bodies. A mistake stops the reading:
   json_error() writes the message and jumps back to json_read(), whose caller
   reports it (batch mode ends the run; the server answers 400). */
typedef struct {
    const char *text, *p, *end;
    char *out;          /* decoded strings, each NUL-terminated: never longer than the text */
    const char *field;  /* the field being read (the server's error names it) */
    int depth;          /* arrays and objects open around p */
    jmp_buf *on_error;
    char error[512];
    long error_at;      /* the byte the mistake is at, from 0 */
} JsonReader;

/* Nesting deeper than this is refused, so the reader's recursion is bounded. */
#define JSON_MAX_DEPTH 32

__attribute__((format(printf, 2, 3))) static void json_error(JsonReader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    r->error_at = r->p - r->text;
    longjmp(*r->on_error, 1);
}

/* Runs read(r, arg): 1, or 0 with r->error and r->error_at set. */
static int json_read(JsonReader *r, void (*read)(JsonReader *r, void *arg), void *arg) {
    jmp_buf jump;
    r->on_error = &jump;
    if (setjmp(jump)) return 0;
    read(r, arg);
    return 1;
}

static void json_space(JsonReader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\n')) r->p++;
}

/* U+FEFF in UTF-8: RFC 8259 lets a reader skip it at the start of the text */
#define UTF8_BOM "\xef\xbb\xbf"

static const char *json_type_at(const JsonReader *r) {
    if (r->p == r->end) return "the end of the text";
    switch (*r->p) {
    case '"': return "a string";
    case '{': return "an object";
    case '[': return "an array";
    case 't': case 'f': return "true or false";
    case 'n': return "null";
    default:
        if (r->end - r->p >= 3 && memcmp(r->p, UTF8_BOM, 3) == 0)
            return "a byte order mark (U+FEFF), which only the file's start may have";
        return *r->p == '-' || isdigit((unsigned char)*r->p) ? "a number" : "something that is not JSON";
    }
}

/* The 4 hex digits of a \u escape after r->p. */
static uint32_t json_hex4(JsonReader *r) {
    char hex[5] = {0};
    for (int i = 0; i < 4; i++) {
        if (r->p + i == r->end || !isxdigit((unsigned char)r->p[i])) json_error(r, "\\u needs four hex digits");
        hex[i] = r->p[i];
    }
    r->p += 4;
    return (uint32_t)strtoul(hex, NULL, 16);
}

/* The string at r->p (its opening quote), decoded into r->out. Refused: a raw
   control character, bytes that are not UTF-8, an unknown escape, a surrogate
   without its pair, and \u0000 (prompts are C strings, as -i's are). */
static const char *json_string(JsonReader *r, const char *field) {
    char *start = r->out;
    r->p++;
    for (;;) {
        if (r->p == r->end) json_error(r, "%s: the string does not end", field);
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') break;
        if (c < 0x20) json_error(r, "%s: a control character (0x%02x) must be escaped", field, c);
        if (c != '\\') {
            int len = utf8_char_len((const unsigned char *)r->p, (size_t)(r->end - r->p));
            if (len == 0) json_error(r, "%s: bytes that are not UTF-8", field);
            memcpy(r->out, r->p, len);
            r->out += len, r->p += len;
            continue;
        }
        if (++r->p == r->end) json_error(r, "%s: the string does not end", field);
        char e = *r->p++;
        const char *plain = strchr("\"\\/bfnrt", e), *value = "\"\\/\b\f\n\r\t";
        if (e != 'u') {
            if ((!plain || !e) && isgraph((unsigned char)e)) json_error(r, "%s: unknown escape '\\%c'", field, e);
            if (!plain || !e) json_error(r, "%s: unknown escape: a backslash before byte 0x%02x", field, (unsigned char)e);
            *r->out++ = value[plain - "\"\\/bfnrt"];
            continue;
        }
        uint32_t cp = json_hex4(r);
        if (cp >= 0xDC00 && cp <= 0xDFFF) json_error(r, "%s: \\u%04X is half of a surrogate pair, without its first half", field, cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
                json_error(r, "%s: \\u%04X is half of a surrogate pair, without its second half", field, cp);
            r->p += 2;
            uint32_t low = json_hex4(r);
            if (low < 0xDC00 || low > 0xDFFF) json_error(r, "%s: \\u%04X must be followed by a low surrogate", field, cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (cp == 0) json_error(r, "%s: \\u0000 (the text must have no NUL)", field);
        r->out += put_utf8(r->out, cp);
    }
    r->p++;
    *r->out++ = '\0';
    return start;
}

/* The number at r->p, by JSON's grammar; integer: no fraction or exponent. */
static double json_number(JsonReader *r, const char *field, int integer, long long *as_integer) {
    const char *start = r->p, *p = r->p;
    if (p < r->end && *p == '-') p++;
    if (p == r->end || !isdigit((unsigned char)*p)) json_error(r, "%s: expected a number, found %s", field, json_type_at(r));
    if (*p == '0') p++;
    else while (p < r->end && isdigit((unsigned char)*p)) p++;
    int fraction = 0;
    if (p < r->end && *p == '.') {
        fraction = 1, p++;
        if (p == r->end || !isdigit((unsigned char)*p)) json_error(r, "%s: a digit must follow the decimal point", field);
        while (p < r->end && isdigit((unsigned char)*p)) p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        fraction = 1, p++;
        if (p < r->end && (*p == '+' || *p == '-')) p++;
        if (p == r->end || !isdigit((unsigned char)*p)) json_error(r, "%s: the exponent has no digits", field);
        while (p < r->end && isdigit((unsigned char)*p)) p++;
    }
    if (integer && fraction) json_error(r, "%s: expected an integer, found %.*s", field, (int)(p - start), start);
    char number[64];
    if (p - start >= (long)sizeof number) json_error(r, "%s: the number %.20s... is too long", field, start);
    memcpy(number, start, p - start);
    number[p - start] = '\0';
    r->p = p;
    errno = 0;
    if (integer) {
        *as_integer = strtoll(number, NULL, 10);
        if (errno == ERANGE) json_error(r, "%s: %s is out of range", field, number);
        return (double)*as_integer;
    }
    double v = strtod(number, NULL);
    if (errno == ERANGE && fabs(v) > 1) json_error(r, "%s: %s is out of range", field, number);
    return v;
}

static long long json_integer(JsonReader *r, const char *field, long long lo, long long hi) {
    long long v;
    const char *start = r->p;
    json_number(r, field, 1, &v);
    if (v < lo || v > hi) r->p = start, json_error(r, "%s: %lld is out of range [%lld, %lld]", field, v, lo, hi);
    return v;
}

static float json_float(JsonReader *r, const char *field, double lo, double hi) {
    const char *start = r->p;
    double v = json_number(r, field, 0, NULL);
    if (!(v >= lo && v <= hi) || isinf((float)v)) r->p = start, json_error(r, "%s: %g is out of range [%g, %g]", field, v, lo, hi);
    return (float)v;
}

/* Whether the text at r->p is `word` (true, false, null); if so, reads it. */
static int json_word(JsonReader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return 0;
    r->p += n;
    return 1;
}

static int json_bool(JsonReader *r, const char *field) {
    if (json_word(r, "true")) return 1;
    if (json_word(r, "false")) return 0;
    json_error(r, "%s: expected true or false, found %s", field, json_type_at(r));
    return 0;
}

/* After a member or an element: ',' (not before the end) or the end; 0 at the end. */
static int json_next(JsonReader *r, char close, const char *after) {
    json_space(r);
    if (r->p < r->end && *r->p == ',') {
        r->p++;
        json_space(r);
        if (r->p < r->end && *r->p == close) json_error(r, "a ',' before '%c'", close);
        return 1;
    }
    if (r->p == r->end) json_error(r, close == '}' ? "the object does not end ('}')" : "the array does not end (']')");
    if (*r->p != close) json_error(r, "expected ',' or '%c' after %s", close, after);
    r->p++;
    r->depth--;
    return 0;
}

/* Opens the object or array at r->p ('{' or '['): 1, or 0 if it is empty
   (and read). */
static int json_open(JsonReader *r, char open, const char *field) {
    if (r->p == r->end || *r->p != open)
        json_error(r, "%s: expected %s, found %s", field, open == '{' ? "an object" : "an array", json_type_at(r));
    if (++r->depth > JSON_MAX_DEPTH) json_error(r, "%s: nested more than %d deep", field, JSON_MAX_DEPTH);
    r->p++;
    json_space(r);
    if (r->p < r->end && *r->p == (open == '{' ? '}' : ']')) {
        r->p++, r->depth--;
        return 0;
    }
    return 1;
}

/* A field name as written, escapes and all, up to 40 characters, for an error
   message (DEL and C1 controls as \u escapes). */
static void quoted_name(const char *from, const char *to, char name[256]) {
    size_t at = 0;
    for (const char *c = from; c < to && at < 40 * 6;) {
        int len = utf8_char_len((const unsigned char *)c, (size_t)(to - c));
        uint32_t cp = len == 1 ? (unsigned char)c[0] : len == 2 ? ((c[0] & 0x1Fu) << 6 | (c[1] & 0x3Fu)) : 0x100;
        if (len == 0) len = 1, cp = 0x80;
        if (cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) at += (size_t)snprintf(name + at, 7, "\\u%04x", (unsigned)cp);
        else memcpy(name + at, c, len), at += len;
        c += len;
    }
    name[at] = '\0';
}

/* The string whose opening quote is at `at`, as written (quoted_name()). */
static void written_string(const char *at, char name[256]) {
    const char *close = at + 1;
    while (*close != '"') close += *close == '\\' ? 2 : 1;
    quoted_name(at + 1, close, name);
}

/* The name of the member at r->p and its ':', decoded into r->out (which the
   caller may take back once it has compared the name). */
static char *json_key(JsonReader *r) {
    if (r->p == r->end || *r->p != '"') json_error(r, "expected a field name in quotes, found %s", json_type_at(r));
    const char *key_at = r->p;
    char *key = (char *)json_string(r, "a field name");
    json_space(r);
    if (r->p == r->end || *r->p != ':') {
        char name[256];
        written_string(key_at, name);
        json_error(r, "expected ':' after \"%s\"", name);
    }
    r->p++;
    json_space(r);
    return key;
}

/* Reads a value of any kind, keeping nothing (the server's fields that do not
   change an answer). */
static void json_skip(JsonReader *r, const char *field) {
    char *out = r->out;
    if (r->p < r->end && (*r->p == '{' || *r->p == '[')) {
        char open = *r->p;
        if (json_open(r, open, field))
            do {
                if (open == '{') json_key(r);
                json_skip(r, field);
            } while (json_next(r, open == '{' ? '}' : ']', field));
    } else if (r->p < r->end && *r->p == '"') {
        json_string(r, field);
    } else if (!json_word(r, "true") && !json_word(r, "false") && !json_word(r, "null")) {
        long long unused;
        json_number(r, field, 0, &unused);
    }
    r->out = out;
}

typedef struct {
    Request *q;
    int blank;
} RequestLine;

/* A batch file's line: one object of the fields Request has. */
static void read_request_line(JsonReader *r, void *arg) {
    RequestLine *l = arg;
    Request *q = l->q;
    json_space(r);
    if (r->p == r->end) {
        l->blank = 1;
        return;
    }
    if (*r->p != '{') json_error(r, "expected a JSON object ({...}), found %s", json_type_at(r));
    static const char *const fields[] = {"prompt", "id", "n", "temperature", "topp", "seed", "system",
                                         "topk", "minp", "presence_penalty"};
    enum { N_FIELDS = sizeof fields / sizeof *fields };
    int seen[N_FIELDS] = {0};
    char field[32] = "";
    if (json_open(r, '{', "the line"))
        do {
            const char *key_at = r->p;
            char *key = json_key(r);
            int f = 0;
            while (f < N_FIELDS && strcmp(key, fields[f]) != 0) f++;
            if (f == N_FIELDS) {
                char name[256];
                written_string(key_at, name);
                r->p = key_at, json_error(r, "unknown field \"%s\" (prompt, id, n, temperature, topp, seed, system, "
                                              "topk, minp, presence_penalty)", name);
            }
            if (seen[f]++) r->p = key_at, json_error(r, "\"%s\" appears twice", fields[f]);
            r->out = key; /* the name is known: its room is free again */
            snprintf(field, sizeof field, "\"%s\"", fields[f]);
            int is_string = r->p < r->end && *r->p == '"';
            switch (f) {
            case 0: case 6:
                if (!is_string) json_error(r, "%s: expected a string, found %s", field, json_type_at(r));
                *(f == 0 ? &q->prompt : &q->system) = json_string(r, field);
                break;
            case 1:
                q->has_id = 1;
                if (is_string) q->id = json_string(r, field);
                else if (r->p < r->end && (*r->p == '-' || isdigit((unsigned char)*r->p))) q->id = NULL, json_number(r, field, 1, &q->id_number);
                else json_error(r, "%s: expected a string or an integer, found %s", field, json_type_at(r));
                break;
            case 2: q->n = json_integer(r, field, 0, INT32_MAX); break;
            case 3: q->temperature = json_float(r, field, 0, HUGE_VAL); break;
            case 4: q->topp = json_float(r, field, 0, 1); break;
            case 5: q->seed = json_integer(r, field, 0, LLONG_MAX); break;
            case 7: q->topk = json_integer(r, field, 0, INT32_MAX); break;
            case 8: q->minp = json_float(r, field, 0, 1); break;
            case 9: q->presence_penalty = json_float(r, field, -2, 2); break;
            }
        } while (json_next(r, '}', field));
    json_space(r);
    if (r->p != r->end) json_error(r, "more after the object: one JSON object per line");
    if (!seen[0]) r->p = r->text, json_error(r, "no \"prompt\"");
}

/* Parses line `line` of the batch file (text[0..len), no newline) into *q, its
   strings decoded into out (room for len + 1 bytes); returns 0 for a blank
   line. The fields the line leaves out come from the command line's. A mistake
   ends the run, naming the file, line, column and field. */
static int parse_request(const char *path, int line, const char *text, size_t len, char *out, Request *q,
                         const Request *defaults) {
    *q = *defaults;
    q->line = line;
    RequestLine l = {q, 0};
    JsonReader r = {.text = text, .p = text, .end = text + len, .out = out};
    if (!json_read(&r, read_request_line, &l)) fail("-f %s: line %d, column %ld: %s", path, line, r.error_at + 1, r.error);
    return !l.blank;
}

/* Appends s[0..n) as a JSON string: UTF-8 as it is, quotes, backslashes and
   control characters escaped. Bytes that are not valid UTF-8 (a character cut
   by the end of an answer): batch mode's results keep them, each as
   \udc80..\udcff, Python's "surrogateescape" (text.encode('utf-8',
   'surrogateescape') gives the bytes); the server's answers, for clients that
   want text, have U+FFFD instead, as a UTF-8 decoder gives (utf8_invalid_len()). */
static void append_json_text(Bytes *out, const char *s, size_t n, int replace_invalid) {
    append_bytes(out, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int len = utf8_char_len((const unsigned char *)s + i, n - i);
        if (c == '"' || c == '\\') append_format(out, "\\%c", c);
        else if (c == '\n') append_bytes(out, "\\n", 2);
        else if (c == '\t') append_bytes(out, "\\t", 2);
        else if (c == '\r') append_bytes(out, "\\r", 2);
        else if (c < 0x20) append_format(out, "\\u%04x", c);
        else if (len == 0 && !replace_invalid) append_format(out, "\\udc%02x", c);
        else if (len == 0) append_bytes(out, "\xef\xbf\xbd", 3), len = utf8_invalid_len((const unsigned char *)s + i, n - i);
        else append_bytes(out, s + i, len);
        i += len ? len : 1;
    }
    append_bytes(out, "\"", 1);
}

/* Strings the server writes: names and messages (valid UTF-8), and answers. */
static void append_json_string(Bytes *out, const char *s, size_t n) { append_json_text(out, s, n, 1); }

static void json_write_string(FILE *out, const char *s, size_t n) {
    Bytes b = {0};
    append_json_text(&b, s, n, 0);
    fwrite(b.data, 1, b.len, out);
    free(b.data);
}

/* ---- The KV block pool and the scheduler, batch mode's and the server's ---- */

/* The blocks of batch mode's KV cache (the run state's caches, a pool of
   them): each used by refs sequences, or free, or free but cached, still
   holding the rows of a full block that a later prompt with the same start may
   take back. The prefix table knows each full block by its tokens and the
   block before it (and so on, back to position 0: its rows depend on all of
   them). */
typedef struct {
    int n_blocks, n_free;
    int *refs;
    int *parent;    /* in the prefix table: the block before (-1 for positions 0..), else -2 */
    int *tokens;    /* [n_blocks][KV_BLOCK]: the tokens of a block in the table */
    long *freed_at; /* when a free block was freed: the longest free is reused first */
    long clock;
} BlockPool;

static void init_block_pool(BlockPool *p, int n_blocks) {
    *p = (BlockPool){.n_blocks = n_blocks, .n_free = n_blocks};
    p->refs = xcalloc(n_blocks, sizeof(int));
    p->parent = xmalloc(n_blocks * sizeof(int));
    for (int i = 0; i < n_blocks; i++) p->parent[i] = -2;
    p->tokens = xmalloc((size_t)n_blocks * KV_BLOCK * sizeof(int));
    p->freed_at = xcalloc(n_blocks, sizeof(long));
}

static void free_block_pool(BlockPool *p) {
    free(p->refs), free(p->parent), free(p->tokens), free(p->freed_at);
}

/* Takes a block and the blocks after it out of the prefix table: their rows
   were computed after its, which are about to change. (They are free: a
   sequence that holds a block holds the one before it.) */
static void forget_block(BlockPool *p, int block) {
    p->parent[block] = -2;
    for (int i = 0; i < p->n_blocks; i++)
        if (p->parent[i] == block) forget_block(p, i);
}

/* A free block for new rows: one outside the prefix table if any, else the
   cached block free the longest, which leaves the table. -1: none. */
static int take_block(BlockPool *p) {
    int best = -1;
    for (int i = 0; i < p->n_blocks; i++) {
        if (p->refs[i]) continue;
        if (p->parent[i] == -2) { best = i; break; }
        if (best < 0 || p->freed_at[i] < p->freed_at[best]) best = i;
    }
    if (best < 0) return -1;
    forget_block(p, best);
    p->refs[best] = 1;
    p->n_free--;
    return best;
}

static void hold_block(BlockPool *p, int block) {
    if (p->refs[block]++ == 0) p->n_free--;
}

static void release_block(BlockPool *p, int block) {
    if (--p->refs[block] == 0) p->n_free++, p->freed_at[block] = p->clock++;
}

/* The block in the prefix table after `parent` with these KV_BLOCK tokens; -1: none. */
static int find_block(const BlockPool *p, int parent, const int *tokens) {
    for (int i = 0; i < p->n_blocks; i++)
        if (p->parent[i] == parent && memcmp(p->tokens + (size_t)i * KV_BLOCK, tokens, KV_BLOCK * sizeof(int)) == 0)
            return i;
    return -1;
}

/* One prompt and its answer, from the request (a batch file's line, or an
   HTTP request) to the result. */
typedef struct {
    void *owner;          /* batch mode's Request, or the server's ApiRequest */
    TokenList tokens;     /* the prompt, then the answer; the last one drawn is not yet run */
    int n_prompt;
    int computed;         /* tokens[0..computed) have their keys and values in the cache */
    int *blocks, n_blocks; /* the block table */
    int in_table;         /* of its full blocks, how many the prefix table has seen */
    KVCache keys, values; /* the pool seen through the block table */
    Sampler sampler;
    int max_new, generated;
    const int *stop_ids;
    int n_stop;
    char **stop_texts;    /* the answer ends before the first of these strings (the server's "stop") */
    int n_stop_texts;
    Bytes text;           /* the answer's bytes, as generate prints them */
    const char *finish_reason; /* "stop" or "length" once it has ended, "cancelled" if its client left */
    int paused;           /* it has been paused (what it takes back from the prefix table is its own) */
    int planned;          /* tokens in this step */
} Sequence;

/* Gives seq's block table blocks for tokens[0..n_positions); 0 if the pool has
   too few free. */
static int reserve_blocks(BlockPool *p, Sequence *seq, int n_positions) {
    int need = (n_positions + KV_BLOCK - 1) / KV_BLOCK;
    if (need - seq->n_blocks > p->n_free) return 0;
    while (seq->n_blocks < need) seq->blocks[seq->n_blocks++] = take_block(p);
    return 1;
}

/* Lets go of every block (a paused sequence is run again from its start when
   it is readmitted, which gives the same rows). */
static void release_sequence(BlockPool *p, Sequence *seq) {
    for (int i = 0; i < seq->n_blocks; i++) release_block(p, seq->blocks[i]);
    seq->n_blocks = seq->computed = seq->in_table = 0;
}

/* Puts seq's full, computed blocks into the prefix table (unless an equal one is there). */
static void add_to_prefix_table(BlockPool *p, Sequence *seq) {
    for (; seq->in_table < seq->computed / KV_BLOCK; seq->in_table++) {
        int i = seq->in_table, block = seq->blocks[i], parent = i ? seq->blocks[i - 1] : -1;
        const int *tokens = seq->tokens.ids + (size_t)i * KV_BLOCK;
        if (p->parent[block] != -2 || find_block(p, parent, tokens) >= 0) continue;
        p->parent[block] = parent;
        memcpy(p->tokens + (size_t)block * KV_BLOCK, tokens, KV_BLOCK * sizeof(int));
    }
}

/* How many full blocks of seq's start, at most `limit`, the prefix table has;
   *idle: how many of those are free (cached). take: into seq's (empty) table. */
static int match_prefix(BlockPool *p, Sequence *seq, int limit, int take, int *idle) {
    int n = 0, parent = -1;
    *idle = 0;
    for (; n < limit; n++) {
        int block = find_block(p, parent, seq->tokens.ids + (size_t)n * KV_BLOCK);
        if (block < 0) break;
        *idle += p->refs[block] == 0;
        if (take) hold_block(p, block), seq->blocks[seq->n_blocks++] = block;
        parent = block;
    }
    return n;
}

/* The scheduler's state: the sequences running, in order of admission, the
   waiting ones in the order they go in (a paused one first), and those the
   last step ended, for the mode to answer. */
typedef struct {
    BlockPool pool;
    int max_running;
    Sequence **running, **waiting, **ended;
    int n_running, n_waiting, n_ended;
    int done;
    long paused, shared_tokens, generated;
} Scheduler;

static void pause_youngest(Scheduler *sc) {
    Sequence *seq = sc->running[--sc->n_running];
    release_sequence(&sc->pool, seq);
    seq->paused = 1;
    memmove(sc->waiting + 1, sc->waiting, sc->n_waiting * sizeof *sc->waiting);
    sc->waiting[0] = seq;
    sc->n_waiting++;
    sc->paused++;
}

/* Whether a running sequence will soon compute blocks of seq's start that the
   prefix table lacks (prompts with a common start admitted together): seq
   waits for them, so that they are computed once. */
static int shares_pending_blocks(const Scheduler *sc, const Sequence *seq, int matched, int limit) {
    for (int i = 0; i < sc->n_running; i++) {
        const Sequence *other = sc->running[i];
        int same = 0, n = other->tokens.n < seq->tokens.n ? other->tokens.n : seq->tokens.n;
        while (same < n && other->tokens.ids[same] == seq->tokens.ids[same]) same++;
        int common = same / KV_BLOCK < limit ? same / KV_BLOCK : limit;
        if (common > matched && other->computed < common * KV_BLOCK) return 1;
    }
    return 0;
}

/* Takes the first waiting sequence that can start: the rest of its prompt fits
   in the pool (else none starts: the first in line is not overtaken by smaller
   ones for ever), and no running one is computing its start. */
static Sequence *admit(Scheduler *sc) {
    for (int w = 0; w < sc->n_waiting; w++) {
        Sequence *seq = sc->waiting[w];
        int limit = (seq->tokens.n - 1) / KV_BLOCK; /* at least the last token is run, for its logits */
        int idle, matched = match_prefix(&sc->pool, seq, limit, 0, &idle);
        if (shares_pending_blocks(sc, seq, matched, limit)) continue;
        int need = (seq->tokens.n + KV_BLOCK - 1) / KV_BLOCK - matched;
        if (need + idle > sc->pool.n_free) return NULL;
        match_prefix(&sc->pool, seq, matched, 1, &idle);
        seq->computed = matched * KV_BLOCK;
        seq->in_table = matched;
        if (!seq->paused) sc->shared_tokens += seq->computed;
        memmove(sc->waiting + w, sc->waiting + w + 1, (sc->n_waiting - w - 1) * sizeof *sc->waiting);
        sc->n_waiting--;
        sc->running[sc->n_running++] = seq;
        return seq;
    }
    return NULL;
}

/* Tokens [computed, computed + k) of seq join the step: at most `room`, and as
   many as the pool's free blocks hold; returns k. */
static int plan_tokens(BlockPool *p, Sequence *seq, int room) {
    int k = seq->tokens.n - seq->computed, fits = seq->n_blocks * KV_BLOCK + p->n_free * KV_BLOCK - seq->computed;
    if (k > room) k = room;
    if (k > fits) k = fits;
    if (k > 0) reserve_blocks(p, seq, seq->computed + k);
    seq->planned = k > 0 ? k : 0;
    return seq->planned;
}

/* Chooses this step's tokens: the next token of every running sequence that
   is answering, then chunks of the prompts being read (in order of admission),
   then new prompts, up to MAX_BATCH tokens. A sequence that needs a block when
   none is free pauses the youngest (itself, if it is the youngest). Returns the
   tokens' count. */
static int plan_step(Scheduler *sc) {
    for (;;) {
        int T = 0;
        for (int i = 0; i < sc->n_running; i++) sc->running[i]->planned = 0;
        for (int i = 0; i < sc->n_running; i++) {
            Sequence *seq = sc->running[i];
            if (seq->tokens.n - seq->computed != 1) continue;
            int reserved;
            while (!(reserved = reserve_blocks(&sc->pool, seq, seq->computed + 1)) && i < sc->n_running - 1)
                pause_youngest(sc);
            if (!reserved) { /* seq is the youngest */
                pause_youngest(sc);
                break;
            }
            seq->planned = 1, T++;
        }
        for (int i = 0; i < sc->n_running && T < MAX_BATCH; i++)
            if (sc->running[i]->tokens.n - sc->running[i]->computed > 1) T += plan_tokens(&sc->pool, sc->running[i], MAX_BATCH - T);
        Sequence *seq;
        while (sc->n_running < sc->max_running && T < MAX_BATCH && (seq = admit(sc))) T += plan_tokens(&sc->pool, seq, MAX_BATCH - T);
        if (T > 0 || sc->n_running == 0) return T;
        pause_youngest(sc); /* every running prompt waits for blocks: free some */
    }
}

/* seq's answer is over (reason: "stop", "length" or "cancelled"): it leaves
   the running or waiting ones and lets its blocks go, and the mode answers it. */
static void end_sequence(Scheduler *sc, Sequence *seq, const char *reason) {
    for (int list = 0; list < 2; list++) { /* it is running, or (cancelled) waiting */
        Sequence **seqs = list ? sc->waiting : sc->running;
        int *n = list ? &sc->n_waiting : &sc->n_running;
        for (int i = 0; i < *n; i++)
            if (seqs[i] == seq) {
                memmove(seqs + i, seqs + i + 1, (*n - i - 1) * sizeof *seqs);
                (*n)--;
                break;
            }
    }
    release_sequence(&sc->pool, seq);
    free_answer(&seq->sampler);
    seq->finish_reason = reason;
    sc->ended[sc->n_ended++] = seq;
    sc->done++;
}

/* Where the first of the stop strings begins in text[0..len), looking only at
   those that end after byte `from`; len if none. */
static size_t find_stop_text(char *const *stops, int n_stops, const char *text, size_t len, size_t from) {
    size_t first = len;
    for (int k = 0; k < n_stops; k++) {
        size_t n = strlen(stops[k]);
        for (size_t at = from >= n ? from - n + 1 : 0; at + n <= len && at < first; at++)
            if (memcmp(text + at, stops[k], n) == 0) first = at;
    }
    return first;
}

/* The token drawn after seq's last: the end of the answer (a stop id, a stop
   string, or its max_new-th token), or the next token to run, as
   print_answer() decides. */
static void take_token(Scheduler *sc, Sequence *seq, const Tokenizer *tok, int next) {
    for (int k = 0; k < seq->n_stop; k++)
        if (next == seq->stop_ids[k]) {
            end_sequence(sc, seq, "stop");
            return;
        }
    int len;
    const char *piece = decode(tok, seq->tokens.ids[seq->tokens.n - 1], next, &len);
    size_t before = seq->text.len;
    if (piece_is_shown(tok, piece, len)) append_bytes(&seq->text, piece, len);
    seq->generated++, sc->generated++;
    size_t stop_at = find_stop_text(seq->stop_texts, seq->n_stop_texts, seq->text.data, seq->text.len, before);
    if (stop_at < seq->text.len) {
        seq->text.len = stop_at;
        end_sequence(sc, seq, "stop");
    } else if (seq->generated == seq->max_new) {
        end_sequence(sc, seq, "length");
    } else {
        append_ids(&seq->tokens, &next, 1);
    }
}

/* Runs one planned step: each sequence's tokens as a segment of one batch; the
   logits of the last token of each that has run all its tokens are sampled. */
static void run_step(Scheduler *sc, Model *m, const Tokenizer *tok, int T, float *logits) {
    int tokens[MAX_BATCH], classify[MAX_BATCH], n_segments = 0, n_classify = 0, first = 0;
    Segment segments[MAX_BATCH];
    Sequence *classified[MAX_BATCH];
    sc->n_ended = 0;
    for (int i = 0; i < sc->n_running; i++) {
        Sequence *seq = sc->running[i];
        if (!seq->planned) continue;
        memcpy(tokens + first, seq->tokens.ids + seq->computed, seq->planned * sizeof(int));
        segments[n_segments++] = (Segment){&seq->keys, &seq->values, first, seq->planned, seq->computed};
        first += seq->planned;
        seq->computed += seq->planned;
        if (seq->computed == seq->tokens.n) classify[n_classify] = first - 1, classified[n_classify++] = seq;
    }
    run_segments(m, tokens, T, segments, n_segments, classify, n_classify, logits);
    for (int i = 0; i < sc->n_running; i++) add_to_prefix_table(&sc->pool, sc->running[i]);
    int vocab = m->ck.config.vocab_size;
    for (int k = 0; k < n_classify; k++) { /* in the batch's order: finishing reorders sc->running */
        Sampler *s = &classified[k]->sampler;
        int next = sample(s, logits + (size_t)k * vocab);
        add_to_answer(s, next);
        take_token(sc, classified[k], tok, next);
    }
}

/* Progress on stderr: a line that updates in place on a terminal, else a line
   at each quarter of the prompts. */
static void report_progress(int done, int total, long generated, double seconds, int final) {
    static double last_shown;
    static int last_quarter;
    double rate = seconds > 0 ? generated / seconds : 0.0;
    if (isatty(STDERR_FILENO)) {
        if (!final && seconds - last_shown < 0.25) return;
        last_shown = seconds;
        fprintf(stderr, "\rbatch: %d/%d done, %.1f tok/s%s", done, total, rate, final ? "\n" : "");
    } else if (4 * done / total > last_quarter) {
        last_quarter = 4 * done / total;
        fprintf(stderr, "batch: %d/%d done, %.1f tok/s\n", done, total, rate);
    }
}

/* ---- Batch mode's file in, results out ---- */

/* A batch result line: the request's id, the answer, its counts, and why it ended. */
static void write_result(const Sequence *seq, const char *error) {
    const Request *q = seq->owner;
    printf("{\"id\":");
    if (q->has_id && q->id) json_write_string(stdout, q->id, strlen(q->id));
    else printf("%lld", q->has_id ? q->id_number : (long long)q->line);
    printf(",\"text\":");
    json_write_string(stdout, seq->text.data ? seq->text.data : "", seq->text.len);
    printf(",\"prompt_tokens\":%d,\"completion_tokens\":%d,\"finish_reason\":\"%s\"", seq->n_prompt, seq->generated,
           error ? "error" : seq->finish_reason);
    if (error) {
        printf(",\"error\":");
        json_write_string(stdout, error, strlen(error));
    }
    printf("}\n");
    if (fflush(stdout) != 0 || ferror(stdout)) fail("stdout: %s (the results cannot be written)", strerror(errno));
}

static void free_sequence(Sequence *seq) {
    free(seq->text.data), seq->text = (Bytes){0};
    free(seq->tokens.ids), seq->tokens = (TokenList){0};
    free(seq->blocks), seq->blocks = NULL;
}

/* -m batch: the requests of the file, each answered as generate (or chat, with
   "system") answers it alone, -b at a time. */
static void batch(Model *m, const Tokenizer *tok, char *file_text, const Options *o) {
    const Config *c = &m->ck.config;
    Request defaults = {.n = o->steps, .seed = o->seed, .temperature = o->temperature, .topp = o->topp,
                        .topk = o->topk, .minp = o->minp, .presence_penalty = o->presence_penalty,
                        .system = o->system_prompt};
    /* every line is read before the first token: a mistake stops the run with nothing written */
    int n_requests = 0, cap = 0, line = 0;
    Request *requests = NULL;
    char **decoded = NULL;
    if (strncmp(file_text, UTF8_BOM, 3) == 0) file_text += 3;
    for (char *text = file_text; text; line++) {
        char *end = strchr(text, '\n');
        size_t len = end ? (size_t)(end - text) : strlen(text);
        if (n_requests == cap) {
            cap = cap ? 2 * cap : 64;
            requests = realloc(requests, cap * sizeof *requests);
            decoded = realloc(decoded, cap * sizeof *decoded);
            if (!requests || !decoded) fail("-f %s: out of memory (%d prompts)", o->prompt_file, n_requests);
        }
        decoded[n_requests] = xmalloc(len + 1);
        if (parse_request(o->prompt_file, line + 1, text, len, decoded[n_requests], &requests[n_requests], &defaults))
            n_requests++;
        else
            free(decoded[n_requests]);
        text = end ? end + 1 : NULL;
    }
    for (int i = 0; i < n_requests; i++)
        if (requests[i].system && tok->kind == BYTE_LEVEL_BPE && !has_chat_tokens(tok))
            fail("-f %s: line %d: \"system\": the tokenizer has no chat tokens (<|start_header_id|>, <|end_header_id|>, "
                 "<|eot_id|> or <|im_start|>, <|im_end|>)", o->prompt_file, requests[i].line);

    /* the sequences: their tokens, limits and samplers; a prompt longer than the context gets its error now */
    static const int sentencepiece_end = EOS_ID;
    Scheduler sc = {.max_running = (int)o->batch};
    Sequence *seqs = xcalloc(n_requests ? n_requests : 1, sizeof(Sequence));
    sc.running = xmalloc((sc.max_running + 1) * sizeof(Sequence *));
    sc.ended = xmalloc((sc.max_running + 1) * sizeof(Sequence *));
    sc.waiting = xmalloc((n_requests ? n_requests : 1) * sizeof(Sequence *));
    int longest = 0;
    for (int i = 0; i < n_requests; i++) {
        Sequence *seq = &seqs[i];
        const Request *q = &requests[i];
        seq->owner = &requests[i];
        if (q->system) {
            seq->tokens = chat_turn(tok, 0, q->system, q->prompt, o->thinking, NULL);
            seq->stop_ids = tok->kind == SENTENCEPIECE ? &sentencepiece_end : tok->stop_ids; /* as chat() */
            seq->n_stop = tok->kind == SENTENCEPIECE ? 1 : tok->n_stop;
        } else {
            seq->tokens.ids = encode_prompt(tok, q->prompt, &seq->tokens.n);
            seq->tokens.cap = seq->tokens.n;
            seq->stop_ids = tok->stop_ids, seq->n_stop = tok->n_stop;
        }
        seq->n_prompt = seq->tokens.n;
        /* as generate with -n n_prompt - 1 + n: the answer ends where the context does */
        seq->max_new = c->seq_len + 1 - seq->n_prompt;
        if (q->n > 0 && q->n < seq->max_new) seq->max_new = (int)q->n;
        if (seq->n_prompt <= c->seq_len) {
            int positions = seq->n_prompt + seq->max_new - 1;
            if (positions > longest) longest = positions;
            sc.waiting[sc.n_waiting++] = seq;
        }
    }
    /* the pool: by default, room for as many of the longest request as run at once */
    int longest_blocks = (longest + KV_BLOCK - 1) / KV_BLOCK;
    int at_once = sc.n_waiting < sc.max_running ? sc.n_waiting : sc.max_running;
    long long pool_blocks = o->pool ? (o->pool + KV_BLOCK - 1) / KV_BLOCK : (long long)at_once * longest_blocks;
    if (sc.n_waiting > 0 && pool_blocks < longest_blocks)
        fail("-x %lld: the KV pool must hold the longest request's %d positions", o->pool, longest_blocks * KV_BLOCK);
    if (pool_blocks > INT32_MAX / KV_BLOCK) fail("-x %lld: more positions than the pool can have", o->pool);
    for (int i = 0; i < n_requests; i++) /* a prompt that cannot run: its error result now */
        if (seqs[i].n_prompt > c->seq_len) {
            char message[160];
            snprintf(message, sizeof message, "line %d: \"prompt\": %d tokens, more than the model's context (%d)",
                     requests[i].line, seqs[i].n_prompt, c->seq_len);
            write_result(&seqs[i], message);
            free_sequence(&seqs[i]);
            sc.done++;
        }
    double start = seconds_now();
    if (sc.n_waiting > 0) {
        SamplingKernels fast = start_compute((int)o->threads);
        start_model(m, longest, (int)pool_blocks, o->cache);
        init_block_pool(&sc.pool, (int)pool_blocks);
        ProbIndex *probindex = xmalloc(c->vocab_size * sizeof(ProbIndex));
        for (int i = 0; i < sc.n_waiting; i++) {
            Sequence *seq = sc.waiting[i];
            const Request *q = seq->owner;
            seq->sampler = (Sampler){.vocab_size = c->vocab_size, .temperature = q->temperature, .topp = q->topp,
                                     .topk = (int)q->topk, .minp = q->minp, .presence_penalty = q->presence_penalty,
                                     .rng_state = q->seed > 0 ? (uint64_t)q->seed : (uint64_t)time(NULL),
                                     .probindex = probindex, .softmax = fast.softmax, .argmax = fast.argmax};
            seq->blocks = xmalloc(longest_blocks * sizeof(int));
            seq->keys = m->state.key_cache, seq->values = m->state.value_cache;
            seq->keys.blocks = seq->values.blocks = seq->blocks;
        }
        float *logits = xmalloc((size_t)sc.max_running * c->vocab_size * sizeof(float)); /* a row per running sequence */
        start = seconds_now(); /* from the first step, as generate's figures: the model's weights are ready */
        for (int T; (T = plan_step(&sc)) > 0;) {
            run_step(&sc, m, tok, T, logits);
            for (int i = 0; i < sc.n_ended; i++) {
                write_result(sc.ended[i], NULL);
                free_sequence(sc.ended[i]);
            }
            report_progress(sc.done, n_requests, sc.generated, seconds_now() - start, 0);
        }
        if (sc.n_waiting > 0) fail("batch: %d prompts could not start (a fault of the scheduler)", sc.n_waiting);
        free(logits), free(probindex);
        free_block_pool(&sc.pool);
        stop_model(m);
        stop_compute();
    }
    double seconds = seconds_now() - start;
    if (n_requests > 0) report_progress(sc.done, n_requests, sc.generated, seconds, 1);
    long prompt_tokens = 0;
    for (int i = 0; i < n_requests; i++) prompt_tokens += seqs[i].n_prompt;
    fprintf(stderr, "batch: %d prompts, %ld prompt tokens (%ld from shared blocks), %ld generated in %.2f s, "
            "%.1f tok/s; -b %d, KV pool %lld positions, paused %ld times\n", n_requests, prompt_tokens,
            sc.shared_tokens, sc.generated, seconds, seconds > 0 ? sc.generated / seconds : 0.0, sc.max_running,
            (long long)sc.pool.n_blocks * KV_BLOCK, sc.paused);
    for (int i = 0; i < n_requests; i++) free(decoded[i]);
    free(decoded), free(requests), free(seqs), free(sc.running), free(sc.waiting), free(sc.ended);
}

/* ------------------------------------------------------------------------- */
/* Serve: OpenAI's API over HTTP, on batch mode's scheduler                   */

/* -m serve answers HTTP requests (POST /v1/chat/completions and
   /v1/completions, as OpenAI's clients send them) with the scheduler batch
   mode runs: every step is one batched forward over the next token of each
   running request and a bounded chunk of the prompts being read, and requests
   join and leave between steps. Two threads: the I/O thread accepts, reads
   and parses requests and writes answers, all through poll(), never waiting
   on a socket; the main thread runs the scheduler and the model (whose thread
   pool computes). They meet in a Server, under one lock: requests go in
   through its inbox, answers' bytes come back in each request's reply.

   A request's answer is the text `./run` prints for it alone (generate for a
   prompt, chat for messages), byte for byte, whatever else runs: the kernels
   give a token the same bits in any batch, and a cached prefix holds the same
   rows as a computed one.

   A request's way, and this section's order: io_thread() accepts the
   connection; serve_connection() reads its bytes; handle_request() parses the
   head (parse_http_head()) and routes it; start_api_request() reads the body
   (read_api_request()), renders the prompt's tokens (render_messages()) and
   queues it; serve()'s loop runs it in the scheduler's steps and publish()es
   its text; serve_connection() writes it out. */

#define SERVE_MAX_HEAD 16384      /* bytes of request line and headers: 431 past it */
#define SERVE_MAX_CONNECTIONS 512 /* open at once; one more replaces an idle one, or gets a 503 */
#define SERVE_READ_SECONDS 10     /* a request must arrive whole this long after its first byte */
#define SERVE_IDLE_SECONDS 30     /* a kept-alive connection may wait this long for its next request */
#define SERVE_WRITE_SECONDS 60    /* a client that reads nothing for this long is dropped */
#define SERVE_MAX_REPLY (16 << 20) /* bytes waiting for a slow reader before it is dropped */
#define MAX_STOP_TEXTS 4          /* OpenAI's limit on "stop" */
#define SERVE_POOL_CONTEXT 4096   /* the default KV pool: -b times this many positions, or the context if shorter */
#define MAX_STOP_BYTES 256        /* each stop string's: every token is compared with them */
#define SERVE_LINGER_SECONDS 2    /* after an error that closes a connection, what the client still sends is read this long */

/* One message of a chat request. */
typedef struct {
    const char *role, *content;
} ChatMessage;

/* One API request, from its body to its last byte: what was asked, the
   sequence the scheduler runs, and the bytes going back. The I/O thread makes
   it; the scheduler owns it from the inbox until it sets `finished`. */
typedef struct {
    int chat;                    /* /v1/chat/completions; else /v1/completions */
    int stream, include_usage;
    int chunked;                 /* the stream's body is chunked (HTTP/1.1) */
    int keep_alive;              /* the connection stays open after the answer */
    int thinking;                /* Qwen3's enable_thinking */
    int split_thinking;          /* the answer's <think>...</think> goes to reasoning_content */
    const char *prompt;          /* completions */
    const char *system;          /* chat: the system prompt when the messages have none (-y) */
    ChatMessage *messages;       /* chat */
    int n_messages;
    long long max_tokens, seed, top_k; /* max_tokens 0: up to the context */
    float temperature, top_p, min_p, presence_penalty;
    char *stop[MAX_STOP_TEXTS];
    int n_stop;
    char *strings;               /* the body's strings, decoded */
    char id[48];
    long long created;
    Sequence seq;
    size_t sent[2];              /* streaming: bytes of the reasoning and of the content sent */
    /* under the server's lock */
    Bytes reply;                 /* bytes for the client that the I/O thread has not taken */
    int finished;                /* the scheduler is done with it: reply is complete */
    int cancelled;               /* the client has gone */
    int refs;                    /* the I/O thread's and the scheduler's: freed at 0 */
} ApiRequest;

/* What /metrics reports. */
typedef struct {
    long stopped, cut, cancelled, errors, rejected; /* requests by outcome: "stop", "length", ... */
    long prompt_tokens, generated_tokens, prefix_hit_tokens;
    int running, waiting, blocks_used, blocks_free;
} ServerMetrics;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t work;     /* the scheduler waits on it when it has nothing to run */
    ApiRequest **inbox;
    int n_inbox;
    int in_flight;           /* queued or running: the scheduler has not finished them */
    int max_in_flight;       /* -b + -q: past it, 503 */
    int stopping;            /* 1: draining (a signal); 2: cancelling (a second one) */
    int wake[2];             /* a pipe: a byte in it wakes the I/O thread's poll() */
    ServerMetrics metrics;
    /* fixed at start */
    const Tokenizer *tok;
    int seq_len;             /* a request's context: the model's, or the KV pool if smaller */
    int longest_piece;       /* bytes: a prompt longer than the context times this is refused unread */
    const char *model_name, *api_key;
    long long body_limit;
    Request defaults;        /* the command line's sampling settings, -n and -y */
    int thinking;            /* -e: enable_thinking unless a request says */
    int thinking_tokens;     /* the tokenizer has Qwen3's <think> and </think> */
} Server;

static void wake_io(Server *sv) {
    char byte = 1;
    ssize_t ignored = write(sv->wake[1], &byte, 1); /* a full pipe already wakes it */
    (void)ignored;
}

/* Drops one reference to q (under the lock); the last one frees it. */
static void release_request(ApiRequest *q) {
    if (--q->refs > 0) return;
    free(q->reply.data), free(q->messages), free(q->strings);
    free_sequence(&q->seq);
    free(q);
}

/* ---- An HTTP request's head ---- */

typedef struct {
    char method[8];
    char path[64];               /* without its query; "" if longer */
    long long content_length;    /* -1: none given */
    int keep_alive, expect_continue, http10;
    char authorization[256];     /* "" if none (or longer) */
    size_t head_len;             /* bytes of request line and headers, the blank line included */
} HttpHead;

static int same_word(const char *a, size_t n, const char *word) {
    return strlen(word) == n && strncasecmp(a, word, n) == 0;
}

/* Parses the head at buf[0..len) (RFC 9112). Returns 0 while it is not whole,
   the status of a mistake (400, 431, 501, 505) with *why, or 200. */
static int parse_http_head(const char *buf, size_t len, HttpHead *h, const char **why) {
    *h = (HttpHead){.content_length = -1};
    const char *end = NULL;
    for (size_t i = 0; i + 3 < len && i + 3 < SERVE_MAX_HEAD; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            end = buf + i + 2; /* the blank line's start */
            break;
        }
    if (!end) {
        for (size_t i = 0; i + 1 < len && i + 1 < SERVE_MAX_HEAD; i++)
            if (buf[i] == '\n' && buf[i + 1] == '\n') { /* never whole: say so now, not at the timeout */
                *why = "the head's lines must end with CR LF";
                return 400;
            }
        *why = "the request's head is over 16 KB";
        return len >= SERVE_MAX_HEAD ? 431 : 0;
    }
    h->head_len = (size_t)(end - buf) + 2;
    /* the request line: METHOD SP TARGET SP HTTP/1.x */
    const char *p = buf, *line_end = memchr(buf, '\r', end - buf);
    size_t m = 0;
    *why = "malformed request line";
    if (line_end[1] != '\n') return 400;
    while (p + m < line_end && isupper((unsigned char)p[m]) && m < sizeof h->method - 1) m++;
    *why = "malformed request line";
    if (m == 0 || p[m] != ' ') return 400;
    memcpy(h->method, p, m);
    p += m + 1;
    const char *target = p;
    while (p < line_end && *p > ' ' && *p < 0x7F) p++;
    if (p == target || *target != '/' || p == line_end || *p != ' ') return 400;
    size_t path_len = 0;
    while (target + path_len < p && target[path_len] != '?') path_len++;
    if (path_len < sizeof h->path) memcpy(h->path, target, path_len);
    p++;
    if (line_end - p != 8 || memcmp(p, "HTTP/", 5) != 0 || !isdigit((unsigned char)p[5]) || p[6] != '.' ||
        !isdigit((unsigned char)p[7]))
        return 400;
    *why = "only HTTP/1.0 and HTTP/1.1 are spoken here";
    if (p[5] != '1' || (p[7] != '0' && p[7] != '1')) return 505;
    h->keep_alive = p[7] == '1';
    h->http10 = p[7] == '0';
    /* the header fields: name ":" OWS value OWS CRLF */
    for (p = line_end + 2; p < end;) {
        line_end = memchr(p, '\r', end - p + 2);
        *why = "malformed header field";
        if (!line_end || line_end[1] != '\n') return 400;
        const char *colon = p;
        while (colon < line_end && *colon != ':' && (isalnum((unsigned char)*colon) || strchr("!#$%&'*+-.^_`|~", *colon)))
            colon++;
        if (colon == p || colon == line_end || *colon != ':') return 400;
        const char *value = colon + 1, *value_end = line_end;
        while (value < value_end && (*value == ' ' || *value == '\t')) value++;
        while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) value_end--;
        for (const char *c = value; c < value_end; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t') return 400;
        size_t name_len = (size_t)(colon - p), value_len = (size_t)(value_end - value);
        if (same_word(p, name_len, "content-length")) {
            long long n = 0;
            *why = "bad Content-Length";
            if (value_len == 0 || value_len > 15) return 400;
            for (const char *c = value; c < value_end; c++) {
                if (!isdigit((unsigned char)*c)) return 400;
                n = n * 10 + (*c - '0');
            }
            if (h->content_length >= 0 && h->content_length != n) return 400;
            h->content_length = n;
        } else if (same_word(p, name_len, "transfer-encoding")) {
            *why = "Transfer-Encoding in a request is not supported: send Content-Length";
            return 501;
        } else if (same_word(p, name_len, "connection")) {
            for (const char *c = value; c < value_end;) { /* a list of options */
                const char *e = c;
                while (e < value_end && *e != ',') e++;
                const char *a = c, *b = e;
                while (a < b && (*a == ' ' || *a == '\t')) a++;
                while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
                if (same_word(a, b - a, "close")) h->keep_alive = 0;
                if (same_word(a, b - a, "keep-alive")) h->keep_alive = 1;
                c = e < value_end ? e + 1 : e;
            }
        } else if (same_word(p, name_len, "expect")) {
            h->expect_continue = same_word(value, value_len, "100-continue");
        } else if (same_word(p, name_len, "authorization") && value_len < sizeof h->authorization) {
            memcpy(h->authorization, value, value_len);
            h->authorization[value_len] = '\0';
        }
        p = line_end + 2;
    }
    return 200;
}

/* Whether the Authorization header is "Bearer <key>", in time that does not
   depend on where they first differ. */
static int authorized(const char *key, const char *authorization) {
    if (!key) return 1;
    if (strncmp(authorization, "Bearer ", 7) != 0) return 0;
    const char *given = authorization + 7;
    size_t n = strlen(key), given_len = strlen(given);
    unsigned char diff = n != given_len;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (given_len ? given[i % given_len] : 0));
    return diff == 0;
}

/* ---- An API request's body ---- */

/* Whether the value at r->p is one that leaves the answer as it is for a
   field this server does not implement: null, or the field's neutral value
   ("0", "1", "false", "{}", "[]", "\"\"", "\"none\""). Reads the value. */
static int json_neutral(JsonReader *r, const char *field, const char *neutral) {
    if (json_word(r, "null")) return 1;
    if (r->p == r->end) return 0;
    if (*neutral == '{' || *neutral == '[') return *r->p == *neutral && !json_open(r, *neutral, field);
    if (*neutral == '"') {
        if (*r->p != '"') return 0;
        char *text = (char *)json_string(r, field);
        r->out = text;
        return strlen(text) + 2 == strlen(neutral) && strncmp(text, neutral + 1, strlen(text)) == 0;
    }
    if (isdigit((unsigned char)*neutral))
        return (*r->p == '-' || isdigit((unsigned char)*r->p)) && json_number(r, field, 0, NULL) == atof(neutral);
    return json_word(r, neutral);
}

/* A message's content: a string, or an array of {"type": "text", "text": ...}
   parts, which are joined. */
static const char *read_content(JsonReader *r, const char *field) {
    if (r->p < r->end && *r->p == '"') return json_string(r, field);
    char *start = r->out;
    size_t joined = 0; /* the parts' bytes so far, from start; names and types are decoded after them, and dropped */
    if (r->p == r->end || *r->p != '[') json_error(r, "%s: expected a string or an array of text parts, found %s", field, json_type_at(r));
    if (json_open(r, '[', field))
        do {
            int is_text = 0;
            if (json_open(r, '{', field))
                do {
                    const char *key_at = r->p;
                    r->out = start + joined;
                    char *key = json_key(r);
                    r->out = start + joined;
                    if (strcmp(key, "type") == 0) {
                        if (r->p == r->end || *r->p != '"') json_error(r, "%s: \"type\": expected a string", field);
                        is_text = strcmp(json_string(r, field), "text") == 0;
                        if (!is_text) json_error(r, "%s: only text parts are supported", field);
                    } else if (strcmp(key, "text") == 0) {
                        if (r->p == r->end || *r->p != '"') json_error(r, "%s: \"text\": expected a string", field);
                        joined += strlen(json_string(r, field));
                    } else {
                        char name[256];
                        written_string(key_at, name);
                        r->p = key_at, json_error(r, "%s: a part's field \"%s\" is not supported", field, name);
                    }
                } while (json_next(r, '}', field));
            if (!is_text) json_error(r, "%s: a part without \"type\": \"text\"", field);
        } while (json_next(r, ']', field));
    start[joined] = '\0';
    r->out = start + joined + 1;
    return start;
}

static void read_messages(JsonReader *r, ApiRequest *q) {
    r->field = "messages";
    int cap = 0;
    if (json_open(r, '[', "\"messages\""))
        do {
            if (q->n_messages == cap) {
                cap = cap ? 2 * cap : 8;
                ChatMessage *grown = realloc(q->messages, cap * sizeof *grown);
                if (!grown) json_error(r, "\"messages\": out of memory");
                q->messages = grown;
            }
            ChatMessage *msg = &q->messages[q->n_messages++];
            *msg = (ChatMessage){0};
            int has_content = 0, has_name = 0;
            if (json_open(r, '{', "\"messages\": each message"))
                do {
                    const char *key_at = r->p;
                    char *key = json_key(r), name[256];
                    int twice = strcmp(key, "role") == 0 ? msg->role != NULL : strcmp(key, "content") == 0 ? has_content
                                                                             : strcmp(key, "name") == 0 && has_name++;
                    if (twice) written_string(key_at, name), r->p = key_at, json_error(r, "\"messages\": \"%s\" appears twice in a message", name);
                    if (strcmp(key, "role") == 0) {
                        r->out = key;
                        if (r->p == r->end || *r->p != '"') json_error(r, "\"role\": expected a string, found %s", json_type_at(r));
                        const char *role_at = r->p;
                        msg->role = json_string(r, "\"role\"");
                        if (strcmp(msg->role, "developer") == 0) msg->role = "system"; /* OpenAI's newer name */
                        if (strcmp(msg->role, "system") && strcmp(msg->role, "user") && strcmp(msg->role, "assistant")) {
                            written_string(role_at, name);
                            r->p = role_at, json_error(r, "\"role\": \"%s\" is not system, user or assistant", name);
                        }
                    } else if (strcmp(key, "content") == 0) {
                        r->out = key;
                        msg->content = read_content(r, "\"content\"");
                        has_content = 1;
                    } else if (strcmp(key, "name") == 0 || strcmp(key, "reasoning_content") == 0) {
                        /* a name changes nothing in these templates; an earlier answer's thinking is dropped, as Qwen3's does */
                        r->out = key;
                        json_skip(r, "\"name\"");
                    } else {
                        written_string(key_at, name);
                        r->p = key_at, json_error(r, "\"messages\": the field \"%s\" is not supported", name);
                    }
                } while (json_next(r, '}', "a message's field"));
            if (!msg->role || !has_content) json_error(r, "\"messages\": each message needs \"role\" and \"content\"");
        } while (json_next(r, ']', "a message"));
    if (q->n_messages == 0) json_error(r, "\"messages\": no message");
}

/* The body of a completions or chat request, into q (whose sampling settings
   are the command line's). Fields that would change the answer and are not
   implemented are refused, naming them; those that would not are ignored. */
static void read_api_request(JsonReader *r, void *arg) {
    ApiRequest *q = arg;
    static const char *const neutral[][2] = {{"frequency_penalty", "0"}, {"repetition_penalty", "1"}, {"logprobs", "false"},
                                             {"top_logprobs", "0"}, {"echo", "false"}, {"best_of", "1"},
                                             {"logit_bias", "{}"}, {"tools", "[]"}, {"tool_choice", "\"none\""},
                                             {"suffix", "\"\""}, {"response_format", "{}"}, {"functions", "[]"}};
    static const char *const ignored[] = {"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls"};
    int has_prompt = 0, has_messages = 0, n_seen = 0;
    const char *seen[32]; /* the fields so far: each may come once (an unknown one is refused at once) */
    json_space(r);
    if (json_open(r, '{', "the body"))
        do {
            const char *key_at = r->p;
            char *key = json_key(r);
            for (int i = 0; i < n_seen; i++)
                if (strcmp(seen[i], key) == 0) r->field = key, r->p = key_at, json_error(r, "\"%s\" appears twice", key);
            if (n_seen < 32) seen[n_seen++] = key;
            char field[48];
            snprintf(field, sizeof field, "\"%.40s\"", key);
            r->field = key;
            if (strcmp(key, "stream_options") == 0 || strcmp(key, "chat_template_kwargs") == 0) {
                int options = key[1] == 't'; /* stream_options */
                if (!json_word(r, "null") && json_open(r, '{', field))
                    do {
                        char *name = json_key(r);
                        if (json_word(r, "null")) {
                            /* as if left out */
                        } else if (options && strcmp(name, "include_usage") == 0) {
                            q->include_usage = json_bool(r, "\"include_usage\"");
                        } else if (!options && strcmp(name, "enable_thinking") == 0) {
                            q->thinking = json_bool(r, "\"enable_thinking\"");
                        } else {
                            json_skip(r, field);
                        }
                    } while (json_next(r, '}', field));
            } else if (strcmp(key, "prompt") == 0) {
                if (r->p == r->end || *r->p != '"') json_error(r, "\"prompt\": expected a string, found %s", json_type_at(r));
                q->prompt = json_string(r, "\"prompt\"");
                has_prompt = 1;
            } else if (strcmp(key, "messages") == 0) {
                read_messages(r, q);
                r->field = "messages";
                has_messages = 1;
            } else if (json_word(r, "null")) {
                /* null: as if the field were left out */
            } else if (strcmp(key, "max_tokens") == 0 || strcmp(key, "max_completion_tokens") == 0) {
                q->max_tokens = json_integer(r, field, 1, INT32_MAX);
            } else if (strcmp(key, "temperature") == 0) {
                q->temperature = json_float(r, field, 0, HUGE_VAL);
            } else if (strcmp(key, "top_p") == 0) {
                q->top_p = json_float(r, field, 0, 1);
            } else if (strcmp(key, "top_k") == 0) {
                q->top_k = json_integer(r, field, -1, INT32_MAX); /* -1: off, as vLLM's */
                if (q->top_k < 0) q->top_k = 0;
            } else if (strcmp(key, "min_p") == 0) {
                q->min_p = json_float(r, field, 0, 1);
            } else if (strcmp(key, "presence_penalty") == 0) {
                q->presence_penalty = json_float(r, field, -2, 2);
            } else if (strcmp(key, "seed") == 0) {
                q->seed = json_integer(r, field, 0, LLONG_MAX);
            } else if (strcmp(key, "stream") == 0) {
                q->stream = json_bool(r, field);
            } else if (strcmp(key, "n") == 0) {
                if (json_integer(r, field, 1, INT32_MAX) != 1) r->p = key_at, json_error(r, "\"n\": only 1 answer per request");
            } else if (strcmp(key, "stop") == 0) {
                int array = r->p < r->end && *r->p == '[';
                if (!array && (r->p == r->end || *r->p != '"'))
                    json_error(r, "\"stop\": expected a string or an array of strings, found %s", json_type_at(r));
                if (!array || json_open(r, '[', field))
                    do {
                        if (r->p == r->end || *r->p != '"') json_error(r, "\"stop\": expected a string, found %s", json_type_at(r));
                        if (q->n_stop == MAX_STOP_TEXTS) json_error(r, "\"stop\": at most %d strings", MAX_STOP_TEXTS);
                        char *text = (char *)json_string(r, field);
                        if (strlen(text) > MAX_STOP_BYTES) json_error(r, "\"stop\": a string of at most %d bytes", MAX_STOP_BYTES);
                        if (text[0]) q->stop[q->n_stop++] = text; /* an empty string stops nothing */
                    } while (array && json_next(r, ']', field));
            } else {
                int f = 0, n_neutral = (int)(sizeof neutral / sizeof *neutral), n_ignored = (int)(sizeof ignored / sizeof *ignored);
                while (f < n_neutral && strcmp(key, neutral[f][0]) != 0) f++;
                if (f < n_neutral) {
                    if (!json_neutral(r, field, neutral[f][1]))
                        r->p = key_at, json_error(r, "%s: not supported (only %s, or leaving it out)", field, neutral[f][1]);
                } else {
                    f = 0;
                    while (f < n_ignored && strcmp(key, ignored[f]) != 0) f++;
                    if (f == n_ignored) {
                        char name[256];
                        written_string(key_at, name);
                        r->p = key_at, json_error(r, "unknown field \"%s\"", name);
                    }
                    json_skip(r, field);
                }
            }
        } while (json_next(r, '}', "a field"));
    json_space(r);
    if (r->p != r->end) json_error(r, "more after the request's object");
    r->field = q->chat ? "messages" : "prompt";
    if (q->chat && has_prompt) r->field = "prompt", json_error(r, "\"prompt\": for /v1/completions; this is chat");
    if (!q->chat && has_messages) r->field = "messages", json_error(r, "\"messages\": for /v1/chat/completions");
    if (q->chat && !has_messages) r->p = r->text, json_error(r, "no \"messages\"");
    if (!q->chat && !has_prompt) r->p = r->text, json_error(r, "no \"prompt\"");
}

/* A chat's messages in the tokenizer's template, as -m chat renders the same
   conversation: [system], then user and assistant turns by turns, ending with
   a user's; each assistant message as chat() leaves its answer in the
   context. NULL, with *why, if the messages are not such a conversation. */
static int render_messages(const Tokenizer *tok, const ApiRequest *q, TokenList *l, const char **why) {
    const ChatMessage *msg = q->messages;
    int n = q->n_messages, first = 0, turn = 0;
    const char *system = q->system ? q->system : "";
    if (strcmp(msg[0].role, "system") == 0) system = msg[0].content, first = 1;
    int turns = n > first && strcmp(msg[n - 1].role, "user") == 0;
    for (int i = first; i < n; i++) turns &= strcmp(msg[i].role, (i - first) % 2 ? "assistant" : "user") == 0;
    if (!turns) {
        *why = "\"messages\": after an optional system message, user and assistant messages take turns, the last a user's";
        return 0;
    }
    *l = (TokenList){0};
    for (int i = first; i < n; i++) {
        if (strcmp(msg[i].role, "user") == 0) {
            TokenList t = chat_turn(tok, turn++, system, msg[i].content, i == n - 1 ? q->thinking : 1, NULL);
            append_ids(l, t.ids, t.n);
            free(t.ids);
            continue;
        }
        /* an assistant's answer after its header, as chat() ends an answer */
        const char *content = msg[i].content;
        if (tok->kind == SENTENCEPIECE) { /* [/INST] answer </s> */
            append_text(l, tok, content, strlen(content));
            append_ids(l, &(int){EOS_ID}, 1);
        } else if (tok->chat == CHATML) { /* from the role on, as end_chatml_answer() */
            while (l->n > 0 && l->ids[l->n - 1] != tok->turn_start_id) l->n--;
            TokenList answer = chatml_answer_text(tok, content, strlen(content));
            append_ids(l, answer.ids, answer.n);
            free(answer.ids);
        } else { /* Llama 3: the header again, with the answer, then <|eot_id|> */
            while (l->n > 0 && l->ids[l->n - 1] != tok->turn_start_id) l->n--;
            l->n--;
            append_message(l, tok, "assistant", content);
            append_ids(l, &tok->turn_end_id, 1);
        }
    }
    return 1;
}

/* ---- Answers: HTTP responses, OpenAI's JSON and its stream of chunks ---- */

static const char *status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Internal Server Error";
    }
}

static void append_response(Bytes *out, int status, const char *type, const Bytes *body, int keep_alive, const char *headers) {
    append_format(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n", status,
                  status_text(status), type, body->len, keep_alive ? "" : "Connection: close\r\n", headers ? headers : "");
    append_bytes(out, body->data, body->len);
}

/* OpenAI's error object: {"error": {"message", "type", "param", "code"}}. */
static void append_error(Bytes *out, int status, const char *message, const char *param, const char *code, int keep_alive) {
    const char *type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    Bytes body = {0};
    append_format(&body, "{\"error\":{\"message\":");
    append_json_string(&body, message, strlen(message));
    append_format(&body, ",\"type\":\"%s\",\"param\":", type);
    if (param) append_json_string(&body, param, strlen(param));
    else append_format(&body, "null");
    append_format(&body, ",\"code\":");
    if (code) append_json_string(&body, code, strlen(code));
    else append_format(&body, "null");
    append_format(&body, "}}");
    const char *headers = status == 503 ? "Retry-After: 1\r\n" : status == 405 ? "Allow: POST\r\n" : NULL;
    append_response(out, status, "application/json", &body, keep_alive, headers);
    free(body.data);
}

/* data[0..len) of a stream's body: one piece of a chunked body (RFC 9112,
   7.1), or for an HTTP/1.0 client, which knows no chunks, as it is (the
   connection's end ends the body). len 0 ends a chunked body. */
static void append_chunk(Bytes *out, int chunked, const char *data, size_t len) {
    if (chunked) append_format(out, "%zx\r\n", len);
    append_bytes(out, data, len);
    if (chunked) append_format(out, "\r\n");
}

/* One Server-Sent Event holding the JSON in event. */
static void append_event(Bytes *out, int chunked, const Bytes *event) {
    Bytes sse = {0};
    append_format(&sse, "data: ");
    append_bytes(&sse, event->data, event->len);
    append_format(&sse, "\n\n");
    append_chunk(out, chunked, sse.data, sse.len);
    free(sse.data);
}

/* A stream's last bytes. */
static void append_done(Bytes *out, int chunked) {
    append_chunk(out, chunked, "data: [DONE]\n\n", strlen("data: [DONE]\n\n"));
    if (chunked) append_chunk(out, chunked, "", 0);
}

/* The head every answer and chunk starts with, up to "choices":. */
static void append_answer_head(Bytes *b, const Server *sv, const ApiRequest *q) {
    const char *object = q->chat ? (q->stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    append_format(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", q->id, object, q->created);
    append_json_string(b, sv->model_name, strlen(sv->model_name));
    append_format(b, ",\"choices\":");
}

static void append_usage(Bytes *b, const Sequence *seq) {
    append_format(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}", seq->n_prompt,
                  seq->generated, seq->n_prompt + seq->generated);
}

/* How much of the answer can be shown: all of it once it has ended; before,
   not a last character that is not yet whole, nor an end that may yet turn
   out to be the start of a stop string. */
static size_t shown_length(const Sequence *seq, int final) {
    const char *text = seq->text.data;
    size_t len = seq->text.len;
    if (final) return len;
    for (size_t back = 1; back <= 3 && back <= len; back++) { /* a character cut short */
        unsigned char c = (unsigned char)text[len - back];
        if ((c & 0xC0) == 0x80) continue;
        int need = c >= 0xF5 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1; /* 1: not a lead byte */
        if (need > (int)back && utf8_char_len((const unsigned char *)text + len - back, back) == 0) len -= back;
        break;
    }
    size_t hold = 0;
    for (int k = 0; k < seq->n_stop_texts; k++) {
        size_t n = strlen(seq->stop_texts[k]);
        for (size_t part = n - 1 < len ? n - 1 : len; part > hold; part--)
            if (memcmp(text + len - part, seq->stop_texts[k], part) == 0) {
                hold = part;
                break;
            }
    }
    return len - hold;
}

/* Splits the shown text into reasoning and content, part[0] and part[1] (each
   [from, to)): Qwen3's answer "<think>\nreasoning\n</think>\n\ncontent", as
   vLLM and llama-server return it; without thinking, all is content. Before
   the end, what may still change (a "<think>" or "</think>" not yet whole,
   newlines that may be trimmed) waits. */
static void split_answer(const ApiRequest *q, size_t len, int final, size_t part[2][2]) {
    const char *text = q->seq.text.data ? q->seq.text.data : "";
    static const char open[] = "<think>", close[] = "</think>";
    part[0][0] = part[0][1] = 0;
    part[1][0] = 0, part[1][1] = len;
    if (!q->split_thinking) return;
    if (len < strlen(open) && memcmp(text, open, len) == 0) { /* perhaps "<think>" */
        if (!final) part[1][1] = 0;
        return;
    }
    if (len < strlen(open) || memcmp(text, open, strlen(open)) != 0) return;
    size_t from = strlen(open), at = from;
    while (from < len && text[from] == '\n') from++;
    while (at + strlen(close) <= len && memcmp(text + at, close, strlen(close)) != 0) at++;
    int closed = at + strlen(close) <= len;
    size_t to = closed ? at : len;
    if (!closed && !final) /* an end that may be the start of "</think>" */
        for (size_t n = strlen(close) - 1; n > 0; n--)
            if (n <= to - from && memcmp(text + to - n, close, n) == 0) {
                to -= n;
                break;
            }
    if (closed || !final)
        while (to > from && text[to - 1] == '\n') to--;
    part[0][0] = from, part[0][1] = to;
    part[1][0] = part[1][1] = len;
    if (!closed) return;
    size_t content = at + strlen(close);
    while (content < len && text[content] == '\n') content++;
    part[1][0] = content;
}

/* Sends what is new of q's answer: a chunk for each part that grew; at the
   end (final), the rest, the reason, the usage and [DONE]. Non-streaming, the
   whole answer at the end. Under the server's lock. */
static void publish(Server *sv, ApiRequest *q, int final) {
    const Sequence *seq = &q->seq;
    if (!q->stream && !final) return;
    size_t part[2][2];
    split_answer(q, shown_length(seq, final), final, part);
    const char *text = seq->text.data ? seq->text.data : "";
    Bytes b = {0};
    if (!q->stream) {
        append_answer_head(&b, sv, q);
        append_format(&b, "[{\"index\":0,");
        if (q->chat) {
            append_format(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
            append_json_string(&b, text + part[1][0], part[1][1] - part[1][0]);
            if (part[0][1] > part[0][0]) {
                append_format(&b, ",\"reasoning_content\":");
                append_json_string(&b, text + part[0][0], part[0][1] - part[0][0]);
            }
            append_format(&b, "},");
        } else {
            append_format(&b, "\"text\":");
            append_json_string(&b, text, part[1][1]);
            append_format(&b, ",");
        }
        append_format(&b, "\"logprobs\":null,\"finish_reason\":\"%s\"}],", seq->finish_reason);
        append_usage(&b, seq);
        append_format(&b, "}");
        append_response(&q->reply, 200, "application/json", &b, q->keep_alive, NULL);
        free(b.data);
        return;
    }
    static const char *const names[2] = {"reasoning_content", "content"};
    for (int k = 0; k < 2; k++) {
        size_t from = q->sent[k] > part[k][0] ? q->sent[k] : part[k][0];
        if (part[k][1] <= from) continue;
        b.len = 0;
        append_answer_head(&b, sv, q);
        if (q->chat) append_format(&b, "[{\"index\":0,\"delta\":{\"%s\":", names[k]);
        else append_format(&b, "[{\"index\":0,\"text\":");
        append_json_string(&b, text + from, part[k][1] - from);
        append_format(&b, "%s\"logprobs\":null,\"finish_reason\":null}]}", q->chat ? "}," : ",");
        append_event(&q->reply, q->chunked, &b);
        q->sent[k] = part[k][1];
    }
    if (final) {
        b.len = 0;
        append_answer_head(&b, sv, q);
        append_format(&b, "[{\"index\":0,%s\"logprobs\":null,\"finish_reason\":\"%s\"}]}", q->chat ? "\"delta\":{}," : "\"text\":\"\",",
                      seq->finish_reason);
        append_event(&q->reply, q->chunked, &b);
        if (q->include_usage) {
            b.len = 0;
            append_answer_head(&b, sv, q);
            append_format(&b, "[],");
            append_usage(&b, seq);
            append_format(&b, "}");
            append_event(&q->reply, q->chunked, &b);
        }
        append_done(&q->reply, q->chunked);
    }
    free(b.data);
}

/* The answer to a request the server cut short (a second signal): an error,
   in the stream or as the response. */
static void publish_cancelled(ApiRequest *q) {
    static const char message[] = "the server is shutting down: this answer was cut short";
    if (!q->stream) {
        append_error(&q->reply, 503, message, NULL, "shutting_down", 0);
        return;
    }
    Bytes b = {0};
    append_format(&b, "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\",\"param\":null,\"code\":\"shutting_down\"}}", message);
    append_event(&q->reply, q->chunked, &b);
    append_done(&q->reply, q->chunked);
    free(b.data);
}

/* ---- The I/O thread: connections, requests in, answers out ---- */

typedef struct {
    int fd;
    Bytes in, out;          /* bytes read and not yet handled; bytes to write */
    size_t out_sent;
    double since;           /* when it began to wait: for a request's bytes, for its next request, or for the client to read */
    ApiRequest *request;    /* being answered */
    HttpHead head;          /* the request's head, once it is whole (have_head) */
    int have_head;
    int keep_alive;         /* after this answer, read the next request */
    int http10;             /* the request is HTTP/1.0's */
    int closing;            /* close after what it has to write */
    int lingering;          /* closing: its end sent, it reads and drops what comes until the client's end */
    int answered;           /* it has had an answer: waiting for the next request, it is idle */
} Connection;


/* Counts an ended request by why it ended, for /metrics (under the lock). */
static void count_outcome(Server *sv, const char *reason) {
    ServerMetrics *m = &sv->metrics;
    if (strcmp(reason, "stop") == 0) m->stopped++;
    else if (strcmp(reason, "length") == 0) m->cut++;
    else m->cancelled++;
}

static void append_metrics(Bytes *b, const ServerMetrics *m) {
    append_format(b, "# HELP run_requests_total API requests answered, by outcome.\n# TYPE run_requests_total counter\n");
    const char *names[] = {"stop", "length", "cancelled", "error", "rejected"};
    long counts[] = {m->stopped, m->cut, m->cancelled, m->errors, m->rejected};
    for (int i = 0; i < 5; i++) append_format(b, "run_requests_total{outcome=\"%s\"} %ld\n", names[i], counts[i]);
    append_format(b, "# HELP run_prompt_tokens_total Prompt tokens of the requests answered.\n"
                     "# TYPE run_prompt_tokens_total counter\nrun_prompt_tokens_total %ld\n"
                     "# HELP run_generated_tokens_total Tokens generated.\n"
                     "# TYPE run_generated_tokens_total counter\nrun_generated_tokens_total %ld\n"
                     "# HELP run_prefix_cache_hit_tokens_total Prompt tokens whose keys and values came from the cache.\n"
                     "# TYPE run_prefix_cache_hit_tokens_total counter\nrun_prefix_cache_hit_tokens_total %ld\n",
                  m->prompt_tokens, m->generated_tokens, m->prefix_hit_tokens);
    append_format(b, "# HELP run_requests_running Requests in the batch.\n# TYPE run_requests_running gauge\n"
                     "run_requests_running %d\n"
                     "# HELP run_requests_waiting Requests queued for the batch.\n# TYPE run_requests_waiting gauge\n"
                     "run_requests_waiting %d\n"
                     "# HELP run_kv_blocks_used KV cache blocks held by requests.\n# TYPE run_kv_blocks_used gauge\n"
                     "run_kv_blocks_used %d\n"
                     "# HELP run_kv_blocks_free KV cache blocks free (some holding cached prefixes).\n"
                     "# TYPE run_kv_blocks_free gauge\nrun_kv_blocks_free %d\n",
                  m->running, m->waiting, m->blocks_used, m->blocks_free);
}

/* A completions or chat request with its body: parsed, its prompt's tokens
   made, and queued for the scheduler; or answered with an error. Returns
   the request queued, or NULL. */
static ApiRequest *start_api_request(Server *sv, Connection *c, int chat, const char *body, size_t len) {
    ApiRequest *q = xcalloc(1, sizeof *q);
    const Request *d = &sv->defaults;
    q->chat = chat, q->thinking = sv->thinking, q->max_tokens = d->n, q->seed = d->seed, q->top_k = d->topk;
    q->system = d->system;
    q->temperature = d->temperature, q->top_p = d->topp, q->min_p = d->minp, q->presence_penalty = d->presence_penalty;
    q->strings = xmalloc(len + 1);
    q->refs = 1;
    JsonReader r = {.text = body, .p = body, .end = body + len, .out = q->strings};
    char message[700];
    const char *why = NULL, *param = NULL, *code = NULL;
    TokenList prompt = {0};
    size_t text_bytes = 0;
    if (!json_read(&r, read_api_request, q)) {
        snprintf(message, sizeof message, "%s (at byte %ld of the body)", r.error, r.error_at);
        why = message, param = r.field;
    } else if (chat && sv->tok->kind == BYTE_LEVEL_BPE && !has_chat_tokens(sv->tok)) {
        why = "the model's tokenizer has no chat template: use /v1/completions", param = "messages";
    } else if (!q->thinking && !sv->thinking_tokens) {
        why = "\"enable_thinking\": false needs a model that thinks (Qwen3's <think> tokens)", param = "chat_template_kwargs";
    } else {
        if (chat)
            for (int i = 0; i < q->n_messages; i++) text_bytes += strlen(q->messages[i].content);
        else
            text_bytes = strlen(q->prompt);
        /* a token is at most the longest piece: this many bytes cannot fit, and need not be encoded */
        if (text_bytes > (size_t)sv->seq_len * (sv->longest_piece + 1) + 64) {
            snprintf(message, sizeof message, "the prompt (%zu bytes) is longer than the model's context (%d tokens)",
                     text_bytes, sv->seq_len);
            why = message, param = chat ? "messages" : "prompt", code = "context_length_exceeded";
        } else if (chat && !render_messages(sv->tok, q, &prompt, &why)) {
            param = "messages";
        } else if (!chat) {
            prompt.ids = encode_prompt(sv->tok, q->prompt, &prompt.n);
            prompt.cap = prompt.n;
        }
        if (!why && prompt.n > sv->seq_len) {
            snprintf(message, sizeof message, "the prompt is %d tokens, more than the model's context (%d)", prompt.n,
                     sv->seq_len);
            why = message, param = chat ? "messages" : "prompt", code = "context_length_exceeded";
        }
    }
    pthread_mutex_lock(&sv->lock);
    int busy = !why && (sv->in_flight >= sv->max_in_flight || sv->stopping);
    if (why) sv->metrics.errors++;
    else if (busy) sv->metrics.rejected++;
    pthread_mutex_unlock(&sv->lock);
    if (why || busy) {
        if (why) append_error(&c->out, 400, why, param, code, c->keep_alive);
        else append_error(&c->out, 503, sv->stopping ? "the server is shutting down" : "the server is full: try again soon",
                          NULL, NULL, c->keep_alive);
        free(prompt.ids);
        release_request(q);
        return NULL;
    }
    /* the sequence the scheduler will run */
    static atomic_long counter;
    q->created = (long long)time(NULL);
    snprintf(q->id, sizeof q->id, "%s-%llx%lx", chat ? "chatcmpl" : "cmpl", q->created, (long)atomic_fetch_add(&counter, 1));
    Sequence *seq = &q->seq;
    seq->owner = q;
    seq->tokens = prompt;
    seq->n_prompt = prompt.n;
    seq->max_new = sv->seq_len + 1 - seq->n_prompt; /* as batch mode: the answer ends where the context does */
    if (q->max_tokens > 0 && q->max_tokens < seq->max_new) seq->max_new = (int)q->max_tokens;
    static const int sentencepiece_end = EOS_ID;
    seq->stop_ids = chat && sv->tok->kind == SENTENCEPIECE ? &sentencepiece_end : sv->tok->stop_ids; /* as chat() */
    seq->n_stop = chat && sv->tok->kind == SENTENCEPIECE ? 1 : sv->tok->n_stop;
    seq->stop_texts = q->stop, seq->n_stop_texts = q->n_stop;
    q->split_thinking = chat && q->thinking && sv->thinking_tokens;
    q->keep_alive = c->keep_alive;
    if (q->stream) { /* the head now, and for chat the role: the answer follows as it comes */
        q->chunked = !c->http10;
        if (c->http10) c->keep_alive = 0;
        append_format(&c->out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n%s%s\r\n",
                      q->chunked ? "Transfer-Encoding: chunked\r\n" : "", c->keep_alive ? "" : "Connection: close\r\n");
        if (chat) {
            Bytes b = {0};
            append_answer_head(&b, sv, q);
            append_format(&b, "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                              "\"finish_reason\":null}]}");
            append_event(&c->out, q->chunked, &b);
            free(b.data);
        }
    }
    q->refs = 2;
    pthread_mutex_lock(&sv->lock);
    sv->inbox[sv->n_inbox++] = q;
    sv->in_flight++;
    pthread_cond_signal(&sv->work);
    pthread_mutex_unlock(&sv->lock);
    return q;
}

/* Handles the request at the start of c->in: its head as soon as it is
   whole (a body too large, without Content-Length, or without the API key is
   refused before it is read), then the rest once its body is in. Returns 0
   while it waits for bytes, 1 when handled, -1 when the connection is to
   close after what it has to write. */
static int handle_request(Server *sv, Connection *c) {
    HttpHead *h = &c->head;
    if (!c->have_head) {
        const char *why;
        int status = parse_http_head(c->in.data, c->in.len, h, &why);
        if (status == 0) return 0;
        if (status != 200) {
            append_error(&c->out, status, why, NULL, NULL, 0);
            return -1;
        }
        c->have_head = 1;
        c->keep_alive = h->keep_alive, c->http10 = h->http10;
        int api = strcmp(h->path, "/v1/chat/completions") == 0 || strcmp(h->path, "/v1/completions") == 0;
        if (strcmp(h->path, "/health") != 0 && !authorized(sv->api_key, h->authorization)) {
            append_error(&c->out, 401, "a valid API key is needed: Authorization: Bearer <key>", NULL, "invalid_api_key", 0);
        } else if (h->content_length > sv->body_limit) {
            char message[128];
            snprintf(message, sizeof message, "the body is %lld bytes, more than the server's limit (-B %lld)",
                     h->content_length, sv->body_limit);
            append_error(&c->out, 413, message, NULL, NULL, 0);
        } else if (api && strcmp(h->method, "POST") == 0 && h->content_length < 0) {
            append_error(&c->out, 400, "a request with a body needs Content-Length", NULL, NULL, 0);
        } else {
            if (h->expect_continue && !h->http10 && c->in.len < h->head_len + (size_t)(h->content_length > 0 ? h->content_length : 0))
                append_format(&c->out, "HTTP/1.1 100 Continue\r\n\r\n"); /* an interim answer: the body may come */
            return 1;
        }
        c->have_head = 0;
        return -1; /* the body is not read: the connection closes */
    }
    size_t body_len = h->content_length > 0 ? (size_t)h->content_length : 0;
    if (c->in.len < h->head_len + body_len) return 0;
    const char *body = c->in.data + h->head_len;
    int post = strcmp(h->method, "POST") == 0, get = strcmp(h->method, "GET") == 0;
    int chat = strcmp(h->path, "/v1/chat/completions") == 0, completions = strcmp(h->path, "/v1/completions") == 0;
    int known = chat || completions || strcmp(h->path, "/v1/models") == 0 || strcmp(h->path, "/health") == 0 ||
                strcmp(h->path, "/metrics") == 0;
    Bytes b = {0};
    if (!known) {
        char message[256];
        snprintf(message, sizeof message, "no endpoint %.64s (POST /v1/chat/completions, POST /v1/completions, "
                                          "GET /v1/models, /health, /metrics)", h->path[0] ? h->path : "of that length");
        append_error(&c->out, 404, message, NULL, NULL, c->keep_alive);
    } else if ((chat || completions) ? !post : !get) {
        append_error(&c->out, 405, chat || completions ? "use POST" : "use GET", NULL, NULL, c->keep_alive);
    } else if (strcmp(h->path, "/health") == 0) {
        pthread_mutex_lock(&sv->lock);
        int draining = sv->stopping > 0;
        pthread_mutex_unlock(&sv->lock);
        append_format(&b, draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}");
        append_response(&c->out, draining ? 503 : 200, "application/json", &b, c->keep_alive, NULL);
    } else if (strcmp(h->path, "/v1/models") == 0) {
        append_format(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        append_json_string(&b, sv->model_name, strlen(sv->model_name));
        append_format(&b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"run\"}]}");
        append_response(&c->out, 200, "application/json", &b, c->keep_alive, NULL);
    } else if (strcmp(h->path, "/metrics") == 0) {
        pthread_mutex_lock(&sv->lock);
        ServerMetrics m = sv->metrics;
        pthread_mutex_unlock(&sv->lock);
        append_metrics(&b, &m);
        append_response(&c->out, 200, "text/plain; version=0.0.4", &b, c->keep_alive, NULL);
    } else {
        c->request = start_api_request(sv, c, chat, body, body_len);
    }
    free(b.data);
    /* the request leaves the input; what follows it is the next one's */
    memmove(c->in.data, c->in.data + h->head_len + body_len, c->in.len - h->head_len - body_len);
    c->in.len -= h->head_len + body_len;
    c->have_head = 0;
    return 1;
}

/* Closes c; a request still running is cancelled (the scheduler frees its
   sequence at its next step). */
static void close_connection(Server *sv, Connection *c) {
    if (c->request) {
        pthread_mutex_lock(&sv->lock);
        c->request->cancelled = 1;
        release_request(c->request);
        pthread_cond_signal(&sv->work);
        pthread_mutex_unlock(&sv->lock);
    }
    close(c->fd);
    free(c->in.data), free(c->out.data);
    *c = (Connection){.fd = -1};
}

static volatile sig_atomic_t signals_received;
static int signal_wake_fd = -1;

static void on_stop_signal(int sig) {
    (void)sig;
    signals_received++;
    char byte = 1;
    ssize_t ignored = write(signal_wake_fd, &byte, 1);
    (void)ignored;
}

/* When c is to be dropped: a request not whole SERVE_READ_SECONDS after its
   first byte (or the connection's start), no next request for
   SERVE_IDLE_SECONDS, an answer not read for SERVE_WRITE_SECONDS, the end of
   a lingering close; 0 while its answer is being computed. */
static double connection_deadline(const Connection *c) {
    if (c->lingering) return c->since + SERVE_LINGER_SECONDS;
    if (c->out.len > c->out_sent) return c->since + SERVE_WRITE_SECONDS;
    if (c->request) return 0;
    return c->since + (c->in.len || !c->answered ? SERVE_READ_SECONDS : SERVE_IDLE_SECONDS);
}

/* With every connection open, a new one takes the place of the one that has
   waited longest for a request (idle, or still sending one): so clients that
   open connections and send nothing cannot shut others out. -1: all are busy
   with answers. */
static int oldest_waiting(const Connection *conns) {
    int oldest = -1;
    for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++)
        if (conns[i].fd >= 0 && !conns[i].request && conns[i].out.len == 0 &&
            (oldest < 0 || conns[i].since < conns[oldest].since))
            oldest = i;
    return oldest;
}

/* Reads what c's client sent, handles each whole request, writes what is
   ready. Returns 0 when c is to close: the client has gone (a client that
   closes its sending side is taken to have gone), broke a limit, or ended a
   lingering close. A connection that is to close after an answer first
   lingers: it sends its end, and reads (and drops) what the client still
   sends for a while, so that the client reads the answer rather than a reset. */
static int serve_connection(Server *sv, Connection *c, short revents, double now) {
    if (revents & (POLLERR | POLLNVAL)) return 0;
    if (revents & (POLLIN | POLLHUP)) {
        size_t room = SERVE_MAX_HEAD + (size_t)sv->body_limit - c->in.len;
        reserve_bytes(&c->in, room < 65536 ? room : 65536);
        ssize_t got = recv(c->fd, c->in.data + c->in.len, room < 65536 ? room : 65536, 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return 0;
        if (got > 0) {
            if (c->in.len == 0 && !c->request && c->out.len == c->out_sent) c->since = now; /* a request begins */
            c->in.len += got;
        }
        if (c->lingering) c->in.len = 0;
    }
    if (c->lingering) return now < c->since + SERVE_LINGER_SECONDS;
    for (;;) {
        while (!c->closing && !c->request && c->in.len > 0 && c->out.len == c->out_sent) {
            int handled = handle_request(sv, c);
            if (handled == 0) break;
            if (handled < 0) c->closing = 1;
            c->since = now;
        }
        if (c->out.len > c->out_sent) {
            ssize_t put = send(c->fd, c->out.data + c->out_sent, c->out.len - c->out_sent, MSG_NOSIGNAL);
            if (put < 0 && errno != EAGAIN && errno != EINTR) return 0;
            if (put > 0) c->out_sent += put, c->since = now;
            if (c->out.len - c->out_sent > SERVE_MAX_REPLY) return 0; /* it reads too slowly */
        }
        if (c->out.len == 0 || c->out.len > c->out_sent) break;
        c->out.len = c->out_sent = 0; /* all written */
        c->since = now;
        if (c->request || c->have_head) break; /* an answer still coming, or a "100 Continue" */
        c->answered = 1;
        if (c->closing || !c->keep_alive) {
            shutdown(c->fd, SHUT_WR);
            c->lingering = 1;
            c->in.len = 0;
            return 1;
        }
        if (c->in.len == 0) break; /* else the next request, already here */
    }
    double deadline = connection_deadline(c);
    if (deadline && now > deadline) {
        if (!c->request && c->in.len && c->out.len == 0) { /* too slow: say so, then close */
            append_error(&c->out, 408, "the request did not arrive in time", NULL, NULL, 0);
            ssize_t ignored = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL);
            (void)ignored;
        }
        return 0;
    }
    return 1;
}

typedef struct {
    Server *sv;
    int listener;
} IoThread;

/* The I/O thread: one poll() over the listening socket, the wake-up pipe and
   every connection. It reads requests, hands the API's to the scheduler,
   moves the answers' bytes to their sockets, and closes connections that
   break the limits. It ends once the server stops and has nothing left. */
static void *io_thread(void *arg) {
    IoThread *io = arg;
    Server *sv = io->sv;
    Connection *conns = xmalloc(SERVE_MAX_CONNECTIONS * sizeof *conns);
    for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++) conns[i] = (Connection){.fd = -1};
    struct pollfd fds[SERVE_MAX_CONNECTIONS + 2];
    int listener = io->listener, n_open = 0, seen_signals = 0;
    double stop_deadline = 0;
    for (;;) {
        double now = seconds_now();
        /* signals: the first stops new connections, the second cuts the running answers */
        if (signals_received != seen_signals) {
            seen_signals = signals_received;
            pthread_mutex_lock(&sv->lock);
            sv->stopping = seen_signals >= 2 ? 2 : 1;
            pthread_cond_signal(&sv->work);
            pthread_mutex_unlock(&sv->lock);
            if (listener >= 0) close(listener), listener = -1;
            fprintf(stderr, "serve: %s\n", seen_signals >= 2 ? "stopping now: cutting the running answers"
                                                               : "stopping: finishing the running answers (again: cut them)");
        }
        /* the answers' new bytes */
        pthread_mutex_lock(&sv->lock);
        int in_flight = sv->in_flight, stopping = sv->stopping;
        for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++) {
            Connection *c = &conns[i];
            if (c->fd < 0 || !c->request) continue;
            ApiRequest *q = c->request;
            if (q->reply.len) {
                if (c->out.len == c->out_sent) c->since = now;
                append_bytes(&c->out, q->reply.data, q->reply.len);
                q->reply.len = 0;
            }
            if (q->finished) {
                release_request(q);
                c->request = NULL;
            }
        }
        pthread_mutex_unlock(&sv->lock);
        if (stopping && in_flight == 0) {
            if (!stop_deadline) stop_deadline = now + 5; /* the last bytes may take this long to leave */
            int pending = 0;
            for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++) pending |= conns[i].fd >= 0 && conns[i].out.len > conns[i].out_sent;
            if (!pending || now > stop_deadline) break;
        }
        /* who to poll for what, and until when */
        int n = 0, slot[SERVE_MAX_CONNECTIONS + 2];
        fds[n] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN}, slot[n++] = -1;
        double next = now + 1;
        for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++) {
            Connection *c = &conns[i];
            if (c->fd < 0) continue;
            short events = c->out.len > c->out_sent ? POLLOUT : 0;
            if (c->in.len < SERVE_MAX_HEAD + (size_t)sv->body_limit) events |= POLLIN;
            fds[n] = (struct pollfd){.fd = c->fd, .events = events}, slot[n++] = i;
            double deadline = connection_deadline(c);
            if (deadline && deadline < next) next = deadline;
        }
        /* last: a new connection may take the place of one handled before it */
        if (listener >= 0) fds[n] = (struct pollfd){.fd = listener, .events = POLLIN}, slot[n++] = -2;
        int wait_ms = next > now ? (int)((next - now) * 1000) + 1 : 0;
        if (poll(fds, n, wait_ms) < 0 && errno != EINTR) fail("serve: poll: %s", strerror(errno));
        now = seconds_now();
        for (int k = 0; k < n; k++) {
            if (slot[k] == -1) { /* the wake-up pipe: empty it */
                char drain[64];
                if (fds[k].revents)
                    while (read(sv->wake[0], drain, sizeof drain) > 0) {}
                continue;
            }
            if (slot[k] == -2) { /* new connections */
                int fd;
                while (fds[k].revents && (fd = accept(listener, NULL, NULL)) >= 0) {
                    fcntl(fd, F_SETFL, O_NONBLOCK);
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
                    int evict = n_open == SERVE_MAX_CONNECTIONS ? oldest_waiting(conns) : -1;
                    if (evict >= 0) close_connection(sv, &conns[evict]), n_open--;
                    if (n_open == SERVE_MAX_CONNECTIONS) {
                        Bytes full = {0};
                        append_error(&full, 503, "every connection is busy with an answer: try again soon", NULL, NULL, 0);
                        ssize_t ignored = send(fd, full.data, full.len, MSG_NOSIGNAL);
                        (void)ignored;
                        free(full.data);
                        close(fd);
                        continue;
                    }
                    int i = 0;
                    while (conns[i].fd >= 0) i++;
                    conns[i] = (Connection){.fd = fd, .since = now};
                    n_open++;
                }
                continue;
            }
            Connection *c = &conns[slot[k]];
            if (!serve_connection(sv, c, fds[k].revents, now)) close_connection(sv, c), n_open--;
        }
    }
    for (int i = 0; i < SERVE_MAX_CONNECTIONS; i++)
        if (conns[i].fd >= 0) close_connection(sv, &conns[i]);
    if (listener >= 0) close(listener);
    free(conns);
    return NULL;
}

/* ---- The scheduler's loop, and the server's start and end ---- */

/* A listening socket on host:port (port 0: any free one); fails with the reason. */
static int listen_on(const char *host, long long port, char *address, size_t address_size) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *found;
    char service[16];
    snprintf(service, sizeof service, "%lld", port);
    int err = getaddrinfo(host, service, &hints, &found);
    if (err) fail("-H %s: %s", host, gai_strerror(err));
    int fd = socket(found->ai_family, SOCK_STREAM, 0);
    if (fd < 0) fail("-H %s: socket: %s", host, strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) fail("-H %s -o %lld: %s", host, port, strerror(errno));
    freeaddrinfo(found);
    if (listen(fd, 256) != 0) fail("-o %lld: listen: %s", port, strerror(errno));
    fcntl(fd, F_SETFL, O_NONBLOCK);
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &len);
    char ip[INET6_ADDRSTRLEN] = "?";
    int is_v6 = bound.ss_family == AF_INET6;
    unsigned short actual = ntohs(is_v6 ? ((struct sockaddr_in6 *)&bound)->sin6_port : ((struct sockaddr_in *)&bound)->sin_port);
    inet_ntop(bound.ss_family, is_v6 ? (void *)&((struct sockaddr_in6 *)&bound)->sin6_addr : (void *)&((struct sockaddr_in *)&bound)->sin_addr,
              ip, sizeof ip);
    snprintf(address, address_size, is_v6 ? "[%s]:%u" : "%s:%u", ip, actual);
    return fd;
}

/* -m serve: listens, and runs the scheduler until a signal stops it and
   every request taken has its answer. */
static void serve(Model *m, const Tokenizer *tok, const Options *o) {
    const Config *c = &m->ck.config;
    Server *sv = xcalloc(1, sizeof *sv);
    pthread_mutex_init(&sv->lock, NULL);
    pthread_cond_init(&sv->work, NULL);
    sv->tok = tok;
    for (int id = 0; id < tok->vocab_size; id++)
        if (piece_len(tok, id) > sv->longest_piece) sv->longest_piece = piece_len(tok, id);
    const char *slash = strrchr(o->checkpoint, '/');
    sv->model_name = slash ? slash + 1 : o->checkpoint;
    sv->api_key = o->api_key ? o->api_key : getenv("RUN_API_KEY");
    if (sv->api_key && !sv->api_key[0]) sv->api_key = NULL;
    sv->body_limit = o->body_limit;
    sv->max_in_flight = (int)(o->batch + o->queue);
    sv->inbox = xmalloc(sv->max_in_flight * sizeof *sv->inbox);
    sv->defaults = (Request){.n = o->steps_given ? o->steps : 0, .seed = o->seed, .temperature = o->temperature,
                             .topp = o->topp, .topk = o->topk, .minp = o->minp, .presence_penalty = o->presence_penalty,
                             .system = o->system_prompt ? o->system_prompt : ""};
    sv->thinking = o->thinking;
    sv->thinking_tokens = tok->chat == CHATML && added_token_id(tok, "<think>") >= 0 && added_token_id(tok, "</think>") >= 0;

    /* the model, and a pool of KV blocks: by default room for -b requests as
       long as the context, or as SERVE_POOL_CONTEXT (Llama 3's 131,072
       positions times -b would be a pool of terabytes). A request's context
       is the model's, or the pool if that is smaller. */
    long long model_blocks = (c->seq_len + KV_BLOCK - 1) / KV_BLOCK, each = model_blocks;
    if (each > SERVE_POOL_CONTEXT / KV_BLOCK) each = SERVE_POOL_CONTEXT / KV_BLOCK;
    long long pool_blocks = o->pool ? (o->pool + KV_BLOCK - 1) / KV_BLOCK : o->batch * each;
    if (pool_blocks > INT32_MAX / KV_BLOCK) fail("-x %lld: more positions than the pool can have", o->pool);
    int context_blocks = (int)(pool_blocks < model_blocks ? pool_blocks : model_blocks);
    sv->seq_len = c->seq_len < context_blocks * KV_BLOCK ? c->seq_len : context_blocks * KV_BLOCK;
    SamplingKernels fast = start_compute((int)o->threads);
    start_model(m, sv->seq_len, (int)pool_blocks, o->cache);
    Scheduler sc = {.max_running = (int)o->batch};
    init_block_pool(&sc.pool, (int)pool_blocks);
    sc.running = xmalloc((sc.max_running + 1) * sizeof(Sequence *));
    sc.ended = xmalloc((sv->max_in_flight + 1) * sizeof(Sequence *));
    sc.waiting = xmalloc((sv->max_in_flight + 1) * sizeof(Sequence *));
    ProbIndex *probindex = xmalloc(c->vocab_size * sizeof(ProbIndex));
    float *logits = xmalloc((size_t)sc.max_running * c->vocab_size * sizeof(float));

    /* the socket, the signals, the I/O thread */
    if (pipe(sv->wake) != 0) fail("serve: pipe: %s", strerror(errno));
    fcntl(sv->wake[0], F_SETFL, O_NONBLOCK), fcntl(sv->wake[1], F_SETFL, O_NONBLOCK);
    char address[80];
    IoThread io = {sv, listen_on(o->host, o->port, address, sizeof address)};
    signal_wake_fd = sv->wake[1];
    struct sigaction stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigaction(SIGINT, &stop, NULL), sigaction(SIGTERM, &stop, NULL);
    pthread_t io_id;
    if (pthread_create(&io_id, NULL, io_thread, &io) != 0) fail("serve: cannot start the I/O thread");
    fprintf(stderr, "serve: listening on http://%s (model %s, context %d, -b %lld, KV pool %lld positions)\n", address,
            sv->model_name, sv->seq_len, o->batch, pool_blocks * KV_BLOCK);

    for (;;) {
        /* wait for work; take new requests in, and note who has gone */
        pthread_mutex_lock(&sv->lock);
        while (!sv->n_inbox && !sc.n_running && !sc.n_waiting && !(sv->stopping && !sv->in_flight))
            pthread_cond_wait(&sv->work, &sv->lock);
        if (sv->stopping && !sv->in_flight) {
            pthread_mutex_unlock(&sv->lock);
            break;
        }
        for (int i = 0; i < sv->n_inbox; i++) {
            ApiRequest *q = sv->inbox[i];
            Sequence *seq = &q->seq;
            seq->sampler = (Sampler){.vocab_size = c->vocab_size, .temperature = q->temperature, .topp = q->top_p,
                                     .topk = (int)q->top_k, .minp = q->min_p, .presence_penalty = q->presence_penalty,
                                     .rng_state = q->seed > 0 ? (uint64_t)q->seed : (uint64_t)time(NULL),
                                     .probindex = probindex, .softmax = fast.softmax, .argmax = fast.argmax};
            seq->blocks = xmalloc(context_blocks * sizeof(int));
            seq->keys = m->state.key_cache, seq->values = m->state.value_cache;
            seq->keys.blocks = seq->values.blocks = seq->blocks;
            sc.waiting[sc.n_waiting++] = seq;
        }
        sv->n_inbox = 0;
        int cut_all = sv->stopping == 2;
        sc.n_ended = 0;
        for (int i = sc.n_running + sc.n_waiting - 1; i >= 0; i--) {
            Sequence *seq = i < sc.n_running ? sc.running[i] : sc.waiting[i - sc.n_running];
            ApiRequest *q = seq->owner;
            if (q->cancelled || cut_all) end_sequence(&sc, seq, "cancelled");
        }
        pthread_mutex_unlock(&sv->lock);

        /* one step of the batch */
        int n_cancelled = sc.n_ended;
        Sequence *cancelled[n_cancelled ? n_cancelled : 1];
        memcpy(cancelled, sc.ended, n_cancelled * sizeof *cancelled);
        int T = plan_step(&sc);
        if (T > 0) run_step(&sc, m, tok, T, logits);
        else sc.n_ended = 0;

        /* the answers' new text, and the ends */
        pthread_mutex_lock(&sv->lock);
        for (int i = 0; i < sc.n_running; i++) publish(sv, sc.running[i]->owner, 0);
        for (int pass = 0; pass < 2; pass++) {
            Sequence **ended = pass ? cancelled : sc.ended;
            for (int i = 0; i < (pass ? n_cancelled : sc.n_ended); i++) {
                ApiRequest *q = ended[i]->owner;
                if (pass == 0) publish(sv, q, 1);
                else if (!q->cancelled) publish_cancelled(q);
                count_outcome(sv, ended[i]->finish_reason);
                sv->metrics.prompt_tokens += ended[i]->n_prompt;
                q->finished = 1;
                sv->in_flight--;
                release_request(q);
            }
        }
        ServerMetrics *mt = &sv->metrics;
        mt->generated_tokens = sc.generated, mt->prefix_hit_tokens = sc.shared_tokens;
        mt->running = sc.n_running, mt->waiting = sc.n_waiting + sv->n_inbox;
        mt->blocks_free = sc.pool.n_free, mt->blocks_used = sc.pool.n_blocks - sc.pool.n_free;
        pthread_mutex_unlock(&sv->lock);
        wake_io(sv);
    }
    pthread_join(io_id, NULL);
    fprintf(stderr, "serve: stopped; %ld answers, %ld tokens generated\n",
            sv->metrics.stopped + sv->metrics.cut, sv->metrics.generated_tokens);
    free(logits), free(probindex);
    free(sc.running), free(sc.ended), free(sc.waiting);
    free_block_pool(&sc.pool);
    stop_model(m);
    stop_compute();
    close(sv->wake[0]), close(sv->wake[1]);
    signal_wake_fd = -1;
    free(sv->inbox), free(sv);
}

/* ------------------------------------------------------------------------- */
/* Command line                                                               */

/* -m batch's sequences at once unless -b says otherwise */
#define DEFAULT_BATCH 16

static void usage(FILE *out) {
    fprintf(out,
            "usage: run <checkpoint> [options]\n"
            "example: run model.bin -n 256 -i \"Once upon a time\"\n"
            "options:\n"
            "  -t <float>  temperature, >= 0 (0 = greedy), default 1.0\n"
            "  -p <float>  top-p (nucleus) threshold in [0,1], default 0.9; 0 or 1 = off\n"
            "  -K <int>    top-k: draw from the k most likely tokens only, >= 0, default 0 = off\n"
            "  -M <float>  min-p: drop tokens less likely than this times the likeliest, [0,1], default 0 = off\n"
            "  -P <float>  presence penalty: subtracted from the logit of each token already in the answer,\n"
            "              [-2,2], default 0 = off\n"
            "  -s <int>    random seed, >= 0, default 0 = from the time\n"
            "  -n <int>    generate: tokens to run, prompt included, at most the context unless -r 1; chat:\n"
            "              the context kept (at most the model's); >= 0, default 256; 0 = the model's context\n"
            "  -r <int>    1: generate runs past the context, shifting it (chat always does); default 0\n"
            "  -i <string> input prompt (perplexity: the text to score)\n"
            "  -f <string> file to read the prompt or text from instead of -i; - reads stdin\n"
            "  -z <string> tokenizer file, default tokenizer.bin\n"
            "  -m <string> mode: generate (default), chat, tokenize (print the prompt's ids),\n"
            "              perplexity (score the text: windows of -n positions, default the context),\n"
            "              batch (-f: a JSON object per line, {\"prompt\": ...}; a JSON line per answer;\n"
            "              -n is each answer's most tokens, 0 = up to the context), or serve (OpenAI's API over\n"
            "              HTTP; -n: an answer's most tokens when a request gives none, default up to the context)\n"
            "  -b <int>    batch and serve: sequences run at once, 1..%d, default %d\n"
            "  -x <int>    batch and serve: KV cache pool in positions, default the longest request's times -b\n"
            "              (serve: the context's, at most 4096, times -b; a request's context is at most the pool)\n"
            "  -o <int>    serve: the TCP port to listen on, 0..65535, default 8080; 0 = any free port\n"
            "  -H <string> serve: the address to listen on, default 127.0.0.1\n"
            "  -q <int>    serve: requests waiting beyond -b at most (more get 503), >= 0, default 64\n"
            "  -B <int>    serve: a request body's most bytes (more get 413), >= 1, default 1048576\n"
            "  -A <string> serve: the API key requests must send (Authorization: Bearer KEY); default\n"
            "              $RUN_API_KEY, or none\n"
            "  -y <string> system prompt in chat mode (batch: for the prompts without \"system\"; serve: for the\n"
            "              chats without a system message)\n"
            "  -a <int>    chat: an answer's most tokens, >= 0, default 0 = up to the context\n"
            "  -j <int>    threads, >= 1, default: one per CPU core\n"
            "  -d <string> draft model for speculative decoding (same vocabulary)\n"
            "  -l <int>    speculative decoding drafted from the text: n-grams of up to this many tokens, 1..16\n"
            "  -k <int>    tokens drafted per step at most, 1..32, default 6 with -d, 8 with -l\n"
            "  -c <string> KV cache: fp32 (default, exact) or int8 (a quarter of the memory, a scale per head)\n"
            "  -e <int>    chat, batch and serve with Qwen3: 0 = no thinking (enable_thinking=false; serve: unless\n"
            "              a request says), default 1\n"
            "  -h          this help\n", MAX_BATCH / 2, DEFAULT_BATCH);
}

/* fail() for a mistake on the command line: the message, then where the options are. */
static void bad_flag(const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    for (char *c = message; *c; c++) /* a value's control characters as '?': the message stays one line */
        if ((unsigned char)*c < 0x20) *c = '?';
    fail("%s (usage: run <checkpoint> [options]; run -h lists them)", message);
}

static float parse_float(const char *flag, const char *s, float lo, float hi) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || isnan(v) || isspace((unsigned char)s[0]))
        bad_flag("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi) bad_flag("%s: %s is out of range [%g, %g]", flag, s, lo, hi);
    return v;
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || isspace((unsigned char)s[0]))
        bad_flag("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) bad_flag("%s: %s is out of range [%lld, %lld]", flag, s, lo, hi);
    return v;
}

/* The whole of a file (`-` for stdin) as a string: its bytes as they are.
   A NUL byte would end the string early, so it is refused. */
static char *read_text_file(const char *path) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) fail("-f %s: %s", path, strerror(errno));
    size_t len = 0, cap = 4096;
    char *text = xmalloc(cap);
    for (;;) {
        len += fread(text + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        if (cap > SIZE_MAX / 2) fail("-f %s: the file is too large", path);
        cap *= 2;
        char *grown = realloc(text, cap);
        if (!grown) fail("-f %s: out of memory (the file is over %zu bytes)", path, len);
        text = grown;
    }
    if (ferror(f)) fail("-f %s: %s", path, strerror(errno));
    if (!is_stdin) fclose(f);
    text[len] = '\0';
    if (strlen(text) != len) fail("-f %s: a NUL byte at offset %zu (the text must have none)", path, strlen(text));
    return text;
}

static Options parse_options(int argc, char **argv) {
    static const char *const mode_names[] = {"generate", "chat", "tokenize", "perplexity", "batch", "serve"};
    Options o = {.tokenizer = "tokenizer.bin", .temperature = 1.0f, .topp = 0.9f, .steps = 256, .thinking = 1,
                 .cache = CACHE_FP32, .host = "127.0.0.1", .port = 8080, .queue = -1, .body_limit = 1 << 20};
    const char *mode = "generate", *serve_flag = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (o.checkpoint) bad_flag("unexpected argument '%s'", arg);
            o.checkpoint = arg;
            continue;
        }
        if (arg[2] != '\0' || !strchr("tpKMPsnifzmyajdlkrcbxeoHqBA", arg[1])) bad_flag("unknown flag '%s'", arg);
        if (i + 1 >= argc) bad_flag("%s needs a value", arg);
        const char *val = argv[++i];
        if (strchr("oHqBA", arg[1])) serve_flag = arg;
        switch (arg[1]) {
        case 't': o.temperature = parse_float(arg, val, 0.0f, INFINITY); break;
        case 'p': o.topp = parse_float(arg, val, 0.0f, 1.0f); break;
        case 'K': o.topk = parse_int(arg, val, 0, INT32_MAX); break;
        case 'M': o.minp = parse_float(arg, val, 0.0f, 1.0f); break;
        case 'P': o.presence_penalty = parse_float(arg, val, -2.0f, 2.0f); break;
        case 's': o.seed = parse_int(arg, val, 0, LLONG_MAX); break;
        case 'n': o.steps = parse_int(arg, val, 0, INT32_MAX), o.steps_given = 1; break;
        case 'i': o.prompt = val; break;
        case 'f': o.prompt_file = val; break;
        case 'z': o.tokenizer = val; break;
        case 'm': mode = val; break;
        case 'y': o.system_prompt = val; break;
        case 'a': o.answer_tokens = parse_int(arg, val, 0, INT32_MAX); break;
        case 'j': o.threads = parse_int(arg, val, 1, 1024); break;
        case 'd': o.draft = val; break;
        case 'l': o.lookup = parse_int(arg, val, 1, 16); break;
        case 'k': o.max_draft = parse_int(arg, val, 1, MAX_DRAFT); break;
        case 'r': o.roll = parse_int(arg, val, 0, 1); break;
        case 'b': o.batch = parse_int(arg, val, 1, MAX_BATCH / 2); break;
        case 'x': o.pool = parse_int(arg, val, 1, INT32_MAX); break;
        case 'e': o.thinking = (int)parse_int(arg, val, 0, 1); break;
        case 'o': o.port = parse_int(arg, val, 0, 65535); break;
        case 'H': o.host = val; break;
        case 'q': o.queue = parse_int(arg, val, 0, 1 << 20); break;
        case 'B': o.body_limit = parse_int(arg, val, 1, 1LL << 30); break;
        case 'A': o.api_key = val; break;
        case 'c':
            if (strcmp(val, "fp32") && strcmp(val, "int8")) bad_flag("-c: unknown KV cache type '%s' (fp32 or int8)", val);
            o.cache = strcmp(val, "int8") == 0 ? CACHE_INT8 : CACHE_FP32;
            break;
        }
    }
    if (!o.checkpoint) bad_flag("no checkpoint given");
    while (o.mode < N_MODES && strcmp(mode, mode_names[o.mode]) != 0) o.mode++;
    if (o.mode == N_MODES) bad_flag("-m: unknown mode '%s' (generate, chat, tokenize, perplexity, batch or serve)", mode);
    if ((o.batch || o.pool) && o.mode != BATCH && o.mode != SERVE) bad_flag("%s: for -m batch and serve only", o.batch ? "-b" : "-x");
    if (serve_flag && o.mode != SERVE) bad_flag("%s: for -m serve only", serve_flag);
    if (o.mode == SERVE && (o.draft || o.lookup || o.roll || o.prompt || o.prompt_file))
        bad_flag("%s: not in serve mode (requests bring their prompts; answers draft nothing and end with the context)",
                 o.draft ? "-d" : o.lookup ? "-l" : o.roll ? "-r" : o.prompt ? "-i" : "-f");
    if (o.mode == SERVE && !o.batch) o.batch = DEFAULT_BATCH;
    if (o.mode == SERVE && o.queue < 0) o.queue = 64;
    if (o.mode == BATCH && (o.draft || o.lookup || o.roll))
        bad_flag("%s: not in batch mode (its answers run together, each drafting nothing and never past the context)",
                 o.draft ? "-d" : o.lookup ? "-l" : "-r");
    if (o.mode == BATCH && o.prompt) bad_flag("-i: -m batch reads its prompts from -f FILE (a JSON object per line)");
    if (o.mode == BATCH && !o.prompt_file) bad_flag("-m batch needs -f FILE (a JSON object per line; - for stdin)");
    if (o.mode == BATCH && !o.batch) o.batch = DEFAULT_BATCH;
    if (o.draft && o.lookup) bad_flag("-d and -l: draft from a model or from the text, not both");
    if (o.max_draft && !o.draft && !o.lookup) bad_flag("-k needs -d or -l");
    if (o.roll && o.mode != GENERATE) bad_flag("-r: for generate only (chat always shifts its context)");
    if (o.answer_tokens && o.mode != CHAT) bad_flag("-a: for chat only (generate counts the prompt in -n; batch: \"n\")");
    if (!o.thinking && o.mode != CHAT && o.mode != BATCH && o.mode != SERVE) bad_flag("-e: for chat, batch and serve only");
    if (o.mode == PERPLEXITY && (o.draft || o.lookup))
        bad_flag("-d and -l speed up generate and chat; -m perplexity has no use for them");
    if (o.prompt && o.prompt_file) fail("-i and -f: give the text one way, not both");
    if (o.mode == PERPLEXITY && !o.prompt && !o.prompt_file)
        fail("-m perplexity needs the text to score: -i TEXT or -f FILE");
    if (o.threads == 0) o.threads = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    return o;
}

/* -m generate and -m chat: the model (and its draft) readied for the context,
   then the decoder and the sampler. */
static void run_decoding(Model *m, const Tokenizer *tok, const char *text, const Options *o) {
    const Config *c = &m->ck.config;
    /* -n beyond the context stops at it, as in llama2.c, unless -r 1 asks
       generate to run on by shifting it */
    long long steps = o->steps == 0 || (o->steps > c->seq_len && !o->roll) ? c->seq_len : o->steps;
    int context = steps < c->seq_len ? (int)steps : c->seq_len; /* positions the caches hold */
    SamplingKernels fast = start_compute((int)o->threads);
    start_model(m, context, 0, o->cache);
    Model draft;
    Decoder d = {.lookup = (int)o->lookup, .max_draft = (int)(o->max_draft ? o->max_draft : o->draft ? 6 : 8)};
    if (o->draft) {
        open_checkpoint(&draft.ck, o->draft);
        if (draft.ck.config.vocab_size != c->vocab_size)
            fail("%s: the draft's vocabulary is %d tokens, the model's (%s) %d", o->draft, draft.ck.config.vocab_size,
                 o->checkpoint, c->vocab_size);
        start_model(&draft, context, 0, o->cache);
        d.draft = &draft;
        d.draft_probs = xmalloc((size_t)d.max_draft * c->vocab_size * sizeof(float));
    }
    if (o->draft || o->lookup) d.logits = xmalloc((size_t)(d.max_draft + 1) * c->vocab_size * sizeof(float));
    Sampler sampler = {.vocab_size = c->vocab_size, .temperature = o->temperature, .topp = o->topp, .topk = (int)o->topk,
                       .minp = o->minp, .presence_penalty = o->presence_penalty,
                       .rng_state = o->seed > 0 ? (uint64_t)o->seed : (uint64_t)time(NULL),
                       .probindex = xmalloc(c->vocab_size * sizeof(ProbIndex)), .softmax = fast.softmax,
                       .argmax = fast.argmax};
    if (o->mode == GENERATE) generate(m, &d, tok, &sampler, text, (int)steps);
    else chat(m, &d, tok, &sampler, text[0] ? text : NULL, o->system_prompt, o->thinking, o->answer_tokens);
    free(sampler.probindex);
    free_answer(&sampler);
    free(d.seq.ids), free(d.logits), free(d.draft_probs);
    if (o->draft) {
        stop_model(&draft);
        close_checkpoint(&draft.ck);
    }
    stop_model(m);
    stop_compute();
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN); /* a closed pipe is a write error, not a kill */
    Options o = parse_options(argc, argv);
    Model m;
    open_checkpoint(&m.ck, o.checkpoint);
    Tokenizer tok;
    load_tokenizer(&tok, o.tokenizer, m.ck.config.vocab_size);
    if (!o.thinking && (tok.chat != CHATML || added_token_id(&tok, "<think>") < 0 || added_token_id(&tok, "</think>") < 0))
        fail("-e 0: %s is not a ChatML tokenizer with <think> and </think> (Qwen3's): no thinking to turn off",
             o.tokenizer);
    char *file_text = o.prompt_file ? read_text_file(o.prompt_file) : NULL;
    const char *text = file_text ? file_text : o.prompt ? o.prompt : "";
    if (o.mode == TOKENIZE) { /* the text's ids, BOS first, on one line */
        int n, *ids = encode(&tok, text, strlen(text), 1, 0, &n);
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    } else if (o.mode == PERPLEXITY) {
        perplexity(&m, &tok, text, &o);
    } else if (o.mode == BATCH) {
        batch(&m, &tok, file_text, &o);
    } else if (o.mode == SERVE) {
        serve(&m, &tok, &o);
    } else {
        run_decoding(&m, &tok, text, &o);
    }
    free(file_text);
    free_tokenizer(&tok);
    close_checkpoint(&m.ck);
    return 0;
}
/* ========================================================================= */
/* APPENDIX: the Unicode tables of the pre-tokenizers and of NFC            */
/* ========================================================================= */

/* BEGIN unicode_tables.py output */
/* Unicode 14.0.0: letters (L*), numbers (N*) and White_Space, as sorted,
 * inclusive ranges of code points. */
static const uint32_t unicode_letters[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xAA, 0xAA}, {0xB5, 0xB5}, {0xBA, 0xBA}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x2C1},
    {0x2C6, 0x2D1}, {0x2E0, 0x2E4}, {0x2EC, 0x2EC}, {0x2EE, 0x2EE}, {0x370, 0x374}, {0x376, 0x377}, {0x37A, 0x37D},
    {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x559, 0x559}, {0x560, 0x588}, {0x5D0, 0x5EA}, {0x5EF, 0x5F2}, {0x620, 0x64A},
    {0x66E, 0x66F}, {0x671, 0x6D3}, {0x6D5, 0x6D5}, {0x6E5, 0x6E6}, {0x6EE, 0x6EF}, {0x6FA, 0x6FC}, {0x6FF, 0x6FF},
    {0x710, 0x710}, {0x712, 0x72F}, {0x74D, 0x7A5}, {0x7B1, 0x7B1}, {0x7CA, 0x7EA}, {0x7F4, 0x7F5}, {0x7FA, 0x7FA},
    {0x800, 0x815}, {0x81A, 0x81A}, {0x824, 0x824}, {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86A}, {0x870, 0x887},
    {0x889, 0x88E}, {0x8A0, 0x8C9}, {0x904, 0x939}, {0x93D, 0x93D}, {0x950, 0x950}, {0x958, 0x961}, {0x971, 0x980},
    {0x985, 0x98C}, {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0}, {0x9B2, 0x9B2}, {0x9B6, 0x9B9}, {0x9BD, 0x9BD},
    {0x9CE, 0x9CE}, {0x9DC, 0x9DD}, {0x9DF, 0x9E1}, {0x9F0, 0x9F1}, {0x9FC, 0x9FC}, {0xA05, 0xA0A}, {0xA0F, 0xA10},
    {0xA13, 0xA28}, {0xA2A, 0xA30}, {0xA32, 0xA33}, {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA59, 0xA5C}, {0xA5E, 0xA5E},
    {0xA72, 0xA74}, {0xA85, 0xA8D}, {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0}, {0xAB2, 0xAB3}, {0xAB5, 0xAB9},
    {0xABD, 0xABD}, {0xAD0, 0xAD0}, {0xAE0, 0xAE1}, {0xAF9, 0xAF9}, {0xB05, 0xB0C}, {0xB0F, 0xB10}, {0xB13, 0xB28},
    {0xB2A, 0xB30}, {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3D, 0xB3D}, {0xB5C, 0xB5D}, {0xB5F, 0xB61}, {0xB71, 0xB71},
    {0xB83, 0xB83}, {0xB85, 0xB8A}, {0xB8E, 0xB90}, {0xB92, 0xB95}, {0xB99, 0xB9A}, {0xB9C, 0xB9C}, {0xB9E, 0xB9F},
    {0xBA3, 0xBA4}, {0xBA8, 0xBAA}, {0xBAE, 0xBB9}, {0xBD0, 0xBD0}, {0xC05, 0xC0C}, {0xC0E, 0xC10}, {0xC12, 0xC28},
    {0xC2A, 0xC39}, {0xC3D, 0xC3D}, {0xC58, 0xC5A}, {0xC5D, 0xC5D}, {0xC60, 0xC61}, {0xC80, 0xC80}, {0xC85, 0xC8C},
    {0xC8E, 0xC90}, {0xC92, 0xCA8}, {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBD, 0xCBD}, {0xCDD, 0xCDE}, {0xCE0, 0xCE1},
    {0xCF1, 0xCF2}, {0xD04, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD3D}, {0xD4E, 0xD4E}, {0xD54, 0xD56},
    {0xD5F, 0xD61}, {0xD7A, 0xD7F}, {0xD85, 0xD96}, {0xD9A, 0xDB1}, {0xDB3, 0xDBB}, {0xDBD, 0xDBD}, {0xDC0, 0xDC6},
    {0xE01, 0xE30}, {0xE32, 0xE33}, {0xE40, 0xE46}, {0xE81, 0xE82}, {0xE84, 0xE84}, {0xE86, 0xE8A}, {0xE8C, 0xEA3},
    {0xEA5, 0xEA5}, {0xEA7, 0xEB0}, {0xEB2, 0xEB3}, {0xEBD, 0xEBD}, {0xEC0, 0xEC4}, {0xEC6, 0xEC6}, {0xEDC, 0xEDF},
    {0xF00, 0xF00}, {0xF40, 0xF47}, {0xF49, 0xF6C}, {0xF88, 0xF8C}, {0x1000, 0x102A}, {0x103F, 0x103F},
    {0x1050, 0x1055}, {0x105A, 0x105D}, {0x1061, 0x1061}, {0x1065, 0x1066}, {0x106E, 0x1070}, {0x1075, 0x1081},
    {0x108E, 0x108E}, {0x10A0, 0x10C5}, {0x10C7, 0x10C7}, {0x10CD, 0x10CD}, {0x10D0, 0x10FA}, {0x10FC, 0x1248},
    {0x124A, 0x124D}, {0x1250, 0x1256}, {0x1258, 0x1258}, {0x125A, 0x125D}, {0x1260, 0x1288}, {0x128A, 0x128D},
    {0x1290, 0x12B0}, {0x12B2, 0x12B5}, {0x12B8, 0x12BE}, {0x12C0, 0x12C0}, {0x12C2, 0x12C5}, {0x12C8, 0x12D6},
    {0x12D8, 0x1310}, {0x1312, 0x1315}, {0x1318, 0x135A}, {0x1380, 0x138F}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD},
    {0x1401, 0x166C}, {0x166F, 0x167F}, {0x1681, 0x169A}, {0x16A0, 0x16EA}, {0x16F1, 0x16F8}, {0x1700, 0x1711},
    {0x171F, 0x1731}, {0x1740, 0x1751}, {0x1760, 0x176C}, {0x176E, 0x1770}, {0x1780, 0x17B3}, {0x17D7, 0x17D7},
    {0x17DC, 0x17DC}, {0x1820, 0x1878}, {0x1880, 0x1884}, {0x1887, 0x18A8}, {0x18AA, 0x18AA}, {0x18B0, 0x18F5},
    {0x1900, 0x191E}, {0x1950, 0x196D}, {0x1970, 0x1974}, {0x1980, 0x19AB}, {0x19B0, 0x19C9}, {0x1A00, 0x1A16},
    {0x1A20, 0x1A54}, {0x1AA7, 0x1AA7}, {0x1B05, 0x1B33}, {0x1B45, 0x1B4C}, {0x1B83, 0x1BA0}, {0x1BAE, 0x1BAF},
    {0x1BBA, 0x1BE5}, {0x1C00, 0x1C23}, {0x1C4D, 0x1C4F}, {0x1C5A, 0x1C7D}, {0x1C80, 0x1C88}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1CE9, 0x1CEC}, {0x1CEE, 0x1CF3}, {0x1CF5, 0x1CF6}, {0x1CFA, 0x1CFA}, {0x1D00, 0x1DBF},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC}, {0x2071, 0x2071}, {0x207F, 0x207F}, {0x2090, 0x209C}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184},
    {0x2C00, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0x2D00, 0x2D25}, {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D},
    {0x2D30, 0x2D67}, {0x2D6F, 0x2D6F}, {0x2D80, 0x2D96}, {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6},
    {0x2DB8, 0x2DBE}, {0x2DC0, 0x2DC6}, {0x2DC8, 0x2DCE}, {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE}, {0x2E2F, 0x2E2F},
    {0x3005, 0x3006}, {0x3031, 0x3035}, {0x303B, 0x303C}, {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA},
    {0x30FC, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E}, {0x31A0, 0x31BF}, {0x31F0, 0x31FF}, {0x3400, 0x4DBF},
    {0x4E00, 0xA48C}, {0xA4D0, 0xA4FD}, {0xA500, 0xA60C}, {0xA610, 0xA61F}, {0xA62A, 0xA62B}, {0xA640, 0xA66E},
    {0xA67F, 0xA69D}, {0xA6A0, 0xA6E5}, {0xA717, 0xA71F}, {0xA722, 0xA788}, {0xA78B, 0xA7CA}, {0xA7D0, 0xA7D1},
    {0xA7D3, 0xA7D3}, {0xA7D5, 0xA7D9}, {0xA7F2, 0xA801}, {0xA803, 0xA805}, {0xA807, 0xA80A}, {0xA80C, 0xA822},
    {0xA840, 0xA873}, {0xA882, 0xA8B3}, {0xA8F2, 0xA8F7}, {0xA8FB, 0xA8FB}, {0xA8FD, 0xA8FE}, {0xA90A, 0xA925},
    {0xA930, 0xA946}, {0xA960, 0xA97C}, {0xA984, 0xA9B2}, {0xA9CF, 0xA9CF}, {0xA9E0, 0xA9E4}, {0xA9E6, 0xA9EF},
    {0xA9FA, 0xA9FE}, {0xAA00, 0xAA28}, {0xAA40, 0xAA42}, {0xAA44, 0xAA4B}, {0xAA60, 0xAA76}, {0xAA7A, 0xAA7A},
    {0xAA7E, 0xAAAF}, {0xAAB1, 0xAAB1}, {0xAAB5, 0xAAB6}, {0xAAB9, 0xAABD}, {0xAAC0, 0xAAC0}, {0xAAC2, 0xAAC2},
    {0xAADB, 0xAADD}, {0xAAE0, 0xAAEA}, {0xAAF2, 0xAAF4}, {0xAB01, 0xAB06}, {0xAB09, 0xAB0E}, {0xAB11, 0xAB16},
    {0xAB20, 0xAB26}, {0xAB28, 0xAB2E}, {0xAB30, 0xAB5A}, {0xAB5C, 0xAB69}, {0xAB70, 0xABE2}, {0xAC00, 0xD7A3},
    {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D}, {0xFA70, 0xFAD9}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFB1D, 0xFB1D}, {0xFB1F, 0xFB28}, {0xFB2A, 0xFB36}, {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41},
    {0xFB43, 0xFB44}, {0xFB46, 0xFBB1}, {0xFBD3, 0xFD3D}, {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7}, {0xFDF0, 0xFDFB},
    {0xFE70, 0xFE74}, {0xFE76, 0xFEFC}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE}, {0xFFC2, 0xFFC7},
    {0xFFCA, 0xFFCF}, {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC}, {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A},
    {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x10280, 0x1029C},
    {0x102A0, 0x102D0}, {0x10300, 0x1031F}, {0x1032D, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375},
    {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF}, {0x10400, 0x1049D}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563}, {0x10570, 0x1057A}, {0x1057C, 0x1058A},
    {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9},
    {0x105BB, 0x105BC}, {0x10600, 0x10736}, {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785},
    {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835},
    {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089E},
    {0x108E0, 0x108F2}, {0x108F4, 0x108F5}, {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10980, 0x109B7},
    {0x109BE, 0x109BF}, {0x10A00, 0x10A00}, {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35},
    {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35},
    {0x10B40, 0x10B55}, {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23}, {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1}, {0x10F00, 0x10F1C},
    {0x10F27, 0x10F27}, {0x10F30, 0x10F45}, {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6},
    {0x11003, 0x11037}, {0x11071, 0x11072}, {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8},
    {0x11103, 0x11126}, {0x11144, 0x11144}, {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176},
    {0x11183, 0x111B2}, {0x111C1, 0x111C4}, {0x111DA, 0x111DA}, {0x111DC, 0x111DC}, {0x11200, 0x11211},
    {0x11213, 0x1122B}, {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D}, {0x1128F, 0x1129D},
    {0x1129F, 0x112A8}, {0x112B0, 0x112DE}, {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328},
    {0x1132A, 0x11330}, {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350},
    {0x1135D, 0x11361}, {0x11400, 0x11434}, {0x11447, 0x1144A}, {0x1145F, 0x11461}, {0x11480, 0x114AF},
    {0x114C4, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F},
    {0x11644, 0x11644}, {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746},
    {0x11800, 0x1182B}, {0x118A0, 0x118DF}, {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913},
    {0x11915, 0x11916}, {0x11918, 0x1192F}, {0x1193F, 0x1193F}, {0x11941, 0x11941}, {0x119A0, 0x119A7},
    {0x119AA, 0x119D0}, {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32},
    {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8},
    {0x11C00, 0x11C08}, {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06},
    {0x11D08, 0x11D09}, {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68},
    {0x11D6A, 0x11D89}, {0x11D98, 0x11D98}, {0x11EE0, 0x11EF2}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399},
    {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342E}, {0x14400, 0x14646}, {0x16800, 0x16A38},
    {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F}, {0x16B40, 0x16B43},
    {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F}, {0x16E40, 0x16E7F}, {0x16F00, 0x16F4A}, {0x16F50, 0x16F50},
    {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE3}, {0x17000, 0x187F7}, {0x18800, 0x18CD5},
    {0x18D00, 0x18D08}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122},
    {0x1B150, 0x1B152}, {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB},
    {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550},
    {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714},
    {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E}, {0x1E100, 0x1E12C}, {0x1E137, 0x1E13D},
    {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB},
    {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B},
    {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27},
    {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42},
    {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52},
    {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D},
    {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72},
    {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B},
    {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B738},
    {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
};
static const uint32_t unicode_numbers[][2] = {
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0x9F4, 0x9F9}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xB72, 0xB77},
    {0xBE6, 0xBF2}, {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xCE6, 0xCEF}, {0xD58, 0xD5E}, {0xD66, 0xD78}, {0xDE6, 0xDEF},
    {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF33}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x137C},
    {0x16EE, 0x16F0}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA},
    {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59},
    {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B},
    {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x2CFD, 0x2CFD}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A},
    {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF},
    {0xA620, 0xA629}, {0xA6E6, 0xA6EF}, {0xA830, 0xA835}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9},
    {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x10107, 0x10133}, {0x10140, 0x10178},
    {0x1018A, 0x1018B}, {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A},
    {0x103D1, 0x103D5}, {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF},
    {0x108FB, 0x108FF}, {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF},
    {0x10A40, 0x10A48}, {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F},
    {0x10B78, 0x10B7F}, {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E},
    {0x10F1D, 0x10F26}, {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9},
    {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x1173B}, {0x118E0, 0x118F2},
    {0x11950, 0x11959}, {0x11C50, 0x11C6C}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11FC0, 0x11FD4},
    {0x12400, 0x1246E}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61},
    {0x16E80, 0x16E96}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149},
    {0x1E2F0, 0x1E2F9}, {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF},
    {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};
static const uint32_t unicode_white_space[][2] = {
    {0x9, 0xD}, {0x20, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};
/* NFC: canonical combining classes [first, last, class]; canonical decompositions
 * [code point, first, second (0: none)], one level; and the pairs that compose
 * [first, second, composite]. Hangul syllables are left to rules. */
static const uint32_t nfc_combining_classes[][3] = {
    {0x300, 0x314, 0xE6}, {0x315, 0x315, 0xE8}, {0x316, 0x319, 0xDC}, {0x31A, 0x31A, 0xE8}, {0x31B, 0x31B, 0xD8},
    {0x31C, 0x320, 0xDC}, {0x321, 0x322, 0xCA}, {0x323, 0x326, 0xDC}, {0x327, 0x328, 0xCA}, {0x329, 0x333, 0xDC},
    {0x334, 0x338, 0x1}, {0x339, 0x33C, 0xDC}, {0x33D, 0x344, 0xE6}, {0x345, 0x345, 0xF0}, {0x346, 0x346, 0xE6},
    {0x347, 0x349, 0xDC}, {0x34A, 0x34C, 0xE6}, {0x34D, 0x34E, 0xDC}, {0x350, 0x352, 0xE6}, {0x353, 0x356, 0xDC},
    {0x357, 0x357, 0xE6}, {0x358, 0x358, 0xE8}, {0x359, 0x35A, 0xDC}, {0x35B, 0x35B, 0xE6}, {0x35C, 0x35C, 0xE9},
    {0x35D, 0x35E, 0xEA}, {0x35F, 0x35F, 0xE9}, {0x360, 0x361, 0xEA}, {0x362, 0x362, 0xE9}, {0x363, 0x36F, 0xE6},
    {0x483, 0x487, 0xE6}, {0x591, 0x591, 0xDC}, {0x592, 0x595, 0xE6}, {0x596, 0x596, 0xDC}, {0x597, 0x599, 0xE6},
    {0x59A, 0x59A, 0xDE}, {0x59B, 0x59B, 0xDC}, {0x59C, 0x5A1, 0xE6}, {0x5A2, 0x5A7, 0xDC}, {0x5A8, 0x5A9, 0xE6},
    {0x5AA, 0x5AA, 0xDC}, {0x5AB, 0x5AC, 0xE6}, {0x5AD, 0x5AD, 0xDE}, {0x5AE, 0x5AE, 0xE4}, {0x5AF, 0x5AF, 0xE6},
    {0x5B0, 0x5B0, 0xA}, {0x5B1, 0x5B1, 0xB}, {0x5B2, 0x5B2, 0xC}, {0x5B3, 0x5B3, 0xD}, {0x5B4, 0x5B4, 0xE},
    {0x5B5, 0x5B5, 0xF}, {0x5B6, 0x5B6, 0x10}, {0x5B7, 0x5B7, 0x11}, {0x5B8, 0x5B8, 0x12}, {0x5B9, 0x5BA, 0x13},
    {0x5BB, 0x5BB, 0x14}, {0x5BC, 0x5BC, 0x15}, {0x5BD, 0x5BD, 0x16}, {0x5BF, 0x5BF, 0x17}, {0x5C1, 0x5C1, 0x18},
    {0x5C2, 0x5C2, 0x19}, {0x5C4, 0x5C4, 0xE6}, {0x5C5, 0x5C5, 0xDC}, {0x5C7, 0x5C7, 0x12}, {0x610, 0x617, 0xE6},
    {0x618, 0x618, 0x1E}, {0x619, 0x619, 0x1F}, {0x61A, 0x61A, 0x20}, {0x64B, 0x64B, 0x1B}, {0x64C, 0x64C, 0x1C},
    {0x64D, 0x64D, 0x1D}, {0x64E, 0x64E, 0x1E}, {0x64F, 0x64F, 0x1F}, {0x650, 0x650, 0x20}, {0x651, 0x651, 0x21},
    {0x652, 0x652, 0x22}, {0x653, 0x654, 0xE6}, {0x655, 0x656, 0xDC}, {0x657, 0x65B, 0xE6}, {0x65C, 0x65C, 0xDC},
    {0x65D, 0x65E, 0xE6}, {0x65F, 0x65F, 0xDC}, {0x670, 0x670, 0x23}, {0x6D6, 0x6DC, 0xE6}, {0x6DF, 0x6E2, 0xE6},
    {0x6E3, 0x6E3, 0xDC}, {0x6E4, 0x6E4, 0xE6}, {0x6E7, 0x6E8, 0xE6}, {0x6EA, 0x6EA, 0xDC}, {0x6EB, 0x6EC, 0xE6},
    {0x6ED, 0x6ED, 0xDC}, {0x711, 0x711, 0x24}, {0x730, 0x730, 0xE6}, {0x731, 0x731, 0xDC}, {0x732, 0x733, 0xE6},
    {0x734, 0x734, 0xDC}, {0x735, 0x736, 0xE6}, {0x737, 0x739, 0xDC}, {0x73A, 0x73A, 0xE6}, {0x73B, 0x73C, 0xDC},
    {0x73D, 0x73D, 0xE6}, {0x73E, 0x73E, 0xDC}, {0x73F, 0x741, 0xE6}, {0x742, 0x742, 0xDC}, {0x743, 0x743, 0xE6},
    {0x744, 0x744, 0xDC}, {0x745, 0x745, 0xE6}, {0x746, 0x746, 0xDC}, {0x747, 0x747, 0xE6}, {0x748, 0x748, 0xDC},
    {0x749, 0x74A, 0xE6}, {0x7EB, 0x7F1, 0xE6}, {0x7F2, 0x7F2, 0xDC}, {0x7F3, 0x7F3, 0xE6}, {0x7FD, 0x7FD, 0xDC},
    {0x816, 0x819, 0xE6}, {0x81B, 0x823, 0xE6}, {0x825, 0x827, 0xE6}, {0x829, 0x82D, 0xE6}, {0x859, 0x85B, 0xDC},
    {0x898, 0x898, 0xE6}, {0x899, 0x89B, 0xDC}, {0x89C, 0x89F, 0xE6}, {0x8CA, 0x8CE, 0xE6}, {0x8CF, 0x8D3, 0xDC},
    {0x8D4, 0x8E1, 0xE6}, {0x8E3, 0x8E3, 0xDC}, {0x8E4, 0x8E5, 0xE6}, {0x8E6, 0x8E6, 0xDC}, {0x8E7, 0x8E8, 0xE6},
    {0x8E9, 0x8E9, 0xDC}, {0x8EA, 0x8EC, 0xE6}, {0x8ED, 0x8EF, 0xDC}, {0x8F0, 0x8F0, 0x1B}, {0x8F1, 0x8F1, 0x1C},
    {0x8F2, 0x8F2, 0x1D}, {0x8F3, 0x8F5, 0xE6}, {0x8F6, 0x8F6, 0xDC}, {0x8F7, 0x8F8, 0xE6}, {0x8F9, 0x8FA, 0xDC},
    {0x8FB, 0x8FF, 0xE6}, {0x93C, 0x93C, 0x7}, {0x94D, 0x94D, 0x9}, {0x951, 0x951, 0xE6}, {0x952, 0x952, 0xDC},
    {0x953, 0x954, 0xE6}, {0x9BC, 0x9BC, 0x7}, {0x9CD, 0x9CD, 0x9}, {0x9FE, 0x9FE, 0xE6}, {0xA3C, 0xA3C, 0x7},
    {0xA4D, 0xA4D, 0x9}, {0xABC, 0xABC, 0x7}, {0xACD, 0xACD, 0x9}, {0xB3C, 0xB3C, 0x7}, {0xB4D, 0xB4D, 0x9},
    {0xBCD, 0xBCD, 0x9}, {0xC3C, 0xC3C, 0x7}, {0xC4D, 0xC4D, 0x9}, {0xC55, 0xC55, 0x54}, {0xC56, 0xC56, 0x5B},
    {0xCBC, 0xCBC, 0x7}, {0xCCD, 0xCCD, 0x9}, {0xD3B, 0xD3C, 0x9}, {0xD4D, 0xD4D, 0x9}, {0xDCA, 0xDCA, 0x9},
    {0xE38, 0xE39, 0x67}, {0xE3A, 0xE3A, 0x9}, {0xE48, 0xE4B, 0x6B}, {0xEB8, 0xEB9, 0x76}, {0xEBA, 0xEBA, 0x9},
    {0xEC8, 0xECB, 0x7A}, {0xF18, 0xF19, 0xDC}, {0xF35, 0xF35, 0xDC}, {0xF37, 0xF37, 0xDC}, {0xF39, 0xF39, 0xD8},
    {0xF71, 0xF71, 0x81}, {0xF72, 0xF72, 0x82}, {0xF74, 0xF74, 0x84}, {0xF7A, 0xF7D, 0x82}, {0xF80, 0xF80, 0x82},
    {0xF82, 0xF83, 0xE6}, {0xF84, 0xF84, 0x9}, {0xF86, 0xF87, 0xE6}, {0xFC6, 0xFC6, 0xDC}, {0x1037, 0x1037, 0x7},
    {0x1039, 0x103A, 0x9}, {0x108D, 0x108D, 0xDC}, {0x135D, 0x135F, 0xE6}, {0x1714, 0x1715, 0x9}, {0x1734, 0x1734, 0x9},
    {0x17D2, 0x17D2, 0x9}, {0x17DD, 0x17DD, 0xE6}, {0x18A9, 0x18A9, 0xE4}, {0x1939, 0x1939, 0xDE},
    {0x193A, 0x193A, 0xE6}, {0x193B, 0x193B, 0xDC}, {0x1A17, 0x1A17, 0xE6}, {0x1A18, 0x1A18, 0xDC},
    {0x1A60, 0x1A60, 0x9}, {0x1A75, 0x1A7C, 0xE6}, {0x1A7F, 0x1A7F, 0xDC}, {0x1AB0, 0x1AB4, 0xE6},
    {0x1AB5, 0x1ABA, 0xDC}, {0x1ABB, 0x1ABC, 0xE6}, {0x1ABD, 0x1ABD, 0xDC}, {0x1ABF, 0x1AC0, 0xDC},
    {0x1AC1, 0x1AC2, 0xE6}, {0x1AC3, 0x1AC4, 0xDC}, {0x1AC5, 0x1AC9, 0xE6}, {0x1ACA, 0x1ACA, 0xDC},
    {0x1ACB, 0x1ACE, 0xE6}, {0x1B34, 0x1B34, 0x7}, {0x1B44, 0x1B44, 0x9}, {0x1B6B, 0x1B6B, 0xE6},
    {0x1B6C, 0x1B6C, 0xDC}, {0x1B6D, 0x1B73, 0xE6}, {0x1BAA, 0x1BAB, 0x9}, {0x1BE6, 0x1BE6, 0x7}, {0x1BF2, 0x1BF3, 0x9},
    {0x1C37, 0x1C37, 0x7}, {0x1CD0, 0x1CD2, 0xE6}, {0x1CD4, 0x1CD4, 0x1}, {0x1CD5, 0x1CD9, 0xDC},
    {0x1CDA, 0x1CDB, 0xE6}, {0x1CDC, 0x1CDF, 0xDC}, {0x1CE0, 0x1CE0, 0xE6}, {0x1CE2, 0x1CE8, 0x1},
    {0x1CED, 0x1CED, 0xDC}, {0x1CF4, 0x1CF4, 0xE6}, {0x1CF8, 0x1CF9, 0xE6}, {0x1DC0, 0x1DC1, 0xE6},
    {0x1DC2, 0x1DC2, 0xDC}, {0x1DC3, 0x1DC9, 0xE6}, {0x1DCA, 0x1DCA, 0xDC}, {0x1DCB, 0x1DCC, 0xE6},
    {0x1DCD, 0x1DCD, 0xEA}, {0x1DCE, 0x1DCE, 0xD6}, {0x1DCF, 0x1DCF, 0xDC}, {0x1DD0, 0x1DD0, 0xCA},
    {0x1DD1, 0x1DF5, 0xE6}, {0x1DF6, 0x1DF6, 0xE8}, {0x1DF7, 0x1DF8, 0xE4}, {0x1DF9, 0x1DF9, 0xDC},
    {0x1DFA, 0x1DFA, 0xDA}, {0x1DFB, 0x1DFB, 0xE6}, {0x1DFC, 0x1DFC, 0xE9}, {0x1DFD, 0x1DFD, 0xDC},
    {0x1DFE, 0x1DFE, 0xE6}, {0x1DFF, 0x1DFF, 0xDC}, {0x20D0, 0x20D1, 0xE6}, {0x20D2, 0x20D3, 0x1},
    {0x20D4, 0x20D7, 0xE6}, {0x20D8, 0x20DA, 0x1}, {0x20DB, 0x20DC, 0xE6}, {0x20E1, 0x20E1, 0xE6},
    {0x20E5, 0x20E6, 0x1}, {0x20E7, 0x20E7, 0xE6}, {0x20E8, 0x20E8, 0xDC}, {0x20E9, 0x20E9, 0xE6},
    {0x20EA, 0x20EB, 0x1}, {0x20EC, 0x20EF, 0xDC}, {0x20F0, 0x20F0, 0xE6}, {0x2CEF, 0x2CF1, 0xE6},
    {0x2D7F, 0x2D7F, 0x9}, {0x2DE0, 0x2DFF, 0xE6}, {0x302A, 0x302A, 0xDA}, {0x302B, 0x302B, 0xE4},
    {0x302C, 0x302C, 0xE8}, {0x302D, 0x302D, 0xDE}, {0x302E, 0x302F, 0xE0}, {0x3099, 0x309A, 0x8},
    {0xA66F, 0xA66F, 0xE6}, {0xA674, 0xA67D, 0xE6}, {0xA69E, 0xA69F, 0xE6}, {0xA6F0, 0xA6F1, 0xE6},
    {0xA806, 0xA806, 0x9}, {0xA82C, 0xA82C, 0x9}, {0xA8C4, 0xA8C4, 0x9}, {0xA8E0, 0xA8F1, 0xE6}, {0xA92B, 0xA92D, 0xDC},
    {0xA953, 0xA953, 0x9}, {0xA9B3, 0xA9B3, 0x7}, {0xA9C0, 0xA9C0, 0x9}, {0xAAB0, 0xAAB0, 0xE6}, {0xAAB2, 0xAAB3, 0xE6},
    {0xAAB4, 0xAAB4, 0xDC}, {0xAAB7, 0xAAB8, 0xE6}, {0xAABE, 0xAABF, 0xE6}, {0xAAC1, 0xAAC1, 0xE6},
    {0xAAF6, 0xAAF6, 0x9}, {0xABED, 0xABED, 0x9}, {0xFB1E, 0xFB1E, 0x1A}, {0xFE20, 0xFE26, 0xE6},
    {0xFE27, 0xFE2D, 0xDC}, {0xFE2E, 0xFE2F, 0xE6}, {0x101FD, 0x101FD, 0xDC}, {0x102E0, 0x102E0, 0xDC},
    {0x10376, 0x1037A, 0xE6}, {0x10A0D, 0x10A0D, 0xDC}, {0x10A0F, 0x10A0F, 0xE6}, {0x10A38, 0x10A38, 0xE6},
    {0x10A39, 0x10A39, 0x1}, {0x10A3A, 0x10A3A, 0xDC}, {0x10A3F, 0x10A3F, 0x9}, {0x10AE5, 0x10AE5, 0xE6},
    {0x10AE6, 0x10AE6, 0xDC}, {0x10D24, 0x10D27, 0xE6}, {0x10EAB, 0x10EAC, 0xE6}, {0x10F46, 0x10F47, 0xDC},
    {0x10F48, 0x10F4A, 0xE6}, {0x10F4B, 0x10F4B, 0xDC}, {0x10F4C, 0x10F4C, 0xE6}, {0x10F4D, 0x10F50, 0xDC},
    {0x10F82, 0x10F82, 0xE6}, {0x10F83, 0x10F83, 0xDC}, {0x10F84, 0x10F84, 0xE6}, {0x10F85, 0x10F85, 0xDC},
    {0x11046, 0x11046, 0x9}, {0x11070, 0x11070, 0x9}, {0x1107F, 0x1107F, 0x9}, {0x110B9, 0x110B9, 0x9},
    {0x110BA, 0x110BA, 0x7}, {0x11100, 0x11102, 0xE6}, {0x11133, 0x11134, 0x9}, {0x11173, 0x11173, 0x7},
    {0x111C0, 0x111C0, 0x9}, {0x111CA, 0x111CA, 0x7}, {0x11235, 0x11235, 0x9}, {0x11236, 0x11236, 0x7},
    {0x112E9, 0x112E9, 0x7}, {0x112EA, 0x112EA, 0x9}, {0x1133B, 0x1133C, 0x7}, {0x1134D, 0x1134D, 0x9},
    {0x11366, 0x1136C, 0xE6}, {0x11370, 0x11374, 0xE6}, {0x11442, 0x11442, 0x9}, {0x11446, 0x11446, 0x7},
    {0x1145E, 0x1145E, 0xE6}, {0x114C2, 0x114C2, 0x9}, {0x114C3, 0x114C3, 0x7}, {0x115BF, 0x115BF, 0x9},
    {0x115C0, 0x115C0, 0x7}, {0x1163F, 0x1163F, 0x9}, {0x116B6, 0x116B6, 0x9}, {0x116B7, 0x116B7, 0x7},
    {0x1172B, 0x1172B, 0x9}, {0x11839, 0x11839, 0x9}, {0x1183A, 0x1183A, 0x7}, {0x1193D, 0x1193E, 0x9},
    {0x11943, 0x11943, 0x7}, {0x119E0, 0x119E0, 0x9}, {0x11A34, 0x11A34, 0x9}, {0x11A47, 0x11A47, 0x9},
    {0x11A99, 0x11A99, 0x9}, {0x11C3F, 0x11C3F, 0x9}, {0x11D42, 0x11D42, 0x7}, {0x11D44, 0x11D45, 0x9},
    {0x11D97, 0x11D97, 0x9}, {0x16AF0, 0x16AF4, 0x1}, {0x16B30, 0x16B36, 0xE6}, {0x16FF0, 0x16FF1, 0x6},
    {0x1BC9E, 0x1BC9E, 0x1}, {0x1D165, 0x1D166, 0xD8}, {0x1D167, 0x1D169, 0x1}, {0x1D16D, 0x1D16D, 0xE2},
    {0x1D16E, 0x1D172, 0xD8}, {0x1D17B, 0x1D182, 0xDC}, {0x1D185, 0x1D189, 0xE6}, {0x1D18A, 0x1D18B, 0xDC},
    {0x1D1AA, 0x1D1AD, 0xE6}, {0x1D242, 0x1D244, 0xE6}, {0x1E000, 0x1E006, 0xE6}, {0x1E008, 0x1E018, 0xE6},
    {0x1E01B, 0x1E021, 0xE6}, {0x1E023, 0x1E024, 0xE6}, {0x1E026, 0x1E02A, 0xE6}, {0x1E130, 0x1E136, 0xE6},
    {0x1E2AE, 0x1E2AE, 0xE6}, {0x1E2EC, 0x1E2EF, 0xE6}, {0x1E8D0, 0x1E8D6, 0xDC}, {0x1E944, 0x1E949, 0xE6},
    {0x1E94A, 0x1E94A, 0x7},
};
static const uint32_t nfc_decompositions[][3] = {
    {0xC0, 0x41, 0x300}, {0xC1, 0x41, 0x301}, {0xC2, 0x41, 0x302}, {0xC3, 0x41, 0x303}, {0xC4, 0x41, 0x308},
    {0xC5, 0x41, 0x30A}, {0xC7, 0x43, 0x327}, {0xC8, 0x45, 0x300}, {0xC9, 0x45, 0x301}, {0xCA, 0x45, 0x302},
    {0xCB, 0x45, 0x308}, {0xCC, 0x49, 0x300}, {0xCD, 0x49, 0x301}, {0xCE, 0x49, 0x302}, {0xCF, 0x49, 0x308},
    {0xD1, 0x4E, 0x303}, {0xD2, 0x4F, 0x300}, {0xD3, 0x4F, 0x301}, {0xD4, 0x4F, 0x302}, {0xD5, 0x4F, 0x303},
    {0xD6, 0x4F, 0x308}, {0xD9, 0x55, 0x300}, {0xDA, 0x55, 0x301}, {0xDB, 0x55, 0x302}, {0xDC, 0x55, 0x308},
    {0xDD, 0x59, 0x301}, {0xE0, 0x61, 0x300}, {0xE1, 0x61, 0x301}, {0xE2, 0x61, 0x302}, {0xE3, 0x61, 0x303},
    {0xE4, 0x61, 0x308}, {0xE5, 0x61, 0x30A}, {0xE7, 0x63, 0x327}, {0xE8, 0x65, 0x300}, {0xE9, 0x65, 0x301},
    {0xEA, 0x65, 0x302}, {0xEB, 0x65, 0x308}, {0xEC, 0x69, 0x300}, {0xED, 0x69, 0x301}, {0xEE, 0x69, 0x302},
    {0xEF, 0x69, 0x308}, {0xF1, 0x6E, 0x303}, {0xF2, 0x6F, 0x300}, {0xF3, 0x6F, 0x301}, {0xF4, 0x6F, 0x302},
    {0xF5, 0x6F, 0x303}, {0xF6, 0x6F, 0x308}, {0xF9, 0x75, 0x300}, {0xFA, 0x75, 0x301}, {0xFB, 0x75, 0x302},
    {0xFC, 0x75, 0x308}, {0xFD, 0x79, 0x301}, {0xFF, 0x79, 0x308}, {0x100, 0x41, 0x304}, {0x101, 0x61, 0x304},
    {0x102, 0x41, 0x306}, {0x103, 0x61, 0x306}, {0x104, 0x41, 0x328}, {0x105, 0x61, 0x328}, {0x106, 0x43, 0x301},
    {0x107, 0x63, 0x301}, {0x108, 0x43, 0x302}, {0x109, 0x63, 0x302}, {0x10A, 0x43, 0x307}, {0x10B, 0x63, 0x307},
    {0x10C, 0x43, 0x30C}, {0x10D, 0x63, 0x30C}, {0x10E, 0x44, 0x30C}, {0x10F, 0x64, 0x30C}, {0x112, 0x45, 0x304},
    {0x113, 0x65, 0x304}, {0x114, 0x45, 0x306}, {0x115, 0x65, 0x306}, {0x116, 0x45, 0x307}, {0x117, 0x65, 0x307},
    {0x118, 0x45, 0x328}, {0x119, 0x65, 0x328}, {0x11A, 0x45, 0x30C}, {0x11B, 0x65, 0x30C}, {0x11C, 0x47, 0x302},
    {0x11D, 0x67, 0x302}, {0x11E, 0x47, 0x306}, {0x11F, 0x67, 0x306}, {0x120, 0x47, 0x307}, {0x121, 0x67, 0x307},
    {0x122, 0x47, 0x327}, {0x123, 0x67, 0x327}, {0x124, 0x48, 0x302}, {0x125, 0x68, 0x302}, {0x128, 0x49, 0x303},
    {0x129, 0x69, 0x303}, {0x12A, 0x49, 0x304}, {0x12B, 0x69, 0x304}, {0x12C, 0x49, 0x306}, {0x12D, 0x69, 0x306},
    {0x12E, 0x49, 0x328}, {0x12F, 0x69, 0x328}, {0x130, 0x49, 0x307}, {0x134, 0x4A, 0x302}, {0x135, 0x6A, 0x302},
    {0x136, 0x4B, 0x327}, {0x137, 0x6B, 0x327}, {0x139, 0x4C, 0x301}, {0x13A, 0x6C, 0x301}, {0x13B, 0x4C, 0x327},
    {0x13C, 0x6C, 0x327}, {0x13D, 0x4C, 0x30C}, {0x13E, 0x6C, 0x30C}, {0x143, 0x4E, 0x301}, {0x144, 0x6E, 0x301},
    {0x145, 0x4E, 0x327}, {0x146, 0x6E, 0x327}, {0x147, 0x4E, 0x30C}, {0x148, 0x6E, 0x30C}, {0x14C, 0x4F, 0x304},
    {0x14D, 0x6F, 0x304}, {0x14E, 0x4F, 0x306}, {0x14F, 0x6F, 0x306}, {0x150, 0x4F, 0x30B}, {0x151, 0x6F, 0x30B},
    {0x154, 0x52, 0x301}, {0x155, 0x72, 0x301}, {0x156, 0x52, 0x327}, {0x157, 0x72, 0x327}, {0x158, 0x52, 0x30C},
    {0x159, 0x72, 0x30C}, {0x15A, 0x53, 0x301}, {0x15B, 0x73, 0x301}, {0x15C, 0x53, 0x302}, {0x15D, 0x73, 0x302},
    {0x15E, 0x53, 0x327}, {0x15F, 0x73, 0x327}, {0x160, 0x53, 0x30C}, {0x161, 0x73, 0x30C}, {0x162, 0x54, 0x327},
    {0x163, 0x74, 0x327}, {0x164, 0x54, 0x30C}, {0x165, 0x74, 0x30C}, {0x168, 0x55, 0x303}, {0x169, 0x75, 0x303},
    {0x16A, 0x55, 0x304}, {0x16B, 0x75, 0x304}, {0x16C, 0x55, 0x306}, {0x16D, 0x75, 0x306}, {0x16E, 0x55, 0x30A},
    {0x16F, 0x75, 0x30A}, {0x170, 0x55, 0x30B}, {0x171, 0x75, 0x30B}, {0x172, 0x55, 0x328}, {0x173, 0x75, 0x328},
    {0x174, 0x57, 0x302}, {0x175, 0x77, 0x302}, {0x176, 0x59, 0x302}, {0x177, 0x79, 0x302}, {0x178, 0x59, 0x308},
    {0x179, 0x5A, 0x301}, {0x17A, 0x7A, 0x301}, {0x17B, 0x5A, 0x307}, {0x17C, 0x7A, 0x307}, {0x17D, 0x5A, 0x30C},
    {0x17E, 0x7A, 0x30C}, {0x1A0, 0x4F, 0x31B}, {0x1A1, 0x6F, 0x31B}, {0x1AF, 0x55, 0x31B}, {0x1B0, 0x75, 0x31B},
    {0x1CD, 0x41, 0x30C}, {0x1CE, 0x61, 0x30C}, {0x1CF, 0x49, 0x30C}, {0x1D0, 0x69, 0x30C}, {0x1D1, 0x4F, 0x30C},
    {0x1D2, 0x6F, 0x30C}, {0x1D3, 0x55, 0x30C}, {0x1D4, 0x75, 0x30C}, {0x1D5, 0xDC, 0x304}, {0x1D6, 0xFC, 0x304},
    {0x1D7, 0xDC, 0x301}, {0x1D8, 0xFC, 0x301}, {0x1D9, 0xDC, 0x30C}, {0x1DA, 0xFC, 0x30C}, {0x1DB, 0xDC, 0x300},
    {0x1DC, 0xFC, 0x300}, {0x1DE, 0xC4, 0x304}, {0x1DF, 0xE4, 0x304}, {0x1E0, 0x226, 0x304}, {0x1E1, 0x227, 0x304},
    {0x1E2, 0xC6, 0x304}, {0x1E3, 0xE6, 0x304}, {0x1E6, 0x47, 0x30C}, {0x1E7, 0x67, 0x30C}, {0x1E8, 0x4B, 0x30C},
    {0x1E9, 0x6B, 0x30C}, {0x1EA, 0x4F, 0x328}, {0x1EB, 0x6F, 0x328}, {0x1EC, 0x1EA, 0x304}, {0x1ED, 0x1EB, 0x304},
    {0x1EE, 0x1B7, 0x30C}, {0x1EF, 0x292, 0x30C}, {0x1F0, 0x6A, 0x30C}, {0x1F4, 0x47, 0x301}, {0x1F5, 0x67, 0x301},
    {0x1F8, 0x4E, 0x300}, {0x1F9, 0x6E, 0x300}, {0x1FA, 0xC5, 0x301}, {0x1FB, 0xE5, 0x301}, {0x1FC, 0xC6, 0x301},
    {0x1FD, 0xE6, 0x301}, {0x1FE, 0xD8, 0x301}, {0x1FF, 0xF8, 0x301}, {0x200, 0x41, 0x30F}, {0x201, 0x61, 0x30F},
    {0x202, 0x41, 0x311}, {0x203, 0x61, 0x311}, {0x204, 0x45, 0x30F}, {0x205, 0x65, 0x30F}, {0x206, 0x45, 0x311},
    {0x207, 0x65, 0x311}, {0x208, 0x49, 0x30F}, {0x209, 0x69, 0x30F}, {0x20A, 0x49, 0x311}, {0x20B, 0x69, 0x311},
    {0x20C, 0x4F, 0x30F}, {0x20D, 0x6F, 0x30F}, {0x20E, 0x4F, 0x311}, {0x20F, 0x6F, 0x311}, {0x210, 0x52, 0x30F},
    {0x211, 0x72, 0x30F}, {0x212, 0x52, 0x311}, {0x213, 0x72, 0x311}, {0x214, 0x55, 0x30F}, {0x215, 0x75, 0x30F},
    {0x216, 0x55, 0x311}, {0x217, 0x75, 0x311}, {0x218, 0x53, 0x326}, {0x219, 0x73, 0x326}, {0x21A, 0x54, 0x326},
    {0x21B, 0x74, 0x326}, {0x21E, 0x48, 0x30C}, {0x21F, 0x68, 0x30C}, {0x226, 0x41, 0x307}, {0x227, 0x61, 0x307},
    {0x228, 0x45, 0x327}, {0x229, 0x65, 0x327}, {0x22A, 0xD6, 0x304}, {0x22B, 0xF6, 0x304}, {0x22C, 0xD5, 0x304},
    {0x22D, 0xF5, 0x304}, {0x22E, 0x4F, 0x307}, {0x22F, 0x6F, 0x307}, {0x230, 0x22E, 0x304}, {0x231, 0x22F, 0x304},
    {0x232, 0x59, 0x304}, {0x233, 0x79, 0x304}, {0x340, 0x300, 0x0}, {0x341, 0x301, 0x0}, {0x343, 0x313, 0x0},
    {0x344, 0x308, 0x301}, {0x374, 0x2B9, 0x0}, {0x37E, 0x3B, 0x0}, {0x385, 0xA8, 0x301}, {0x386, 0x391, 0x301},
    {0x387, 0xB7, 0x0}, {0x388, 0x395, 0x301}, {0x389, 0x397, 0x301}, {0x38A, 0x399, 0x301}, {0x38C, 0x39F, 0x301},
    {0x38E, 0x3A5, 0x301}, {0x38F, 0x3A9, 0x301}, {0x390, 0x3CA, 0x301}, {0x3AA, 0x399, 0x308}, {0x3AB, 0x3A5, 0x308},
    {0x3AC, 0x3B1, 0x301}, {0x3AD, 0x3B5, 0x301}, {0x3AE, 0x3B7, 0x301}, {0x3AF, 0x3B9, 0x301}, {0x3B0, 0x3CB, 0x301},
    {0x3CA, 0x3B9, 0x308}, {0x3CB, 0x3C5, 0x308}, {0x3CC, 0x3BF, 0x301}, {0x3CD, 0x3C5, 0x301}, {0x3CE, 0x3C9, 0x301},
    {0x3D3, 0x3D2, 0x301}, {0x3D4, 0x3D2, 0x308}, {0x400, 0x415, 0x300}, {0x401, 0x415, 0x308}, {0x403, 0x413, 0x301},
    {0x407, 0x406, 0x308}, {0x40C, 0x41A, 0x301}, {0x40D, 0x418, 0x300}, {0x40E, 0x423, 0x306}, {0x419, 0x418, 0x306},
    {0x439, 0x438, 0x306}, {0x450, 0x435, 0x300}, {0x451, 0x435, 0x308}, {0x453, 0x433, 0x301}, {0x457, 0x456, 0x308},
    {0x45C, 0x43A, 0x301}, {0x45D, 0x438, 0x300}, {0x45E, 0x443, 0x306}, {0x476, 0x474, 0x30F}, {0x477, 0x475, 0x30F},
    {0x4C1, 0x416, 0x306}, {0x4C2, 0x436, 0x306}, {0x4D0, 0x410, 0x306}, {0x4D1, 0x430, 0x306}, {0x4D2, 0x410, 0x308},
    {0x4D3, 0x430, 0x308}, {0x4D6, 0x415, 0x306}, {0x4D7, 0x435, 0x306}, {0x4DA, 0x4D8, 0x308}, {0x4DB, 0x4D9, 0x308},
    {0x4DC, 0x416, 0x308}, {0x4DD, 0x436, 0x308}, {0x4DE, 0x417, 0x308}, {0x4DF, 0x437, 0x308}, {0x4E2, 0x418, 0x304},
    {0x4E3, 0x438, 0x304}, {0x4E4, 0x418, 0x308}, {0x4E5, 0x438, 0x308}, {0x4E6, 0x41E, 0x308}, {0x4E7, 0x43E, 0x308},
    {0x4EA, 0x4E8, 0x308}, {0x4EB, 0x4E9, 0x308}, {0x4EC, 0x42D, 0x308}, {0x4ED, 0x44D, 0x308}, {0x4EE, 0x423, 0x304},
    {0x4EF, 0x443, 0x304}, {0x4F0, 0x423, 0x308}, {0x4F1, 0x443, 0x308}, {0x4F2, 0x423, 0x30B}, {0x4F3, 0x443, 0x30B},
    {0x4F4, 0x427, 0x308}, {0x4F5, 0x447, 0x308}, {0x4F8, 0x42B, 0x308}, {0x4F9, 0x44B, 0x308}, {0x622, 0x627, 0x653},
    {0x623, 0x627, 0x654}, {0x624, 0x648, 0x654}, {0x625, 0x627, 0x655}, {0x626, 0x64A, 0x654}, {0x6C0, 0x6D5, 0x654},
    {0x6C2, 0x6C1, 0x654}, {0x6D3, 0x6D2, 0x654}, {0x929, 0x928, 0x93C}, {0x931, 0x930, 0x93C}, {0x934, 0x933, 0x93C},
    {0x958, 0x915, 0x93C}, {0x959, 0x916, 0x93C}, {0x95A, 0x917, 0x93C}, {0x95B, 0x91C, 0x93C}, {0x95C, 0x921, 0x93C},
    {0x95D, 0x922, 0x93C}, {0x95E, 0x92B, 0x93C}, {0x95F, 0x92F, 0x93C}, {0x9CB, 0x9C7, 0x9BE}, {0x9CC, 0x9C7, 0x9D7},
    {0x9DC, 0x9A1, 0x9BC}, {0x9DD, 0x9A2, 0x9BC}, {0x9DF, 0x9AF, 0x9BC}, {0xA33, 0xA32, 0xA3C}, {0xA36, 0xA38, 0xA3C},
    {0xA59, 0xA16, 0xA3C}, {0xA5A, 0xA17, 0xA3C}, {0xA5B, 0xA1C, 0xA3C}, {0xA5E, 0xA2B, 0xA3C}, {0xB48, 0xB47, 0xB56},
    {0xB4B, 0xB47, 0xB3E}, {0xB4C, 0xB47, 0xB57}, {0xB5C, 0xB21, 0xB3C}, {0xB5D, 0xB22, 0xB3C}, {0xB94, 0xB92, 0xBD7},
    {0xBCA, 0xBC6, 0xBBE}, {0xBCB, 0xBC7, 0xBBE}, {0xBCC, 0xBC6, 0xBD7}, {0xC48, 0xC46, 0xC56}, {0xCC0, 0xCBF, 0xCD5},
    {0xCC7, 0xCC6, 0xCD5}, {0xCC8, 0xCC6, 0xCD6}, {0xCCA, 0xCC6, 0xCC2}, {0xCCB, 0xCCA, 0xCD5}, {0xD4A, 0xD46, 0xD3E},
    {0xD4B, 0xD47, 0xD3E}, {0xD4C, 0xD46, 0xD57}, {0xDDA, 0xDD9, 0xDCA}, {0xDDC, 0xDD9, 0xDCF}, {0xDDD, 0xDDC, 0xDCA},
    {0xDDE, 0xDD9, 0xDDF}, {0xF43, 0xF42, 0xFB7}, {0xF4D, 0xF4C, 0xFB7}, {0xF52, 0xF51, 0xFB7}, {0xF57, 0xF56, 0xFB7},
    {0xF5C, 0xF5B, 0xFB7}, {0xF69, 0xF40, 0xFB5}, {0xF73, 0xF71, 0xF72}, {0xF75, 0xF71, 0xF74}, {0xF76, 0xFB2, 0xF80},
    {0xF78, 0xFB3, 0xF80}, {0xF81, 0xF71, 0xF80}, {0xF93, 0xF92, 0xFB7}, {0xF9D, 0xF9C, 0xFB7}, {0xFA2, 0xFA1, 0xFB7},
    {0xFA7, 0xFA6, 0xFB7}, {0xFAC, 0xFAB, 0xFB7}, {0xFB9, 0xF90, 0xFB5}, {0x1026, 0x1025, 0x102E},
    {0x1B06, 0x1B05, 0x1B35}, {0x1B08, 0x1B07, 0x1B35}, {0x1B0A, 0x1B09, 0x1B35}, {0x1B0C, 0x1B0B, 0x1B35},
    {0x1B0E, 0x1B0D, 0x1B35}, {0x1B12, 0x1B11, 0x1B35}, {0x1B3B, 0x1B3A, 0x1B35}, {0x1B3D, 0x1B3C, 0x1B35},
    {0x1B40, 0x1B3E, 0x1B35}, {0x1B41, 0x1B3F, 0x1B35}, {0x1B43, 0x1B42, 0x1B35}, {0x1E00, 0x41, 0x325},
    {0x1E01, 0x61, 0x325}, {0x1E02, 0x42, 0x307}, {0x1E03, 0x62, 0x307}, {0x1E04, 0x42, 0x323}, {0x1E05, 0x62, 0x323},
    {0x1E06, 0x42, 0x331}, {0x1E07, 0x62, 0x331}, {0x1E08, 0xC7, 0x301}, {0x1E09, 0xE7, 0x301}, {0x1E0A, 0x44, 0x307},
    {0x1E0B, 0x64, 0x307}, {0x1E0C, 0x44, 0x323}, {0x1E0D, 0x64, 0x323}, {0x1E0E, 0x44, 0x331}, {0x1E0F, 0x64, 0x331},
    {0x1E10, 0x44, 0x327}, {0x1E11, 0x64, 0x327}, {0x1E12, 0x44, 0x32D}, {0x1E13, 0x64, 0x32D}, {0x1E14, 0x112, 0x300},
    {0x1E15, 0x113, 0x300}, {0x1E16, 0x112, 0x301}, {0x1E17, 0x113, 0x301}, {0x1E18, 0x45, 0x32D},
    {0x1E19, 0x65, 0x32D}, {0x1E1A, 0x45, 0x330}, {0x1E1B, 0x65, 0x330}, {0x1E1C, 0x228, 0x306}, {0x1E1D, 0x229, 0x306},
    {0x1E1E, 0x46, 0x307}, {0x1E1F, 0x66, 0x307}, {0x1E20, 0x47, 0x304}, {0x1E21, 0x67, 0x304}, {0x1E22, 0x48, 0x307},
    {0x1E23, 0x68, 0x307}, {0x1E24, 0x48, 0x323}, {0x1E25, 0x68, 0x323}, {0x1E26, 0x48, 0x308}, {0x1E27, 0x68, 0x308},
    {0x1E28, 0x48, 0x327}, {0x1E29, 0x68, 0x327}, {0x1E2A, 0x48, 0x32E}, {0x1E2B, 0x68, 0x32E}, {0x1E2C, 0x49, 0x330},
    {0x1E2D, 0x69, 0x330}, {0x1E2E, 0xCF, 0x301}, {0x1E2F, 0xEF, 0x301}, {0x1E30, 0x4B, 0x301}, {0x1E31, 0x6B, 0x301},
    {0x1E32, 0x4B, 0x323}, {0x1E33, 0x6B, 0x323}, {0x1E34, 0x4B, 0x331}, {0x1E35, 0x6B, 0x331}, {0x1E36, 0x4C, 0x323},
    {0x1E37, 0x6C, 0x323}, {0x1E38, 0x1E36, 0x304}, {0x1E39, 0x1E37, 0x304}, {0x1E3A, 0x4C, 0x331},
    {0x1E3B, 0x6C, 0x331}, {0x1E3C, 0x4C, 0x32D}, {0x1E3D, 0x6C, 0x32D}, {0x1E3E, 0x4D, 0x301}, {0x1E3F, 0x6D, 0x301},
    {0x1E40, 0x4D, 0x307}, {0x1E41, 0x6D, 0x307}, {0x1E42, 0x4D, 0x323}, {0x1E43, 0x6D, 0x323}, {0x1E44, 0x4E, 0x307},
    {0x1E45, 0x6E, 0x307}, {0x1E46, 0x4E, 0x323}, {0x1E47, 0x6E, 0x323}, {0x1E48, 0x4E, 0x331}, {0x1E49, 0x6E, 0x331},
    {0x1E4A, 0x4E, 0x32D}, {0x1E4B, 0x6E, 0x32D}, {0x1E4C, 0xD5, 0x301}, {0x1E4D, 0xF5, 0x301}, {0x1E4E, 0xD5, 0x308},
    {0x1E4F, 0xF5, 0x308}, {0x1E50, 0x14C, 0x300}, {0x1E51, 0x14D, 0x300}, {0x1E52, 0x14C, 0x301},
    {0x1E53, 0x14D, 0x301}, {0x1E54, 0x50, 0x301}, {0x1E55, 0x70, 0x301}, {0x1E56, 0x50, 0x307}, {0x1E57, 0x70, 0x307},
    {0x1E58, 0x52, 0x307}, {0x1E59, 0x72, 0x307}, {0x1E5A, 0x52, 0x323}, {0x1E5B, 0x72, 0x323}, {0x1E5C, 0x1E5A, 0x304},
    {0x1E5D, 0x1E5B, 0x304}, {0x1E5E, 0x52, 0x331}, {0x1E5F, 0x72, 0x331}, {0x1E60, 0x53, 0x307}, {0x1E61, 0x73, 0x307},
    {0x1E62, 0x53, 0x323}, {0x1E63, 0x73, 0x323}, {0x1E64, 0x15A, 0x307}, {0x1E65, 0x15B, 0x307},
    {0x1E66, 0x160, 0x307}, {0x1E67, 0x161, 0x307}, {0x1E68, 0x1E62, 0x307}, {0x1E69, 0x1E63, 0x307},
    {0x1E6A, 0x54, 0x307}, {0x1E6B, 0x74, 0x307}, {0x1E6C, 0x54, 0x323}, {0x1E6D, 0x74, 0x323}, {0x1E6E, 0x54, 0x331},
    {0x1E6F, 0x74, 0x331}, {0x1E70, 0x54, 0x32D}, {0x1E71, 0x74, 0x32D}, {0x1E72, 0x55, 0x324}, {0x1E73, 0x75, 0x324},
    {0x1E74, 0x55, 0x330}, {0x1E75, 0x75, 0x330}, {0x1E76, 0x55, 0x32D}, {0x1E77, 0x75, 0x32D}, {0x1E78, 0x168, 0x301},
    {0x1E79, 0x169, 0x301}, {0x1E7A, 0x16A, 0x308}, {0x1E7B, 0x16B, 0x308}, {0x1E7C, 0x56, 0x303},
    {0x1E7D, 0x76, 0x303}, {0x1E7E, 0x56, 0x323}, {0x1E7F, 0x76, 0x323}, {0x1E80, 0x57, 0x300}, {0x1E81, 0x77, 0x300},
    {0x1E82, 0x57, 0x301}, {0x1E83, 0x77, 0x301}, {0x1E84, 0x57, 0x308}, {0x1E85, 0x77, 0x308}, {0x1E86, 0x57, 0x307},
    {0x1E87, 0x77, 0x307}, {0x1E88, 0x57, 0x323}, {0x1E89, 0x77, 0x323}, {0x1E8A, 0x58, 0x307}, {0x1E8B, 0x78, 0x307},
    {0x1E8C, 0x58, 0x308}, {0x1E8D, 0x78, 0x308}, {0x1E8E, 0x59, 0x307}, {0x1E8F, 0x79, 0x307}, {0x1E90, 0x5A, 0x302},
    {0x1E91, 0x7A, 0x302}, {0x1E92, 0x5A, 0x323}, {0x1E93, 0x7A, 0x323}, {0x1E94, 0x5A, 0x331}, {0x1E95, 0x7A, 0x331},
    {0x1E96, 0x68, 0x331}, {0x1E97, 0x74, 0x308}, {0x1E98, 0x77, 0x30A}, {0x1E99, 0x79, 0x30A}, {0x1E9B, 0x17F, 0x307},
    {0x1EA0, 0x41, 0x323}, {0x1EA1, 0x61, 0x323}, {0x1EA2, 0x41, 0x309}, {0x1EA3, 0x61, 0x309}, {0x1EA4, 0xC2, 0x301},
    {0x1EA5, 0xE2, 0x301}, {0x1EA6, 0xC2, 0x300}, {0x1EA7, 0xE2, 0x300}, {0x1EA8, 0xC2, 0x309}, {0x1EA9, 0xE2, 0x309},
    {0x1EAA, 0xC2, 0x303}, {0x1EAB, 0xE2, 0x303}, {0x1EAC, 0x1EA0, 0x302}, {0x1EAD, 0x1EA1, 0x302},
    {0x1EAE, 0x102, 0x301}, {0x1EAF, 0x103, 0x301}, {0x1EB0, 0x102, 0x300}, {0x1EB1, 0x103, 0x300},
    {0x1EB2, 0x102, 0x309}, {0x1EB3, 0x103, 0x309}, {0x1EB4, 0x102, 0x303}, {0x1EB5, 0x103, 0x303},
    {0x1EB6, 0x1EA0, 0x306}, {0x1EB7, 0x1EA1, 0x306}, {0x1EB8, 0x45, 0x323}, {0x1EB9, 0x65, 0x323},
    {0x1EBA, 0x45, 0x309}, {0x1EBB, 0x65, 0x309}, {0x1EBC, 0x45, 0x303}, {0x1EBD, 0x65, 0x303}, {0x1EBE, 0xCA, 0x301},
    {0x1EBF, 0xEA, 0x301}, {0x1EC0, 0xCA, 0x300}, {0x1EC1, 0xEA, 0x300}, {0x1EC2, 0xCA, 0x309}, {0x1EC3, 0xEA, 0x309},
    {0x1EC4, 0xCA, 0x303}, {0x1EC5, 0xEA, 0x303}, {0x1EC6, 0x1EB8, 0x302}, {0x1EC7, 0x1EB9, 0x302},
    {0x1EC8, 0x49, 0x309}, {0x1EC9, 0x69, 0x309}, {0x1ECA, 0x49, 0x323}, {0x1ECB, 0x69, 0x323}, {0x1ECC, 0x4F, 0x323},
    {0x1ECD, 0x6F, 0x323}, {0x1ECE, 0x4F, 0x309}, {0x1ECF, 0x6F, 0x309}, {0x1ED0, 0xD4, 0x301}, {0x1ED1, 0xF4, 0x301},
    {0x1ED2, 0xD4, 0x300}, {0x1ED3, 0xF4, 0x300}, {0x1ED4, 0xD4, 0x309}, {0x1ED5, 0xF4, 0x309}, {0x1ED6, 0xD4, 0x303},
    {0x1ED7, 0xF4, 0x303}, {0x1ED8, 0x1ECC, 0x302}, {0x1ED9, 0x1ECD, 0x302}, {0x1EDA, 0x1A0, 0x301},
    {0x1EDB, 0x1A1, 0x301}, {0x1EDC, 0x1A0, 0x300}, {0x1EDD, 0x1A1, 0x300}, {0x1EDE, 0x1A0, 0x309},
    {0x1EDF, 0x1A1, 0x309}, {0x1EE0, 0x1A0, 0x303}, {0x1EE1, 0x1A1, 0x303}, {0x1EE2, 0x1A0, 0x323},
    {0x1EE3, 0x1A1, 0x323}, {0x1EE4, 0x55, 0x323}, {0x1EE5, 0x75, 0x323}, {0x1EE6, 0x55, 0x309}, {0x1EE7, 0x75, 0x309},
    {0x1EE8, 0x1AF, 0x301}, {0x1EE9, 0x1B0, 0x301}, {0x1EEA, 0x1AF, 0x300}, {0x1EEB, 0x1B0, 0x300},
    {0x1EEC, 0x1AF, 0x309}, {0x1EED, 0x1B0, 0x309}, {0x1EEE, 0x1AF, 0x303}, {0x1EEF, 0x1B0, 0x303},
    {0x1EF0, 0x1AF, 0x323}, {0x1EF1, 0x1B0, 0x323}, {0x1EF2, 0x59, 0x300}, {0x1EF3, 0x79, 0x300}, {0x1EF4, 0x59, 0x323},
    {0x1EF5, 0x79, 0x323}, {0x1EF6, 0x59, 0x309}, {0x1EF7, 0x79, 0x309}, {0x1EF8, 0x59, 0x303}, {0x1EF9, 0x79, 0x303},
    {0x1F00, 0x3B1, 0x313}, {0x1F01, 0x3B1, 0x314}, {0x1F02, 0x1F00, 0x300}, {0x1F03, 0x1F01, 0x300},
    {0x1F04, 0x1F00, 0x301}, {0x1F05, 0x1F01, 0x301}, {0x1F06, 0x1F00, 0x342}, {0x1F07, 0x1F01, 0x342},
    {0x1F08, 0x391, 0x313}, {0x1F09, 0x391, 0x314}, {0x1F0A, 0x1F08, 0x300}, {0x1F0B, 0x1F09, 0x300},
    {0x1F0C, 0x1F08, 0x301}, {0x1F0D, 0x1F09, 0x301}, {0x1F0E, 0x1F08, 0x342}, {0x1F0F, 0x1F09, 0x342},
    {0x1F10, 0x3B5, 0x313}, {0x1F11, 0x3B5, 0x314}, {0x1F12, 0x1F10, 0x300}, {0x1F13, 0x1F11, 0x300},
    {0x1F14, 0x1F10, 0x301}, {0x1F15, 0x1F11, 0x301}, {0x1F18, 0x395, 0x313}, {0x1F19, 0x395, 0x314},
    {0x1F1A, 0x1F18, 0x300}, {0x1F1B, 0x1F19, 0x300}, {0x1F1C, 0x1F18, 0x301}, {0x1F1D, 0x1F19, 0x301},
    {0x1F20, 0x3B7, 0x313}, {0x1F21, 0x3B7, 0x314}, {0x1F22, 0x1F20, 0x300}, {0x1F23, 0x1F21, 0x300},
    {0x1F24, 0x1F20, 0x301}, {0x1F25, 0x1F21, 0x301}, {0x1F26, 0x1F20, 0x342}, {0x1F27, 0x1F21, 0x342},
    {0x1F28, 0x397, 0x313}, {0x1F29, 0x397, 0x314}, {0x1F2A, 0x1F28, 0x300}, {0x1F2B, 0x1F29, 0x300},
    {0x1F2C, 0x1F28, 0x301}, {0x1F2D, 0x1F29, 0x301}, {0x1F2E, 0x1F28, 0x342}, {0x1F2F, 0x1F29, 0x342},
    {0x1F30, 0x3B9, 0x313}, {0x1F31, 0x3B9, 0x314}, {0x1F32, 0x1F30, 0x300}, {0x1F33, 0x1F31, 0x300},
    {0x1F34, 0x1F30, 0x301}, {0x1F35, 0x1F31, 0x301}, {0x1F36, 0x1F30, 0x342}, {0x1F37, 0x1F31, 0x342},
    {0x1F38, 0x399, 0x313}, {0x1F39, 0x399, 0x314}, {0x1F3A, 0x1F38, 0x300}, {0x1F3B, 0x1F39, 0x300},
    {0x1F3C, 0x1F38, 0x301}, {0x1F3D, 0x1F39, 0x301}, {0x1F3E, 0x1F38, 0x342}, {0x1F3F, 0x1F39, 0x342},
    {0x1F40, 0x3BF, 0x313}, {0x1F41, 0x3BF, 0x314}, {0x1F42, 0x1F40, 0x300}, {0x1F43, 0x1F41, 0x300},
    {0x1F44, 0x1F40, 0x301}, {0x1F45, 0x1F41, 0x301}, {0x1F48, 0x39F, 0x313}, {0x1F49, 0x39F, 0x314},
    {0x1F4A, 0x1F48, 0x300}, {0x1F4B, 0x1F49, 0x300}, {0x1F4C, 0x1F48, 0x301}, {0x1F4D, 0x1F49, 0x301},
    {0x1F50, 0x3C5, 0x313}, {0x1F51, 0x3C5, 0x314}, {0x1F52, 0x1F50, 0x300}, {0x1F53, 0x1F51, 0x300},
    {0x1F54, 0x1F50, 0x301}, {0x1F55, 0x1F51, 0x301}, {0x1F56, 0x1F50, 0x342}, {0x1F57, 0x1F51, 0x342},
    {0x1F59, 0x3A5, 0x314}, {0x1F5B, 0x1F59, 0x300}, {0x1F5D, 0x1F59, 0x301}, {0x1F5F, 0x1F59, 0x342},
    {0x1F60, 0x3C9, 0x313}, {0x1F61, 0x3C9, 0x314}, {0x1F62, 0x1F60, 0x300}, {0x1F63, 0x1F61, 0x300},
    {0x1F64, 0x1F60, 0x301}, {0x1F65, 0x1F61, 0x301}, {0x1F66, 0x1F60, 0x342}, {0x1F67, 0x1F61, 0x342},
    {0x1F68, 0x3A9, 0x313}, {0x1F69, 0x3A9, 0x314}, {0x1F6A, 0x1F68, 0x300}, {0x1F6B, 0x1F69, 0x300},
    {0x1F6C, 0x1F68, 0x301}, {0x1F6D, 0x1F69, 0x301}, {0x1F6E, 0x1F68, 0x342}, {0x1F6F, 0x1F69, 0x342},
    {0x1F70, 0x3B1, 0x300}, {0x1F71, 0x3AC, 0x0}, {0x1F72, 0x3B5, 0x300}, {0x1F73, 0x3AD, 0x0}, {0x1F74, 0x3B7, 0x300},
    {0x1F75, 0x3AE, 0x0}, {0x1F76, 0x3B9, 0x300}, {0x1F77, 0x3AF, 0x0}, {0x1F78, 0x3BF, 0x300}, {0x1F79, 0x3CC, 0x0},
    {0x1F7A, 0x3C5, 0x300}, {0x1F7B, 0x3CD, 0x0}, {0x1F7C, 0x3C9, 0x300}, {0x1F7D, 0x3CE, 0x0}, {0x1F80, 0x1F00, 0x345},
    {0x1F81, 0x1F01, 0x345}, {0x1F82, 0x1F02, 0x345}, {0x1F83, 0x1F03, 0x345}, {0x1F84, 0x1F04, 0x345},
    {0x1F85, 0x1F05, 0x345}, {0x1F86, 0x1F06, 0x345}, {0x1F87, 0x1F07, 0x345}, {0x1F88, 0x1F08, 0x345},
    {0x1F89, 0x1F09, 0x345}, {0x1F8A, 0x1F0A, 0x345}, {0x1F8B, 0x1F0B, 0x345}, {0x1F8C, 0x1F0C, 0x345},
    {0x1F8D, 0x1F0D, 0x345}, {0x1F8E, 0x1F0E, 0x345}, {0x1F8F, 0x1F0F, 0x345}, {0x1F90, 0x1F20, 0x345},
    {0x1F91, 0x1F21, 0x345}, {0x1F92, 0x1F22, 0x345}, {0x1F93, 0x1F23, 0x345}, {0x1F94, 0x1F24, 0x345},
    {0x1F95, 0x1F25, 0x345}, {0x1F96, 0x1F26, 0x345}, {0x1F97, 0x1F27, 0x345}, {0x1F98, 0x1F28, 0x345},
    {0x1F99, 0x1F29, 0x345}, {0x1F9A, 0x1F2A, 0x345}, {0x1F9B, 0x1F2B, 0x345}, {0x1F9C, 0x1F2C, 0x345},
    {0x1F9D, 0x1F2D, 0x345}, {0x1F9E, 0x1F2E, 0x345}, {0x1F9F, 0x1F2F, 0x345}, {0x1FA0, 0x1F60, 0x345},
    {0x1FA1, 0x1F61, 0x345}, {0x1FA2, 0x1F62, 0x345}, {0x1FA3, 0x1F63, 0x345}, {0x1FA4, 0x1F64, 0x345},
    {0x1FA5, 0x1F65, 0x345}, {0x1FA6, 0x1F66, 0x345}, {0x1FA7, 0x1F67, 0x345}, {0x1FA8, 0x1F68, 0x345},
    {0x1FA9, 0x1F69, 0x345}, {0x1FAA, 0x1F6A, 0x345}, {0x1FAB, 0x1F6B, 0x345}, {0x1FAC, 0x1F6C, 0x345},
    {0x1FAD, 0x1F6D, 0x345}, {0x1FAE, 0x1F6E, 0x345}, {0x1FAF, 0x1F6F, 0x345}, {0x1FB0, 0x3B1, 0x306},
    {0x1FB1, 0x3B1, 0x304}, {0x1FB2, 0x1F70, 0x345}, {0x1FB3, 0x3B1, 0x345}, {0x1FB4, 0x3AC, 0x345},
    {0x1FB6, 0x3B1, 0x342}, {0x1FB7, 0x1FB6, 0x345}, {0x1FB8, 0x391, 0x306}, {0x1FB9, 0x391, 0x304},
    {0x1FBA, 0x391, 0x300}, {0x1FBB, 0x386, 0x0}, {0x1FBC, 0x391, 0x345}, {0x1FBE, 0x3B9, 0x0}, {0x1FC1, 0xA8, 0x342},
    {0x1FC2, 0x1F74, 0x345}, {0x1FC3, 0x3B7, 0x345}, {0x1FC4, 0x3AE, 0x345}, {0x1FC6, 0x3B7, 0x342},
    {0x1FC7, 0x1FC6, 0x345}, {0x1FC8, 0x395, 0x300}, {0x1FC9, 0x388, 0x0}, {0x1FCA, 0x397, 0x300}, {0x1FCB, 0x389, 0x0},
    {0x1FCC, 0x397, 0x345}, {0x1FCD, 0x1FBF, 0x300}, {0x1FCE, 0x1FBF, 0x301}, {0x1FCF, 0x1FBF, 0x342},
    {0x1FD0, 0x3B9, 0x306}, {0x1FD1, 0x3B9, 0x304}, {0x1FD2, 0x3CA, 0x300}, {0x1FD3, 0x390, 0x0},
    {0x1FD6, 0x3B9, 0x342}, {0x1FD7, 0x3CA, 0x342}, {0x1FD8, 0x399, 0x306}, {0x1FD9, 0x399, 0x304},
    {0x1FDA, 0x399, 0x300}, {0x1FDB, 0x38A, 0x0}, {0x1FDD, 0x1FFE, 0x300}, {0x1FDE, 0x1FFE, 0x301},
    {0x1FDF, 0x1FFE, 0x342}, {0x1FE0, 0x3C5, 0x306}, {0x1FE1, 0x3C5, 0x304}, {0x1FE2, 0x3CB, 0x300},
    {0x1FE3, 0x3B0, 0x0}, {0x1FE4, 0x3C1, 0x313}, {0x1FE5, 0x3C1, 0x314}, {0x1FE6, 0x3C5, 0x342},
    {0x1FE7, 0x3CB, 0x342}, {0x1FE8, 0x3A5, 0x306}, {0x1FE9, 0x3A5, 0x304}, {0x1FEA, 0x3A5, 0x300},
    {0x1FEB, 0x38E, 0x0}, {0x1FEC, 0x3A1, 0x314}, {0x1FED, 0xA8, 0x300}, {0x1FEE, 0x385, 0x0}, {0x1FEF, 0x60, 0x0},
    {0x1FF2, 0x1F7C, 0x345}, {0x1FF3, 0x3C9, 0x345}, {0x1FF4, 0x3CE, 0x345}, {0x1FF6, 0x3C9, 0x342},
    {0x1FF7, 0x1FF6, 0x345}, {0x1FF8, 0x39F, 0x300}, {0x1FF9, 0x38C, 0x0}, {0x1FFA, 0x3A9, 0x300}, {0x1FFB, 0x38F, 0x0},
    {0x1FFC, 0x3A9, 0x345}, {0x1FFD, 0xB4, 0x0}, {0x2000, 0x2002, 0x0}, {0x2001, 0x2003, 0x0}, {0x2126, 0x3A9, 0x0},
    {0x212A, 0x4B, 0x0}, {0x212B, 0xC5, 0x0}, {0x219A, 0x2190, 0x338}, {0x219B, 0x2192, 0x338}, {0x21AE, 0x2194, 0x338},
    {0x21CD, 0x21D0, 0x338}, {0x21CE, 0x21D4, 0x338}, {0x21CF, 0x21D2, 0x338}, {0x2204, 0x2203, 0x338},
    {0x2209, 0x2208, 0x338}, {0x220C, 0x220B, 0x338}, {0x2224, 0x2223, 0x338}, {0x2226, 0x2225, 0x338},
    {0x2241, 0x223C, 0x338}, {0x2244, 0x2243, 0x338}, {0x2247, 0x2245, 0x338}, {0x2249, 0x2248, 0x338},
    {0x2260, 0x3D, 0x338}, {0x2262, 0x2261, 0x338}, {0x226D, 0x224D, 0x338}, {0x226E, 0x3C, 0x338},
    {0x226F, 0x3E, 0x338}, {0x2270, 0x2264, 0x338}, {0x2271, 0x2265, 0x338}, {0x2274, 0x2272, 0x338},
    {0x2275, 0x2273, 0x338}, {0x2278, 0x2276, 0x338}, {0x2279, 0x2277, 0x338}, {0x2280, 0x227A, 0x338},
    {0x2281, 0x227B, 0x338}, {0x2284, 0x2282, 0x338}, {0x2285, 0x2283, 0x338}, {0x2288, 0x2286, 0x338},
    {0x2289, 0x2287, 0x338}, {0x22AC, 0x22A2, 0x338}, {0x22AD, 0x22A8, 0x338}, {0x22AE, 0x22A9, 0x338},
    {0x22AF, 0x22AB, 0x338}, {0x22E0, 0x227C, 0x338}, {0x22E1, 0x227D, 0x338}, {0x22E2, 0x2291, 0x338},
    {0x22E3, 0x2292, 0x338}, {0x22EA, 0x22B2, 0x338}, {0x22EB, 0x22B3, 0x338}, {0x22EC, 0x22B4, 0x338},
    {0x22ED, 0x22B5, 0x338}, {0x2329, 0x3008, 0x0}, {0x232A, 0x3009, 0x0}, {0x2ADC, 0x2ADD, 0x338},
    {0x304C, 0x304B, 0x3099}, {0x304E, 0x304D, 0x3099}, {0x3050, 0x304F, 0x3099}, {0x3052, 0x3051, 0x3099},
    {0x3054, 0x3053, 0x3099}, {0x3056, 0x3055, 0x3099}, {0x3058, 0x3057, 0x3099}, {0x305A, 0x3059, 0x3099},
    {0x305C, 0x305B, 0x3099}, {0x305E, 0x305D, 0x3099}, {0x3060, 0x305F, 0x3099}, {0x3062, 0x3061, 0x3099},
    {0x3065, 0x3064, 0x3099}, {0x3067, 0x3066, 0x3099}, {0x3069, 0x3068, 0x3099}, {0x3070, 0x306F, 0x3099},
    {0x3071, 0x306F, 0x309A}, {0x3073, 0x3072, 0x3099}, {0x3074, 0x3072, 0x309A}, {0x3076, 0x3075, 0x3099},
    {0x3077, 0x3075, 0x309A}, {0x3079, 0x3078, 0x3099}, {0x307A, 0x3078, 0x309A}, {0x307C, 0x307B, 0x3099},
    {0x307D, 0x307B, 0x309A}, {0x3094, 0x3046, 0x3099}, {0x309E, 0x309D, 0x3099}, {0x30AC, 0x30AB, 0x3099},
    {0x30AE, 0x30AD, 0x3099}, {0x30B0, 0x30AF, 0x3099}, {0x30B2, 0x30B1, 0x3099}, {0x30B4, 0x30B3, 0x3099},
    {0x30B6, 0x30B5, 0x3099}, {0x30B8, 0x30B7, 0x3099}, {0x30BA, 0x30B9, 0x3099}, {0x30BC, 0x30BB, 0x3099},
    {0x30BE, 0x30BD, 0x3099}, {0x30C0, 0x30BF, 0x3099}, {0x30C2, 0x30C1, 0x3099}, {0x30C5, 0x30C4, 0x3099},
    {0x30C7, 0x30C6, 0x3099}, {0x30C9, 0x30C8, 0x3099}, {0x30D0, 0x30CF, 0x3099}, {0x30D1, 0x30CF, 0x309A},
    {0x30D3, 0x30D2, 0x3099}, {0x30D4, 0x30D2, 0x309A}, {0x30D6, 0x30D5, 0x3099}, {0x30D7, 0x30D5, 0x309A},
    {0x30D9, 0x30D8, 0x3099}, {0x30DA, 0x30D8, 0x309A}, {0x30DC, 0x30DB, 0x3099}, {0x30DD, 0x30DB, 0x309A},
    {0x30F4, 0x30A6, 0x3099}, {0x30F7, 0x30EF, 0x3099}, {0x30F8, 0x30F0, 0x3099}, {0x30F9, 0x30F1, 0x3099},
    {0x30FA, 0x30F2, 0x3099}, {0x30FE, 0x30FD, 0x3099}, {0xF900, 0x8C48, 0x0}, {0xF901, 0x66F4, 0x0},
    {0xF902, 0x8ECA, 0x0}, {0xF903, 0x8CC8, 0x0}, {0xF904, 0x6ED1, 0x0}, {0xF905, 0x4E32, 0x0}, {0xF906, 0x53E5, 0x0},
    {0xF907, 0x9F9C, 0x0}, {0xF908, 0x9F9C, 0x0}, {0xF909, 0x5951, 0x0}, {0xF90A, 0x91D1, 0x0}, {0xF90B, 0x5587, 0x0},
    {0xF90C, 0x5948, 0x0}, {0xF90D, 0x61F6, 0x0}, {0xF90E, 0x7669, 0x0}, {0xF90F, 0x7F85, 0x0}, {0xF910, 0x863F, 0x0},
    {0xF911, 0x87BA, 0x0}, {0xF912, 0x88F8, 0x0}, {0xF913, 0x908F, 0x0}, {0xF914, 0x6A02, 0x0}, {0xF915, 0x6D1B, 0x0},
    {0xF916, 0x70D9, 0x0}, {0xF917, 0x73DE, 0x0}, {0xF918, 0x843D, 0x0}, {0xF919, 0x916A, 0x0}, {0xF91A, 0x99F1, 0x0},
    {0xF91B, 0x4E82, 0x0}, {0xF91C, 0x5375, 0x0}, {0xF91D, 0x6B04, 0x0}, {0xF91E, 0x721B, 0x0}, {0xF91F, 0x862D, 0x0},
    {0xF920, 0x9E1E, 0x0}, {0xF921, 0x5D50, 0x0}, {0xF922, 0x6FEB, 0x0}, {0xF923, 0x85CD, 0x0}, {0xF924, 0x8964, 0x0},
    {0xF925, 0x62C9, 0x0}, {0xF926, 0x81D8, 0x0}, {0xF927, 0x881F, 0x0}, {0xF928, 0x5ECA, 0x0}, {0xF929, 0x6717, 0x0},
    {0xF92A, 0x6D6A, 0x0}, {0xF92B, 0x72FC, 0x0}, {0xF92C, 0x90CE, 0x0}, {0xF92D, 0x4F86, 0x0}, {0xF92E, 0x51B7, 0x0},
    {0xF92F, 0x52DE, 0x0}, {0xF930, 0x64C4, 0x0}, {0xF931, 0x6AD3, 0x0}, {0xF932, 0x7210, 0x0}, {0xF933, 0x76E7, 0x0},
    {0xF934, 0x8001, 0x0}, {0xF935, 0x8606, 0x0}, {0xF936, 0x865C, 0x0}, {0xF937, 0x8DEF, 0x0}, {0xF938, 0x9732, 0x0},
    {0xF939, 0x9B6F, 0x0}, {0xF93A, 0x9DFA, 0x0}, {0xF93B, 0x788C, 0x0}, {0xF93C, 0x797F, 0x0}, {0xF93D, 0x7DA0, 0x0},
    {0xF93E, 0x83C9, 0x0}, {0xF93F, 0x9304, 0x0}, {0xF940, 0x9E7F, 0x0}, {0xF941, 0x8AD6, 0x0}, {0xF942, 0x58DF, 0x0},
    {0xF943, 0x5F04, 0x0}, {0xF944, 0x7C60, 0x0}, {0xF945, 0x807E, 0x0}, {0xF946, 0x7262, 0x0}, {0xF947, 0x78CA, 0x0},
    {0xF948, 0x8CC2, 0x0}, {0xF949, 0x96F7, 0x0}, {0xF94A, 0x58D8, 0x0}, {0xF94B, 0x5C62, 0x0}, {0xF94C, 0x6A13, 0x0},
    {0xF94D, 0x6DDA, 0x0}, {0xF94E, 0x6F0F, 0x0}, {0xF94F, 0x7D2F, 0x0}, {0xF950, 0x7E37, 0x0}, {0xF951, 0x964B, 0x0},
    {0xF952, 0x52D2, 0x0}, {0xF953, 0x808B, 0x0}, {0xF954, 0x51DC, 0x0}, {0xF955, 0x51CC, 0x0}, {0xF956, 0x7A1C, 0x0},
    {0xF957, 0x7DBE, 0x0}, {0xF958, 0x83F1, 0x0}, {0xF959, 0x9675, 0x0}, {0xF95A, 0x8B80, 0x0}, {0xF95B, 0x62CF, 0x0},
    {0xF95C, 0x6A02, 0x0}, {0xF95D, 0x8AFE, 0x0}, {0xF95E, 0x4E39, 0x0}, {0xF95F, 0x5BE7, 0x0}, {0xF960, 0x6012, 0x0},
    {0xF961, 0x7387, 0x0}, {0xF962, 0x7570, 0x0}, {0xF963, 0x5317, 0x0}, {0xF964, 0x78FB, 0x0}, {0xF965, 0x4FBF, 0x0},
    {0xF966, 0x5FA9, 0x0}, {0xF967, 0x4E0D, 0x0}, {0xF968, 0x6CCC, 0x0}, {0xF969, 0x6578, 0x0}, {0xF96A, 0x7D22, 0x0},
    {0xF96B, 0x53C3, 0x0}, {0xF96C, 0x585E, 0x0}, {0xF96D, 0x7701, 0x0}, {0xF96E, 0x8449, 0x0}, {0xF96F, 0x8AAA, 0x0},
    {0xF970, 0x6BBA, 0x0}, {0xF971, 0x8FB0, 0x0}, {0xF972, 0x6C88, 0x0}, {0xF973, 0x62FE, 0x0}, {0xF974, 0x82E5, 0x0},
    {0xF975, 0x63A0, 0x0}, {0xF976, 0x7565, 0x0}, {0xF977, 0x4EAE, 0x0}, {0xF978, 0x5169, 0x0}, {0xF979, 0x51C9, 0x0},
    {0xF97A, 0x6881, 0x0}, {0xF97B, 0x7CE7, 0x0}, {0xF97C, 0x826F, 0x0}, {0xF97D, 0x8AD2, 0x0}, {0xF97E, 0x91CF, 0x0},
    {0xF97F, 0x52F5, 0x0}, {0xF980, 0x5442, 0x0}, {0xF981, 0x5973, 0x0}, {0xF982, 0x5EEC, 0x0}, {0xF983, 0x65C5, 0x0},
    {0xF984, 0x6FFE, 0x0}, {0xF985, 0x792A, 0x0}, {0xF986, 0x95AD, 0x0}, {0xF987, 0x9A6A, 0x0}, {0xF988, 0x9E97, 0x0},
    {0xF989, 0x9ECE, 0x0}, {0xF98A, 0x529B, 0x0}, {0xF98B, 0x66C6, 0x0}, {0xF98C, 0x6B77, 0x0}, {0xF98D, 0x8F62, 0x0},
    {0xF98E, 0x5E74, 0x0}, {0xF98F, 0x6190, 0x0}, {0xF990, 0x6200, 0x0}, {0xF991, 0x649A, 0x0}, {0xF992, 0x6F23, 0x0},
    {0xF993, 0x7149, 0x0}, {0xF994, 0x7489, 0x0}, {0xF995, 0x79CA, 0x0}, {0xF996, 0x7DF4, 0x0}, {0xF997, 0x806F, 0x0},
    {0xF998, 0x8F26, 0x0}, {0xF999, 0x84EE, 0x0}, {0xF99A, 0x9023, 0x0}, {0xF99B, 0x934A, 0x0}, {0xF99C, 0x5217, 0x0},
    {0xF99D, 0x52A3, 0x0}, {0xF99E, 0x54BD, 0x0}, {0xF99F, 0x70C8, 0x0}, {0xF9A0, 0x88C2, 0x0}, {0xF9A1, 0x8AAA, 0x0},
    {0xF9A2, 0x5EC9, 0x0}, {0xF9A3, 0x5FF5, 0x0}, {0xF9A4, 0x637B, 0x0}, {0xF9A5, 0x6BAE, 0x0}, {0xF9A6, 0x7C3E, 0x0},
    {0xF9A7, 0x7375, 0x0}, {0xF9A8, 0x4EE4, 0x0}, {0xF9A9, 0x56F9, 0x0}, {0xF9AA, 0x5BE7, 0x0}, {0xF9AB, 0x5DBA, 0x0},
    {0xF9AC, 0x601C, 0x0}, {0xF9AD, 0x73B2, 0x0}, {0xF9AE, 0x7469, 0x0}, {0xF9AF, 0x7F9A, 0x0}, {0xF9B0, 0x8046, 0x0},
    {0xF9B1, 0x9234, 0x0}, {0xF9B2, 0x96F6, 0x0}, {0xF9B3, 0x9748, 0x0}, {0xF9B4, 0x9818, 0x0}, {0xF9B5, 0x4F8B, 0x0},
    {0xF9B6, 0x79AE, 0x0}, {0xF9B7, 0x91B4, 0x0}, {0xF9B8, 0x96B8, 0x0}, {0xF9B9, 0x60E1, 0x0}, {0xF9BA, 0x4E86, 0x0},
    {0xF9BB, 0x50DA, 0x0}, {0xF9BC, 0x5BEE, 0x0}, {0xF9BD, 0x5C3F, 0x0}, {0xF9BE, 0x6599, 0x0}, {0xF9BF, 0x6A02, 0x0},
    {0xF9C0, 0x71CE, 0x0}, {0xF9C1, 0x7642, 0x0}, {0xF9C2, 0x84FC, 0x0}, {0xF9C3, 0x907C, 0x0}, {0xF9C4, 0x9F8D, 0x0},
    {0xF9C5, 0x6688, 0x0}, {0xF9C6, 0x962E, 0x0}, {0xF9C7, 0x5289, 0x0}, {0xF9C8, 0x677B, 0x0}, {0xF9C9, 0x67F3, 0x0},
    {0xF9CA, 0x6D41, 0x0}, {0xF9CB, 0x6E9C, 0x0}, {0xF9CC, 0x7409, 0x0}, {0xF9CD, 0x7559, 0x0}, {0xF9CE, 0x786B, 0x0},
    {0xF9CF, 0x7D10, 0x0}, {0xF9D0, 0x985E, 0x0}, {0xF9D1, 0x516D, 0x0}, {0xF9D2, 0x622E, 0x0}, {0xF9D3, 0x9678, 0x0},
    {0xF9D4, 0x502B, 0x0}, {0xF9D5, 0x5D19, 0x0}, {0xF9D6, 0x6DEA, 0x0}, {0xF9D7, 0x8F2A, 0x0}, {0xF9D8, 0x5F8B, 0x0},
    {0xF9D9, 0x6144, 0x0}, {0xF9DA, 0x6817, 0x0}, {0xF9DB, 0x7387, 0x0}, {0xF9DC, 0x9686, 0x0}, {0xF9DD, 0x5229, 0x0},
    {0xF9DE, 0x540F, 0x0}, {0xF9DF, 0x5C65, 0x0}, {0xF9E0, 0x6613, 0x0}, {0xF9E1, 0x674E, 0x0}, {0xF9E2, 0x68A8, 0x0},
    {0xF9E3, 0x6CE5, 0x0}, {0xF9E4, 0x7406, 0x0}, {0xF9E5, 0x75E2, 0x0}, {0xF9E6, 0x7F79, 0x0}, {0xF9E7, 0x88CF, 0x0},
    {0xF9E8, 0x88E1, 0x0}, {0xF9E9, 0x91CC, 0x0}, {0xF9EA, 0x96E2, 0x0}, {0xF9EB, 0x533F, 0x0}, {0xF9EC, 0x6EBA, 0x0},
    {0xF9ED, 0x541D, 0x0}, {0xF9EE, 0x71D0, 0x0}, {0xF9EF, 0x7498, 0x0}, {0xF9F0, 0x85FA, 0x0}, {0xF9F1, 0x96A3, 0x0},
    {0xF9F2, 0x9C57, 0x0}, {0xF9F3, 0x9E9F, 0x0}, {0xF9F4, 0x6797, 0x0}, {0xF9F5, 0x6DCB, 0x0}, {0xF9F6, 0x81E8, 0x0},
    {0xF9F7, 0x7ACB, 0x0}, {0xF9F8, 0x7B20, 0x0}, {0xF9F9, 0x7C92, 0x0}, {0xF9FA, 0x72C0, 0x0}, {0xF9FB, 0x7099, 0x0},
    {0xF9FC, 0x8B58, 0x0}, {0xF9FD, 0x4EC0, 0x0}, {0xF9FE, 0x8336, 0x0}, {0xF9FF, 0x523A, 0x0}, {0xFA00, 0x5207, 0x0},
    {0xFA01, 0x5EA6, 0x0}, {0xFA02, 0x62D3, 0x0}, {0xFA03, 0x7CD6, 0x0}, {0xFA04, 0x5B85, 0x0}, {0xFA05, 0x6D1E, 0x0},
    {0xFA06, 0x66B4, 0x0}, {0xFA07, 0x8F3B, 0x0}, {0xFA08, 0x884C, 0x0}, {0xFA09, 0x964D, 0x0}, {0xFA0A, 0x898B, 0x0},
    {0xFA0B, 0x5ED3, 0x0}, {0xFA0C, 0x5140, 0x0}, {0xFA0D, 0x55C0, 0x0}, {0xFA10, 0x585A, 0x0}, {0xFA12, 0x6674, 0x0},
    {0xFA15, 0x51DE, 0x0}, {0xFA16, 0x732A, 0x0}, {0xFA17, 0x76CA, 0x0}, {0xFA18, 0x793C, 0x0}, {0xFA19, 0x795E, 0x0},
    {0xFA1A, 0x7965, 0x0}, {0xFA1B, 0x798F, 0x0}, {0xFA1C, 0x9756, 0x0}, {0xFA1D, 0x7CBE, 0x0}, {0xFA1E, 0x7FBD, 0x0},
    {0xFA20, 0x8612, 0x0}, {0xFA22, 0x8AF8, 0x0}, {0xFA25, 0x9038, 0x0}, {0xFA26, 0x90FD, 0x0}, {0xFA2A, 0x98EF, 0x0},
    {0xFA2B, 0x98FC, 0x0}, {0xFA2C, 0x9928, 0x0}, {0xFA2D, 0x9DB4, 0x0}, {0xFA2E, 0x90DE, 0x0}, {0xFA2F, 0x96B7, 0x0},
    {0xFA30, 0x4FAE, 0x0}, {0xFA31, 0x50E7, 0x0}, {0xFA32, 0x514D, 0x0}, {0xFA33, 0x52C9, 0x0}, {0xFA34, 0x52E4, 0x0},
    {0xFA35, 0x5351, 0x0}, {0xFA36, 0x559D, 0x0}, {0xFA37, 0x5606, 0x0}, {0xFA38, 0x5668, 0x0}, {0xFA39, 0x5840, 0x0},
    {0xFA3A, 0x58A8, 0x0}, {0xFA3B, 0x5C64, 0x0}, {0xFA3C, 0x5C6E, 0x0}, {0xFA3D, 0x6094, 0x0}, {0xFA3E, 0x6168, 0x0},
    {0xFA3F, 0x618E, 0x0}, {0xFA40, 0x61F2, 0x0}, {0xFA41, 0x654F, 0x0}, {0xFA42, 0x65E2, 0x0}, {0xFA43, 0x6691, 0x0},
    {0xFA44, 0x6885, 0x0}, {0xFA45, 0x6D77, 0x0}, {0xFA46, 0x6E1A, 0x0}, {0xFA47, 0x6F22, 0x0}, {0xFA48, 0x716E, 0x0},
    {0xFA49, 0x722B, 0x0}, {0xFA4A, 0x7422, 0x0}, {0xFA4B, 0x7891, 0x0}, {0xFA4C, 0x793E, 0x0}, {0xFA4D, 0x7949, 0x0},
    {0xFA4E, 0x7948, 0x0}, {0xFA4F, 0x7950, 0x0}, {0xFA50, 0x7956, 0x0}, {0xFA51, 0x795D, 0x0}, {0xFA52, 0x798D, 0x0},
    {0xFA53, 0x798E, 0x0}, {0xFA54, 0x7A40, 0x0}, {0xFA55, 0x7A81, 0x0}, {0xFA56, 0x7BC0, 0x0}, {0xFA57, 0x7DF4, 0x0},
    {0xFA58, 0x7E09, 0x0}, {0xFA59, 0x7E41, 0x0}, {0xFA5A, 0x7F72, 0x0}, {0xFA5B, 0x8005, 0x0}, {0xFA5C, 0x81ED, 0x0},
    {0xFA5D, 0x8279, 0x0}, {0xFA5E, 0x8279, 0x0}, {0xFA5F, 0x8457, 0x0}, {0xFA60, 0x8910, 0x0}, {0xFA61, 0x8996, 0x0},
    {0xFA62, 0x8B01, 0x0}, {0xFA63, 0x8B39, 0x0}, {0xFA64, 0x8CD3, 0x0}, {0xFA65, 0x8D08, 0x0}, {0xFA66, 0x8FB6, 0x0},
    {0xFA67, 0x9038, 0x0}, {0xFA68, 0x96E3, 0x0}, {0xFA69, 0x97FF, 0x0}, {0xFA6A, 0x983B, 0x0}, {0xFA6B, 0x6075, 0x0},
    {0xFA6C, 0x242EE, 0x0}, {0xFA6D, 0x8218, 0x0}, {0xFA70, 0x4E26, 0x0}, {0xFA71, 0x51B5, 0x0}, {0xFA72, 0x5168, 0x0},
    {0xFA73, 0x4F80, 0x0}, {0xFA74, 0x5145, 0x0}, {0xFA75, 0x5180, 0x0}, {0xFA76, 0x52C7, 0x0}, {0xFA77, 0x52FA, 0x0},
    {0xFA78, 0x559D, 0x0}, {0xFA79, 0x5555, 0x0}, {0xFA7A, 0x5599, 0x0}, {0xFA7B, 0x55E2, 0x0}, {0xFA7C, 0x585A, 0x0},
    {0xFA7D, 0x58B3, 0x0}, {0xFA7E, 0x5944, 0x0}, {0xFA7F, 0x5954, 0x0}, {0xFA80, 0x5A62, 0x0}, {0xFA81, 0x5B28, 0x0},
    {0xFA82, 0x5ED2, 0x0}, {0xFA83, 0x5ED9, 0x0}, {0xFA84, 0x5F69, 0x0}, {0xFA85, 0x5FAD, 0x0}, {0xFA86, 0x60D8, 0x0},
    {0xFA87, 0x614E, 0x0}, {0xFA88, 0x6108, 0x0}, {0xFA89, 0x618E, 0x0}, {0xFA8A, 0x6160, 0x0}, {0xFA8B, 0x61F2, 0x0},
    {0xFA8C, 0x6234, 0x0}, {0xFA8D, 0x63C4, 0x0}, {0xFA8E, 0x641C, 0x0}, {0xFA8F, 0x6452, 0x0}, {0xFA90, 0x6556, 0x0},
    {0xFA91, 0x6674, 0x0}, {0xFA92, 0x6717, 0x0}, {0xFA93, 0x671B, 0x0}, {0xFA94, 0x6756, 0x0}, {0xFA95, 0x6B79, 0x0},
    {0xFA96, 0x6BBA, 0x0}, {0xFA97, 0x6D41, 0x0}, {0xFA98, 0x6EDB, 0x0}, {0xFA99, 0x6ECB, 0x0}, {0xFA9A, 0x6F22, 0x0},
    {0xFA9B, 0x701E, 0x0}, {0xFA9C, 0x716E, 0x0}, {0xFA9D, 0x77A7, 0x0}, {0xFA9E, 0x7235, 0x0}, {0xFA9F, 0x72AF, 0x0},
    {0xFAA0, 0x732A, 0x0}, {0xFAA1, 0x7471, 0x0}, {0xFAA2, 0x7506, 0x0}, {0xFAA3, 0x753B, 0x0}, {0xFAA4, 0x761D, 0x0},
    {0xFAA5, 0x761F, 0x0}, {0xFAA6, 0x76CA, 0x0}, {0xFAA7, 0x76DB, 0x0}, {0xFAA8, 0x76F4, 0x0}, {0xFAA9, 0x774A, 0x0},
    {0xFAAA, 0x7740, 0x0}, {0xFAAB, 0x78CC, 0x0}, {0xFAAC, 0x7AB1, 0x0}, {0xFAAD, 0x7BC0, 0x0}, {0xFAAE, 0x7C7B, 0x0},
    {0xFAAF, 0x7D5B, 0x0}, {0xFAB0, 0x7DF4, 0x0}, {0xFAB1, 0x7F3E, 0x0}, {0xFAB2, 0x8005, 0x0}, {0xFAB3, 0x8352, 0x0},
    {0xFAB4, 0x83EF, 0x0}, {0xFAB5, 0x8779, 0x0}, {0xFAB6, 0x8941, 0x0}, {0xFAB7, 0x8986, 0x0}, {0xFAB8, 0x8996, 0x0},
    {0xFAB9, 0x8ABF, 0x0}, {0xFABA, 0x8AF8, 0x0}, {0xFABB, 0x8ACB, 0x0}, {0xFABC, 0x8B01, 0x0}, {0xFABD, 0x8AFE, 0x0},
    {0xFABE, 0x8AED, 0x0}, {0xFABF, 0x8B39, 0x0}, {0xFAC0, 0x8B8A, 0x0}, {0xFAC1, 0x8D08, 0x0}, {0xFAC2, 0x8F38, 0x0},
    {0xFAC3, 0x9072, 0x0}, {0xFAC4, 0x9199, 0x0}, {0xFAC5, 0x9276, 0x0}, {0xFAC6, 0x967C, 0x0}, {0xFAC7, 0x96E3, 0x0},
    {0xFAC8, 0x9756, 0x0}, {0xFAC9, 0x97DB, 0x0}, {0xFACA, 0x97FF, 0x0}, {0xFACB, 0x980B, 0x0}, {0xFACC, 0x983B, 0x0},
    {0xFACD, 0x9B12, 0x0}, {0xFACE, 0x9F9C, 0x0}, {0xFACF, 0x2284A, 0x0}, {0xFAD0, 0x22844, 0x0},
    {0xFAD1, 0x233D5, 0x0}, {0xFAD2, 0x3B9D, 0x0}, {0xFAD3, 0x4018, 0x0}, {0xFAD4, 0x4039, 0x0}, {0xFAD5, 0x25249, 0x0},
    {0xFAD6, 0x25CD0, 0x0}, {0xFAD7, 0x27ED3, 0x0}, {0xFAD8, 0x9F43, 0x0}, {0xFAD9, 0x9F8E, 0x0},
    {0xFB1D, 0x5D9, 0x5B4}, {0xFB1F, 0x5F2, 0x5B7}, {0xFB2A, 0x5E9, 0x5C1}, {0xFB2B, 0x5E9, 0x5C2},
    {0xFB2C, 0xFB49, 0x5C1}, {0xFB2D, 0xFB49, 0x5C2}, {0xFB2E, 0x5D0, 0x5B7}, {0xFB2F, 0x5D0, 0x5B8},
    {0xFB30, 0x5D0, 0x5BC}, {0xFB31, 0x5D1, 0x5BC}, {0xFB32, 0x5D2, 0x5BC}, {0xFB33, 0x5D3, 0x5BC},
    {0xFB34, 0x5D4, 0x5BC}, {0xFB35, 0x5D5, 0x5BC}, {0xFB36, 0x5D6, 0x5BC}, {0xFB38, 0x5D8, 0x5BC},
    {0xFB39, 0x5D9, 0x5BC}, {0xFB3A, 0x5DA, 0x5BC}, {0xFB3B, 0x5DB, 0x5BC}, {0xFB3C, 0x5DC, 0x5BC},
    {0xFB3E, 0x5DE, 0x5BC}, {0xFB40, 0x5E0, 0x5BC}, {0xFB41, 0x5E1, 0x5BC}, {0xFB43, 0x5E3, 0x5BC},
    {0xFB44, 0x5E4, 0x5BC}, {0xFB46, 0x5E6, 0x5BC}, {0xFB47, 0x5E7, 0x5BC}, {0xFB48, 0x5E8, 0x5BC},
    {0xFB49, 0x5E9, 0x5BC}, {0xFB4A, 0x5EA, 0x5BC}, {0xFB4B, 0x5D5, 0x5B9}, {0xFB4C, 0x5D1, 0x5BF},
    {0xFB4D, 0x5DB, 0x5BF}, {0xFB4E, 0x5E4, 0x5BF}, {0x1109A, 0x11099, 0x110BA}, {0x1109C, 0x1109B, 0x110BA},
    {0x110AB, 0x110A5, 0x110BA}, {0x1112E, 0x11131, 0x11127}, {0x1112F, 0x11132, 0x11127}, {0x1134B, 0x11347, 0x1133E},
    {0x1134C, 0x11347, 0x11357}, {0x114BB, 0x114B9, 0x114BA}, {0x114BC, 0x114B9, 0x114B0}, {0x114BE, 0x114B9, 0x114BD},
    {0x115BA, 0x115B8, 0x115AF}, {0x115BB, 0x115B9, 0x115AF}, {0x11938, 0x11935, 0x11930}, {0x1D15E, 0x1D157, 0x1D165},
    {0x1D15F, 0x1D158, 0x1D165}, {0x1D160, 0x1D15F, 0x1D16E}, {0x1D161, 0x1D15F, 0x1D16F}, {0x1D162, 0x1D15F, 0x1D170},
    {0x1D163, 0x1D15F, 0x1D171}, {0x1D164, 0x1D15F, 0x1D172}, {0x1D1BB, 0x1D1B9, 0x1D165}, {0x1D1BC, 0x1D1BA, 0x1D165},
    {0x1D1BD, 0x1D1BB, 0x1D16E}, {0x1D1BE, 0x1D1BC, 0x1D16E}, {0x1D1BF, 0x1D1BB, 0x1D16F}, {0x1D1C0, 0x1D1BC, 0x1D16F},
    {0x2F800, 0x4E3D, 0x0}, {0x2F801, 0x4E38, 0x0}, {0x2F802, 0x4E41, 0x0}, {0x2F803, 0x20122, 0x0},
    {0x2F804, 0x4F60, 0x0}, {0x2F805, 0x4FAE, 0x0}, {0x2F806, 0x4FBB, 0x0}, {0x2F807, 0x5002, 0x0},
    {0x2F808, 0x507A, 0x0}, {0x2F809, 0x5099, 0x0}, {0x2F80A, 0x50E7, 0x0}, {0x2F80B, 0x50CF, 0x0},
    {0x2F80C, 0x349E, 0x0}, {0x2F80D, 0x2063A, 0x0}, {0x2F80E, 0x514D, 0x0}, {0x2F80F, 0x5154, 0x0},
    {0x2F810, 0x5164, 0x0}, {0x2F811, 0x5177, 0x0}, {0x2F812, 0x2051C, 0x0}, {0x2F813, 0x34B9, 0x0},
    {0x2F814, 0x5167, 0x0}, {0x2F815, 0x518D, 0x0}, {0x2F816, 0x2054B, 0x0}, {0x2F817, 0x5197, 0x0},
    {0x2F818, 0x51A4, 0x0}, {0x2F819, 0x4ECC, 0x0}, {0x2F81A, 0x51AC, 0x0}, {0x2F81B, 0x51B5, 0x0},
    {0x2F81C, 0x291DF, 0x0}, {0x2F81D, 0x51F5, 0x0}, {0x2F81E, 0x5203, 0x0}, {0x2F81F, 0x34DF, 0x0},
    {0x2F820, 0x523B, 0x0}, {0x2F821, 0x5246, 0x0}, {0x2F822, 0x5272, 0x0}, {0x2F823, 0x5277, 0x0},
    {0x2F824, 0x3515, 0x0}, {0x2F825, 0x52C7, 0x0}, {0x2F826, 0x52C9, 0x0}, {0x2F827, 0x52E4, 0x0},
    {0x2F828, 0x52FA, 0x0}, {0x2F829, 0x5305, 0x0}, {0x2F82A, 0x5306, 0x0}, {0x2F82B, 0x5317, 0x0},
    {0x2F82C, 0x5349, 0x0}, {0x2F82D, 0x5351, 0x0}, {0x2F82E, 0x535A, 0x0}, {0x2F82F, 0x5373, 0x0},
    {0x2F830, 0x537D, 0x0}, {0x2F831, 0x537F, 0x0}, {0x2F832, 0x537F, 0x0}, {0x2F833, 0x537F, 0x0},
    {0x2F834, 0x20A2C, 0x0}, {0x2F835, 0x7070, 0x0}, {0x2F836, 0x53CA, 0x0}, {0x2F837, 0x53DF, 0x0},
    {0x2F838, 0x20B63, 0x0}, {0x2F839, 0x53EB, 0x0}, {0x2F83A, 0x53F1, 0x0}, {0x2F83B, 0x5406, 0x0},
    {0x2F83C, 0x549E, 0x0}, {0x2F83D, 0x5438, 0x0}, {0x2F83E, 0x5448, 0x0}, {0x2F83F, 0x5468, 0x0},
    {0x2F840, 0x54A2, 0x0}, {0x2F841, 0x54F6, 0x0}, {0x2F842, 0x5510, 0x0}, {0x2F843, 0x5553, 0x0},
    {0x2F844, 0x5563, 0x0}, {0x2F845, 0x5584, 0x0}, {0x2F846, 0x5584, 0x0}, {0x2F847, 0x5599, 0x0},
    {0x2F848, 0x55AB, 0x0}, {0x2F849, 0x55B3, 0x0}, {0x2F84A, 0x55C2, 0x0}, {0x2F84B, 0x5716, 0x0},
    {0x2F84C, 0x5606, 0x0}, {0x2F84D, 0x5717, 0x0}, {0x2F84E, 0x5651, 0x0}, {0x2F84F, 0x5674, 0x0},
    {0x2F850, 0x5207, 0x0}, {0x2F851, 0x58EE, 0x0}, {0x2F852, 0x57CE, 0x0}, {0x2F853, 0x57F4, 0x0},
    {0x2F854, 0x580D, 0x0}, {0x2F855, 0x578B, 0x0}, {0x2F856, 0x5832, 0x0}, {0x2F857, 0x5831, 0x0},
    {0x2F858, 0x58AC, 0x0}, {0x2F859, 0x214E4, 0x0}, {0x2F85A, 0x58F2, 0x0}, {0x2F85B, 0x58F7, 0x0},
    {0x2F85C, 0x5906, 0x0}, {0x2F85D, 0x591A, 0x0}, {0x2F85E, 0x5922, 0x0}, {0x2F85F, 0x5962, 0x0},
    {0x2F860, 0x216A8, 0x0}, {0x2F861, 0x216EA, 0x0}, {0x2F862, 0x59EC, 0x0}, {0x2F863, 0x5A1B, 0x0},
    {0x2F864, 0x5A27, 0x0}, {0x2F865, 0x59D8, 0x0}, {0x2F866, 0x5A66, 0x0}, {0x2F867, 0x36EE, 0x0},
    {0x2F868, 0x36FC, 0x0}, {0x2F869, 0x5B08, 0x0}, {0x2F86A, 0x5B3E, 0x0}, {0x2F86B, 0x5B3E, 0x0},
    {0x2F86C, 0x219C8, 0x0}, {0x2F86D, 0x5BC3, 0x0}, {0x2F86E, 0x5BD8, 0x0}, {0x2F86F, 0x5BE7, 0x0},
    {0x2F870, 0x5BF3, 0x0}, {0x2F871, 0x21B18, 0x0}, {0x2F872, 0x5BFF, 0x0}, {0x2F873, 0x5C06, 0x0},
    {0x2F874, 0x5F53, 0x0}, {0x2F875, 0x5C22, 0x0}, {0x2F876, 0x3781, 0x0}, {0x2F877, 0x5C60, 0x0},
    {0x2F878, 0x5C6E, 0x0}, {0x2F879, 0x5CC0, 0x0}, {0x2F87A, 0x5C8D, 0x0}, {0x2F87B, 0x21DE4, 0x0},
    {0x2F87C, 0x5D43, 0x0}, {0x2F87D, 0x21DE6, 0x0}, {0x2F87E, 0x5D6E, 0x0}, {0x2F87F, 0x5D6B, 0x0},
    {0x2F880, 0x5D7C, 0x0}, {0x2F881, 0x5DE1, 0x0}, {0x2F882, 0x5DE2, 0x0}, {0x2F883, 0x382F, 0x0},
    {0x2F884, 0x5DFD, 0x0}, {0x2F885, 0x5E28, 0x0}, {0x2F886, 0x5E3D, 0x0}, {0x2F887, 0x5E69, 0x0},
    {0x2F888, 0x3862, 0x0}, {0x2F889, 0x22183, 0x0}, {0x2F88A, 0x387C, 0x0}, {0x2F88B, 0x5EB0, 0x0},
    {0x2F88C, 0x5EB3, 0x0}, {0x2F88D, 0x5EB6, 0x0}, {0x2F88E, 0x5ECA, 0x0}, {0x2F88F, 0x2A392, 0x0},
    {0x2F890, 0x5EFE, 0x0}, {0x2F891, 0x22331, 0x0}, {0x2F892, 0x22331, 0x0}, {0x2F893, 0x8201, 0x0},
    {0x2F894, 0x5F22, 0x0}, {0x2F895, 0x5F22, 0x0}, {0x2F896, 0x38C7, 0x0}, {0x2F897, 0x232B8, 0x0},
    {0x2F898, 0x261DA, 0x0}, {0x2F899, 0x5F62, 0x0}, {0x2F89A, 0x5F6B, 0x0}, {0x2F89B, 0x38E3, 0x0},
    {0x2F89C, 0x5F9A, 0x0}, {0x2F89D, 0x5FCD, 0x0}, {0x2F89E, 0x5FD7, 0x0}, {0x2F89F, 0x5FF9, 0x0},
    {0x2F8A0, 0x6081, 0x0}, {0x2F8A1, 0x393A, 0x0}, {0x2F8A2, 0x391C, 0x0}, {0x2F8A3, 0x6094, 0x0},
    {0x2F8A4, 0x226D4, 0x0}, {0x2F8A5, 0x60C7, 0x0}, {0x2F8A6, 0x6148, 0x0}, {0x2F8A7, 0x614C, 0x0},
    {0x2F8A8, 0x614E, 0x0}, {0x2F8A9, 0x614C, 0x0}, {0x2F8AA, 0x617A, 0x0}, {0x2F8AB, 0x618E, 0x0},
    {0x2F8AC, 0x61B2, 0x0}, {0x2F8AD, 0x61A4, 0x0}, {0x2F8AE, 0x61AF, 0x0}, {0x2F8AF, 0x61DE, 0x0},
    {0x2F8B0, 0x61F2, 0x0}, {0x2F8B1, 0x61F6, 0x0}, {0x2F8B2, 0x6210, 0x0}, {0x2F8B3, 0x621B, 0x0},
    {0x2F8B4, 0x625D, 0x0}, {0x2F8B5, 0x62B1, 0x0}, {0x2F8B6, 0x62D4, 0x0}, {0x2F8B7, 0x6350, 0x0},
    {0x2F8B8, 0x22B0C, 0x0}, {0x2F8B9, 0x633D, 0x0}, {0x2F8BA, 0x62FC, 0x0}, {0x2F8BB, 0x6368, 0x0},
    {0x2F8BC, 0x6383, 0x0}, {0x2F8BD, 0x63E4, 0x0}, {0x2F8BE, 0x22BF1, 0x0}, {0x2F8BF, 0x6422, 0x0},
    {0x2F8C0, 0x63C5, 0x0}, {0x2F8C1, 0x63A9, 0x0}, {0x2F8C2, 0x3A2E, 0x0}, {0x2F8C3, 0x6469, 0x0},
    {0x2F8C4, 0x647E, 0x0}, {0x2F8C5, 0x649D, 0x0}, {0x2F8C6, 0x6477, 0x0}, {0x2F8C7, 0x3A6C, 0x0},
    {0x2F8C8, 0x654F, 0x0}, {0x2F8C9, 0x656C, 0x0}, {0x2F8CA, 0x2300A, 0x0}, {0x2F8CB, 0x65E3, 0x0},
    {0x2F8CC, 0x66F8, 0x0}, {0x2F8CD, 0x6649, 0x0}, {0x2F8CE, 0x3B19, 0x0}, {0x2F8CF, 0x6691, 0x0},
    {0x2F8D0, 0x3B08, 0x0}, {0x2F8D1, 0x3AE4, 0x0}, {0x2F8D2, 0x5192, 0x0}, {0x2F8D3, 0x5195, 0x0},
    {0x2F8D4, 0x6700, 0x0}, {0x2F8D5, 0x669C, 0x0}, {0x2F8D6, 0x80AD, 0x0}, {0x2F8D7, 0x43D9, 0x0},
    {0x2F8D8, 0x6717, 0x0}, {0x2F8D9, 0x671B, 0x0}, {0x2F8DA, 0x6721, 0x0}, {0x2F8DB, 0x675E, 0x0},
    {0x2F8DC, 0x6753, 0x0}, {0x2F8DD, 0x233C3, 0x0}, {0x2F8DE, 0x3B49, 0x0}, {0x2F8DF, 0x67FA, 0x0},
    {0x2F8E0, 0x6785, 0x0}, {0x2F8E1, 0x6852, 0x0}, {0x2F8E2, 0x6885, 0x0}, {0x2F8E3, 0x2346D, 0x0},
    {0x2F8E4, 0x688E, 0x0}, {0x2F8E5, 0x681F, 0x0}, {0x2F8E6, 0x6914, 0x0}, {0x2F8E7, 0x3B9D, 0x0},
    {0x2F8E8, 0x6942, 0x0}, {0x2F8E9, 0x69A3, 0x0}, {0x2F8EA, 0x69EA, 0x0}, {0x2F8EB, 0x6AA8, 0x0},
    {0x2F8EC, 0x236A3, 0x0}, {0x2F8ED, 0x6ADB, 0x0}, {0x2F8EE, 0x3C18, 0x0}, {0x2F8EF, 0x6B21, 0x0},
    {0x2F8F0, 0x238A7, 0x0}, {0x2F8F1, 0x6B54, 0x0}, {0x2F8F2, 0x3C4E, 0x0}, {0x2F8F3, 0x6B72, 0x0},
    {0x2F8F4, 0x6B9F, 0x0}, {0x2F8F5, 0x6BBA, 0x0}, {0x2F8F6, 0x6BBB, 0x0}, {0x2F8F7, 0x23A8D, 0x0},
    {0x2F8F8, 0x21D0B, 0x0}, {0x2F8F9, 0x23AFA, 0x0}, {0x2F8FA, 0x6C4E, 0x0}, {0x2F8FB, 0x23CBC, 0x0},
    {0x2F8FC, 0x6CBF, 0x0}, {0x2F8FD, 0x6CCD, 0x0}, {0x2F8FE, 0x6C67, 0x0}, {0x2F8FF, 0x6D16, 0x0},
    {0x2F900, 0x6D3E, 0x0}, {0x2F901, 0x6D77, 0x0}, {0x2F902, 0x6D41, 0x0}, {0x2F903, 0x6D69, 0x0},
    {0x2F904, 0x6D78, 0x0}, {0x2F905, 0x6D85, 0x0}, {0x2F906, 0x23D1E, 0x0}, {0x2F907, 0x6D34, 0x0},
    {0x2F908, 0x6E2F, 0x0}, {0x2F909, 0x6E6E, 0x0}, {0x2F90A, 0x3D33, 0x0}, {0x2F90B, 0x6ECB, 0x0},
    {0x2F90C, 0x6EC7, 0x0}, {0x2F90D, 0x23ED1, 0x0}, {0x2F90E, 0x6DF9, 0x0}, {0x2F90F, 0x6F6E, 0x0},
    {0x2F910, 0x23F5E, 0x0}, {0x2F911, 0x23F8E, 0x0}, {0x2F912, 0x6FC6, 0x0}, {0x2F913, 0x7039, 0x0},
    {0x2F914, 0x701E, 0x0}, {0x2F915, 0x701B, 0x0}, {0x2F916, 0x3D96, 0x0}, {0x2F917, 0x704A, 0x0},
    {0x2F918, 0x707D, 0x0}, {0x2F919, 0x7077, 0x0}, {0x2F91A, 0x70AD, 0x0}, {0x2F91B, 0x20525, 0x0},
    {0x2F91C, 0x7145, 0x0}, {0x2F91D, 0x24263, 0x0}, {0x2F91E, 0x719C, 0x0}, {0x2F91F, 0x243AB, 0x0},
    {0x2F920, 0x7228, 0x0}, {0x2F921, 0x7235, 0x0}, {0x2F922, 0x7250, 0x0}, {0x2F923, 0x24608, 0x0},
    {0x2F924, 0x7280, 0x0}, {0x2F925, 0x7295, 0x0}, {0x2F926, 0x24735, 0x0}, {0x2F927, 0x24814, 0x0},
    {0x2F928, 0x737A, 0x0}, {0x2F929, 0x738B, 0x0}, {0x2F92A, 0x3EAC, 0x0}, {0x2F92B, 0x73A5, 0x0},
    {0x2F92C, 0x3EB8, 0x0}, {0x2F92D, 0x3EB8, 0x0}, {0x2F92E, 0x7447, 0x0}, {0x2F92F, 0x745C, 0x0},
    {0x2F930, 0x7471, 0x0}, {0x2F931, 0x7485, 0x0}, {0x2F932, 0x74CA, 0x0}, {0x2F933, 0x3F1B, 0x0},
    {0x2F934, 0x7524, 0x0}, {0x2F935, 0x24C36, 0x0}, {0x2F936, 0x753E, 0x0}, {0x2F937, 0x24C92, 0x0},
    {0x2F938, 0x7570, 0x0}, {0x2F939, 0x2219F, 0x0}, {0x2F93A, 0x7610, 0x0}, {0x2F93B, 0x24FA1, 0x0},
    {0x2F93C, 0x24FB8, 0x0}, {0x2F93D, 0x25044, 0x0}, {0x2F93E, 0x3FFC, 0x0}, {0x2F93F, 0x4008, 0x0},
    {0x2F940, 0x76F4, 0x0}, {0x2F941, 0x250F3, 0x0}, {0x2F942, 0x250F2, 0x0}, {0x2F943, 0x25119, 0x0},
    {0x2F944, 0x25133, 0x0}, {0x2F945, 0x771E, 0x0}, {0x2F946, 0x771F, 0x0}, {0x2F947, 0x771F, 0x0},
    {0x2F948, 0x774A, 0x0}, {0x2F949, 0x4039, 0x0}, {0x2F94A, 0x778B, 0x0}, {0x2F94B, 0x4046, 0x0},
    {0x2F94C, 0x4096, 0x0}, {0x2F94D, 0x2541D, 0x0}, {0x2F94E, 0x784E, 0x0}, {0x2F94F, 0x788C, 0x0},
    {0x2F950, 0x78CC, 0x0}, {0x2F951, 0x40E3, 0x0}, {0x2F952, 0x25626, 0x0}, {0x2F953, 0x7956, 0x0},
    {0x2F954, 0x2569A, 0x0}, {0x2F955, 0x256C5, 0x0}, {0x2F956, 0x798F, 0x0}, {0x2F957, 0x79EB, 0x0},
    {0x2F958, 0x412F, 0x0}, {0x2F959, 0x7A40, 0x0}, {0x2F95A, 0x7A4A, 0x0}, {0x2F95B, 0x7A4F, 0x0},
    {0x2F95C, 0x2597C, 0x0}, {0x2F95D, 0x25AA7, 0x0}, {0x2F95E, 0x25AA7, 0x0}, {0x2F95F, 0x7AEE, 0x0},
    {0x2F960, 0x4202, 0x0}, {0x2F961, 0x25BAB, 0x0}, {0x2F962, 0x7BC6, 0x0}, {0x2F963, 0x7BC9, 0x0},
    {0x2F964, 0x4227, 0x0}, {0x2F965, 0x25C80, 0x0}, {0x2F966, 0x7CD2, 0x0}, {0x2F967, 0x42A0, 0x0},
    {0x2F968, 0x7CE8, 0x0}, {0x2F969, 0x7CE3, 0x0}, {0x2F96A, 0x7D00, 0x0}, {0x2F96B, 0x25F86, 0x0},
    {0x2F96C, 0x7D63, 0x0}, {0x2F96D, 0x4301, 0x0}, {0x2F96E, 0x7DC7, 0x0}, {0x2F96F, 0x7E02, 0x0},
    {0x2F970, 0x7E45, 0x0}, {0x2F971, 0x4334, 0x0}, {0x2F972, 0x26228, 0x0}, {0x2F973, 0x26247, 0x0},
    {0x2F974, 0x4359, 0x0}, {0x2F975, 0x262D9, 0x0}, {0x2F976, 0x7F7A, 0x0}, {0x2F977, 0x2633E, 0x0},
    {0x2F978, 0x7F95, 0x0}, {0x2F979, 0x7FFA, 0x0}, {0x2F97A, 0x8005, 0x0}, {0x2F97B, 0x264DA, 0x0},
    {0x2F97C, 0x26523, 0x0}, {0x2F97D, 0x8060, 0x0}, {0x2F97E, 0x265A8, 0x0}, {0x2F97F, 0x8070, 0x0},
    {0x2F980, 0x2335F, 0x0}, {0x2F981, 0x43D5, 0x0}, {0x2F982, 0x80B2, 0x0}, {0x2F983, 0x8103, 0x0},
    {0x2F984, 0x440B, 0x0}, {0x2F985, 0x813E, 0x0}, {0x2F986, 0x5AB5, 0x0}, {0x2F987, 0x267A7, 0x0},
    {0x2F988, 0x267B5, 0x0}, {0x2F989, 0x23393, 0x0}, {0x2F98A, 0x2339C, 0x0}, {0x2F98B, 0x8201, 0x0},
    {0x2F98C, 0x8204, 0x0}, {0x2F98D, 0x8F9E, 0x0}, {0x2F98E, 0x446B, 0x0}, {0x2F98F, 0x8291, 0x0},
    {0x2F990, 0x828B, 0x0}, {0x2F991, 0x829D, 0x0}, {0x2F992, 0x52B3, 0x0}, {0x2F993, 0x82B1, 0x0},
    {0x2F994, 0x82B3, 0x0}, {0x2F995, 0x82BD, 0x0}, {0x2F996, 0x82E6, 0x0}, {0x2F997, 0x26B3C, 0x0},
    {0x2F998, 0x82E5, 0x0}, {0x2F999, 0x831D, 0x0}, {0x2F99A, 0x8363, 0x0}, {0x2F99B, 0x83AD, 0x0},
    {0x2F99C, 0x8323, 0x0}, {0x2F99D, 0x83BD, 0x0}, {0x2F99E, 0x83E7, 0x0}, {0x2F99F, 0x8457, 0x0},
    {0x2F9A0, 0x8353, 0x0}, {0x2F9A1, 0x83CA, 0x0}, {0x2F9A2, 0x83CC, 0x0}, {0x2F9A3, 0x83DC, 0x0},
    {0x2F9A4, 0x26C36, 0x0}, {0x2F9A5, 0x26D6B, 0x0}, {0x2F9A6, 0x26CD5, 0x0}, {0x2F9A7, 0x452B, 0x0},
    {0x2F9A8, 0x84F1, 0x0}, {0x2F9A9, 0x84F3, 0x0}, {0x2F9AA, 0x8516, 0x0}, {0x2F9AB, 0x273CA, 0x0},
    {0x2F9AC, 0x8564, 0x0}, {0x2F9AD, 0x26F2C, 0x0}, {0x2F9AE, 0x455D, 0x0}, {0x2F9AF, 0x4561, 0x0},
    {0x2F9B0, 0x26FB1, 0x0}, {0x2F9B1, 0x270D2, 0x0}, {0x2F9B2, 0x456B, 0x0}, {0x2F9B3, 0x8650, 0x0},
    {0x2F9B4, 0x865C, 0x0}, {0x2F9B5, 0x8667, 0x0}, {0x2F9B6, 0x8669, 0x0}, {0x2F9B7, 0x86A9, 0x0},
    {0x2F9B8, 0x8688, 0x0}, {0x2F9B9, 0x870E, 0x0}, {0x2F9BA, 0x86E2, 0x0}, {0x2F9BB, 0x8779, 0x0},
    {0x2F9BC, 0x8728, 0x0}, {0x2F9BD, 0x876B, 0x0}, {0x2F9BE, 0x8786, 0x0}, {0x2F9BF, 0x45D7, 0x0},
    {0x2F9C0, 0x87E1, 0x0}, {0x2F9C1, 0x8801, 0x0}, {0x2F9C2, 0x45F9, 0x0}, {0x2F9C3, 0x8860, 0x0},
    {0x2F9C4, 0x8863, 0x0}, {0x2F9C5, 0x27667, 0x0}, {0x2F9C6, 0x88D7, 0x0}, {0x2F9C7, 0x88DE, 0x0},
    {0x2F9C8, 0x4635, 0x0}, {0x2F9C9, 0x88FA, 0x0}, {0x2F9CA, 0x34BB, 0x0}, {0x2F9CB, 0x278AE, 0x0},
    {0x2F9CC, 0x27966, 0x0}, {0x2F9CD, 0x46BE, 0x0}, {0x2F9CE, 0x46C7, 0x0}, {0x2F9CF, 0x8AA0, 0x0},
    {0x2F9D0, 0x8AED, 0x0}, {0x2F9D1, 0x8B8A, 0x0}, {0x2F9D2, 0x8C55, 0x0}, {0x2F9D3, 0x27CA8, 0x0},
    {0x2F9D4, 0x8CAB, 0x0}, {0x2F9D5, 0x8CC1, 0x0}, {0x2F9D6, 0x8D1B, 0x0}, {0x2F9D7, 0x8D77, 0x0},
    {0x2F9D8, 0x27F2F, 0x0}, {0x2F9D9, 0x20804, 0x0}, {0x2F9DA, 0x8DCB, 0x0}, {0x2F9DB, 0x8DBC, 0x0},
    {0x2F9DC, 0x8DF0, 0x0}, {0x2F9DD, 0x208DE, 0x0}, {0x2F9DE, 0x8ED4, 0x0}, {0x2F9DF, 0x8F38, 0x0},
    {0x2F9E0, 0x285D2, 0x0}, {0x2F9E1, 0x285ED, 0x0}, {0x2F9E2, 0x9094, 0x0}, {0x2F9E3, 0x90F1, 0x0},
    {0x2F9E4, 0x9111, 0x0}, {0x2F9E5, 0x2872E, 0x0}, {0x2F9E6, 0x911B, 0x0}, {0x2F9E7, 0x9238, 0x0},
    {0x2F9E8, 0x92D7, 0x0}, {0x2F9E9, 0x92D8, 0x0}, {0x2F9EA, 0x927C, 0x0}, {0x2F9EB, 0x93F9, 0x0},
    {0x2F9EC, 0x9415, 0x0}, {0x2F9ED, 0x28BFA, 0x0}, {0x2F9EE, 0x958B, 0x0}, {0x2F9EF, 0x4995, 0x0},
    {0x2F9F0, 0x95B7, 0x0}, {0x2F9F1, 0x28D77, 0x0}, {0x2F9F2, 0x49E6, 0x0}, {0x2F9F3, 0x96C3, 0x0},
    {0x2F9F4, 0x5DB2, 0x0}, {0x2F9F5, 0x9723, 0x0}, {0x2F9F6, 0x29145, 0x0}, {0x2F9F7, 0x2921A, 0x0},
    {0x2F9F8, 0x4A6E, 0x0}, {0x2F9F9, 0x4A76, 0x0}, {0x2F9FA, 0x97E0, 0x0}, {0x2F9FB, 0x2940A, 0x0},
    {0x2F9FC, 0x4AB2, 0x0}, {0x2F9FD, 0x29496, 0x0}, {0x2F9FE, 0x980B, 0x0}, {0x2F9FF, 0x980B, 0x0},
    {0x2FA00, 0x9829, 0x0}, {0x2FA01, 0x295B6, 0x0}, {0x2FA02, 0x98E2, 0x0}, {0x2FA03, 0x4B33, 0x0},
    {0x2FA04, 0x9929, 0x0}, {0x2FA05, 0x99A7, 0x0}, {0x2FA06, 0x99C2, 0x0}, {0x2FA07, 0x99FE, 0x0},
    {0x2FA08, 0x4BCE, 0x0}, {0x2FA09, 0x29B30, 0x0}, {0x2FA0A, 0x9B12, 0x0}, {0x2FA0B, 0x9C40, 0x0},
    {0x2FA0C, 0x9CFD, 0x0}, {0x2FA0D, 0x4CCE, 0x0}, {0x2FA0E, 0x4CED, 0x0}, {0x2FA0F, 0x9D67, 0x0},
    {0x2FA10, 0x2A0CE, 0x0}, {0x2FA11, 0x4CF8, 0x0}, {0x2FA12, 0x2A105, 0x0}, {0x2FA13, 0x2A20E, 0x0},
    {0x2FA14, 0x2A291, 0x0}, {0x2FA15, 0x9EBB, 0x0}, {0x2FA16, 0x4D56, 0x0}, {0x2FA17, 0x9EF9, 0x0},
    {0x2FA18, 0x9EFE, 0x0}, {0x2FA19, 0x9F05, 0x0}, {0x2FA1A, 0x9F0F, 0x0}, {0x2FA1B, 0x9F16, 0x0},
    {0x2FA1C, 0x9F3B, 0x0}, {0x2FA1D, 0x2A600, 0x0},
};
static const uint32_t nfc_compositions[][3] = {
    {0x3C, 0x338, 0x226E}, {0x3D, 0x338, 0x2260}, {0x3E, 0x338, 0x226F}, {0x41, 0x300, 0xC0}, {0x41, 0x301, 0xC1},
    {0x41, 0x302, 0xC2}, {0x41, 0x303, 0xC3}, {0x41, 0x304, 0x100}, {0x41, 0x306, 0x102}, {0x41, 0x307, 0x226},
    {0x41, 0x308, 0xC4}, {0x41, 0x309, 0x1EA2}, {0x41, 0x30A, 0xC5}, {0x41, 0x30C, 0x1CD}, {0x41, 0x30F, 0x200},
    {0x41, 0x311, 0x202}, {0x41, 0x323, 0x1EA0}, {0x41, 0x325, 0x1E00}, {0x41, 0x328, 0x104}, {0x42, 0x307, 0x1E02},
    {0x42, 0x323, 0x1E04}, {0x42, 0x331, 0x1E06}, {0x43, 0x301, 0x106}, {0x43, 0x302, 0x108}, {0x43, 0x307, 0x10A},
    {0x43, 0x30C, 0x10C}, {0x43, 0x327, 0xC7}, {0x44, 0x307, 0x1E0A}, {0x44, 0x30C, 0x10E}, {0x44, 0x323, 0x1E0C},
    {0x44, 0x327, 0x1E10}, {0x44, 0x32D, 0x1E12}, {0x44, 0x331, 0x1E0E}, {0x45, 0x300, 0xC8}, {0x45, 0x301, 0xC9},
    {0x45, 0x302, 0xCA}, {0x45, 0x303, 0x1EBC}, {0x45, 0x304, 0x112}, {0x45, 0x306, 0x114}, {0x45, 0x307, 0x116},
    {0x45, 0x308, 0xCB}, {0x45, 0x309, 0x1EBA}, {0x45, 0x30C, 0x11A}, {0x45, 0x30F, 0x204}, {0x45, 0x311, 0x206},
    {0x45, 0x323, 0x1EB8}, {0x45, 0x327, 0x228}, {0x45, 0x328, 0x118}, {0x45, 0x32D, 0x1E18}, {0x45, 0x330, 0x1E1A},
    {0x46, 0x307, 0x1E1E}, {0x47, 0x301, 0x1F4}, {0x47, 0x302, 0x11C}, {0x47, 0x304, 0x1E20}, {0x47, 0x306, 0x11E},
    {0x47, 0x307, 0x120}, {0x47, 0x30C, 0x1E6}, {0x47, 0x327, 0x122}, {0x48, 0x302, 0x124}, {0x48, 0x307, 0x1E22},
    {0x48, 0x308, 0x1E26}, {0x48, 0x30C, 0x21E}, {0x48, 0x323, 0x1E24}, {0x48, 0x327, 0x1E28}, {0x48, 0x32E, 0x1E2A},
    {0x49, 0x300, 0xCC}, {0x49, 0x301, 0xCD}, {0x49, 0x302, 0xCE}, {0x49, 0x303, 0x128}, {0x49, 0x304, 0x12A},
    {0x49, 0x306, 0x12C}, {0x49, 0x307, 0x130}, {0x49, 0x308, 0xCF}, {0x49, 0x309, 0x1EC8}, {0x49, 0x30C, 0x1CF},
    {0x49, 0x30F, 0x208}, {0x49, 0x311, 0x20A}, {0x49, 0x323, 0x1ECA}, {0x49, 0x328, 0x12E}, {0x49, 0x330, 0x1E2C},
    {0x4A, 0x302, 0x134}, {0x4B, 0x301, 0x1E30}, {0x4B, 0x30C, 0x1E8}, {0x4B, 0x323, 0x1E32}, {0x4B, 0x327, 0x136},
    {0x4B, 0x331, 0x1E34}, {0x4C, 0x301, 0x139}, {0x4C, 0x30C, 0x13D}, {0x4C, 0x323, 0x1E36}, {0x4C, 0x327, 0x13B},
    {0x4C, 0x32D, 0x1E3C}, {0x4C, 0x331, 0x1E3A}, {0x4D, 0x301, 0x1E3E}, {0x4D, 0x307, 0x1E40}, {0x4D, 0x323, 0x1E42},
    {0x4E, 0x300, 0x1F8}, {0x4E, 0x301, 0x143}, {0x4E, 0x303, 0xD1}, {0x4E, 0x307, 0x1E44}, {0x4E, 0x30C, 0x147},
    {0x4E, 0x323, 0x1E46}, {0x4E, 0x327, 0x145}, {0x4E, 0x32D, 0x1E4A}, {0x4E, 0x331, 0x1E48}, {0x4F, 0x300, 0xD2},
    {0x4F, 0x301, 0xD3}, {0x4F, 0x302, 0xD4}, {0x4F, 0x303, 0xD5}, {0x4F, 0x304, 0x14C}, {0x4F, 0x306, 0x14E},
    {0x4F, 0x307, 0x22E}, {0x4F, 0x308, 0xD6}, {0x4F, 0x309, 0x1ECE}, {0x4F, 0x30B, 0x150}, {0x4F, 0x30C, 0x1D1},
    {0x4F, 0x30F, 0x20C}, {0x4F, 0x311, 0x20E}, {0x4F, 0x31B, 0x1A0}, {0x4F, 0x323, 0x1ECC}, {0x4F, 0x328, 0x1EA},
    {0x50, 0x301, 0x1E54}, {0x50, 0x307, 0x1E56}, {0x52, 0x301, 0x154}, {0x52, 0x307, 0x1E58}, {0x52, 0x30C, 0x158},
    {0x52, 0x30F, 0x210}, {0x52, 0x311, 0x212}, {0x52, 0x323, 0x1E5A}, {0x52, 0x327, 0x156}, {0x52, 0x331, 0x1E5E},
    {0x53, 0x301, 0x15A}, {0x53, 0x302, 0x15C}, {0x53, 0x307, 0x1E60}, {0x53, 0x30C, 0x160}, {0x53, 0x323, 0x1E62},
    {0x53, 0x326, 0x218}, {0x53, 0x327, 0x15E}, {0x54, 0x307, 0x1E6A}, {0x54, 0x30C, 0x164}, {0x54, 0x323, 0x1E6C},
    {0x54, 0x326, 0x21A}, {0x54, 0x327, 0x162}, {0x54, 0x32D, 0x1E70}, {0x54, 0x331, 0x1E6E}, {0x55, 0x300, 0xD9},
    {0x55, 0x301, 0xDA}, {0x55, 0x302, 0xDB}, {0x55, 0x303, 0x168}, {0x55, 0x304, 0x16A}, {0x55, 0x306, 0x16C},
    {0x55, 0x308, 0xDC}, {0x55, 0x309, 0x1EE6}, {0x55, 0x30A, 0x16E}, {0x55, 0x30B, 0x170}, {0x55, 0x30C, 0x1D3},
    {0x55, 0x30F, 0x214}, {0x55, 0x311, 0x216}, {0x55, 0x31B, 0x1AF}, {0x55, 0x323, 0x1EE4}, {0x55, 0x324, 0x1E72},
    {0x55, 0x328, 0x172}, {0x55, 0x32D, 0x1E76}, {0x55, 0x330, 0x1E74}, {0x56, 0x303, 0x1E7C}, {0x56, 0x323, 0x1E7E},
    {0x57, 0x300, 0x1E80}, {0x57, 0x301, 0x1E82}, {0x57, 0x302, 0x174}, {0x57, 0x307, 0x1E86}, {0x57, 0x308, 0x1E84},
    {0x57, 0x323, 0x1E88}, {0x58, 0x307, 0x1E8A}, {0x58, 0x308, 0x1E8C}, {0x59, 0x300, 0x1EF2}, {0x59, 0x301, 0xDD},
    {0x59, 0x302, 0x176}, {0x59, 0x303, 0x1EF8}, {0x59, 0x304, 0x232}, {0x59, 0x307, 0x1E8E}, {0x59, 0x308, 0x178},
    {0x59, 0x309, 0x1EF6}, {0x59, 0x323, 0x1EF4}, {0x5A, 0x301, 0x179}, {0x5A, 0x302, 0x1E90}, {0x5A, 0x307, 0x17B},
    {0x5A, 0x30C, 0x17D}, {0x5A, 0x323, 0x1E92}, {0x5A, 0x331, 0x1E94}, {0x61, 0x300, 0xE0}, {0x61, 0x301, 0xE1},
    {0x61, 0x302, 0xE2}, {0x61, 0x303, 0xE3}, {0x61, 0x304, 0x101}, {0x61, 0x306, 0x103}, {0x61, 0x307, 0x227},
    {0x61, 0x308, 0xE4}, {0x61, 0x309, 0x1EA3}, {0x61, 0x30A, 0xE5}, {0x61, 0x30C, 0x1CE}, {0x61, 0x30F, 0x201},
    {0x61, 0x311, 0x203}, {0x61, 0x323, 0x1EA1}, {0x61, 0x325, 0x1E01}, {0x61, 0x328, 0x105}, {0x62, 0x307, 0x1E03},
    {0x62, 0x323, 0x1E05}, {0x62, 0x331, 0x1E07}, {0x63, 0x301, 0x107}, {0x63, 0x302, 0x109}, {0x63, 0x307, 0x10B},
    {0x63, 0x30C, 0x10D}, {0x63, 0x327, 0xE7}, {0x64, 0x307, 0x1E0B}, {0x64, 0x30C, 0x10F}, {0x64, 0x323, 0x1E0D},
    {0x64, 0x327, 0x1E11}, {0x64, 0x32D, 0x1E13}, {0x64, 0x331, 0x1E0F}, {0x65, 0x300, 0xE8}, {0x65, 0x301, 0xE9},
    {0x65, 0x302, 0xEA}, {0x65, 0x303, 0x1EBD}, {0x65, 0x304, 0x113}, {0x65, 0x306, 0x115}, {0x65, 0x307, 0x117},
    {0x65, 0x308, 0xEB}, {0x65, 0x309, 0x1EBB}, {0x65, 0x30C, 0x11B}, {0x65, 0x30F, 0x205}, {0x65, 0x311, 0x207},
    {0x65, 0x323, 0x1EB9}, {0x65, 0x327, 0x229}, {0x65, 0x328, 0x119}, {0x65, 0x32D, 0x1E19}, {0x65, 0x330, 0x1E1B},
    {0x66, 0x307, 0x1E1F}, {0x67, 0x301, 0x1F5}, {0x67, 0x302, 0x11D}, {0x67, 0x304, 0x1E21}, {0x67, 0x306, 0x11F},
    {0x67, 0x307, 0x121}, {0x67, 0x30C, 0x1E7}, {0x67, 0x327, 0x123}, {0x68, 0x302, 0x125}, {0x68, 0x307, 0x1E23},
    {0x68, 0x308, 0x1E27}, {0x68, 0x30C, 0x21F}, {0x68, 0x323, 0x1E25}, {0x68, 0x327, 0x1E29}, {0x68, 0x32E, 0x1E2B},
    {0x68, 0x331, 0x1E96}, {0x69, 0x300, 0xEC}, {0x69, 0x301, 0xED}, {0x69, 0x302, 0xEE}, {0x69, 0x303, 0x129},
    {0x69, 0x304, 0x12B}, {0x69, 0x306, 0x12D}, {0x69, 0x308, 0xEF}, {0x69, 0x309, 0x1EC9}, {0x69, 0x30C, 0x1D0},
    {0x69, 0x30F, 0x209}, {0x69, 0x311, 0x20B}, {0x69, 0x323, 0x1ECB}, {0x69, 0x328, 0x12F}, {0x69, 0x330, 0x1E2D},
    {0x6A, 0x302, 0x135}, {0x6A, 0x30C, 0x1F0}, {0x6B, 0x301, 0x1E31}, {0x6B, 0x30C, 0x1E9}, {0x6B, 0x323, 0x1E33},
    {0x6B, 0x327, 0x137}, {0x6B, 0x331, 0x1E35}, {0x6C, 0x301, 0x13A}, {0x6C, 0x30C, 0x13E}, {0x6C, 0x323, 0x1E37},
    {0x6C, 0x327, 0x13C}, {0x6C, 0x32D, 0x1E3D}, {0x6C, 0x331, 0x1E3B}, {0x6D, 0x301, 0x1E3F}, {0x6D, 0x307, 0x1E41},
    {0x6D, 0x323, 0x1E43}, {0x6E, 0x300, 0x1F9}, {0x6E, 0x301, 0x144}, {0x6E, 0x303, 0xF1}, {0x6E, 0x307, 0x1E45},
    {0x6E, 0x30C, 0x148}, {0x6E, 0x323, 0x1E47}, {0x6E, 0x327, 0x146}, {0x6E, 0x32D, 0x1E4B}, {0x6E, 0x331, 0x1E49},
    {0x6F, 0x300, 0xF2}, {0x6F, 0x301, 0xF3}, {0x6F, 0x302, 0xF4}, {0x6F, 0x303, 0xF5}, {0x6F, 0x304, 0x14D},
    {0x6F, 0x306, 0x14F}, {0x6F, 0x307, 0x22F}, {0x6F, 0x308, 0xF6}, {0x6F, 0x309, 0x1ECF}, {0x6F, 0x30B, 0x151},
    {0x6F, 0x30C, 0x1D2}, {0x6F, 0x30F, 0x20D}, {0x6F, 0x311, 0x20F}, {0x6F, 0x31B, 0x1A1}, {0x6F, 0x323, 0x1ECD},
    {0x6F, 0x328, 0x1EB}, {0x70, 0x301, 0x1E55}, {0x70, 0x307, 0x1E57}, {0x72, 0x301, 0x155}, {0x72, 0x307, 0x1E59},
    {0x72, 0x30C, 0x159}, {0x72, 0x30F, 0x211}, {0x72, 0x311, 0x213}, {0x72, 0x323, 0x1E5B}, {0x72, 0x327, 0x157},
    {0x72, 0x331, 0x1E5F}, {0x73, 0x301, 0x15B}, {0x73, 0x302, 0x15D}, {0x73, 0x307, 0x1E61}, {0x73, 0x30C, 0x161},
    {0x73, 0x323, 0x1E63}, {0x73, 0x326, 0x219}, {0x73, 0x327, 0x15F}, {0x74, 0x307, 0x1E6B}, {0x74, 0x308, 0x1E97},
    {0x74, 0x30C, 0x165}, {0x74, 0x323, 0x1E6D}, {0x74, 0x326, 0x21B}, {0x74, 0x327, 0x163}, {0x74, 0x32D, 0x1E71},
    {0x74, 0x331, 0x1E6F}, {0x75, 0x300, 0xF9}, {0x75, 0x301, 0xFA}, {0x75, 0x302, 0xFB}, {0x75, 0x303, 0x169},
    {0x75, 0x304, 0x16B}, {0x75, 0x306, 0x16D}, {0x75, 0x308, 0xFC}, {0x75, 0x309, 0x1EE7}, {0x75, 0x30A, 0x16F},
    {0x75, 0x30B, 0x171}, {0x75, 0x30C, 0x1D4}, {0x75, 0x30F, 0x215}, {0x75, 0x311, 0x217}, {0x75, 0x31B, 0x1B0},
    {0x75, 0x323, 0x1EE5}, {0x75, 0x324, 0x1E73}, {0x75, 0x328, 0x173}, {0x75, 0x32D, 0x1E77}, {0x75, 0x330, 0x1E75},
    {0x76, 0x303, 0x1E7D}, {0x76, 0x323, 0x1E7F}, {0x77, 0x300, 0x1E81}, {0x77, 0x301, 0x1E83}, {0x77, 0x302, 0x175},
    {0x77, 0x307, 0x1E87}, {0x77, 0x308, 0x1E85}, {0x77, 0x30A, 0x1E98}, {0x77, 0x323, 0x1E89}, {0x78, 0x307, 0x1E8B},
    {0x78, 0x308, 0x1E8D}, {0x79, 0x300, 0x1EF3}, {0x79, 0x301, 0xFD}, {0x79, 0x302, 0x177}, {0x79, 0x303, 0x1EF9},
    {0x79, 0x304, 0x233}, {0x79, 0x307, 0x1E8F}, {0x79, 0x308, 0xFF}, {0x79, 0x309, 0x1EF7}, {0x79, 0x30A, 0x1E99},
    {0x79, 0x323, 0x1EF5}, {0x7A, 0x301, 0x17A}, {0x7A, 0x302, 0x1E91}, {0x7A, 0x307, 0x17C}, {0x7A, 0x30C, 0x17E},
    {0x7A, 0x323, 0x1E93}, {0x7A, 0x331, 0x1E95}, {0xA8, 0x300, 0x1FED}, {0xA8, 0x301, 0x385}, {0xA8, 0x342, 0x1FC1},
    {0xC2, 0x300, 0x1EA6}, {0xC2, 0x301, 0x1EA4}, {0xC2, 0x303, 0x1EAA}, {0xC2, 0x309, 0x1EA8}, {0xC4, 0x304, 0x1DE},
    {0xC5, 0x301, 0x1FA}, {0xC6, 0x301, 0x1FC}, {0xC6, 0x304, 0x1E2}, {0xC7, 0x301, 0x1E08}, {0xCA, 0x300, 0x1EC0},
    {0xCA, 0x301, 0x1EBE}, {0xCA, 0x303, 0x1EC4}, {0xCA, 0x309, 0x1EC2}, {0xCF, 0x301, 0x1E2E}, {0xD4, 0x300, 0x1ED2},
    {0xD4, 0x301, 0x1ED0}, {0xD4, 0x303, 0x1ED6}, {0xD4, 0x309, 0x1ED4}, {0xD5, 0x301, 0x1E4C}, {0xD5, 0x304, 0x22C},
    {0xD5, 0x308, 0x1E4E}, {0xD6, 0x304, 0x22A}, {0xD8, 0x301, 0x1FE}, {0xDC, 0x300, 0x1DB}, {0xDC, 0x301, 0x1D7},
    {0xDC, 0x304, 0x1D5}, {0xDC, 0x30C, 0x1D9}, {0xE2, 0x300, 0x1EA7}, {0xE2, 0x301, 0x1EA5}, {0xE2, 0x303, 0x1EAB},
    {0xE2, 0x309, 0x1EA9}, {0xE4, 0x304, 0x1DF}, {0xE5, 0x301, 0x1FB}, {0xE6, 0x301, 0x1FD}, {0xE6, 0x304, 0x1E3},
    {0xE7, 0x301, 0x1E09}, {0xEA, 0x300, 0x1EC1}, {0xEA, 0x301, 0x1EBF}, {0xEA, 0x303, 0x1EC5}, {0xEA, 0x309, 0x1EC3},
    {0xEF, 0x301, 0x1E2F}, {0xF4, 0x300, 0x1ED3}, {0xF4, 0x301, 0x1ED1}, {0xF4, 0x303, 0x1ED7}, {0xF4, 0x309, 0x1ED5},
    {0xF5, 0x301, 0x1E4D}, {0xF5, 0x304, 0x22D}, {0xF5, 0x308, 0x1E4F}, {0xF6, 0x304, 0x22B}, {0xF8, 0x301, 0x1FF},
    {0xFC, 0x300, 0x1DC}, {0xFC, 0x301, 0x1D8}, {0xFC, 0x304, 0x1D6}, {0xFC, 0x30C, 0x1DA}, {0x102, 0x300, 0x1EB0},
    {0x102, 0x301, 0x1EAE}, {0x102, 0x303, 0x1EB4}, {0x102, 0x309, 0x1EB2}, {0x103, 0x300, 0x1EB1},
    {0x103, 0x301, 0x1EAF}, {0x103, 0x303, 0x1EB5}, {0x103, 0x309, 0x1EB3}, {0x112, 0x300, 0x1E14},
    {0x112, 0x301, 0x1E16}, {0x113, 0x300, 0x1E15}, {0x113, 0x301, 0x1E17}, {0x14C, 0x300, 0x1E50},
    {0x14C, 0x301, 0x1E52}, {0x14D, 0x300, 0x1E51}, {0x14D, 0x301, 0x1E53}, {0x15A, 0x307, 0x1E64},
    {0x15B, 0x307, 0x1E65}, {0x160, 0x307, 0x1E66}, {0x161, 0x307, 0x1E67}, {0x168, 0x301, 0x1E78},
    {0x169, 0x301, 0x1E79}, {0x16A, 0x308, 0x1E7A}, {0x16B, 0x308, 0x1E7B}, {0x17F, 0x307, 0x1E9B},
    {0x1A0, 0x300, 0x1EDC}, {0x1A0, 0x301, 0x1EDA}, {0x1A0, 0x303, 0x1EE0}, {0x1A0, 0x309, 0x1EDE},
    {0x1A0, 0x323, 0x1EE2}, {0x1A1, 0x300, 0x1EDD}, {0x1A1, 0x301, 0x1EDB}, {0x1A1, 0x303, 0x1EE1},
    {0x1A1, 0x309, 0x1EDF}, {0x1A1, 0x323, 0x1EE3}, {0x1AF, 0x300, 0x1EEA}, {0x1AF, 0x301, 0x1EE8},
    {0x1AF, 0x303, 0x1EEE}, {0x1AF, 0x309, 0x1EEC}, {0x1AF, 0x323, 0x1EF0}, {0x1B0, 0x300, 0x1EEB},
    {0x1B0, 0x301, 0x1EE9}, {0x1B0, 0x303, 0x1EEF}, {0x1B0, 0x309, 0x1EED}, {0x1B0, 0x323, 0x1EF1},
    {0x1B7, 0x30C, 0x1EE}, {0x1EA, 0x304, 0x1EC}, {0x1EB, 0x304, 0x1ED}, {0x226, 0x304, 0x1E0}, {0x227, 0x304, 0x1E1},
    {0x228, 0x306, 0x1E1C}, {0x229, 0x306, 0x1E1D}, {0x22E, 0x304, 0x230}, {0x22F, 0x304, 0x231}, {0x292, 0x30C, 0x1EF},
    {0x391, 0x300, 0x1FBA}, {0x391, 0x301, 0x386}, {0x391, 0x304, 0x1FB9}, {0x391, 0x306, 0x1FB8},
    {0x391, 0x313, 0x1F08}, {0x391, 0x314, 0x1F09}, {0x391, 0x345, 0x1FBC}, {0x395, 0x300, 0x1FC8},
    {0x395, 0x301, 0x388}, {0x395, 0x313, 0x1F18}, {0x395, 0x314, 0x1F19}, {0x397, 0x300, 0x1FCA},
    {0x397, 0x301, 0x389}, {0x397, 0x313, 0x1F28}, {0x397, 0x314, 0x1F29}, {0x397, 0x345, 0x1FCC},
    {0x399, 0x300, 0x1FDA}, {0x399, 0x301, 0x38A}, {0x399, 0x304, 0x1FD9}, {0x399, 0x306, 0x1FD8},
    {0x399, 0x308, 0x3AA}, {0x399, 0x313, 0x1F38}, {0x399, 0x314, 0x1F39}, {0x39F, 0x300, 0x1FF8},
    {0x39F, 0x301, 0x38C}, {0x39F, 0x313, 0x1F48}, {0x39F, 0x314, 0x1F49}, {0x3A1, 0x314, 0x1FEC},
    {0x3A5, 0x300, 0x1FEA}, {0x3A5, 0x301, 0x38E}, {0x3A5, 0x304, 0x1FE9}, {0x3A5, 0x306, 0x1FE8},
    {0x3A5, 0x308, 0x3AB}, {0x3A5, 0x314, 0x1F59}, {0x3A9, 0x300, 0x1FFA}, {0x3A9, 0x301, 0x38F},
    {0x3A9, 0x313, 0x1F68}, {0x3A9, 0x314, 0x1F69}, {0x3A9, 0x345, 0x1FFC}, {0x3AC, 0x345, 0x1FB4},
    {0x3AE, 0x345, 0x1FC4}, {0x3B1, 0x300, 0x1F70}, {0x3B1, 0x301, 0x3AC}, {0x3B1, 0x304, 0x1FB1},
    {0x3B1, 0x306, 0x1FB0}, {0x3B1, 0x313, 0x1F00}, {0x3B1, 0x314, 0x1F01}, {0x3B1, 0x342, 0x1FB6},
    {0x3B1, 0x345, 0x1FB3}, {0x3B5, 0x300, 0x1F72}, {0x3B5, 0x301, 0x3AD}, {0x3B5, 0x313, 0x1F10},
    {0x3B5, 0x314, 0x1F11}, {0x3B7, 0x300, 0x1F74}, {0x3B7, 0x301, 0x3AE}, {0x3B7, 0x313, 0x1F20},
    {0x3B7, 0x314, 0x1F21}, {0x3B7, 0x342, 0x1FC6}, {0x3B7, 0x345, 0x1FC3}, {0x3B9, 0x300, 0x1F76},
    {0x3B9, 0x301, 0x3AF}, {0x3B9, 0x304, 0x1FD1}, {0x3B9, 0x306, 0x1FD0}, {0x3B9, 0x308, 0x3CA},
    {0x3B9, 0x313, 0x1F30}, {0x3B9, 0x314, 0x1F31}, {0x3B9, 0x342, 0x1FD6}, {0x3BF, 0x300, 0x1F78},
    {0x3BF, 0x301, 0x3CC}, {0x3BF, 0x313, 0x1F40}, {0x3BF, 0x314, 0x1F41}, {0x3C1, 0x313, 0x1FE4},
    {0x3C1, 0x314, 0x1FE5}, {0x3C5, 0x300, 0x1F7A}, {0x3C5, 0x301, 0x3CD}, {0x3C5, 0x304, 0x1FE1},
    {0x3C5, 0x306, 0x1FE0}, {0x3C5, 0x308, 0x3CB}, {0x3C5, 0x313, 0x1F50}, {0x3C5, 0x314, 0x1F51},
    {0x3C5, 0x342, 0x1FE6}, {0x3C9, 0x300, 0x1F7C}, {0x3C9, 0x301, 0x3CE}, {0x3C9, 0x313, 0x1F60},
    {0x3C9, 0x314, 0x1F61}, {0x3C9, 0x342, 0x1FF6}, {0x3C9, 0x345, 0x1FF3}, {0x3CA, 0x300, 0x1FD2},
    {0x3CA, 0x301, 0x390}, {0x3CA, 0x342, 0x1FD7}, {0x3CB, 0x300, 0x1FE2}, {0x3CB, 0x301, 0x3B0},
    {0x3CB, 0x342, 0x1FE7}, {0x3CE, 0x345, 0x1FF4}, {0x3D2, 0x301, 0x3D3}, {0x3D2, 0x308, 0x3D4}, {0x406, 0x308, 0x407},
    {0x410, 0x306, 0x4D0}, {0x410, 0x308, 0x4D2}, {0x413, 0x301, 0x403}, {0x415, 0x300, 0x400}, {0x415, 0x306, 0x4D6},
    {0x415, 0x308, 0x401}, {0x416, 0x306, 0x4C1}, {0x416, 0x308, 0x4DC}, {0x417, 0x308, 0x4DE}, {0x418, 0x300, 0x40D},
    {0x418, 0x304, 0x4E2}, {0x418, 0x306, 0x419}, {0x418, 0x308, 0x4E4}, {0x41A, 0x301, 0x40C}, {0x41E, 0x308, 0x4E6},
    {0x423, 0x304, 0x4EE}, {0x423, 0x306, 0x40E}, {0x423, 0x308, 0x4F0}, {0x423, 0x30B, 0x4F2}, {0x427, 0x308, 0x4F4},
    {0x42B, 0x308, 0x4F8}, {0x42D, 0x308, 0x4EC}, {0x430, 0x306, 0x4D1}, {0x430, 0x308, 0x4D3}, {0x433, 0x301, 0x453},
    {0x435, 0x300, 0x450}, {0x435, 0x306, 0x4D7}, {0x435, 0x308, 0x451}, {0x436, 0x306, 0x4C2}, {0x436, 0x308, 0x4DD},
    {0x437, 0x308, 0x4DF}, {0x438, 0x300, 0x45D}, {0x438, 0x304, 0x4E3}, {0x438, 0x306, 0x439}, {0x438, 0x308, 0x4E5},
    {0x43A, 0x301, 0x45C}, {0x43E, 0x308, 0x4E7}, {0x443, 0x304, 0x4EF}, {0x443, 0x306, 0x45E}, {0x443, 0x308, 0x4F1},
    {0x443, 0x30B, 0x4F3}, {0x447, 0x308, 0x4F5}, {0x44B, 0x308, 0x4F9}, {0x44D, 0x308, 0x4ED}, {0x456, 0x308, 0x457},
    {0x474, 0x30F, 0x476}, {0x475, 0x30F, 0x477}, {0x4D8, 0x308, 0x4DA}, {0x4D9, 0x308, 0x4DB}, {0x4E8, 0x308, 0x4EA},
    {0x4E9, 0x308, 0x4EB}, {0x627, 0x653, 0x622}, {0x627, 0x654, 0x623}, {0x627, 0x655, 0x625}, {0x648, 0x654, 0x624},
    {0x64A, 0x654, 0x626}, {0x6C1, 0x654, 0x6C2}, {0x6D2, 0x654, 0x6D3}, {0x6D5, 0x654, 0x6C0}, {0x928, 0x93C, 0x929},
    {0x930, 0x93C, 0x931}, {0x933, 0x93C, 0x934}, {0x9C7, 0x9BE, 0x9CB}, {0x9C7, 0x9D7, 0x9CC}, {0xB47, 0xB3E, 0xB4B},
    {0xB47, 0xB56, 0xB48}, {0xB47, 0xB57, 0xB4C}, {0xB92, 0xBD7, 0xB94}, {0xBC6, 0xBBE, 0xBCA}, {0xBC6, 0xBD7, 0xBCC},
    {0xBC7, 0xBBE, 0xBCB}, {0xC46, 0xC56, 0xC48}, {0xCBF, 0xCD5, 0xCC0}, {0xCC6, 0xCC2, 0xCCA}, {0xCC6, 0xCD5, 0xCC7},
    {0xCC6, 0xCD6, 0xCC8}, {0xCCA, 0xCD5, 0xCCB}, {0xD46, 0xD3E, 0xD4A}, {0xD46, 0xD57, 0xD4C}, {0xD47, 0xD3E, 0xD4B},
    {0xDD9, 0xDCA, 0xDDA}, {0xDD9, 0xDCF, 0xDDC}, {0xDD9, 0xDDF, 0xDDE}, {0xDDC, 0xDCA, 0xDDD},
    {0x1025, 0x102E, 0x1026}, {0x1B05, 0x1B35, 0x1B06}, {0x1B07, 0x1B35, 0x1B08}, {0x1B09, 0x1B35, 0x1B0A},
    {0x1B0B, 0x1B35, 0x1B0C}, {0x1B0D, 0x1B35, 0x1B0E}, {0x1B11, 0x1B35, 0x1B12}, {0x1B3A, 0x1B35, 0x1B3B},
    {0x1B3C, 0x1B35, 0x1B3D}, {0x1B3E, 0x1B35, 0x1B40}, {0x1B3F, 0x1B35, 0x1B41}, {0x1B42, 0x1B35, 0x1B43},
    {0x1E36, 0x304, 0x1E38}, {0x1E37, 0x304, 0x1E39}, {0x1E5A, 0x304, 0x1E5C}, {0x1E5B, 0x304, 0x1E5D},
    {0x1E62, 0x307, 0x1E68}, {0x1E63, 0x307, 0x1E69}, {0x1EA0, 0x302, 0x1EAC}, {0x1EA0, 0x306, 0x1EB6},
    {0x1EA1, 0x302, 0x1EAD}, {0x1EA1, 0x306, 0x1EB7}, {0x1EB8, 0x302, 0x1EC6}, {0x1EB9, 0x302, 0x1EC7},
    {0x1ECC, 0x302, 0x1ED8}, {0x1ECD, 0x302, 0x1ED9}, {0x1F00, 0x300, 0x1F02}, {0x1F00, 0x301, 0x1F04},
    {0x1F00, 0x342, 0x1F06}, {0x1F00, 0x345, 0x1F80}, {0x1F01, 0x300, 0x1F03}, {0x1F01, 0x301, 0x1F05},
    {0x1F01, 0x342, 0x1F07}, {0x1F01, 0x345, 0x1F81}, {0x1F02, 0x345, 0x1F82}, {0x1F03, 0x345, 0x1F83},
    {0x1F04, 0x345, 0x1F84}, {0x1F05, 0x345, 0x1F85}, {0x1F06, 0x345, 0x1F86}, {0x1F07, 0x345, 0x1F87},
    {0x1F08, 0x300, 0x1F0A}, {0x1F08, 0x301, 0x1F0C}, {0x1F08, 0x342, 0x1F0E}, {0x1F08, 0x345, 0x1F88},
    {0x1F09, 0x300, 0x1F0B}, {0x1F09, 0x301, 0x1F0D}, {0x1F09, 0x342, 0x1F0F}, {0x1F09, 0x345, 0x1F89},
    {0x1F0A, 0x345, 0x1F8A}, {0x1F0B, 0x345, 0x1F8B}, {0x1F0C, 0x345, 0x1F8C}, {0x1F0D, 0x345, 0x1F8D},
    {0x1F0E, 0x345, 0x1F8E}, {0x1F0F, 0x345, 0x1F8F}, {0x1F10, 0x300, 0x1F12}, {0x1F10, 0x301, 0x1F14},
    {0x1F11, 0x300, 0x1F13}, {0x1F11, 0x301, 0x1F15}, {0x1F18, 0x300, 0x1F1A}, {0x1F18, 0x301, 0x1F1C},
    {0x1F19, 0x300, 0x1F1B}, {0x1F19, 0x301, 0x1F1D}, {0x1F20, 0x300, 0x1F22}, {0x1F20, 0x301, 0x1F24},
    {0x1F20, 0x342, 0x1F26}, {0x1F20, 0x345, 0x1F90}, {0x1F21, 0x300, 0x1F23}, {0x1F21, 0x301, 0x1F25},
    {0x1F21, 0x342, 0x1F27}, {0x1F21, 0x345, 0x1F91}, {0x1F22, 0x345, 0x1F92}, {0x1F23, 0x345, 0x1F93},
    {0x1F24, 0x345, 0x1F94}, {0x1F25, 0x345, 0x1F95}, {0x1F26, 0x345, 0x1F96}, {0x1F27, 0x345, 0x1F97},
    {0x1F28, 0x300, 0x1F2A}, {0x1F28, 0x301, 0x1F2C}, {0x1F28, 0x342, 0x1F2E}, {0x1F28, 0x345, 0x1F98},
    {0x1F29, 0x300, 0x1F2B}, {0x1F29, 0x301, 0x1F2D}, {0x1F29, 0x342, 0x1F2F}, {0x1F29, 0x345, 0x1F99},
    {0x1F2A, 0x345, 0x1F9A}, {0x1F2B, 0x345, 0x1F9B}, {0x1F2C, 0x345, 0x1F9C}, {0x1F2D, 0x345, 0x1F9D},
    {0x1F2E, 0x345, 0x1F9E}, {0x1F2F, 0x345, 0x1F9F}, {0x1F30, 0x300, 0x1F32}, {0x1F30, 0x301, 0x1F34},
    {0x1F30, 0x342, 0x1F36}, {0x1F31, 0x300, 0x1F33}, {0x1F31, 0x301, 0x1F35}, {0x1F31, 0x342, 0x1F37},
    {0x1F38, 0x300, 0x1F3A}, {0x1F38, 0x301, 0x1F3C}, {0x1F38, 0x342, 0x1F3E}, {0x1F39, 0x300, 0x1F3B},
    {0x1F39, 0x301, 0x1F3D}, {0x1F39, 0x342, 0x1F3F}, {0x1F40, 0x300, 0x1F42}, {0x1F40, 0x301, 0x1F44},
    {0x1F41, 0x300, 0x1F43}, {0x1F41, 0x301, 0x1F45}, {0x1F48, 0x300, 0x1F4A}, {0x1F48, 0x301, 0x1F4C},
    {0x1F49, 0x300, 0x1F4B}, {0x1F49, 0x301, 0x1F4D}, {0x1F50, 0x300, 0x1F52}, {0x1F50, 0x301, 0x1F54},
    {0x1F50, 0x342, 0x1F56}, {0x1F51, 0x300, 0x1F53}, {0x1F51, 0x301, 0x1F55}, {0x1F51, 0x342, 0x1F57},
    {0x1F59, 0x300, 0x1F5B}, {0x1F59, 0x301, 0x1F5D}, {0x1F59, 0x342, 0x1F5F}, {0x1F60, 0x300, 0x1F62},
    {0x1F60, 0x301, 0x1F64}, {0x1F60, 0x342, 0x1F66}, {0x1F60, 0x345, 0x1FA0}, {0x1F61, 0x300, 0x1F63},
    {0x1F61, 0x301, 0x1F65}, {0x1F61, 0x342, 0x1F67}, {0x1F61, 0x345, 0x1FA1}, {0x1F62, 0x345, 0x1FA2},
    {0x1F63, 0x345, 0x1FA3}, {0x1F64, 0x345, 0x1FA4}, {0x1F65, 0x345, 0x1FA5}, {0x1F66, 0x345, 0x1FA6},
    {0x1F67, 0x345, 0x1FA7}, {0x1F68, 0x300, 0x1F6A}, {0x1F68, 0x301, 0x1F6C}, {0x1F68, 0x342, 0x1F6E},
    {0x1F68, 0x345, 0x1FA8}, {0x1F69, 0x300, 0x1F6B}, {0x1F69, 0x301, 0x1F6D}, {0x1F69, 0x342, 0x1F6F},
    {0x1F69, 0x345, 0x1FA9}, {0x1F6A, 0x345, 0x1FAA}, {0x1F6B, 0x345, 0x1FAB}, {0x1F6C, 0x345, 0x1FAC},
    {0x1F6D, 0x345, 0x1FAD}, {0x1F6E, 0x345, 0x1FAE}, {0x1F6F, 0x345, 0x1FAF}, {0x1F70, 0x345, 0x1FB2},
    {0x1F74, 0x345, 0x1FC2}, {0x1F7C, 0x345, 0x1FF2}, {0x1FB6, 0x345, 0x1FB7}, {0x1FBF, 0x300, 0x1FCD},
    {0x1FBF, 0x301, 0x1FCE}, {0x1FBF, 0x342, 0x1FCF}, {0x1FC6, 0x345, 0x1FC7}, {0x1FF6, 0x345, 0x1FF7},
    {0x1FFE, 0x300, 0x1FDD}, {0x1FFE, 0x301, 0x1FDE}, {0x1FFE, 0x342, 0x1FDF}, {0x2190, 0x338, 0x219A},
    {0x2192, 0x338, 0x219B}, {0x2194, 0x338, 0x21AE}, {0x21D0, 0x338, 0x21CD}, {0x21D2, 0x338, 0x21CF},
    {0x21D4, 0x338, 0x21CE}, {0x2203, 0x338, 0x2204}, {0x2208, 0x338, 0x2209}, {0x220B, 0x338, 0x220C},
    {0x2223, 0x338, 0x2224}, {0x2225, 0x338, 0x2226}, {0x223C, 0x338, 0x2241}, {0x2243, 0x338, 0x2244},
    {0x2245, 0x338, 0x2247}, {0x2248, 0x338, 0x2249}, {0x224D, 0x338, 0x226D}, {0x2261, 0x338, 0x2262},
    {0x2264, 0x338, 0x2270}, {0x2265, 0x338, 0x2271}, {0x2272, 0x338, 0x2274}, {0x2273, 0x338, 0x2275},
    {0x2276, 0x338, 0x2278}, {0x2277, 0x338, 0x2279}, {0x227A, 0x338, 0x2280}, {0x227B, 0x338, 0x2281},
    {0x227C, 0x338, 0x22E0}, {0x227D, 0x338, 0x22E1}, {0x2282, 0x338, 0x2284}, {0x2283, 0x338, 0x2285},
    {0x2286, 0x338, 0x2288}, {0x2287, 0x338, 0x2289}, {0x2291, 0x338, 0x22E2}, {0x2292, 0x338, 0x22E3},
    {0x22A2, 0x338, 0x22AC}, {0x22A8, 0x338, 0x22AD}, {0x22A9, 0x338, 0x22AE}, {0x22AB, 0x338, 0x22AF},
    {0x22B2, 0x338, 0x22EA}, {0x22B3, 0x338, 0x22EB}, {0x22B4, 0x338, 0x22EC}, {0x22B5, 0x338, 0x22ED},
    {0x3046, 0x3099, 0x3094}, {0x304B, 0x3099, 0x304C}, {0x304D, 0x3099, 0x304E}, {0x304F, 0x3099, 0x3050},
    {0x3051, 0x3099, 0x3052}, {0x3053, 0x3099, 0x3054}, {0x3055, 0x3099, 0x3056}, {0x3057, 0x3099, 0x3058},
    {0x3059, 0x3099, 0x305A}, {0x305B, 0x3099, 0x305C}, {0x305D, 0x3099, 0x305E}, {0x305F, 0x3099, 0x3060},
    {0x3061, 0x3099, 0x3062}, {0x3064, 0x3099, 0x3065}, {0x3066, 0x3099, 0x3067}, {0x3068, 0x3099, 0x3069},
    {0x306F, 0x3099, 0x3070}, {0x306F, 0x309A, 0x3071}, {0x3072, 0x3099, 0x3073}, {0x3072, 0x309A, 0x3074},
    {0x3075, 0x3099, 0x3076}, {0x3075, 0x309A, 0x3077}, {0x3078, 0x3099, 0x3079}, {0x3078, 0x309A, 0x307A},
    {0x307B, 0x3099, 0x307C}, {0x307B, 0x309A, 0x307D}, {0x309D, 0x3099, 0x309E}, {0x30A6, 0x3099, 0x30F4},
    {0x30AB, 0x3099, 0x30AC}, {0x30AD, 0x3099, 0x30AE}, {0x30AF, 0x3099, 0x30B0}, {0x30B1, 0x3099, 0x30B2},
    {0x30B3, 0x3099, 0x30B4}, {0x30B5, 0x3099, 0x30B6}, {0x30B7, 0x3099, 0x30B8}, {0x30B9, 0x3099, 0x30BA},
    {0x30BB, 0x3099, 0x30BC}, {0x30BD, 0x3099, 0x30BE}, {0x30BF, 0x3099, 0x30C0}, {0x30C1, 0x3099, 0x30C2},
    {0x30C4, 0x3099, 0x30C5}, {0x30C6, 0x3099, 0x30C7}, {0x30C8, 0x3099, 0x30C9}, {0x30CF, 0x3099, 0x30D0},
    {0x30CF, 0x309A, 0x30D1}, {0x30D2, 0x3099, 0x30D3}, {0x30D2, 0x309A, 0x30D4}, {0x30D5, 0x3099, 0x30D6},
    {0x30D5, 0x309A, 0x30D7}, {0x30D8, 0x3099, 0x30D9}, {0x30D8, 0x309A, 0x30DA}, {0x30DB, 0x3099, 0x30DC},
    {0x30DB, 0x309A, 0x30DD}, {0x30EF, 0x3099, 0x30F7}, {0x30F0, 0x3099, 0x30F8}, {0x30F1, 0x3099, 0x30F9},
    {0x30F2, 0x3099, 0x30FA}, {0x30FD, 0x3099, 0x30FE}, {0x11099, 0x110BA, 0x1109A}, {0x1109B, 0x110BA, 0x1109C},
    {0x110A5, 0x110BA, 0x110AB}, {0x11131, 0x11127, 0x1112E}, {0x11132, 0x11127, 0x1112F}, {0x11347, 0x1133E, 0x1134B},
    {0x11347, 0x11357, 0x1134C}, {0x114B9, 0x114B0, 0x114BC}, {0x114B9, 0x114BA, 0x114BB}, {0x114B9, 0x114BD, 0x114BE},
    {0x115B8, 0x115AF, 0x115BA}, {0x115B9, 0x115AF, 0x115BB}, {0x11935, 0x11930, 0x11938},
};
/* END unicode_tables.py output */

static int in_ranges(uint32_t cp, const uint32_t (*ranges)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ranges[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ranges[lo][0] <= cp;
}

static CharClass unicode_class(uint32_t cp) {
    if (in_ranges(cp, unicode_letters, sizeof unicode_letters / sizeof *unicode_letters)) return LETTER;
    if (in_ranges(cp, unicode_numbers, sizeof unicode_numbers / sizeof *unicode_numbers)) return NUMBER;
    if (in_ranges(cp, unicode_white_space, sizeof unicode_white_space / sizeof *unicode_white_space)) return SPACE;
    return SYMBOL;
}

static int combining_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_combining_classes / sizeof *nfc_combining_classes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (nfc_combining_classes[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    int found = lo < sizeof nfc_combining_classes / sizeof *nfc_combining_classes && nfc_combining_classes[lo][0] <= cp;
    return found ? (int)nfc_combining_classes[lo][2] : 0;
}

static const uint32_t *find_decomposition(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_decompositions / sizeof *nfc_decompositions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (nfc_decompositions[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    int found = lo < sizeof nfc_decompositions / sizeof *nfc_decompositions && nfc_decompositions[lo][0] == cp;
    return found ? nfc_decompositions[lo] : NULL;
}

static uint32_t find_composition(uint32_t first, uint32_t second) {
    uint64_t key = (uint64_t)first << 32 | second;
    size_t lo = 0, hi = sizeof nfc_compositions / sizeof *nfc_compositions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (((uint64_t)nfc_compositions[mid][0] << 32 | nfc_compositions[mid][1]) < key) lo = mid + 1;
        else hi = mid;
    }
    int found = lo < sizeof nfc_compositions / sizeof *nfc_compositions && nfc_compositions[lo][0] == first &&
                nfc_compositions[lo][1] == second;
    return found ? nfc_compositions[lo][2] : 0;
}
