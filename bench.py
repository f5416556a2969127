#!/usr/bin/env python3
"""make bench: decode and prefill speed and peak memory of ./run on three shapes.

Random-weight models of the stories15M, stories110M and TinyLlama-1.1B shapes
are written by ../shared/tools/gen_model.c (fp32, legacy layout) into a cache
folder ($BENCH_DIR, default /tmp/run-bench), with int8 copies made by export.py.
For each model and thread count it runs ./run twice: a 200-token prompt with
one generated token (prefill tok/s), and a one-word prompt with N generated
tokens (decode tok/s); with all cores, three times, keeping the best figures.
Peak RSS is the largest of those runs. Figures are ./run's own (its stderr
line), so model loading is not counted.

usage: python3 bench.py [--quick] [--long]
  --quick  only the two small shapes
  --long   also decode speed near position 2000 of the 1.1B shape (int8)
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(os.path.dirname(HERE), "shared")
CACHE = os.environ.get("BENCH_DIR", "/tmp/run-bench")
RUN = os.path.join(HERE, "run")
TOKENIZER = os.path.join(HERE, "tokenizer.bin")

# name: gen_model arguments (dim hidden layers heads kv_heads vocab seq_len seed), decode steps
SHAPES = [
    ("stories15M", "288 768 6 6 6 32000 256 1", 256),
    ("stories110M", "768 2048 12 12 12 32000 1024 1", 128),
    ("TinyLlama-1.1B", "2048 5632 22 32 4 32000 2048 1", 32),
]


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


def run(model, threads, prompt, steps):
    """Runs ./run; returns (prompt tok/s, decode tok/s, peak RSS in MB)."""
    cmd = [RUN, model, "-z", TOKENIZER, "-t", "0", "-j", str(threads), "-n", str(steps), "-i", prompt]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"bench: {' '.join(cmd[:2])} failed: {err.strip()}")
    m = re.search(r"prompt: (\d+) tokens, ([\d.]+) tok/s; generated: (\d+) tokens, ([\d.]+) tok/s", err)
    return float(m.group(2)), float(m.group(4)), usage.ru_maxrss / 1024


def main():
    quick, long = "--quick" in sys.argv, "--long" in sys.argv
    if not os.path.exists(os.path.join(SHARED, "tools", "gen_model.c")):
        sys.exit(f"bench: {SHARED}/tools/gen_model.c not found")
    prompt = " ".join(["hello world"] * 100)  # 201 tokens with BOS
    cores = os.cpu_count() or 1
    rows = []
    for name, args, steps in SHAPES[:2] if quick else SHAPES:
        fp32, int8 = models(name, args)
        for kind, model in (("fp32", fp32), ("int8", int8)):
            for threads in sorted({cores, 1}, reverse=True):
                # all cores: best of three runs, since on a shared machine the
                # other tenants' load moves single runs by 10-20%
                prefill = decode = rss = 0
                for _ in range(3 if threads == cores else 1):
                    prefill_run, _, rss1 = run(model, threads, prompt, 201)
                    _, decode_run, rss2 = run(model, threads, "Once", steps)
                    prefill, decode, rss = max(prefill, prefill_run), max(decode, decode_run), max(rss, rss1, rss2)
                size = os.path.getsize(model) / 2**20
                dim, _, layers, heads, kv_heads = (int(a) for a in args.split()[:5])
                kv_cache = 2 * layers * 201 * (dim // heads * kv_heads) * 4 / 2**20  # K and V, fp32, 201 positions
                rows.append((name, kind, threads, decode, prefill, rss, size, size + kv_cache + 16))
                print(f"  {name} {kind} {threads} thread(s): decode {decode:.1f}, prefill {prefill:.1f} tok/s",
                      file=sys.stderr)
    # the RSS limit: the file, plus the KV cache, plus 16 MB
    print(f"{'shape':<16} {'weights':<7} {'threads':>7} {'decode tok/s':>13} {'prefill tok/s':>14}"
          f" {'peak RSS MB':>12} {'file MB':>8} {'limit MB':>9}")
    for name, kind, threads, decode, prefill, rss, size, limit in rows:
        print(f"{name:<16} {kind:<7} {threads:>7} {decode:>13.1f} {prefill:>14.1f} {rss:>12.1f} {size:>8.1f} {limit:>9.1f}")
    if long and not quick:
        _, int8 = models(*SHAPES[2][:2])
        near = " ".join(["hello world"] * 975)  # about 1950 tokens
        # alternated three times, best of each: on a shared machine the load
        # changes between runs by more than the difference measured here
        at_100 = at_2000 = 0
        for _ in range(3):
            at_100 = max(at_100, run(int8, cores, " ".join(["hello world"] * 50), 150)[1])
            at_2000 = max(at_2000, run(int8, cores, near, 2000)[1])
        print(f"TinyLlama-1.1B int8, {cores} threads: decode {at_100:.1f} tok/s after a 100-token prompt, "
              f"{at_2000:.1f} tok/s at positions 1950-2000 ({100 * (at_2000 / at_100 - 1):+.0f}%), best of 3 runs each")


main()
