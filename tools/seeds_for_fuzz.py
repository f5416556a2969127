#!/usr/bin/env python3
"""Seed corpus for fuzz.c's targets: `python3 tools/seeds_for_fuzz.py SHARED OUT`.

Writes OUT/checkpoint, OUT/tokenizer and OUT/encode from the shared models,
tokenizers and tokenizer cases, plus small generated files (tiny checkpoints of
every layout, cut and damaged copies), OUT/batch: lines of batch files, and
OUT/serve: HTTP requests to the server. Standard library only; deterministic."""

import json
import os
import random
import struct
import sys

rng = random.Random(1234)


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def floats(n, scale=0.5):
    return struct.pack("<%df" % n, *(rng.uniform(-scale, scale) for _ in range(n)))


def tiny_checkpoint(version, dim, hidden, layers, heads, kv_heads, vocab, seq_len, shared, group=0, head_size=0,
                    qkv_bias=0, qk_norm=0):
    """A checkpoint of the given shape with random weights, in run.c's layouts
    (versions 1-3 with Qwen's head size, biases and q/k norms when asked)."""
    head = head_size or dim // heads
    kv_dim, q_dim = head * kv_heads, head * heads
    shapes = [(q_dim, dim), (kv_dim, dim), (kv_dim, dim), (dim, q_dim), (hidden, dim), (dim, hidden), (hidden, dim)]
    if version == 0:
        out = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq_len)
        out += floats(vocab * dim) + floats(layers * dim, 1.0)
        for rows, cols in shapes[:4]:
            out += floats(layers * rows * cols)
        out += floats(layers * dim, 1.0)
        for rows, cols in shapes[4:]:
            out += floats(layers * rows * cols)
        out += floats(dim, 1.0) + floats(seq_len * head)
        if not shared:
            out += floats(vocab * dim)
        return out
    header = struct.pack("<Ii7i", 0x616B3432, version, dim, hidden, layers, heads, kv_heads, vocab, seq_len)
    header += struct.pack("<B", 1 if shared else 0) + struct.pack("<i", group if version == 2 else 0)
    header += b"\0" * (44 - len(header)) + struct.pack("<ff", 10000.0, 1e-5) + b"\0" * 16
    header += struct.pack("<iBB", head_size, qkv_bias, qk_norm)
    header += b"\0" * (256 - len(header))

    # version 3: where the rows are whole blocks of 256 q4k, every third matrix q6k,
    # else int8 (group), the first wq in fp32; its type table follows the header
    matrices = [(vocab, dim)] + [shape for shape in shapes for _ in range(layers)] + ([] if shared else [(vocab, dim)])
    types = [((3 if k % 3 == 2 else 2), 0) if cols % 256 == 0 else (0, 0) if k == 1 else (1, group)
             for k, (_, cols) in enumerate(matrices)]
    if version == 3:
        header += b"".join(struct.pack("<ii", *t) for t in types)

    def matrix(k, rows, cols):
        n = rows * cols
        kind = 0 if version == 1 else 1 if version == 2 else types[k][0]
        if kind == 0:
            return floats(n)
        if kind == 2:  # q4k blocks: fp16 d and dmin of 2^-10, random scales and values
            return b"".join(struct.pack("<HH", 0x1400, 0x1400) + bytes(rng.randrange(256) for _ in range(140))
                            for _ in range(n // 256))
        if kind == 3:  # q6k blocks: random values and scales, fp16 d of 2^-10 (the last two bytes)
            return b"".join(bytes(rng.randrange(256) for _ in range(208)) + struct.pack("<H", 0x1400)
                            for _ in range(n // 256))
        return bytes(rng.randrange(256) for _ in range(n)) + floats(n // group, 0.01)

    out = header + floats(layers * dim, 1.0) + floats(layers * dim, 1.0) + floats(dim, 1.0)
    if qk_norm:
        out += floats(2 * layers * head, 1.0)
    if qkv_bias:
        out += floats(layers * (q_dim + 2 * kv_dim))
    for k, (rows, cols) in enumerate(matrices):
        out += matrix(k, rows, cols)
    return out


def tokenizer_file(pieces, max_len=None):
    longest = max((len(p) for p, _ in pieces), default=1)
    out = struct.pack("<i", max_len if max_len is not None else max(longest, 1))
    for text, score in pieces:
        out += struct.pack("<fi", score, len(text)) + text
    return out


def read_pieces(data, count):
    """The first `count` pieces of a tokenizer.bin, as (bytes, score)."""
    pieces, at = [], 4
    for _ in range(count):
        score, n = struct.unpack_from("<fi", data, at)
        pieces.append((data[at + 8:at + 8 + n], score))
        at += 8 + n
    return pieces


def with_vocab(data, vocab):
    """The tokenizer target's input: the file, then vocab_size - 1 as two bytes."""
    return data + struct.pack("<H", vocab - 1)


def main():
    shared, out = sys.argv[1], sys.argv[2]
    ck_dir, tok_dir, enc_dir, batch_dir = (os.path.join(out, d) for d in ("checkpoint", "tokenizer", "encode", "batch"))

    # checkpoints: the shared models, tiny ones of every layout, damaged copies
    models = os.path.join(shared, "models")
    if os.path.isdir(models):
        for name in sorted(os.listdir(models)):
            if name.endswith(".bin") and "tok" not in name:
                with open(os.path.join(models, name), "rb") as f:
                    write(ck_dir, name, f.read())
    tiny = {
        "v0_shared": tiny_checkpoint(0, 8, 16, 1, 2, 1, 8, 4, True),
        "v0_separate": tiny_checkpoint(0, 8, 12, 2, 2, 2, 6, 3, False),
        "v0_seq1": tiny_checkpoint(0, 4, 4, 1, 2, 2, 3, 1, True),
        "v1_shared": tiny_checkpoint(1, 8, 16, 1, 4, 2, 8, 5, True),
        "v1_separate": tiny_checkpoint(1, 4, 8, 1, 1, 1, 5, 2, False),
        "v2_g4": tiny_checkpoint(2, 8, 16, 1, 2, 1, 8, 4, True, 4),
        "v2_g8_separate": tiny_checkpoint(2, 8, 24, 2, 2, 2, 4, 6, False, 8),
        "v2_g2": tiny_checkpoint(2, 4, 6, 1, 2, 1, 4, 3, True, 2),
        "v2_g64": tiny_checkpoint(2, 64, 64, 1, 4, 4, 16, 2, True, 64),
        "v3_int8_fp32": tiny_checkpoint(3, 8, 16, 1, 2, 1, 8, 4, False, 4),
        "v3_q4k_q6k": tiny_checkpoint(3, 256, 256, 1, 2, 1, 4, 2, True, 32),
        "v1_qwen3": tiny_checkpoint(1, 8, 16, 1, 2, 1, 8, 4, True, head_size=6, qk_norm=1),
        "v2_qwen2": tiny_checkpoint(2, 8, 16, 1, 2, 1, 8, 4, False, 4, qkv_bias=1),
    }
    for name, data in tiny.items():
        write(ck_dir, name, data)
    base = tiny["v0_shared"]
    write(ck_dir, "cut_header", base[:20])
    write(ck_dir, "cut_weights", base[:-4])
    write(ck_dir, "trailing", base + b"\0\0\0\0")
    write(ck_dir, "v1_cut_header", tiny["v1_shared"][:100])
    write(ck_dir, "v1_version9", tiny["v1_shared"][:4] + struct.pack("<i", 9) + tiny["v1_shared"][8:])
    write(ck_dir, "v1_nan_eps", tiny["v1_shared"][:48] + struct.pack("<f", float("nan")) + tiny["v1_shared"][52:])
    scaled = struct.pack("<fffi", 8.0, 1.0, 4.0, 2)  # Llama 3.1's RoPE scaling, original context 2
    write(ck_dir, "v1_rope_scaled", tiny["v1_shared"][:52] + scaled + tiny["v1_shared"][68:])
    write(ck_dir, "huge_header", struct.pack("<7i", 65536, 2**31 - 1, 2**31 - 1, 2, 2, 2**31 - 1, 2**31 - 1))
    write(ck_dir, "empty", b"")

    # tokenizers: the input is the file, then vocab_size - 1 as two bytes
    llama = None
    if os.path.exists("tokenizer.bin"):
        with open("tokenizer.bin", "rb") as f:
            llama = f.read()
        write(tok_dir, "llama2_32000", with_vocab(llama, 32000))
        first = read_pieces(llama, 300)
        write(tok_dir, "llama2_first300", with_vocab(tokenizer_file(first), 300))
        write(tok_dir, "llama2_first300_vocab400", with_vocab(tokenizer_file(first), 400))
    small_path = os.path.join(models, "aidreams_tok512.bin")
    if os.path.exists(small_path):
        with open(small_path, "rb") as f:
            small = f.read()
        write(tok_dir, "aidreams_512", with_vocab(small, 512))
        write(tok_dir, "aidreams_first40", with_vocab(tokenizer_file(read_pieces(small, 40)), 40))
    made = [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0), (b"<0x41>", 0.0), (b" ", -1.0),
            (b"a", -2.0), (b" a", -1.5), (b"ab", -1.0), (b"\xe2\x96\x81", -3.0), (b"", -4.0)]
    made_file = tokenizer_file(made)
    write(tok_dir, "made10", with_vocab(made_file, 10))
    write(tok_dir, "made10_vocab3", with_vocab(made_file, 3))
    write(tok_dir, "made_cut", with_vocab(made_file[:-3], 10))
    write(tok_dir, "made_negative_len", with_vocab(made_file[:8] + struct.pack("<i", -1) + made_file[12:], 10))
    write(tok_dir, "made_nan_score", with_vocab(made_file[:4] + struct.pack("<f", float("inf")) + made_file[8:], 10))
    write(tok_dir, "made_max0", with_vocab(tokenizer_file(made, 0), 10))

    # encoder: the SentencePiece cases' texts, and some odd bytes
    cases = os.path.join(shared, "tokenizer", "llama2_cases.jsonl")
    if os.path.exists(cases):
        with open(cases, encoding="utf-8") as f:
            for i, line in enumerate(f):
                text = json.loads(line)["text"]
                write(enc_dir, "case%03d" % i, text.encode("utf-8", "surrogatepass"))
    odd = [b"", b" ", b"\xff\xfe", b"\xc3", b"\xe2\x96\x81\xe2\x96\x81", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\xc0\xaf", b"<s></s><unk><0x41>", b"\x00a\x00", b"Once upon a time " * 20, "日本語テキスト".encode()]
    for i, text in enumerate(odd):
        write(enc_dir, "odd%02d" % i, text)

    # batch lines: every field, escapes, and the cases' texts as prompts
    lines = [b'{"prompt": "Once upon a time"}',
             b'{"id": "a\\"b", "prompt": "x\\n\\u00e9\\ud83d\\ude00", "n": 0, "temperature": 0.7, "topp": 1e-1, '
             b'"seed": 42, "system": ""}',
             b' { "id" : -3 , "prompt" : "" } \r', b'{"prompt": "1", "n": 1.5}', b'{"prompt": "\\ud800"}', b'[]', b'']
    if os.path.exists(cases):
        with open(cases, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i % 10 == 0:
                    lines.append(json.dumps({"prompt": json.loads(line)["text"], "n": i}).encode())
    for i, line in enumerate(lines):
        write(batch_dir, "line%02d" % i, line)

    # server requests: heads of every kind, bodies with every field
    bodies = [b'{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": true, '
              b'"stream_options": {"include_usage": true}, "stop": ["\\n", "The"], "seed": 7, "top_k": -1}',
              b'{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": '
              b'[{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}, {"role": "assistant", "content": '
              b'"Hello"}, {"role": "user", "content": "\\u00e9"}], "n": 1, "logprobs": false, "frequency_penalty": 0, '
              b'"chat_template_kwargs": {"enable_thinking": false}, "max_completion_tokens": null, "user": "u"}',
              b'{"prompt": 5}', b'{"messages": []}', b'{"prompt": "x", "n": 2}', b'{"prompt": "x", "logit_bias": {"1": 2}}']
    heads = [b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
             b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nAuthorization: Bearer k\r\nConnection: close\r\n"
             b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n",
             b"GET /metrics HTTP/1.0\r\n\r\n", b"POST / HTTP/2.0\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n", b"BAD\r\n\r\n"]
    for i, head in enumerate(heads):
        for j, body in enumerate(bodies):
            write(os.path.join(out, "serve"), "request%d_%d" % (i, j), (head % len(body) if b"%d" in head else head) + body)


if __name__ == "__main__":
    main()
