#!/usr/bin/env python3
"""make bench: decode and prefill speed and peak memory of ./run on three shapes.

Random-weight models of the stories15M, stories110M and TinyLlama-1.1B shapes
are written by ../shared/tools/gen_model.c (fp32, legacy layout) into a cache
folder ($BENCH_DIR, default /tmp/run-bench), with int8 copies made by export.py
and, for the shapes whose widths are whole blocks of 256, version 3 files of
random q4k and q6k blocks as Q4_K_M mixes them (q4k_model(): speed only, the
weights are not the fp32 ones).
For each model and thread count it runs ./run twice: a 200-token prompt with
one generated token (prefill tok/s), and a one-word prompt with N generated
tokens (decode tok/s); with all cores, three times, keeping the best figures.
Peak RSS is the largest of those runs. Figures are ./run's own (its stderr
line), so model loading is not counted.

Speculative decoding: stories110M fp32, greedy, all cores, plain beside its
int8 copy as draft (-k 6) and prompt lookup (-l 3), best of three alternated
runs; then the demo model plain beside its own draft on one thread and on all
cores, medians of 15 alternated runs.

Then a second table puts ./run beside llama2.c (karpathy/llama2.c's run.c for
fp32 and runq.c for int8, built with gcc -Ofast -march=haswell -fopenmp) on the
stories15M and stories110M shapes, 2 threads each (-j 2, OMP_NUM_THREADS=2),
./run with RUN_KERNELS=avx2 (or --kernels). llama2.c's source is not part of
this repository: set LLAMA2C to a folder holding its run.c and runq.c; without
it, the llama2.c columns are skipped (and say so). Both programs get the same
files (llama2.c's run.c reads the legacy fp32 file, runq.c export.py's version 2
int8 file: group size 64, or 32 for stories15M, whose dim 288 64 does not
divide), the same prompts and -n, -t 0; best of three runs each:
  prefill: the 200-word prompt ("hello world" x 100: BOS + 200 tokens), -n 201.
    ./run: its "prompt: N tokens, X tok/s" figure (all 201 tokens, batched).
    llama2.c: its "achieved tok/s", which counts the forward passes after the
    first (positions 1..200, here all prompt tokens, one at a time) over the
    time from the end of the first to the end of the run.
  decode: the prompt "Once" (BOS + 1 token), -n 256 (15M) or 128 (110M).
    llama2.c: "achieved tok/s" again: positions 1..n-1, each a forward pass
    and a sampled token.
    ./run: its "generated: G tokens, Y tok/s" figure, put on the same footing:
    (G - 1) forward passes over the time G / Y (the first token comes from the
    prompt's pass, which that time leaves out).

Last, the Llama 3 tokenizer (made by export.py from ../shared's tokenizer.json):
the time to load it and encode a 100 KB prompt (./run -m tokenize, wall clock,
best of three), and its memory: peak RSS minus that of ./run -h, beside the
file's size.

With --long, the 1.1B shape near the end of its context: int8 decode speed
after 100 positions and at 1950-2048, with all cores; then, on 2 threads, decode
speed at positions 1950-2048 (about 100 steps) and peak RSS with each KV cache
(-c fp32, -c int8) for the fp32 and the int8 weights: five rounds of one run
with each cache, the first alternating, and the medians of their speeds and of each round's
int8 / fp32 ratio (runs differ by 10-20% here, rounds share the drift); beside
them the largest peak RSS, the file, the cache (2048 positions) and the memory
limit (file + cache + 16 MB); last, the two caches in one process over one
mapping of the weights, taking turns token by token (PAIRED_DECODE_C).

Batch mode (batch_bench()): the int8 stories110M and 1.1B shapes (--quick: the
first only), 64 prompts of about 100 tokens with 128 generated each, at -b 1,
4, 8 and 16 on 2 threads, three rounds (forwards, backwards, forwards): the
median generated tok/s of the whole run, the median of each round's ratio to
its -b 1, the ratio to generate's decode speed, and peak RSS beside the file
and the KV pool.
Each decode row gives the bytes a step reads times its speed (GB/s) beside the
roof: a plain streaming read of the same file on as many threads (ROOF_C).
Then, with LLAMA_CPP, the 1.1B shape's decode and prefill beside llama-bench on
F32, Q8_0 and Q4_K_M GGUFs of the same weights (decode_beside_llama_cpp()).

Then, if LLAMA_CPP names a llama.cpp folder built with cmake, batch mode beside
its llama-batched-bench on the same weights as Q8_0 (llama_cpp_bench()).

usage: python3 tools/bench.py [--quick] [--long] [--long-only] [--kernels SET] [--compare-only] [--batch-only] [--beside-only]
  --quick         only the two small shapes
  --batch-only    only the batch mode tables, with each KV cache (-c fp32, -c int8),
                  and beside llama.cpp
  --long          also the 1.1B shape near position 2000 (above)
  --long-only     only that
  --kernels SET   run every ./run row with RUN_KERNELS=SET (plain, sse, avx2, avxvnni,
                  avx512, vnni; neon on ARM64); the comparison's default is avx2
  --compare-only  only the table beside llama2.c
  --beside-only   only the 1.1B shape's decode and prefill beside llama.cpp's llama-bench
"""
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tools/
SHARED = os.path.join(os.path.dirname(HERE), "shared")
CACHE = os.environ.get("BENCH_DIR", "/tmp/run-bench")
RUN = os.path.join(HERE, "run")
TOKENIZER = os.path.join(HERE, "tokenizer.bin")

# name: gen_model arguments (dim hidden layers heads kv_heads vocab seq_len seed), decode steps
# rounds of the --long comparison of the two KV caches
LONG_ROUNDS = 5
# rounds of the one-process comparison (about 100 steps with each cache each)
PAIRED_ROUNDS = 3
# rounds of the batch bench's runs at each -b
BATCH_ROUNDS = 3

SHAPES = [
    ("stories15M", "288 768 6 6 6 32000 256 1", 256),
    ("stories110M", "768 2048 12 12 12 32000 1024 1", 128),
    ("TinyLlama-1.1B", "2048 5632 22 32 4 32000 2048 1", 32),
]


# Shapes with vocabularies of their own, int8 only: name, (dim, hidden, layers, heads,
# kv_heads, vocab, head_size (0: dim / heads), q/k norm), decode steps, the tokenizer.json
# (in ../shared) they are run with
VOCAB_SHAPES = [
    ("Llama-3.2-1B", (2048, 8192, 16, 32, 8, 128256, 0, 0), 32, "llama3"),
    ("Qwen3-0.6B", (1024, 3072, 28, 16, 8, 151936, 128, 1), 32, "qwen3"),
]


def int8_model(name, shape):
    """A version 2 file (group size 64, tied classifier) of random int8 weights, with
    scales that keep the activations tame; Qwen3's head size and q/k norms from the
    shape. Written directly: an fp32 file of these vocabularies would be GBs."""
    import struct
    import numpy as np
    dim, hidden, layers, heads, kv_heads, vocab, head_size, qk_norm = shape
    path = os.path.join(CACHE, name + "_q80.bin")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE, exist_ok=True)
    print(f"bench: writing {path}", file=sys.stderr)
    hs = head_size or dim // heads
    q_dim, kv_dim, group = heads * hs, kv_heads * hs, 64
    header = struct.pack("<Ii7iBi", 0x616B3432, 2, dim, hidden, layers, heads, kv_heads, vocab, 8192, 1, group)
    header += b"\0" * (44 - len(header)) + struct.pack("<ff", 1e6 if qk_norm else 5e5, 1e-6) + b"\0" * 16
    header += struct.pack("<iBB", head_size, 0, qk_norm)
    rng = np.random.default_rng(26)
    matrices = [(vocab, dim)] + [m for m in ((q_dim, dim), (kv_dim, dim), (kv_dim, dim), (dim, q_dim), (hidden, dim),
                                             (dim, hidden), (hidden, dim)) for _ in range(layers)]
    with open(path + ".tmp", "wb") as f:
        f.write(header + b"\0" * (256 - len(header)))
        f.write(np.ones(2 * layers * dim + dim + (2 * layers * hs if qk_norm else 0), "<f4").tobytes())
        for rows, cols in matrices:
            f.write(rng.integers(-127, 128, size=rows * cols, dtype=np.int8).tobytes())
            f.write(np.full(rows * cols // group, 1 / (127 * cols ** 0.5), "<f4").tobytes())
    os.replace(path + ".tmp", path)
    return path


def shared_tokenizer(which):
    """../shared's tokenizer.json of Llama 3 or Qwen3 as run.c's tokenizer file, or None."""
    json_file = os.path.join(SHARED, "tokenizer", which, "tokenizer.json")
    if not os.path.exists(json_file):
        return None
    os.makedirs(CACHE, exist_ok=True)
    tokenizer = os.path.join(CACHE, f"tokenizer_{which}.bin")
    if not os.path.exists(tokenizer):
        subprocess.run([python_with_numpy(), os.path.join(HERE, "export.py"), tokenizer, "--tokenizer", json_file],
                       check=True, stderr=subprocess.DEVNULL)
    return tokenizer


def python_with_numpy():
    for python in ("python3", "/usr/bin/python3"):
        if subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode == 0:
            return python
    sys.exit("bench: export.py needs a python3 with numpy for the int8 models")


def models(name, args):
    """The fp32 and int8 files of one shape, made once."""
    os.makedirs(CACHE, exist_ok=True)
    gen = os.path.join(CACHE, "gen_model")
    if not os.path.exists(gen):
        subprocess.run(["cc", "-O2", "-o", gen, os.path.join(SHARED, "tools", "gen_model.c"), "-lm"], check=True)
    fp32 = os.path.join(CACHE, name + ".bin")
    int8 = os.path.join(CACHE, name + "_q80.bin")
    if not os.path.exists(fp32):
        print(f"bench: writing {fp32}", file=sys.stderr)
        subprocess.run([gen, fp32 + ".tmp"] + args.split(), check=True)
        os.replace(fp32 + ".tmp", fp32)
    if not os.path.exists(int8):
        print(f"bench: writing {int8}", file=sys.stderr)
        subprocess.run([python_with_numpy(), os.path.join(HERE, "export.py"), int8, "--bin", fp32, "--version", "2"],
                       check=True, stdout=subprocess.DEVNULL)
    return fp32, int8


def q4k_model(name, int8):
    """A version 3 copy of the int8 file with random blocks of the types llama.cpp's
    Q4_K_M gives each matrix (q6k for the classifier and for wv and w2 in the layers
    export.py's use_more_bits picks, q4k for the rest; fp16 d and dmin of 2^-14, random
    scales and values), for speed only; None when a width is not whole blocks of 256."""
    import struct
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from export import use_more_bits
    with open(int8, "rb") as f:
        header = bytearray(f.read(256))
    dim, hidden, layers, heads, kv_heads, vocab = struct.unpack_from("<6i", header, 8)
    if dim % 256 or hidden % 256 or header[68:74] != bytes(6):  # whole blocks; no head size or flags of its own
        return None
    path = os.path.join(CACHE, name + "_q4km.bin")
    if os.path.exists(path):
        return path
    print(f"bench: writing {path}", file=sys.stderr)
    kv_dim = dim // heads * kv_heads
    shared = bool(header[36])
    matrices = [("embedding", -1, vocab, dim)] + [
        (kind, layer, rows, cols)
        for kind, rows, cols in (("wq", dim, dim), ("wk", kv_dim, dim), ("wv", kv_dim, dim), ("wo", dim, dim),
                                 ("w1", hidden, dim), ("w2", dim, hidden), ("w3", hidden, dim))
        for layer in range(layers)]
    if not shared:
        matrices.append(("classifier", -1, vocab, dim))

    def is_q6k(kind, layer, rows, cols):
        more = kind == "classifier" or kind == "embedding" and shared or \
            kind in ("wv", "w2") and use_more_bits(layer, layers)
        # export.py would keep an odd number of q6k blocks as int8 (alignment); no bench shape has one
        assert not more or rows * cols // 256 % 2 == 0
        return more

    types = [3 if is_q6k(*m) else 2 for m in matrices]
    rng = np.random.default_rng(26)
    struct.pack_into("<i", header, 4, 3)  # version 3
    struct.pack_into("<i", header, 37, 0)  # group size: each matrix's own
    with open(path + ".tmp", "wb") as f:
        f.write(header + b"".join(struct.pack("<ii", t, 0) for t in types))
        f.write(np.ones(2 * layers * dim + dim, "<f4").tobytes())
        for (kind, layer, rows, cols), t in zip(matrices, types):
            blocks = rng.integers(0, 256, size=(rows * cols // 256, 144 if t == 2 else 210), dtype=np.uint8)
            if t == 2:
                blocks[:, 0:4] = np.frombuffer(struct.pack("<HH", 0x0400, 0x0400), np.uint8)
            else:
                blocks[:, 208:210] = np.frombuffer(struct.pack("<H", 0x0400), np.uint8)
            f.write(blocks.tobytes())
    os.replace(path + ".tmp", path)
    return path


def drop_from_page_cache(path):
    """Has the next run read the file from disk, as after a reboot, so that how the
    kernel holds it (2 MB pieces where it can, with run.c's MADV_HUGEPAGE) does not
    depend on how this bench or an earlier one wrote or read it (docs/performance.md)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_measured(cmd, env):
    """Runs cmd under GNU time; returns (exit status, its stderr, peak RSS in MB).
    Not os.wait4's figure: a child forked from this Python starts with the Python's
    pages (numpy and the arrays that wrote the models), and its peak counts them."""
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=env, text=True)
    err, _, kb = p.stderr.rstrip("\n").rpartition("\n")
    return p.returncode, err, int(kb) / 1024 if kb.isdigit() else 0.0


def run(model, threads, prompt, steps, kernels=None, fatal=True, extra=(), tokenizer=TOKENIZER):
    """Runs ./run (with RUN_KERNELS=kernels if given, and `extra` flags); returns
    (prompt tok/s, decode tok/s, peak RSS in MB, generated tokens), or, when it
    fails and not fatal, its error message."""
    cmd = [RUN, model, "-z", tokenizer, "-t", "0", "-j", str(threads), "-n", str(steps), "-i", prompt] + list(extra)
    env = dict(os.environ, RUN_KERNELS=kernels) if kernels else None
    status, err, rss = run_measured(cmd, env)
    if status != 0:
        if not fatal:
            return err.strip()
        sys.exit(f"bench: {' '.join(cmd[:2])} failed: {err.strip()}")
    m = re.search(r"prompt: (\d+) tokens, ([\d.]+) tok/s; generated: (\d+) tokens, ([\d.]+) tok/s", err)
    global last_acceptance
    drafted = re.search(r"drafted: (\d+), accepted: (\d+)", err)
    last_acceptance = int(drafted.group(2)) / max(1, int(drafted.group(1))) if drafted else None
    return float(m.group(2)), float(m.group(4)), rss, int(m.group(3))


last_acceptance = None  # of the last run() with a draft: accepted / drafted


BATCH_SIZES = (1, 4, 8, 16)
BATCH_PROMPTS, BATCH_WORDS, BATCH_NEW = 64, 95, 128


def batch_prompts(count):
    """The first `count` of the batch bench's prompts (BOS and 95 words of a small
    list, each prompt its own, 128 tokens to generate), written to a file; its path."""
    import json
    import random
    rng = random.Random(25)
    words = ("the a cat dog sat on mat ran far away house tree big small red blue green happy sad day night sun "
             "moon star sky water fire earth wind").split()
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, "batch_prompts.jsonl" if count == BATCH_PROMPTS else f"batch_prompts_{count}.jsonl")
    with open(path, "w") as f:
        for _ in range(count):
            f.write(json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(BATCH_WORDS)), "n": BATCH_NEW}) + "\n")
    return path


def batch_bench(kernels, shapes=("stories110M", "TinyLlama-1.1B"), cache="fp32"):
    """Batch mode: 64 prompts of about 100 tokens (BOS and 95 words of a small
    list, each prompt its own), 128 generated tokens each, greedy, 2 threads, at
    -b 1, 4, 8 and 16, the int8 weights of each shape: the generated tokens per
    second of the whole run (prompts included, ./run's summary line) and its
    peak RSS beside the file, the KV pool (-b sequences of the longest request)
    and the limit (file plus pool, plus 5%). BATCH_ROUNDS rounds of the four
    runs, in turn forwards and backwards (the host's memory bandwidth drifts over
    minutes, and it sets -b 1's speed more than the others'): the median speed,
    the median of each round's ratio to its own -b 1, the largest peak RSS.
    Beside them the ratio to generate's single-stream decode speed (a one-word
    prompt, 128 tokens; the best of three runs)."""
    path = batch_prompts(BATCH_PROMPTS)
    threads = 2
    print(f"batch mode: {BATCH_PROMPTS} prompts of {BATCH_WORDS + 1} tokens, {BATCH_NEW} generated each, greedy, "
          f"{threads} threads, -c {cache}; {BATCH_ROUNDS} rounds, medians:")
    print(f"  {'shape':<16} {'-b':>3} {'tok/s':>8} {'x -b 1':>7} {'x generate':>11} {'peak RSS MB':>12} {'file MB':>8}"
          f" {'pool MB':>8} {'limit MB':>9}")
    for name, args, _ in SHAPES:
        if name not in shapes:
            continue
        _, int8 = models(name, args)
        single = max(run(int8, threads, "Once", BATCH_NEW, kernels)[1] for _ in range(3))
        dim, _, layers, heads, kv_heads = (int(a) for a in args.split()[:5])
        position_bytes = 2 * layers * (dim // heads * kv_heads) * (4 if cache == "fp32" else 1 + 4 / (dim // heads))
        rates, rss, pool_positions = {b: [] for b in BATCH_SIZES}, dict.fromkeys(BATCH_SIZES, 0.0), {}
        for round in range(BATCH_ROUNDS):
            for b in BATCH_SIZES if round % 2 == 0 else BATCH_SIZES[::-1]:
                cmd = [RUN, int8, "-z", TOKENIZER, "-m", "batch", "-f", path, "-b", str(b), "-j", str(threads),
                       "-t", "0", "-c", cache]
                env = dict(os.environ, RUN_KERNELS=kernels) if kernels else None
                status, err, peak = run_measured(cmd, env)
                m = re.search(r"generated in [\d.]+ s, ([\d.]+) tok/s; -b \d+, KV pool (\d+) positions", err)
                if status != 0 or not m:
                    sys.exit(f"bench: {' '.join(cmd)} failed: {err.strip()}")
                rates[b].append(float(m.group(1)))
                rss[b], pool_positions[b] = max(rss[b], peak), int(m.group(2))
                print(f"  {name} -b {b}, round {round + 1}: {rates[b][-1]:.1f} tok/s, {peak:.1f} MB", file=sys.stderr)
        size = os.path.getsize(int8) / 2**20
        ratios = {b: [r / r1 for r, r1 in zip(rates[b], rates[BATCH_SIZES[0]])] for b in BATCH_SIZES}
        for b in BATCH_SIZES:
            rate = statistics.median(rates[b])
            pool = pool_positions[b] * position_bytes / 2**20
            print(f"  {name:<16} {b:>3} {rate:>8.1f} {statistics.median(ratios[b]):>7.2f} {rate / single:>11.2f}"
                  f" {rss[b]:>12.1f} {size:>8.1f} {pool:>8.1f} {(size + pool) * 1.05:>9.1f}", flush=True)
        print(f"  ({name} int8, generate: {single:.1f} tok/s decode; x -b 1 over the rounds: "
              + ", ".join(f"-b {b} {min(ratios[b]):.2f}-{max(ratios[b]):.2f}" for b in BATCH_SIZES[1:]) + ")")


def gguf_model(name, fp32, kind="Q8_0"):
    """The fp32 weights of one shape (read by export.py's BinSource) as a GGUF
    of llama.cpp's Q8_0 (blocks of 32 int8 values and an fp16 scale: 1.0625
    bytes a weight, as export.py's int8 with groups of 64) or F32, written once by
    tests/gguf_reference.py (llama.cpp's reference quantizer, its converter's
    metadata and Llama 2 vocabulary, from ../shared's tokenizer.model). The
    classifier is the embedding's, as in the file; the query and key rows are
    already in the order llama.cpp's rotation pairs them (run.c's)."""
    path = os.path.join(CACHE, f"{name}_{kind.lower()}.gguf")
    if os.path.exists(path):
        return path
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "tests"))
    from export import BinSource
    from gguf_reference import gguf_encode, gguf_llama_kv, llama2_vocab_kv, write_gguf
    print(f"bench: writing {path}", file=sys.stderr)
    source = BinSource(fp32)
    c = source.config
    if not c.shared_classifier:
        sys.exit(f"bench: {fp32}: an unshared classifier; gguf_model() writes shared ones only")

    def tensor(gguf_name, name, layer=None):
        w = source.tensor(name, layer)
        form = "F32" if w.ndim == 1 else kind
        return gguf_name, w.shape, form, gguf_encode(w, form)

    names = (("attn_norm", "attention_norm"), ("attn_q", "wq"), ("attn_k", "wk"), ("attn_v", "wv"),
             ("attn_output", "wo"), ("ffn_norm", "ffn_norm"), ("ffn_gate", "w1"), ("ffn_up", "w3"),
             ("ffn_down", "w2"))
    tensors = [tensor("token_embd.weight", "tok_embeddings")]
    tensors += [tensor(f"blk.{layer}.{short}.weight", ours, layer) for layer in range(c.n_layers)
                for short, ours in names]
    tensors.append(tensor("output_norm.weight", "norm"))
    config = {"hidden_size": c.dim, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
              "num_hidden_layers": c.n_layers, "intermediate_size": c.hidden_dim,
              "max_position_embeddings": c.seq_len, "rope_theta": c.rope_theta, "rms_norm_eps": c.norm_eps,
              "vocab_size": c.vocab_size}
    try:
        vocab_kv = llama2_vocab_kv(os.path.join(SHARED, "tokenizer", "llama2.model"))
    except ImportError:
        sys.exit("bench: writing the GGUF's vocabulary for llama.cpp needs sentencepiece (python3-sentencepiece)")
    write_gguf(path + ".tmp", gguf_llama_kv(config, {"F32": 0, "Q8_0": 7}[kind]) + vocab_kv, tensors)
    os.replace(path + ".tmp", path)
    return path


def llama_cpp_bench(kernels, shapes=("stories110M", "TinyLlama-1.1B"), rounds=2):
    """Batch mode beside llama.cpp's batched generation, one wave of B prompts
    (96 tokens, 128 generated each) at B = 1, 4, 8, 16, 2 threads: ./run -m
    batch on the first B of batch_bench()'s prompts with -b B (the default
    -c fp32) and the int8 weights, and llama-batched-bench -npp 96 -ntg 128
    -npl B -fa (flash attention, its faster setting here; its KV cache is
    fp16) on the same fp32 weights in Q8_0; for both the generated tokens over
    the whole run's time, prompts included, and for llama.cpp also over its
    generation phase alone (S_TG). The best of `rounds` alternated rounds.
    $LLAMA_CPP: a llama.cpp folder built with cmake
    (build/bin/llama-batched-bench); unset, this table is skipped and says so."""
    import json
    binary, reason = llama_cpp_folder("llama-batched-bench")
    if not binary:
        print(f"batch mode beside llama.cpp: skipped ({reason}; LLAMA_CPP=/path/to/llama.cpp, built with cmake)")
        return
    commit = subprocess.run(["git", "-C", os.environ["LLAMA_CPP"], "log", "-1", "--format=%h"], capture_output=True,
                            text=True)
    threads, new, sizes = 2, BATCH_NEW, ",".join(str(b) for b in BATCH_SIZES)
    print(f"batch mode beside llama.cpp {commit.stdout.strip() or '(no git)'} (llama-batched-bench -fa), one wave of B "
          f"prompts of {BATCH_WORDS + 1} tokens, {new} generated each, {threads} threads, best of {rounds}:")
    print(f"  {'shape':<16} {'B':>3} {'./run tok/s':>12} {'llama.cpp tok/s':>16} {'ratio':>6} {'llama.cpp S_TG':>15}")
    for name, args, _ in SHAPES:
        if name not in shapes:
            continue
        fp32, int8 = models(name, args)
        gguf_path = gguf_model(name, fp32)
        ours, theirs, theirs_tg = {}, {}, {}
        for _ in range(rounds):
            for b in BATCH_SIZES:
                cmd = [RUN, int8, "-z", TOKENIZER, "-m", "batch", "-f", batch_prompts(b), "-b", str(b),
                       "-j", str(threads), "-t", "0"]
                p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env=dict(os.environ, RUN_KERNELS=kernels) if kernels else None)
                m = re.search(r"generated in [\d.]+ s, ([\d.]+) tok/s", p.stderr)
                if p.returncode != 0 or not m:
                    sys.exit(f"bench: {' '.join(cmd)} failed: {p.stderr.strip()}")
                ours[b] = max(ours.get(b, 0.0), float(m.group(1)))
            cmd = [binary, "-m", gguf_path, "-c", str(max(BATCH_SIZES) * (BATCH_WORDS + 1 + new)), "-b", "2048",
                   "-ub", "512", "-npp", str(BATCH_WORDS + 1), "-ntg", str(new), "-npl", sizes, "-t", str(threads),
                   "-tb", str(threads), "-fa", "--output-format", "jsonl"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
            if p.returncode != 0 or len(rows) != len(BATCH_SIZES):
                sys.exit(f"bench: {' '.join(cmd)} failed: {p.stderr.strip()[-1000:]}")
            for row in rows:
                b = row["pl"]
                theirs[b] = max(theirs.get(b, 0.0), b * row["tg"] / row["t"])
                theirs_tg[b] = max(theirs_tg.get(b, 0.0), row["speed_tg"])
        for b in BATCH_SIZES:
            print(f"  {name:<16} {b:>3} {ours[b]:>12.1f} {theirs[b]:>16.1f} {ours[b] / theirs[b]:>6.2f}"
                  f" {theirs_tg[b]:>15.1f}", flush=True)


def llama_cpp_folder(program):
    """$LLAMA_CPP/$LLAMA_CPP_BUILD/bin/program (LLAMA_CPP_BUILD: default build), or None and why not."""
    folder = os.environ.get("LLAMA_CPP")
    binary = os.path.join(folder or "", os.environ.get("LLAMA_CPP_BUILD", "build"), "bin", program)
    if not folder:
        return None, "LLAMA_CPP is not set"
    return (binary, None) if os.path.exists(binary) else (None, f"{binary} not found")


def decode_beside_llama_cpp(kernels, name="TinyLlama-1.1B", rounds=5, steps=32):
    """Decode and prefill of one shape beside llama.cpp's llama-bench, 2 threads: ./run
    on its fp32, int8 (groups of 64) and Q4_K_M files, llama.cpp on F32, Q8_0 and
    Q4_K_M GGUFs of the same fp32 weights (Q4_K_M: llama-quantize's, which ./run
    imports as it is, so both read the same blocks). Decode: the prompt "Once" and
    `steps` tokens (llama-bench -n steps); prefill: the 200-word prompt (-p 201).
    `rounds` rounds, the two programs alternating and which goes first alternating;
    medians and spreads, and each one's GB/s against the streaming-read roof of its
    own file. Skipped (and says why) without llama-bench (LLAMA_CPP)."""
    import json
    bench_binary, why = llama_cpp_folder("llama-bench")
    quantize, why_q = llama_cpp_folder("llama-quantize")
    if not bench_binary or not quantize:
        print(f"decode beside llama.cpp: skipped ({why or why_q}; LLAMA_CPP=/path/to/llama.cpp, built with cmake)")
        return
    args = dict((n, a) for n, a, _ in SHAPES)[name]
    fp32, int8 = models(name, args)
    f32_gguf, q8_gguf = gguf_model(name, fp32, "F32"), gguf_model(name, fp32, "Q8_0")
    q4_gguf = os.path.join(CACHE, name + "_q4_k_m.gguf")
    if not os.path.exists(q4_gguf):
        subprocess.run([quantize, f32_gguf, q4_gguf + ".tmp", "Q4_K_M", "2"], check=True, capture_output=True)
        os.replace(q4_gguf + ".tmp", q4_gguf)
    q4_ours = os.path.join(CACHE, name + "_q4_k_m.bin")
    if not os.path.exists(q4_ours):
        subprocess.run([python_with_numpy(), os.path.join(HERE, "export.py"), q4_ours + ".tmp", "--gguf", q4_gguf,
                        "--version", "3"], check=True, capture_output=True)
        os.replace(q4_ours + ".tmp", q4_ours)
    commit = subprocess.run(["git", "-C", os.environ["LLAMA_CPP"], "log", "-1", "--format=%h"], capture_output=True,
                            text=True).stdout.strip()
    threads, prompt = 2, " ".join(["hello world"] * 100)
    print(f"\n{name} beside llama.cpp {commit or '(no git)'} llama-bench ({os.path.dirname(bench_binary)}), "
          f"{threads} threads, ./run kernels {kernels or 'the best the CPU has'}; CPU: {cpu_name()}; medians of {rounds} "
          f"alternated rounds (spread); GB/s = tok/s x bytes a step reads, roof = a streaming read of the file")
    print(f"  {'weights':<16} {'decode ./run':>13} {'llama.cpp':>17} {'ratio':>6} {'./run of roof':>14} "
          f"{'llama of roof':>14} {'prefill ./run':>17} {'llama.cpp':>17} {'ratio':>6}")
    for label, ours_file, theirs_file in (("int8 / Q8_0", int8, q8_gguf), ("fp32 / F32", fp32, f32_gguf),
                                          ("Q4_K_M", q4_ours, q4_gguf)):
        got = {"ours_d": [], "ours_p": [], "theirs_d": [], "theirs_p": []}
        for r in range(rounds):
            for who in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                if who == "ours":
                    prefill, _, _, _ = run(ours_file, threads, prompt, 201, kernels)
                    _, decode, _, _ = run(ours_file, threads, "Once", steps, kernels)
                else:
                    cmd = [bench_binary, "-m", theirs_file, "-p", "201", "-n", str(steps), "-t", str(threads),
                           "-r", "1", "-o", "jsonl"]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
                    if p.returncode != 0 or len(rows) != 2:
                        sys.exit(f"bench: {' '.join(cmd)} failed: {p.stderr.strip()[-1000:]}")
                    prefill = next(row["avg_ts"] for row in rows if row["n_prompt"] > 0)
                    decode = next(row["avg_ts"] for row in rows if row["n_gen"] > 0)
                got[who + "_d"].append(decode)
                got[who + "_p"].append(prefill)
        med = {k: statistics.median(v) for k, v in got.items()}
        spread = {k: f"{min(v):.1f}-{max(v):.1f}" for k, v in got.items()}
        ours_share = med["ours_d"] * bytes_per_token(ours_file) / 1e9 / streaming_roof(ours_file, threads)
        theirs_share = med["theirs_d"] * os.path.getsize(theirs_file) / 1e9 / streaming_roof(theirs_file, threads)
        print(f"  {label:<16} {med['ours_d']:>5.1f} ({spread['ours_d']:>9}) {med['theirs_d']:>5.1f} "
              f"({spread['theirs_d']:>9}) {med['ours_d'] / med['theirs_d']:>5.2f}x {ours_share:>14.0%} "
              f"{theirs_share:>14.0%} {med['ours_p']:>6.1f} ({spread['ours_p']:>11}) {med['theirs_p']:>5.1f} "
              f"({spread['theirs_p']:>11}) {med['ours_p'] / med['theirs_p']:>5.2f}x", flush=True)


def speculative_bench(kernels):
    """stories110M fp32, greedy, all cores: plain decoding beside speculative
    decoding with the int8 copy as draft and with prompt lookup (best of three,
    alternated). The weights are random, and such a model's text repeats, which
    flatters both drafts' acceptance next to a trained model's."""
    fp32, int8 = models(*SHAPES[1][:2])
    cores = os.cpu_count() or 1
    setups = [("plain", ()), ("draft: int8 copy, -k 6", ("-d", int8, "-k", "6")), ("prompt lookup, -l 3", ("-l", "3"))]
    best = {name: (0.0, None) for name, _ in setups}
    for _ in range(3):
        for name, extra in setups:
            decode = run(fp32, cores, "Once", 256, kernels, extra=extra)[1]
            if decode > best[name][0]:
                best[name] = (decode, last_acceptance)
    plain = best["plain"][0]
    print(f"speculative decoding, stories110M fp32, greedy, {cores} threads, 256 positions (the text is the same in each):")
    for name, _ in setups:
        decode, acceptance = best[name]
        rate = f", {100 * acceptance:.0f}% of drafted tokens accepted" if acceptance is not None else ""
        print(f"  {name:<24} decode {decode:6.1f} tok/s ({decode / plain:.2f}x){rate}")


def demo_speculative_bench(kernels):
    """The demo model, greedy, its story from "Once upon a time", plain beside
    its draft (demo/draft.bin, -k by default), on one thread and on all cores:
    medians of 15 alternated runs, since a run decodes its 162 tokens in about
    15 ms and single runs scatter."""
    model, draft, tokenizer = (os.path.join(HERE, "demo", f) for f in ("model.bin", "draft.bin", "tokenizer.bin"))
    print("speculative decoding, demo model with its draft, greedy (medians of 15 alternated runs):")
    for threads in sorted({1, os.cpu_count() or 1}):
        plain, drafted = [], []
        for _ in range(15):
            plain.append(run(model, threads, "Once upon a time", 256, kernels, tokenizer=tokenizer)[1])
            drafted.append(run(model, threads, "Once upon a time", 256, kernels, extra=("-d", draft),
                               tokenizer=tokenizer)[1])
        p, d = statistics.median(plain), statistics.median(drafted)
        print(f"  {threads} thread(s): plain {p:7.0f} tok/s, with its draft {d:7.0f} tok/s ({d / p:.2f}x),"
              f" {100 * last_acceptance:.0f}% of drafted tokens accepted")


def build_llama2c():
    """llama2.c's run.c and runq.c from $LLAMA2C, built into the cache folder;
    returns {"fp32": binary, "int8": binary}, or the reason they are not there."""
    folder = os.environ.get("LLAMA2C")
    if not folder:
        return "LLAMA2C is not set (LLAMA2C=/path/to/llama2.c, a folder holding its run.c and runq.c)"
    binaries = {}
    for kind, source in (("fp32", "run.c"), ("int8", "runq.c")):
        src = os.path.join(folder, source)
        if not os.path.exists(src):
            return f"{src} not found (LLAMA2C={folder})"
        out = os.path.join(CACHE, "llama2c_" + source[:-2])
        os.makedirs(CACHE, exist_ok=True)
        p = subprocess.run(["gcc", "-Ofast", "-march=haswell", "-fopenmp", "-o", out, src, "-lm"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return f"gcc -Ofast -march=haswell -fopenmp {src} failed: {p.stderr.strip()[-500:]}"
        binaries[kind] = out
    return binaries


def run_llama2c(binary, model, prompt, steps):
    """Runs llama2.c on 2 threads; returns its "achieved tok/s"."""
    cmd = [binary, model, "-z", TOKENIZER, "-t", "0", "-n", str(steps), "-i", prompt]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="2"))
    m = re.search(r"achieved tok/s: ([\d.]+)", p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"bench: {' '.join(cmd[:2])} failed: {p.stderr.strip()}")
    return float(m.group(1))


def compare(prompt, kernels):
    """./run (RUN_KERNELS=kernels, 2 threads) beside llama2.c (2 threads), best of 3."""
    llama2c = build_llama2c()
    if isinstance(llama2c, str):
        print(f"bench: llama2.c rows skipped: {llama2c}", file=sys.stderr)
    rows, failure = [], None
    for name, args, steps in SHAPES[:2]:
        fp32, int8 = models(name, args)
        for kind, model in (("fp32", fp32), ("int8", int8)):
            ours_decode = ours_prefill = theirs_decode = theirs_prefill = None
            # the two programs' runs alternate, so that both see the same load
            for _ in range(3):
                if failure is None:
                    prefill_run = run(model, 2, prompt, 201, kernels, fatal=False)
                    decode_run = run(model, 2, "Once", steps, kernels, fatal=False)
                    if isinstance(prefill_run, str) or isinstance(decode_run, str):
                        failure = prefill_run if isinstance(prefill_run, str) else decode_run
                        ours_decode = ours_prefill = None
                    else:
                        # decode: forward passes per second, as llama2.c counts them
                        generated, rate = decode_run[3], decode_run[1]
                        if generated != steps - 1:
                            print(f"bench: note: ./run stopped {name} {kind} after {generated} of {steps - 1} tokens"
                                  " (EOS or BOS), so its decode figure covers fewer positions", file=sys.stderr)
                        decode = (generated - 1) * rate / generated if generated > 1 else 0.0
                        ours_prefill = max(ours_prefill or 0, prefill_run[0])
                        ours_decode = max(ours_decode or 0, decode)
                if not isinstance(llama2c, str):
                    binary = llama2c[kind]
                    theirs_prefill = max(theirs_prefill or 0, run_llama2c(binary, model, prompt, 201))
                    theirs_decode = max(theirs_decode or 0, run_llama2c(binary, model, "Once", steps))
            rows.append((name, kind, ours_decode, ours_prefill, theirs_decode, theirs_prefill))
            print(f"  {name} {kind} beside llama2.c: done", file=sys.stderr)
    if failure:
        print(f"bench: ./run with RUN_KERNELS={kernels} failed ({failure}): its columns are empty", file=sys.stderr)

    def cell(x, width, digits=1):
        return f"{x:>{width}.{digits}f}" if x else f"{'-':>{width}}"

    print()
    print(f"./run (RUN_KERNELS={kernels}, -j 2) beside llama2.c (gcc -Ofast -march=haswell -fopenmp, "
          f"OMP_NUM_THREADS=2); tok/s, best of 3; prefill: 200-token prompt")
    print(f"{'shape':<12} {'weights':<7} {'ours decode':>11} {'ours prefill':>12} {'llama2.c decode':>15}"
          f" {'llama2.c prefill':>16} {'decode ratio':>12} {'prefill ratio':>13}")
    for name, kind, od, op, td, tp in rows:
        print(f"{name:<12} {kind:<7} {cell(od, 11)} {cell(op, 12)} {cell(td, 15)} {cell(tp, 16)}"
              f" {cell(od and td and od / td, 12, 2)} {cell(op and tp and op / tp, 13, 2)}")
    if isinstance(llama2c, str):
        print(f"(llama2.c columns skipped: {llama2c})")


def tokenizer_bench():
    tokenizer = shared_tokenizer("llama3")
    if tokenizer is None:
        print(f"Llama 3 tokenizer: skipped ({SHARED}/tokenizer/llama3/tokenizer.json not found)")
        return
    model, _ = models("llama3-vocab", "64 128 1 4 4 128256 256 1")
    paragraph = ("Once upon a time, in a village by the sea, there lived a girl who loved numbers: 3.14159, "
                 "2718, 42! She said, \"I'm sure we'll find it.\" Ελληνικά, Русский, 日本語のテキスト, "
                 "한국어, العربية, हिन्दी 😀🇫🇷\n\n    def f(x):\n        return x + 1\r\n")
    prompt = (paragraph * (100_000 // len(paragraph.encode()) + 1)).encode()[:100_000].decode(errors="ignore")

    def seconds(cmd):
        start = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if p.returncode != 0:
            sys.exit(f"bench: {' '.join(cmd[:2])} failed: {p.stderr.decode().strip()}")
        return time.perf_counter() - start

    best = min(seconds([RUN, model, "-z", tokenizer, "-m", "tokenize", "-i", prompt]) for _ in range(3))
    rss = peak_rss([RUN, model, "-z", tokenizer, "-m", "tokenize", "-i", ""])
    base = peak_rss([RUN, "-h"])
    size = os.path.getsize(tokenizer) / 2**20
    print(f"Llama 3 tokenizer: load + encode a 100 KB prompt {best:.3f} s (best of 3); "
          f"memory {rss - base:.1f} MB (peak RSS {rss:.1f} MB minus {base:.1f} MB of ./run -h), file {size:.1f} MB")


def peak_rss(cmd):
    """Peak RSS in MB of cmd alone (run_measured())."""
    return run_measured(cmd, None)[2]


def main():
    quick, long, compare_only = "--quick" in sys.argv, "--long" in sys.argv, "--compare-only" in sys.argv
    long_only = "--long-only" in sys.argv
    kernels = None
    if "--kernels" in sys.argv:
        i = sys.argv.index("--kernels")
        if i + 1 >= len(sys.argv):
            sys.exit("bench: --kernels needs a kernel set (plain, sse, avx2, avxvnni, avx512, vnni, neon)")
        kernels = sys.argv[i + 1]
    if not os.path.exists(os.path.join(SHARED, "tools", "gen_model.c")):
        sys.exit(f"bench: {SHARED}/tools/gen_model.c not found")
    prompt = " ".join(["hello world"] * 100)  # 201 tokens with BOS
    if compare_only:
        compare(prompt, kernels or "avx2")
        return
    if "--beside-only" in sys.argv:
        decode_beside_llama_cpp(kernels)
        return
    if "--batch-only" in sys.argv:
        for cache in ("fp32", "int8"):
            batch_bench(kernels, cache=cache)
        llama_cpp_bench(kernels)
        return
    if kernels:
        print(f"./run with RUN_KERNELS={kernels}")
    cores = os.cpu_count() or 1
    if long_only:
        long_context(cores, kernels)
        return
    rows = []
    for name, args, steps in SHAPES[:2] if quick else SHAPES:
        fp32, int8 = models(name, args)
        q4k = q4k_model(name, int8)
        for kind, model in (("fp32", fp32), ("int8", int8)) + ((("Q4_K_M", q4k),) if q4k else ()):
            drop_from_page_cache(model)
            for threads in sorted({cores, 1}, reverse=True):
                # all cores: best of three runs, since on a shared machine the
                # other tenants' load moves single runs by 10-20%
                prefill = decode = rss = 0
                for _ in range(3 if threads == cores else 1):
                    prefill_run, _, rss1, _ = run(model, threads, prompt, 201, kernels)
                    _, decode_run, rss2, _ = run(model, threads, "Once", steps, kernels)
                    prefill, decode, rss = max(prefill, prefill_run), max(decode, decode_run), max(rss, rss1, rss2)
                size = os.path.getsize(model) / 2**20
                dim, _, layers, heads, kv_heads = (int(a) for a in args.split()[:5])
                kv_cache = 2 * layers * 201 * (dim // heads * kv_heads) * 4 / 2**20  # K and V, fp32, 201 positions
                moved = decode * bytes_per_token(model) / 1e9
                roof = streaming_roof(model, threads)
                rows.append((name, kind, threads, decode, prefill, rss, size, size + kv_cache + 16, moved, roof))
                print(f"  {name} {kind} {threads} thread(s): decode {decode:.1f} ({moved:.1f} GB/s, "
                      f"roof {roof:.1f}), prefill {prefill:.1f} tok/s", file=sys.stderr)
    for name, shape, steps, which in [] if quick else VOCAB_SHAPES:
        tokenizer = shared_tokenizer(which)
        if tokenizer is None:
            print(f"  {name}: skipped (no ../shared/tokenizer/{which}/tokenizer.json)", file=sys.stderr)
            continue
        model = int8_model(name, shape)
        prefill = decode = rss = 0
        for _ in range(3):
            prefill_run, _, rss1, _ = run(model, cores, prompt, 201, kernels, tokenizer=tokenizer)
            _, decode_run, rss2, _ = run(model, cores, "Once", steps, kernels, tokenizer=tokenizer)
            prefill, decode, rss = max(prefill, prefill_run), max(decode, decode_run), max(rss, rss1, rss2)
        size = os.path.getsize(model) / 2**20
        dim, _, layers, heads, kv_heads, _, head_size, _ = shape
        kv_cache = 2 * layers * 201 * ((head_size or dim // heads) * kv_heads) * 4 / 2**20
        moved, roof = decode * bytes_per_token(model) / 1e9, streaming_roof(model, cores)
        rows.append((name, "int8", cores, decode, prefill, rss, size, size + kv_cache + 16, moved, roof))
        print(f"  {name} int8 {cores} thread(s): decode {decode:.1f}, prefill {prefill:.1f} tok/s", file=sys.stderr)
    # the RSS limit: the file, plus the KV cache, plus 16 MB
    # decode GB/s: the bytes a step reads (bytes_per_token()) times decode tok/s; roof: a
    # plain streaming read of the same file on as many threads (streaming_roof())
    print(f"CPU: {cpu_name()}")
    print(f"{'shape':<16} {'weights':<7} {'threads':>7} {'decode tok/s':>13} {'GB/s':>6} {'roof':>6} {'of roof':>7}"
          f" {'prefill tok/s':>14} {'peak RSS MB':>12} {'file MB':>8} {'limit MB':>9}")
    for name, kind, threads, decode, prefill, rss, size, limit, moved, roof in rows:
        print(f"{name:<16} {kind:<7} {threads:>7} {decode:>13.1f} {moved:>6.1f} {roof:>6.1f} {moved / roof:>7.0%}"
              f" {prefill:>14.1f} {rss:>12.1f} {size:>8.1f} {limit:>9.1f}")
    if not quick:
        decode_beside_llama_cpp(kernels)
    if long and not quick:
        long_context(cores, kernels)
    batch_bench(kernels, ("stories110M",) if quick else ("stories110M", "TinyLlama-1.1B"))
    llama_cpp_bench(kernels, ("stories110M",) if quick else ("stories110M", "TinyLlama-1.1B"))
    speculative_bench(kernels)
    demo_speculative_bench(kernels)
    compare(prompt, kernels or "avx2")
    tokenizer_bench()


# The streaming-read roof: how fast THREADS threads read a file that is in the
# page cache, mapped as run.c maps a checkpoint (MADV_HUGEPAGE), each its own
# contiguous slice, adding up its 8-byte words in four independent sums (so that
# neither the adds nor one chain of them limits it). The best of PASSES passes.
ROOF_C = r"""
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

static const uint64_t *words;
static size_t n_words;
static int threads;
static pthread_barrier_t start, done;
static volatile uint64_t sink;

static void *reader(void *arg) {
    int t = (int)(intptr_t)arg;
    size_t begin = n_words * t / threads / 4 * 4, end = t + 1 == threads ? n_words : n_words * (t + 1) / threads / 4 * 4;
    for (;;) {
        pthread_barrier_wait(&start);
        uint64_t s[4] = {0, 0, 0, 0};
        for (size_t i = begin; i + 4 <= end; i += 4)
            for (int k = 0; k < 4; k++) s[k] += words[i + k];
        sink += s[0] + s[1] + s[2] + s[3];
        pthread_barrier_wait(&done);
    }
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: roof file threads passes\n"), 2;
    int fd = open(argv[1], O_RDONLY), passes = atoi(argv[3]);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return perror(argv[1]), 1;
    threads = atoi(argv[2]);
    void *p = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return perror("mmap"), 1;
#ifdef MADV_HUGEPAGE
    madvise(p, st.st_size, MADV_HUGEPAGE);
#endif
    words = p;
    n_words = st.st_size / 8;
    pthread_barrier_init(&start, NULL, threads + 1);
    pthread_barrier_init(&done, NULL, threads + 1);
    for (int t = 0; t < threads; t++) {
        pthread_t id;
        pthread_create(&id, NULL, reader, (void *)(intptr_t)t);
    }
    double best = 0;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = now(); /* before the start: after it, the readers may run while this thread waits for a core */
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        double rate = n_words * 8 / (now() - t0);
        if (rate > best) best = rate;
    }
    printf("%.3f\n", best / 1e9);
    return 0;
}
"""

ROOF_PASSES = 5


def cpu_name():
    """The CPU as /proc/cpuinfo names it, with its family and model, and the CPU count."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}), "
            f"{os.cpu_count()} CPUs")


ROOFS = {}  # (path, threads): GB/s, measured once per run of the bench


def streaming_roof(path, threads):
    """GB/s of a plain streaming read of `path` on `threads` threads (ROOF_C), once per file and count."""
    binary = os.path.join(CACHE, "roof")
    if not os.path.exists(binary):
        source = binary + ".c"
        with open(source, "w") as f:
            f.write(ROOF_C)
        subprocess.run(["cc", "-O2", "-o", binary, source, "-lpthread"], check=True)
    if (path, threads) not in ROOFS:
        out = subprocess.run([binary, path, str(threads), str(ROOF_PASSES)], check=True, stdout=subprocess.PIPE)
        ROOFS[path, threads] = float(out.stdout)
    return ROOFS[path, threads]


def bytes_per_token(path):
    """The bytes a decode step reads from a checkpoint: the whole file but the token
    embedding table's rows other than the token's own (when the classifier is a matrix
    of its own; a shared one is read whole)."""
    import struct
    with open(path, "rb") as f:
        head = f.read(256)
    size = os.path.getsize(path)
    magic, version = struct.unpack_from("<Ii", head, 0)
    if magic != 0x616B3432:  # legacy fp32 (gen_model): a negative vocabulary means a classifier of its own
        dim, vocab = struct.unpack_from("<i", head, 0)[0], struct.unpack_from("<i", head, 20)[0]
        return size - (0 if vocab > 0 else (-vocab - 1) * dim * 4)
    dim, vocab = struct.unpack_from("<i", head, 8)[0], struct.unpack_from("<i", head, 28)[0]
    if head[36]:
        return size
    if version == 2:
        group = struct.unpack_from("<i", head, 37)[0]
        per_weight = 1 + 4 / group
    else:  # version 3: the embedding's type is the type table's first entry
        kind, = struct.unpack_from("<i", head, 256)
        group = struct.unpack_from("<i", head, 260)[0] or 64
        per_weight = {0: 4, 1: 1 + 4 / group, 2: 144 / 256, 3: 210 / 256}[kind]
    return size - (vocab - 1) * dim * per_weight


# Decode with each KV cache in one process: two models over one mapping of the
# weights, taking turns token by token (which goes first alternates), so that
# the machine's drift, which between runs is larger than the caches' difference,
# falls on both alike. It includes run.c, as test_all.c does.
PAIRED_DECODE_C = r"""
#define main run_main
#include "run.c"
#undef main

int main(int argc, char **argv) {
    if (argc != 5) fail("usage: paired_decode model.bin first_position n_pos rounds");
    int first = atoi(argv[2]), n_pos = atoi(argv[3]), rounds = atoi(argv[4]);
    start_compute(2);
    Model m[2];
    open_checkpoint(&m[0].ck, argv[1]);
    m[1].ck = m[0].ck;
    if (first < 2 || n_pos <= first || n_pos > m[0].ck.config.seq_len || rounds < 1) fail("paired_decode: bad positions");
    start_model(&m[0], n_pos, CACHE_FP32, 0);
    start_model(&m[1], n_pos, CACHE_INT8, 0);
    int vocab = m[0].ck.config.vocab_size, *prompt = xmalloc(first * sizeof(int)), next[2];
    for (int i = 0; i < first; i++) prompt[i] = i == 0 ? 1 : i % 2 ? 22172 : 3186; /* BOS hello world ... */
    for (int k = 0; k < 2; k++) next[k] = sample_argmax(run_tokens(&m[k], prompt, first, 0, NULL), vocab);
    double spent[2] = {0, 0};
    long steps = 0;
    for (int r = 0; r < rounds; r++) {
        int token[2] = {next[0], next[1]};
        for (int pos = first; pos < n_pos; pos++, steps++)
            for (int j = 0; j < 2; j++) {
                int k = (pos + r) % 2 ? 1 - j : j;
                double start = seconds_now();
                token[k] = sample_argmax(run_tokens(&m[k], &token[k], 1, pos, NULL), vocab);
                spent[k] += seconds_now() - start;
            }
    }
    printf("%.3f %.3f\n", steps / spent[0], steps / spent[1]);
    return 0;
}
"""


def build_paired_decode():
    """Compiles PAIRED_DECODE_C (against this run.c) into the bench directory."""
    source, binary = os.path.join(CACHE, "paired_decode.c"), os.path.join(CACHE, "paired_decode")
    with open(source, "w") as f:
        f.write(PAIRED_DECODE_C)
    subprocess.run(["cc", "-std=gnu11", "-O3", "-I", HERE, "-o", binary, source, "-lm", "-lpthread"], check=True)
    return binary


def paired_decode(binary, model, first, n_pos, rounds, kernels):
    """Decode tok/s with the fp32 and the int8 KV cache, from build_paired_decode()'s binary."""
    env = dict(os.environ, RUN_KERNELS=kernels) if kernels else None
    out = subprocess.run([binary, model, str(first), str(n_pos), str(rounds)], env=env, check=True,
                         stdout=subprocess.PIPE).stdout.decode().split()
    return float(out[0]), float(out[1])


def long_context(cores, kernels):
    """The 1.1B shape near position 2000: int8 weights at 100 and 2000
    positions, then both KV caches with both weights."""
    name, args, _ = SHAPES[2]
    fp32, int8 = models(name, args)
    near = " ".join(["hello world"] * 975)  # about 1950 tokens
    # alternated three times, best of each: on a shared machine the load
    # changes between runs by more than the difference measured here
    at_100 = at_2000 = 0
    for _ in range(3):
        at_100 = max(at_100, run(int8, cores, " ".join(["hello world"] * 50), 150, kernels)[1])
        at_2000 = max(at_2000, run(int8, cores, near, 2048, kernels)[1])
    print(f"TinyLlama-1.1B int8, {cores} threads: decode {at_100:.1f} tok/s after a 100-token prompt, "
          f"{at_2000:.1f} tok/s at positions 1950-2048 ({100 * (at_2000 / at_100 - 1):+.0f}%), best of 3 runs each")
    dim, _, layers, heads, kv_heads = (int(a) for a in args.split()[:5])
    kv_dim, positions = dim // heads * kv_heads, 2048
    cache_mb = {  # keys and values for the whole context; int8: a byte per value and a float per KV head and position
        "fp32": 2 * layers * positions * kv_dim * 4 / 2**20,
        "int8": 2 * layers * positions * (kv_dim + 4 * kv_heads) / 2**20,
    }
    print(f"TinyLlama-1.1B, 2 threads, decode at positions 1950-2048 with each KV cache (-c), {LONG_ROUNDS} rounds "
          f"of one run with each cache (which goes first alternates), medians:")
    print(f"{'weights':<7} {'cache':<5} {'decode tok/s':>12} {'int8/fp32':>9} {'peak RSS MB':>12} {'file MB':>8} "
          f"{'cache MB':>9} {'limit MB':>9}")
    for kind, model in (("fp32", fp32), ("int8", int8)):
        decode, rss, ratios = {"fp32": [], "int8": []}, {"fp32": 0.0, "int8": 0.0}, []
        for round in range(LONG_ROUNDS):
            # the machine's speed drifts by more than the caches differ, so
            # each round compares its own two runs
            for cache in ("fp32", "int8") if round % 2 == 0 else ("int8", "fp32"):
                _, speed, peak, _ = run(model, 2, near, positions, kernels, extra=("-c", cache))
                decode[cache].append(speed)
                rss[cache] = max(rss[cache], peak)
            ratios.append(decode["int8"][-1] / decode["fp32"][-1])
        size = os.path.getsize(model) / 2**20
        for cache in ("fp32", "int8"):
            ratio = f"{statistics.median(ratios):.3f}" if cache == "int8" else ""
            print(f"{kind:<7} {cache:<5} {statistics.median(decode[cache]):>12.2f} {ratio:>9} {rss[cache]:>12.1f} "
                  f"{size:>8.1f} {cache_mb[cache]:>9.1f} {size + cache_mb[cache] + 16:>9.1f}")
    print(f"TinyLlama-1.1B, 2 threads, decode at positions 1950-2048 in one process holding both caches, "
          f"the two taking turns token by token, {PAIRED_ROUNDS} rounds:")
    binary = build_paired_decode()
    for kind, model in (("fp32", fp32), ("int8", int8)):
        fp32_speed, int8_speed = paired_decode(binary, model, 1950, positions, PAIRED_ROUNDS, kernels)
        print(f"{kind} weights: fp32 cache {fp32_speed:.2f} tok/s, int8 cache {int8_speed:.2f} tok/s, "
              f"int8/fp32 {int8_speed / fp32_speed:.3f}")

if __name__ == "__main__":
    main()
