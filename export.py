#!/usr/bin/env python3
"""Write checkpoints and tokenizers in the formats that run.c reads.

Commands
--------
Tokenizers (standard library only):

  python3 export.py tokenizer.bin --tokenizer tokenizer.model   # SentencePiece model, or Llama 3's tiktoken file
  python3 export.py tokenizer.bin --tokenizer tokenizer.json    # Hugging Face: Llama 2 kind, or Llama 3 or Qwen
                                                                #   (byte-level)
  python3 export.py tokenizer.bin --tokenizer model.gguf        # a GGUF file's own vocabulary (Llama 2, 3, Qwen),
                                                                #   known by its "GGUF" magic

Models (need numpy; torch only where noted):

  python3 export.py model.bin --hf DIR            # Hugging Face Llama/Mistral folder, Llama 3.x included,
                                                  #   or Qwen2/Qwen2.5/Qwen3 (Qwen2ForCausalLM, Qwen3ForCausalLM)
                                                  #   (safetensors; pytorch_model*.bin needs torch)
  python3 export.py model.bin --meta DIR          # Meta's params.json + consolidated.*.pth (torch)
  python3 export.py model.bin --checkpoint ckpt.pt  # llama2.c / train.py checkpoint (torch)
  python3 export.py model.bin --bin old.bin       # any file run.c reads, re-written
  python3 export.py model.bin --gguf model.gguf   # llama.cpp's GGUF (v2/v3), architecture llama, qwen2 or qwen3: F32, F16,
                                                  #   BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K;
                                                  #   Q8_0 to --version 2 --group-size 32 is copied exactly
  python3 export.py model.bin --gguf model-Q4_K_M.gguf --version 3
                                                  # each matrix in its own type, losslessly where it can be:
                                                  #   Q4_K copied as q4k, Q6_K as q6k (an odd number of
                                                  #   blocks as int8 per 16, named), Q8_0 and Q4_0
                                                  #   as int8 per 32; the others requantized (and named)
  python3 export.py model_q4km.bin --hf DIR --quant Q4_K_M
                                                  # any input to version 3 as llama.cpp's llama-quantize
                                                  #   makes Q4_K_M: the same bytes as --gguf of its file

Options for models:
  --version 0|1|2|3  output format (default 1): 0 = legacy llama2.c layout,
                     1 = fp32 with a 256-byte header, 2 = int8 (Q8_0) with fp32 scales,
                     3 = a type per matrix (int8, or q4k and q6k kept from the input)
  --quant Q4_K_M|q4k|int8
                     version 3 in llama.cpp's types: Q4_K_M with llama-quantize's choice of type per
                     matrix and its rounding; q4k: Q4_K for every matrix; int8: as --version 3
  --group-size G     quantization group for versions 2 and 3 (default 64); when it does not
                     divide dim, hidden_dim (and n_heads * head_size), the largest power of two below it that
                     does is used (with a note on stderr)
  --seq-len N        maximum sequence length to record (default: the model's own;
                     4096 for --meta, whose params.json does not say)

Formats
-------
tokenizer.bin (little-endian): int32 max_token_length, then for every token id in
order: float32 score, int32 byte length, the piece's UTF-8 bytes. U+2581 ("▁") is
written as a space, BOS as "\\n<s>\\n" and EOS as "\\n</s>\\n".

Checkpoints: config = 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
vocab_size, seq_len). Weight matrices are row-major [out][in] and the query/key rows
of each head are in interleaved-pair RoPE order (pair i = rows 2i, 2i+1).
  v0: config (vocab_size negative when the classifier is stored separately), then
      fp32 token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
      the RoPE tables cos and sin [seq_len][head_size/2] (see rope_tables; run.c
      does not read them), classifier if not shared.
  v1: 256-byte header: uint32 magic 0x616b3432, int32 version, config (at 8),
      uint8 shared_classifier (36), int32 group_size (37, v2 only), float32
      rope_theta (44, 0 = 10000), float32 rms_norm_eps (48, 0 = 1e-5), Llama 3.1
      RoPE scaling (all 0 = none): float32 factor (52), low_freq_factor (56),
      high_freq_factor (60), int32 original_max_position_embeddings (64), int32
      head_size (68, 0 = dim / n_heads), uint8 qkv_bias (72), uint8 qk_norm (73); then
      fp32 rms_att, rms_ffn, rms_final, [q_norm, k_norm if qk_norm], [bq, bk, bv if
      qkv_bias], token embedding, wq, wk, wv, wo, w1, w2, w3, classifier if not
      shared. wq is [n_heads * head_size][dim], wo [dim][n_heads * head_size].
  v2: same header with version 2; fp32 rms_att, rms_ffn, rms_final (q/k norms and
      biases); then each
      quantized tensor as int8 values followed by its fp32 scales (one per group of
      group_size consecutive values): token embedding, wq of every layer, wk, wv, wo,
      w1, w2, w3, classifier if not shared. scale = max|w|/127, q = round(w/scale).
  v3: same header with version 3 and group_size 0; then a type table, two int32
      (type, group size) per matrix in file order (token embedding, wq of each
      layer, ..., w3, classifier if not shared): type 0 fp32, 1 int8 (group size:
      values per scale), 2 q4k, 3 q6k (group size 0); then the tensors in v2's
      order, each matrix in its type: fp32; int8 values then fp32 scales; q4k its
      rows' blocks of 256 weights in 144 bytes, llama.cpp's Q4_K byte for byte;
      q6k the same in 210 bytes, llama.cpp's Q6_K byte for byte. A Q6_K matrix of an
      odd number of blocks is written as int8 per 16 (q - 32, d * scale): the same values,
      and the tensors after it stay 4-byte aligned as run.c needs.
The tensor order of each version is the table LAYOUTS below.
"""

import argparse
import glob
import json
import math
import mmap
import os
import re
import struct
import sys


class ExportError(Exception):
    """A problem the user should see as a one-line message, not a traceback."""


def note(message):
    print(f"export.py: {message}", file=sys.stderr)


# ===========================================================================
# Tokenizer export

SPACE_MARK = "\u2581"  # SentencePiece's visible space "▁"
TOKENIZER_MAGIC = 0x6E6B6F74  # "tokn": the byte-level BPE tokenizer file


def read_sentencepiece_model(path):
    """Return (pieces, scores, bos_id, eos_id) of a SentencePiece .model file."""
    try:
        import sentencepiece
    except ImportError:
        sentencepiece = None
    if sentencepiece is not None:
        sp = sentencepiece.SentencePieceProcessor(model_file=path)
        n = sp.vocab_size()
        pieces = [sp.id_to_piece(i) for i in range(n)]
        scores = [sp.get_score(i) for i in range(n)]
        return pieces, scores, sp.bos_id(), sp.eos_id()
    with open(path, "rb") as f:
        return parse_sentencepiece_proto(f.read())


def _read_varint(buf, pos):
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _proto_fields(buf):
    """Yield (field_number, wire_type, value) for each field of a protobuf message.

    value is an int for varints, bytes for length-delimited fields and the raw
    4 or 8 bytes for fixed32/fixed64 fields.
    """
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ExportError(f"unsupported protobuf wire type {wire}: is this a SentencePiece .model file?")
        yield field, wire, value


def _int32(varint):
    """A protobuf int32 is sent as a 64-bit two's complement varint."""
    varint &= (1 << 64) - 1
    return varint - (1 << 64) if varint >= 1 << 63 else varint


def parse_sentencepiece_proto(data):
    """Minimal reader for sentencepiece's ModelProto.

    ModelProto: field 1 = repeated SentencePiece {1: piece, 2: score (float),
    3: type}, field 2 = TrainerSpec (41: bos_id, 42: eos_id; defaults 1 and 2).
    """
    pieces, scores = [], []
    bos_id, eos_id = 1, 2
    for field, wire, value in _proto_fields(data):
        if field == 1 and wire == 2:
            piece, score = "", 0.0
            for f, w, v in _proto_fields(value):
                if f == 1 and w == 2:
                    piece = v.decode("utf-8")
                elif f == 2 and w == 5:
                    score = struct.unpack("<f", v)[0]
            pieces.append(piece)
            scores.append(score)
        elif field == 2 and wire == 2:
            for f, w, v in _proto_fields(value):
                if f == 41 and w == 0:
                    bos_id = _int32(v)
                elif f == 42 and w == 0:
                    eos_id = _int32(v)
    if not pieces:
        raise ExportError("no pieces found: is this a SentencePiece .model file?")
    return pieces, scores, bos_id, eos_id


def read_hf_tokenizer_json(path):
    """Return (pieces, scores, bos_id, eos_id) of a SentencePiece-style BPE tokenizer.json.

    Hugging Face's BPE merges the adjacent pair of lowest merge rank; run.c merges
    the adjacent pair whose joined piece has the highest score. Giving each piece
    the score -(rank of the first merge that makes it) makes the two agree. Pieces
    that no merge makes (single characters, byte pieces <0xXX>, special tokens)
    are never looked up as a merge result, and get score 0 like SentencePiece's
    byte and control pieces, or, for ordinary pieces, a score below every merge.
    """
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok.get("model") or {}
    if model.get("type") != "BPE":
        raise ExportError(f"{path}: model.type is {model.get('type')!r}; only the SentencePiece-BPE kind (\"BPE\") is supported")
    if not model.get("byte_fallback"):
        raise ExportError(f"{path}: model.byte_fallback is not true: a byte-level BPE tokenizer (GPT-2/Llama 3 kind) "
                          "cannot be written as tokenizer.bin; only the SentencePiece-BPE kind (Llama 2, Mistral) is supported")
    pre = tok.get("pre_tokenizer")
    if pre and "ByteLevel" in json.dumps(pre):
        raise ExportError(f"{path}: pre_tokenizer is ByteLevel: only the SentencePiece-BPE kind is supported")

    vocab = model["vocab"]
    size = max(vocab.values()) + 1
    for added in tok.get("added_tokens") or []:
        size = max(size, added["id"] + 1)
    pieces = [None] * size
    for piece, i in vocab.items():
        pieces[i] = piece
    special = set()
    for added in tok.get("added_tokens") or []:
        pieces[added["id"]] = added["content"]
        if added.get("special"):
            special.add(added["id"])
    missing = [i for i, p in enumerate(pieces) if p is None]
    if missing:
        raise ExportError(f"{path}: token ids {missing[:5]} have no piece")

    # Rank of the first merge that makes each piece.
    first_rank = {}
    for rank, merge in enumerate(model.get("merges") or []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        first_rank.setdefault(left + right, rank)
    n_merges = len(model.get("merges") or [])

    scores = []
    for i, piece in enumerate(pieces):
        if piece in first_rank:
            scores.append(-float(first_rank[piece]))
        elif i in special or _is_byte_piece(piece):
            scores.append(0.0)
        else:
            scores.append(-float(n_merges + i))

    bos_piece, eos_piece = _hf_special_tokens(path)
    ids = {p: i for i, p in enumerate(pieces)}
    bos_id, eos_id = ids.get(bos_piece, -1), ids.get(eos_piece, -1)
    return pieces, scores, bos_id, eos_id


def _is_byte_piece(piece):
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")


def _hf_special_tokens(tokenizer_json_path):
    """BOS and EOS pieces: from tokenizer_config.json beside the file, else <s>, </s>."""
    bos, eos = "<s>", "</s>"
    config_path = os.path.join(os.path.dirname(os.path.abspath(tokenizer_json_path)), "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)

        def content(value, default):
            if isinstance(value, dict):
                value = value.get("content")
            return value if isinstance(value, str) else default

        bos = content(config.get("bos_token"), bos)
        eos = content(config.get("eos_token"), eos)
    return bos, eos


def write_tokenizer_bin(out, pieces, scores, bos_id, eos_id):
    encoded = []
    for i, piece in enumerate(pieces):
        if i == bos_id:
            piece = "\n<s>\n"
        elif i == eos_id:
            piece = "\n</s>\n"
        encoded.append(piece.replace(SPACE_MARK, " ").encode("utf-8"))
    out.write(struct.pack("<i", max(len(b) for b in encoded)))
    for score, b in zip(scores, encoded):
        out.write(struct.pack("<fi", score, len(b)))
        out.write(b)


# --- Byte-level BPE (Llama 3) ----------------------------------------------

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_N_SPECIAL = 256  # control tokens after the 128000 BPE pieces, in Meta's code and every Llama 3 file
# Control tokens the program uses, by the ids Meta's code gives them (Llama 3.0 files
# call 128008 <|reserved_special_token_4|>; from 3.1 on it is <|eom_id|>).
LLAMA3_CONTROL = {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|start_header_id|>": 128006,
                  "<|end_header_id|>": 128007, "<|eom_id|>": 128008, "<|eot_id|>": 128009}


# Qwen2, Qwen2.5 and Qwen3: Llama 3's regex but one digit per chunk, an NFC normalizer,
# 151643 BPE pieces, then added tokens (22 in Qwen2.5, 26 in Qwen3) and no BOS; the
# model's vocabulary (151936) is larger than the tokenizer's
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN_N_PIECES = 151643
QWEN_CONTROL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}

# kind 2's flags (run.c's TokenizerFlag); kind 1 is kind 2 with WHOLE_CHUNK_TOKENS alone
FLAG_NFC, FLAG_SINGLE_DIGITS, FLAG_WHOLE_CHUNK_TOKENS, FLAG_CHATML = 1, 2, 4, 8


def gpt2_byte_chars():
    """GPT-2's byte-level alphabet: the character that stands for each byte in
    tokenizer.json. Printable Latin-1 bytes stand for themselves; the others
    (0-32, 127-160, 173) for U+0100 onwards, in byte order."""
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def split_patterns(pre_tokenizer):
    """Every regex of a pre_tokenizer's Split steps."""
    if isinstance(pre_tokenizer, dict):
        if pre_tokenizer.get("type") == "Split" and isinstance(pre_tokenizer.get("pattern"), dict):
            return [pre_tokenizer["pattern"].get("Regex")]
        return [p for step in pre_tokenizer.get("pretokenizers") or [] for p in split_patterns(step)]
    return []


def read_llama3_tokenizer_json(path, tok):
    """The raw bytes of each BPE piece (id = merge rank) of a Llama 3 tokenizer.json."""
    model = tok["model"]
    if LLAMA3_PATTERN not in split_patterns(tok.get("pre_tokenizer")):
        raise ExportError(f"{path}: pre_tokenizer's regex is neither Llama 3's nor Qwen2's; other byte-level "
                          "tokenizers are not supported")
    control = {added["id"]: added["content"] for added in tok.get("added_tokens") or []}
    return llama3_byte_pieces(path, model["vocab"], model.get("merges") or [], control)


def llama3_byte_pieces(where, vocab, merges, control, n_pieces=128000, n_special=LLAMA3_N_SPECIAL):
    """The raw bytes of each BPE piece of a Llama 3 vocabulary, checked as run.c needs it.

    vocab maps each piece in GPT-2's byte characters to its id, merges are "left right"
    strings (or pairs) in rank order, control maps the ids of control tokens to their text.
    Qwen's pieces pass the same checks with their own numbers (and their added tokens
    checked by qwen_byte_pieces).
    """
    byte_of = {c: b for b, c in gpt2_byte_chars().items()}
    pieces = [None] * len(vocab)
    for piece, i in vocab.items():
        if not 0 <= i < len(vocab):
            raise ExportError(f"{where}: token ids are not 0..{len(vocab) - 1} (id {i})")
        try:
            pieces[i] = bytes(byte_of[c] for c in piece)
        except KeyError as e:
            raise ExportError(f"{where}: piece {i} has {e.args[0]!r}, not a byte-level character")
    # run.c merges the pair whose joined piece has the lowest id: check that this
    # is the merge list's order
    last = -1
    for merge in merges:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        joined = vocab.get(left + right, -1)
        if joined < last:
            raise ExportError(f"{where}: merge {left!r} {right!r} is out of id order; "
                              "run.c merges by id (tiktoken's rule)")
        last = joined
    for i, content in control.items():
        if i < len(vocab):
            raise ExportError(f"{where}: added token {content!r} has id {i}, inside the BPE pieces")
    found_special = max(control, default=len(vocab) - 1) + 1 - len(vocab)
    if found_special != n_special or len(vocab) != n_pieces:
        raise ExportError(f"{where}: {len(vocab)} pieces and {found_special} control tokens, not {n_pieces} and "
                          f"{n_special}")
    for name, fixed in LLAMA3_CONTROL.items():
        if control.get(fixed) not in (name, None) and not control[fixed].startswith("<|reserved_special_token_"):
            raise ExportError(f"{where}: token {fixed} is {control[fixed]!r}, Llama 3's {name} or a reserved one")
    return pieces


def read_tiktoken(path):
    """The pieces of Meta's tokenizer.model (tiktoken): one line per piece, its
    bytes in base64, a space, its rank."""
    import base64
    ranked = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not line.strip():
                continue
            try:
                piece, rank = base64.b64decode(fields[0], validate=True), int(fields[1])
                if len(fields) != 2:
                    raise ValueError
            except (ValueError, IndexError):
                raise ExportError(f"{path}: line {number} is not 'base64 rank'")
            ranked[rank] = piece
    if sorted(ranked) != list(range(len(ranked))):
        raise ExportError(f"{path}: the ranks are not 0..{len(ranked) - 1}")
    if len(ranked) != 128000:
        raise ExportError(f"{path}: {len(ranked)} pieces; Llama 3's tokenizer.model has 128000")
    return [ranked[i] for i in range(len(ranked))]


def is_tiktoken(path):
    with open(path, "rb") as f:
        first = f.readline(200)
    return re.fullmatch(rb"[A-Za-z0-9+/=]+ [0-9]+\r?\n?", first) is not None


def write_byte_level_tokenizer(out, pieces):
    """The byte-level BPE tokenizer file (see the head of this file)."""
    ids = LLAMA3_CONTROL
    stops = [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]
    n = len(pieces) + LLAMA3_N_SPECIAL
    out.write(struct.pack("<I8i", TOKENIZER_MAGIC, 1, n, max(len(p) for p in pieces), len(pieces),
                          ids["<|begin_of_text|>"], ids["<|start_header_id|>"], ids["<|end_header_id|>"],
                          ids["<|eot_id|>"]))
    out.write(struct.pack(f"<i{len(stops)}i", len(stops), *stops))
    for p in pieces:
        out.write(struct.pack("<i", len(p)))
        out.write(p)
    out.write(struct.pack("<i", 0) * LLAMA3_N_SPECIAL)  # control tokens have no text
    return f"{n} pieces (byte-level BPE, Llama 3), BOS {ids['<|begin_of_text|>']}, stop ids {stops}"


def qwen_byte_pieces(where, vocab, merges, added):
    """The bytes of every token of a Qwen vocabulary: the BPE pieces' raw bytes, then the
    added tokens, special ones (control tokens) without text, the others (<think>,
    <tool_call>) with theirs, which run.c prints but never encodes. added maps each
    added token's id to (text, special)."""
    if len(vocab) != QWEN_N_PIECES:
        raise ExportError(f"{where}: {len(vocab)} BPE pieces; Qwen's vocabulary has {QWEN_N_PIECES}")
    for name, fixed in QWEN_CONTROL.items():
        if added.get(fixed, (None,))[0] != name:
            raise ExportError(f"{where}: token {fixed} is {added.get(fixed, ('none',))[0]!r}, not Qwen's {name}")
    top = max(added) + 1
    missing = [i for i in range(QWEN_N_PIECES, top) if i not in added]
    if missing:
        raise ExportError(f"{where}: added token ids {missing[:5]} have no token")
    # llama3_byte_pieces checks the BPE pieces as for Llama 3, but for their number
    pieces = llama3_byte_pieces(where, vocab, merges, {}, n_pieces=QWEN_N_PIECES, n_special=0)
    return pieces + [b"" if added[i][1] else added[i][0].encode("utf-8") for i in range(QWEN_N_PIECES, top)]


def read_qwen_tokenizer_json(path, tok):
    if (tok.get("normalizer") or {}).get("type") != "NFC":
        raise ExportError(f"{path}: normalizer is {tok.get('normalizer')!r}; Qwen's is NFC")
    model = tok["model"]
    if model.get("ignore_merges"):
        raise ExportError(f"{path}: model.ignore_merges is true; Qwen's tokenizer merges every chunk")
    added = {a["id"]: (a["content"], bool(a.get("special"))) for a in tok.get("added_tokens") or []}
    return qwen_byte_pieces(path, model["vocab"], model.get("merges") or [], added)


def write_qwen_tokenizer(out, pieces):
    """The byte-level BPE tokenizer file, kind 2, with Qwen's flags, no BOS and ChatML's ids."""
    ids = QWEN_CONTROL
    stops = [ids["<|endoftext|>"], ids["<|im_end|>"]]
    flags = FLAG_NFC | FLAG_SINGLE_DIGITS | FLAG_CHATML
    out.write(struct.pack("<I9i", TOKENIZER_MAGIC, 2, flags, len(pieces), max(len(p) for p in pieces), QWEN_N_PIECES,
                          -1, ids["<|im_start|>"], -1, ids["<|im_end|>"]))
    out.write(struct.pack(f"<i{len(stops)}i", len(stops), *stops))
    for p in pieces:
        out.write(struct.pack("<i", len(p)))
        out.write(p)
    return f"{len(pieces)} tokens (byte-level BPE, Qwen), no BOS, stop ids {stops}"


def export_tokenizer(in_path, out):
    if is_gguf(in_path):
        return export_gguf_tokenizer(in_path, out)
    if in_path.endswith(".json"):
        with open(in_path, encoding="utf-8") as f:
            tok = json.load(f)
        if QWEN2_PATTERN in split_patterns(tok.get("pre_tokenizer")):
            return write_qwen_tokenizer(out, read_qwen_tokenizer_json(in_path, tok))
        if "ByteLevel" in json.dumps(tok.get("pre_tokenizer")):
            return write_byte_level_tokenizer(out, read_llama3_tokenizer_json(in_path, tok))
        pieces, scores, bos_id, eos_id = read_hf_tokenizer_json(in_path)
    elif is_tiktoken(in_path):
        return write_byte_level_tokenizer(out, read_tiktoken(in_path))
    else:
        pieces, scores, bos_id, eos_id = read_sentencepiece_model(in_path)
    write_tokenizer_bin(out, pieces, scores, bos_id, eos_id)
    return f"{len(pieces)} pieces, BOS {bos_id}, EOS {eos_id}"


def export_gguf_tokenizer(path, out):
    """The tokenizer file of a GGUF's own vocabulary: SentencePiece ("llama") as
    tokenizer.bin, or byte-level BPE ("gpt2") with pre-tokenizer "llama-bpe" (Llama 3)
    or "qwen2" (Qwen2, Qwen2.5, Qwen3)."""
    meta = GGUFFile(path).metadata
    model = meta.get("tokenizer.ggml.model")
    tokens = gguf_list(path, meta, "tokenizer.ggml.tokens", str)
    if model == "llama":
        scores = gguf_list(path, meta, "tokenizer.ggml.scores", (int, float))
        if len(scores) != len(tokens):
            raise ExportError(f"{path}: tokenizer.ggml.scores has {len(scores)} values for {len(tokens)} tokens")
        # SentencePiece's own defaults, as parse_sentencepiece_proto has them
        bos_id = gguf_int(path, meta, "tokenizer.ggml.bos_token_id", 1)
        eos_id = gguf_int(path, meta, "tokenizer.ggml.eos_token_id", 2)
        write_tokenizer_bin(out, tokens, scores, bos_id, eos_id)
        return f"{len(tokens)} pieces, BOS {bos_id}, EOS {eos_id}"
    if model != "gpt2":
        raise ExportError(f"{path}: tokenizer.ggml.model is {model!r}: only \"llama\" (SentencePiece, Llama 2) and "
                          "\"gpt2\" with pre-tokenizer \"llama-bpe\" (Llama 3) or \"qwen2\" are supported")
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in ("llama-bpe", "qwen2"):
        raise ExportError(f"{path}: tokenizer.ggml.pre is {pre!r}: of the byte-level (gpt2) tokenizers only "
                          "Llama 3's, \"llama-bpe\", and Qwen's, \"qwen2\", are supported")
    types = gguf_list(path, meta, "tokenizer.ggml.token_type", int)
    if len(types) != len(tokens):
        raise ExportError(f"{path}: tokenizer.ggml.token_type has {len(types)} values for {len(tokens)} tokens")
    if pre == "qwen2":
        return write_qwen_tokenizer(out, gguf_qwen_pieces(path, meta, tokens, types))
    # the BPE pieces are the normal tokens (type 1), ids 0..n-1; control tokens follow
    n = next((i for i, t in enumerate(types) if t != 1), len(types))
    if any(t == 1 for t in types[n:]):
        raise ExportError(f"{path}: tokenizer.ggml.token_type: normal tokens (type 1) after the first other "
                          f"one (id {n})")
    vocab = {piece: i for i, piece in enumerate(tokens[:n])}
    control = {i: tokens[i] for i in range(n, len(tokens))}
    pieces = llama3_byte_pieces(path, vocab, gguf_list(path, meta, "tokenizer.ggml.merges", str), control)
    # the file run.c reads fixes Meta's ids; the GGUF's must agree with them
    bos_id = gguf_int(path, meta, "tokenizer.ggml.bos_token_id", LLAMA3_CONTROL["<|begin_of_text|>"])
    if bos_id != LLAMA3_CONTROL["<|begin_of_text|>"]:
        raise ExportError(f"{path}: tokenizer.ggml.bos_token_id is {bos_id}; Llama 3's is 128000 (<|begin_of_text|>)")
    stops = [LLAMA3_CONTROL[name] for name in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    eos_id = gguf_int(path, meta, "tokenizer.ggml.eos_token_id", stops[0])
    if eos_id not in stops:
        raise ExportError(f"{path}: tokenizer.ggml.eos_token_id is {eos_id}; run.c stops at Llama 3's {stops} only")
    return write_byte_level_tokenizer(out, pieces)


def gguf_qwen_pieces(path, meta, tokens, types):
    """A Qwen GGUF's tokens as qwen_byte_pieces wants them. llama.cpp's converter writes
    the BPE pieces as normal tokens (type 1), the added tokens as control (3, the
    special ones) or user-defined (4), and pads to the model's vocabulary with unused
    tokens (5, "[PAD151669]"), which are left out here as they have no text."""
    while types and types[-1] == 5:
        types, tokens = types[:-1], tokens[:-1]
    vocab = {piece: i for i, piece in enumerate(tokens[:QWEN_N_PIECES]) if types[i] == 1}
    if len(vocab) != QWEN_N_PIECES:
        raise ExportError(f"{path}: tokenizer.ggml.token_type: ids 0..{QWEN_N_PIECES - 1} are not all normal tokens")
    added = {}
    for i in range(QWEN_N_PIECES, len(tokens)):
        if types[i] not in (3, 4):
            raise ExportError(f"{path}: tokenizer.ggml.token_type of id {i} is {types[i]}; Qwen's added tokens "
                              "are control (3) or user-defined (4)")
        added[i] = (tokens[i], types[i] == 3)
    return qwen_byte_pieces(path, vocab, gguf_list(path, meta, "tokenizer.ggml.merges", str), added)


# ===========================================================================
# Models: a common description, and sources that hand out one tensor at a time
#
# Tensor names used below (llama2.c's): tok_embeddings, attention_norm, wq, wk,
# wv, wo, ffn_norm, w1 (gate), w2 (down), w3 (up), norm, output. Per-layer
# tensors are asked for with their layer index. A source returns float32 numpy
# arrays ([out][in] matrices, 1-D norms) with wq/wk already in interleaved RoPE
# order; nothing is loaded before it is asked for, so big models export with
# about one tensor in memory at a time (safetensors and --bin inputs).

LAYER_TENSORS = ("attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3",
                 "q_norm", "k_norm", "bq", "bk", "bv")
# 1-D tensors, always fp32: the norms, Qwen3's q/k norms and Qwen2's q/k/v biases
VECTORS = ("attention_norm", "ffn_norm", "norm", "q_norm", "k_norm", "bq", "bk", "bv")
QK_NORMS, QKV_BIASES = ("q_norm", "k_norm"), ("bq", "bk", "bv")
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_NORM_EPS = 1e-5
FLOAT32_MAX = 3.4028234663852886e38
MAGIC = 0x616B3432
HEADER_SIZE = 256
LEGACY_HEADER_SIZE = 28

# The tensor order of each checkpoint version: the one description that the --bin
# reader (offsets, size check) and the writer walk. A name in LAYER_TENSORS stands
# for that tensor of every layer in turn; "output" (the classifier) is stored only
# when it is not shared with tok_embeddings. freqs_cos and freqs_sin are version
# 0's RoPE tables (llama2.c run.c's freq_cis_real and freq_cis_imag), which the
# writer computes (rope_tables) and nothing reads. q_norm and k_norm are stored only
# for models that have them (Qwen3), bq, bk and bv likewise (Qwen2).
LAYOUTS = {
    0: ("tok_embeddings", "attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3", "norm",
        "freqs_cos", "freqs_sin", "output"),
    1: ("attention_norm", "ffn_norm", "norm", "q_norm", "k_norm", "bq", "bk", "bv", "tok_embeddings", "wq", "wk",
        "wv", "wo", "w1", "w2", "w3", "output"),
}
LAYOUTS[2] = LAYOUTS[1]  # the same order, with the matrices in int8
LAYOUTS[3] = LAYOUTS[1]  # the same order, each matrix in the type its table entry gives

# version 3's type codes
TYPE_FP32, TYPE_INT8, TYPE_Q4K, TYPE_Q6K = 0, 1, 2, 3
Q4K_BLOCK, Q4K_BLOCK_BYTES, Q6K_BLOCK_BYTES = 256, 144, 210  # q6k blocks are 256 values too
BLOCK_BYTES = {TYPE_Q4K: Q4K_BLOCK_BYTES, TYPE_Q6K: Q6K_BLOCK_BYTES}


def layout(version, config):
    """(name, layer) of each tensor that a checkpoint of this version stores, in file order."""
    for name in LAYOUTS[version]:
        if (name == "output" and config.shared_classifier or name in QK_NORMS and not config.qk_norm
                or name in QKV_BIASES and not config.qkv_bias):
            continue
        for layer in range(config.n_layers) if name in LAYER_TENSORS else [None]:
            yield name, layer


def matrix_bytes(n, type_code, group_size):
    """Bytes of n values of a version 3 type."""
    if type_code == TYPE_INT8:
        return n + 4 * (n // group_size)
    return n // Q4K_BLOCK * BLOCK_BYTES[type_code] if type_code in BLOCK_BYTES else 4 * n


def is_quantized(version, name):
    """Version 2 stores every matrix as int8 values plus fp32 scales (version 3 as its
    table says); norms stay fp32."""
    return version >= 2 and name not in VECTORS


def import_numpy():
    """numpy, imported only when a model is exported."""
    try:
        import numpy as np
    except ImportError:
        raise ExportError("model export needs numpy (Debian: apt-get install python3-numpy)")
    return np


def torch_module(why):
    try:
        import torch
    except ImportError:
        raise ExportError(f"{why} needs torch (Debian: apt-get install python3-torch)")
    return torch


def torch_load(torch, path):
    """torch.load, restricted to plain data when this torch allows it."""
    import pickle
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch older than 1.13 has no weights_only
        pass
    except pickle.UnpicklingError:  # older weights-only loaders reject some plain data (floats)
        note(f"{path}: loading with full unpickling (only do this with files you trust)")
    return torch.load(path, map_location="cpu")


def torch_to_numpy(tensor):
    return tensor.detach().to("cpu").float().numpy()


class Config:
    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len,
                 rope_theta=DEFAULT_ROPE_THETA, norm_eps=DEFAULT_NORM_EPS, shared_classifier=True,
                 rope_scaling=None, head_dim=None, qkv_bias=False, qk_norm=False):
        self.dim = int(dim)
        self.hidden_dim = int(hidden_dim)
        self.n_layers = int(n_layers)
        self.n_heads = int(n_heads)
        self.n_kv_heads = int(n_kv_heads)
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.rope_theta = float(rope_theta)
        self.norm_eps = float(norm_eps)
        self.shared_classifier = bool(shared_classifier)
        # Llama 3.1's RoPE scaling: None, or (factor, low_freq_factor, high_freq_factor,
        # original_max_position_embeddings), as transformers' rope_type "llama3" has them
        self.rope_scaling = rope_scaling
        # Qwen3: heads of their own width (None: dim / n_heads), an RMSNorm over each
        # head of q and k; Qwen2: biases on the q, k and v projections
        self.head_dim = None if head_dim is None else int(head_dim)
        self.qkv_bias = bool(qkv_bias)
        self.qk_norm = bool(qk_norm)

    @property
    def head_size(self):
        return self.head_dim if self.head_dim is not None else self.dim // self.n_heads

    @property
    def q_dim(self):
        return self.head_size * self.n_heads

    @property
    def kv_dim(self):
        return self.head_size * self.n_kv_heads

    def check(self):
        if self.n_heads <= 0 or self.head_dim is None and (self.dim <= 0 or self.dim % self.n_heads):
            raise ExportError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.head_size <= 0:
            raise ExportError(f"head size {self.head_size} is not positive")
        if self.head_size % 2:
            raise ExportError(f"head size {self.head_size} is odd: RoPE needs pairs")
        if self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads:
            raise ExportError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if min(self.hidden_dim, self.n_layers, self.vocab_size, self.seq_len) <= 0:
            raise ExportError(f"bad model shape: {self}")
        if self.rope_scaling is not None:
            factor, low, high, original = self.rope_scaling
            # the limits run.c's parse_header checks, on the float32 values it reads
            for name, value in (("factor", factor), ("low_freq_factor", low), ("high_freq_factor", high)):
                if not (0 < value <= FLOAT32_MAX) or f32(value) == 0:
                    raise ExportError(f"rope_scaling {name} {value!r} is not a positive float32 number")
            if not f32(low) < f32(high):
                raise ExportError(f"rope_scaling high_freq_factor {high!r} is not above low_freq_factor {low!r}")
            if not (isinstance(original, int) and 0 < original < 2 ** 31):
                raise ExportError(f"rope_scaling original_max_position_embeddings {original!r} "
                                  "is not a positive 32-bit integer")

    def shape(self, name):
        d, h, kv, v, q = self.dim, self.hidden_dim, self.kv_dim, self.vocab_size, self.q_dim
        rope = (self.seq_len, self.head_size // 2)
        return {"tok_embeddings": (v, d), "output": (v, d), "norm": (d,),
                "attention_norm": (d,), "ffn_norm": (d,),
                "q_norm": (self.head_size,), "k_norm": (self.head_size,), "bq": (q,), "bk": (kv,), "bv": (kv,),
                "wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q),
                "w1": (h, d), "w2": (d, h), "w3": (h, d),
                "freqs_cos": rope, "freqs_sin": rope}[name]

    def __str__(self):
        return (f"dim {self.dim}, hidden_dim {self.hidden_dim}, {self.n_layers} layers, "
                f"{self.n_heads} heads, {self.n_kv_heads} KV heads, vocab {self.vocab_size}, "
                f"seq_len {self.seq_len}, rope_theta {self.rope_theta:g}, norm_eps {self.norm_eps:g}, "
                + (f"head size {self.head_size}, " if self.head_dim is not None else "")
                + ("q/k norm, " if self.qk_norm else "") + ("q/k/v biases, " if self.qkv_bias else "") +
                f"{'shared' if self.shared_classifier else 'separate'} classifier"
                + (", RoPE scaling (llama3: factor {:g}, low_freq_factor {:g}, high_freq_factor {:g}, "
                   "original context {})".format(*self.rope_scaling) if self.rope_scaling else ""))


class Source:
    """Base of the model readers: a Config and tensor(name, layer)."""
    config = None
    show_progress = False  # a line on stderr as the tensors are written (big inputs)
    q80_group_size = None  # the group size at which q80() hands out the source's own int8 values

    def tensor(self, name, layer=None):
        np = import_numpy()
        w = np.ascontiguousarray(self.load(name, layer), dtype=np.float32)
        want = self.config.shape(name)
        if w.shape != want:
            where = name if layer is None else f"{name} of layer {layer}"
            raise ExportError(f"{where} has shape {w.shape}, expected {want}")
        return w

    def load(self, name, layer):
        raise NotImplementedError

    def q80(self, name, layer, group_size):
        """(int8 values, fp32 scales) when the source already holds the tensor so at this
        group size, to be copied exactly rather than quantized again (its shape checked
        by the source); else None."""
        return None

    def exact_type(self, name, layer):
        """Version 3: (type, group size) in which the source holds the matrix exactly
        (q4k, q6k, or int8 at some group size), to be copied as it is; None: requantized."""
        return None

    def exact(self, name, layer):
        """The matrix in exact_type()'s type: q4k or q6k blocks as bytes, or (int8
        values, fp32 scales)."""
        raise NotImplementedError

    def source_type(self, name, layer):
        """The matrix's type in the input, for notes."""
        return "fp32"


def rotate_half_to_interleaved(w, n_heads):
    """Undo Hugging Face's query/key row order.

    In HF checkpoints each head's rows hold first the real parts of all RoPE pairs,
    then the imaginary parts (rotate-half order). run.c rotates adjacent pairs, so
    row j of the first half and row j of the second half must become rows 2j, 2j+1.
    Rows may be matrix rows, bias entries or rows of quantized blocks.
    """
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, 2, half, -1).transpose(0, 2, 1, 3).reshape(w.shape)


def to_interleaved(name, w, config):
    """A tensor in rotate-half order (Hugging Face's, llama.cpp's NEOX one) in run.c's:
    the query rows and bias per query head, the key ones per KV head, and the q/k
    norm weights, which scale each head's values in place."""
    heads = {"wq": config.n_heads, "bq": config.n_heads, "wk": config.n_kv_heads, "bk": config.n_kv_heads,
             "q_norm": 1, "k_norm": 1}.get(name)
    return w if heads is None else rotate_half_to_interleaved(w, heads)


# ---------------------------------------------------------------------------
# Hugging Face folders

SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


class SafetensorsFile:
    """Reads single tensors of a .safetensors file: u64 header size, JSON header, data."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            (header_size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_size))
        header.pop("__metadata__", None)
        self.entries = header
        self.data_start = 8 + header_size

    def read(self, name):
        np = import_numpy()
        entry = self.entries[name]
        dtype = entry["dtype"]
        if dtype not in SAFETENSORS_DTYPES:
            raise ExportError(f"{self.path}: tensor {name} has dtype {dtype}; supported: F32, F16, BF16")
        begin, end = entry["data_offsets"]
        count = math.prod(entry["shape"])
        raw = np.fromfile(self.path, dtype=SAFETENSORS_DTYPES[dtype], count=count,
                          offset=self.data_start + begin)
        if raw.nbytes != end - begin:
            raise ExportError(f"{self.path}: tensor {name} is truncated")
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            values = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            values = raw.astype(np.float32)
        return values.reshape(entry["shape"])


class HuggingFaceSource(Source):
    # architecture -> model_type; Qwen2 adds q/k/v biases, Qwen3 q/k norms and its own head_dim
    SUPPORTED = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3"}

    def __init__(self, folder, seq_len=None):
        config_path = os.path.join(folder, "config.json")
        if not os.path.exists(config_path):
            raise ExportError(f"{folder}: no config.json (is this a Hugging Face model folder?)")
        with open(config_path) as f:
            hf = json.load(f)
        kind = self._refuse_unsupported(hf)
        self.files = self._index(folder)  # tensor name -> reader
        names = set(self.files)
        allowed = re.compile(r"model\.layers\.\d+\.self_attn\.[qkv]_proj\.bias" if kind == "qwen2" else "^$")
        biases = sorted(n for n in names if n.endswith(".bias") and not allowed.fullmatch(n))
        if biases:
            raise ExportError(f"the model has bias tensors ({biases[0]}, ...): run.c has biases only on "
                              "Qwen2's q, k and v projections")

        n_heads = hf["num_attention_heads"]
        tied = hf.get("tie_word_embeddings", False) or "lm_head.weight" not in names
        self.config = Config(
            dim=hf["hidden_size"],
            hidden_dim=hf["intermediate_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=hf.get("num_key_value_heads") or n_heads,
            vocab_size=hf["vocab_size"],
            seq_len=seq_len or hf.get("max_position_embeddings", 2048),
            rope_theta=hf.get("rope_theta", DEFAULT_ROPE_THETA),
            norm_eps=hf.get("rms_norm_eps", 1e-6),  # HF LlamaConfig's default
            shared_classifier=tied,
            rope_scaling=self._rope_scaling(hf),
            head_dim=hf.get("head_dim"),
            qkv_bias=kind == "qwen2",
            qk_norm=kind == "qwen3")
        self.config.check()

    @staticmethod
    def _refuse_unsupported(hf):
        def refuse(field, why):
            raise ExportError(f"config.json: {field} = {json.dumps(hf.get(field))}: {why}; run.c cannot run this model")

        supported = HuggingFaceSource.SUPPORTED
        archs = [a for a in hf.get("architectures") or [] if a in supported]
        if hf.get("architectures") and not archs:
            refuse("architectures", "only " + ", ".join(supported) + " are supported")
        kind = supported[archs[0]] if archs else hf.get("model_type")
        if kind not in supported.values():
            refuse("model_type", "only " + ", ".join(supported.values()) + " are supported")
        dim, heads = hf["hidden_size"], hf["num_attention_heads"]
        head_dim = hf.get("head_dim")
        if head_dim is None and dim % heads:
            refuse("num_attention_heads", f"hidden_size {dim} is not a multiple of it, and there is no head_dim")
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2):
            refuse("head_dim", "run.c needs a positive even head size (RoPE rotates pairs)")
        # Qwen's configs carry a sliding_window that only use_sliding_window turns on
        window = hf.get("sliding_window")
        if kind in ("llama", "mistral") and window is not None and window < hf.get("max_position_embeddings", 2048):
            refuse("sliding_window", "sliding-window attention is not supported "
                                     "(it is harmless only when >= max_position_embeddings)")
        if hf.get("use_sliding_window"):
            refuse("use_sliding_window", "sliding-window attention is not supported")
        if hf.get("attention_bias"):
            refuse("attention_bias", "attention biases are not supported (but for Qwen2's q, k and v ones)")
        if hf.get("mlp_bias"):
            refuse("mlp_bias", "MLP biases are not supported")
        if hf.get("partial_rotary_factor", 1.0) != 1.0:
            refuse("partial_rotary_factor", "partial RoPE is not supported")
        for field in ("hidden_act", "hidden_activation"):
            if hf.get(field, "silu") != "silu":
                refuse(field, "only the silu (SwiGLU) activation is supported")
        return kind

    @staticmethod
    def _rope_scaling(hf):
        """Llama 3.1's rope_scaling as Config.rope_scaling; None when there is none;
        other kinds of scaling refused with their rope_type named."""
        scaling = hf.get("rope_scaling")
        if not scaling:
            return None
        rope_type = scaling.get("rope_type", scaling.get("type"))  # "type" in older configs
        if rope_type == "default":
            return None
        if rope_type != "llama3":
            raise ExportError(f"config.json: rope_scaling has rope_type {json.dumps(rope_type)}: only \"llama3\" "
                              "(Llama 3.1's) RoPE scaling is supported; run.c cannot run this model")
        keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        missing = [k for k in keys if scaling.get(k) is None]
        if missing:
            raise ExportError(f"config.json: rope_scaling (llama3) has no {missing[0]}")
        for k in keys:
            value = scaling[k]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ExportError(f"config.json: rope_scaling (llama3) {k} = {json.dumps(value)} is not a number")
        original = scaling["original_max_position_embeddings"]
        if not (isinstance(original, int) or original.is_integer()):
            raise ExportError(f"config.json: rope_scaling (llama3) original_max_position_embeddings = {original} "
                              "is not a whole number")
        return tuple(float(scaling[k]) for k in keys[:3]) + (int(original),)

    @staticmethod
    def _index(folder):
        index_path = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index_path):  # sharded: the index names the files
            with open(index_path) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            files = [os.path.join(folder, name) for name in files]
        elif os.path.exists(os.path.join(folder, "model.safetensors")):
            files = [os.path.join(folder, "model.safetensors")]
        else:
            files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
        if files:
            index = {}
            for path in files:
                reader = SafetensorsFile(path)
                for name in reader.entries:
                    index[name] = reader
            return index
        files = sorted(glob.glob(os.path.join(folder, "pytorch_model*.bin")))
        if files:
            torch = torch_module("reading pytorch_model*.bin")
            index = {}
            for path in files:
                reader = TorchFile(torch, path)
                for name in reader.names():
                    index[name] = reader
            return index
        raise ExportError(f"{folder}: no *.safetensors or pytorch_model*.bin files")

    HF_NAMES = {
        "tok_embeddings": "model.embed_tokens.weight",
        "norm": "model.norm.weight",
        "output": "lm_head.weight",
        "attention_norm": "model.layers.{}.input_layernorm.weight",
        "wq": "model.layers.{}.self_attn.q_proj.weight",
        "wk": "model.layers.{}.self_attn.k_proj.weight",
        "wv": "model.layers.{}.self_attn.v_proj.weight",
        "wo": "model.layers.{}.self_attn.o_proj.weight",
        "ffn_norm": "model.layers.{}.post_attention_layernorm.weight",
        "w1": "model.layers.{}.mlp.gate_proj.weight",
        "w2": "model.layers.{}.mlp.down_proj.weight",
        "w3": "model.layers.{}.mlp.up_proj.weight",
        "bq": "model.layers.{}.self_attn.q_proj.bias",
        "bk": "model.layers.{}.self_attn.k_proj.bias",
        "bv": "model.layers.{}.self_attn.v_proj.bias",
        "q_norm": "model.layers.{}.self_attn.q_norm.weight",
        "k_norm": "model.layers.{}.self_attn.k_norm.weight",
    }

    def load(self, name, layer):
        hf_name = self.HF_NAMES[name].format(layer)
        if hf_name not in self.files:
            raise ExportError(f"tensor {hf_name} not found")
        return to_interleaved(name, self.files[hf_name].read(hf_name), self.config)


class TorchFile:
    """A torch state_dict file (pytorch_model*.bin), loaded when first read."""

    def __init__(self, torch, path):
        self.torch, self.path, self.state = torch, path, None

    def _load(self):
        if self.state is None:
            self.state = torch_load(self.torch, self.path)
        return self.state

    def names(self):
        return list(self._load())

    def read(self, name):
        return torch_to_numpy(self._load()[name])


# ---------------------------------------------------------------------------
# Meta's original checkpoints: params.json + consolidated.NN.pth

class MetaSource(Source):
    # Model-parallel shards split these along dim 0 (column-parallel) or dim 1.
    CONCAT_AXIS = {"wq": 0, "wk": 0, "wv": 0, "w1": 0, "w3": 0, "output": 0,
                   "wo": 1, "w2": 1, "tok_embeddings": 1}
    META_NAMES = {
        "tok_embeddings": "tok_embeddings.weight", "norm": "norm.weight", "output": "output.weight",
        "attention_norm": "layers.{}.attention_norm.weight", "ffn_norm": "layers.{}.ffn_norm.weight",
        "wq": "layers.{}.attention.wq.weight", "wk": "layers.{}.attention.wk.weight",
        "wv": "layers.{}.attention.wv.weight", "wo": "layers.{}.attention.wo.weight",
        "w1": "layers.{}.feed_forward.w1.weight", "w2": "layers.{}.feed_forward.w2.weight",
        "w3": "layers.{}.feed_forward.w3.weight",
    }

    def __init__(self, folder, seq_len=None):
        torch = torch_module("--meta")
        with open(os.path.join(folder, "params.json")) as f:
            params = json.load(f)
        if params.get("use_scaled_rope"):
            raise ExportError("params.json: use_scaled_rope = true: params.json does not give the scaling's "
                              "parameters (Meta's code fixes them per release); export the Hugging Face "
                              "release with --hf instead")
        paths = sorted(glob.glob(os.path.join(folder, "consolidated.*.pth")))
        if not paths:
            raise ExportError(f"{folder}: no consolidated.*.pth files")
        self.shards = [torch_load(torch, p) for p in paths]

        dim, n_heads = params["dim"], params["n_heads"]
        first = self.shards[0]
        vocab = params.get("vocab_size", -1)
        if vocab is None or vocab <= 0:
            vocab = first["tok_embeddings.weight"].shape[0]
        hidden = sum(s["layers.0.feed_forward.w1.weight"].shape[0] for s in self.shards)
        rule = self.hidden_dim_rule(dim, params.get("multiple_of", 256), params.get("ffn_dim_multiplier"))
        if hidden != rule:
            note(f"hidden_dim {hidden} (from the weights) differs from the multiple_of rule's {rule}; using {hidden}")
        self.config = Config(
            dim=dim, hidden_dim=hidden, n_layers=params["n_layers"], n_heads=n_heads,
            n_kv_heads=params.get("n_kv_heads") or n_heads, vocab_size=vocab,
            seq_len=seq_len or 4096,
            rope_theta=params.get("rope_theta", DEFAULT_ROPE_THETA),
            norm_eps=params.get("norm_eps", DEFAULT_NORM_EPS),
            shared_classifier="output.weight" not in first)
        self.config.check()

    @staticmethod
    def hidden_dim_rule(dim, multiple_of, ffn_dim_multiplier):
        hidden = int(2 * (4 * dim) / 3)
        if ffn_dim_multiplier is not None:
            hidden = int(ffn_dim_multiplier * hidden)
        return multiple_of * ((hidden + multiple_of - 1) // multiple_of)

    def load(self, name, layer):
        np = import_numpy()
        key = self.META_NAMES[name].format(layer)
        parts = [torch_to_numpy(s[key]) for s in self.shards]
        if len(parts) == 1 or name not in self.CONCAT_AXIS:
            return parts[0]
        return np.concatenate(parts, axis=self.CONCAT_AXIS[name])


# ---------------------------------------------------------------------------
# llama2.c training checkpoints (ckpt.pt: {"model": state_dict, "model_args": {...}})

class TrainingCheckpointSource(Source):
    def __init__(self, path, seq_len=None):
        np = import_numpy()
        torch = torch_module("--checkpoint")
        checkpoint = torch_load(torch, path)
        if not isinstance(checkpoint, dict) or "model" not in checkpoint or "model_args" not in checkpoint:
            raise ExportError(f"{path}: not a llama2.c checkpoint (a dict with 'model' and 'model_args')")
        prefix = "_orig_mod."  # left by torch.compile
        self.state = {k[len(prefix):] if k.startswith(prefix) else k: v
                      for k, v in checkpoint["model"].items()}
        args = checkpoint["model_args"]
        embedding = self.state["tok_embeddings.weight"]
        output = self.state.get("output.weight")
        shared = output is None or (output.shape == embedding.shape and
                                    np.array_equal(torch_to_numpy(output), torch_to_numpy(embedding)))
        n_heads = args["n_heads"]
        self.config = Config(
            dim=args["dim"],
            hidden_dim=self.state["layers.0.feed_forward.w1.weight"].shape[0],
            n_layers=args["n_layers"], n_heads=n_heads,
            n_kv_heads=args.get("n_kv_heads") or n_heads,
            vocab_size=args.get("vocab_size") or embedding.shape[0],
            seq_len=seq_len or args["max_seq_len"],
            rope_theta=args.get("rope_theta") or DEFAULT_ROPE_THETA,
            norm_eps=args.get("norm_eps") or DEFAULT_NORM_EPS,
            shared_classifier=shared)
        self.config.check()

    def load(self, name, layer):
        return torch_to_numpy(self.state[MetaSource.META_NAMES[name].format(layer)])


# ---------------------------------------------------------------------------
# Files run.c reads (v0, v1, v2)

class BinSource(Source):
    def __init__(self, path, seq_len=None):
        self.np = import_numpy()
        self.path = path
        with open(path, "rb") as f:
            header = f.read(HEADER_SIZE)
        if len(header) < LEGACY_HEADER_SIZE:
            raise ExportError(f"{path}: too short for a checkpoint")
        magic, version = struct.unpack_from("<Ii", header, 0)
        if magic == MAGIC:
            if version not in (1, 2, 3):
                raise ExportError(f"{path}: unknown checkpoint version {version}")
            self.version = version
            fields = struct.unpack_from("<7i", header, 8)
            shared = header[36] != 0
            self.group_size = struct.unpack_from("<i", header, 37)[0] if version >= 2 else 0
            if version == 3 and self.group_size != 0:
                raise ExportError(f"{path}: group size {self.group_size} in a version 3 header (must be 0)")
            theta, eps = struct.unpack_from("<ff", header, 44)
            factor, low, high, original = struct.unpack_from("<fffi", header, 52)
            scaling = (factor, low, high, original) if factor != 0 else None
            head_size, qkv_bias, qk_norm = struct.unpack_from("<iBB", header, 68)
            if head_size < 0 or qkv_bias > 1 or qk_norm > 1:
                raise ExportError(f"{path}: bad head size {head_size} or Qwen flags {qkv_bias}, {qk_norm}")
            if factor == 0 and (low, high, original) != (0, 0, 0):
                raise ExportError(f"{path}: RoPE scaling factor is 0 but its other header fields are not")
            offset = HEADER_SIZE
        else:
            self.version = 0
            fields = struct.unpack_from("<7i", header, 0)
            shared = fields[5] > 0
            theta = eps = 0.0
            scaling = None
            head_size = qkv_bias = qk_norm = 0
            offset = LEGACY_HEADER_SIZE
        dim, hidden, layers, heads, kv_heads, vocab, seq = fields
        self.config = Config(dim, hidden, layers, heads, kv_heads, abs(vocab), seq,
                             rope_theta=theta or DEFAULT_ROPE_THETA, norm_eps=eps or DEFAULT_NORM_EPS,
                             shared_classifier=shared, rope_scaling=scaling, head_dim=head_size or None,
                             qkv_bias=qkv_bias, qk_norm=qk_norm)
        self.config.check()
        if self.version == 2 and (self.group_size <= 0 or dim % self.group_size or hidden % self.group_size
                                  or self.config.q_dim % self.group_size):
            raise ExportError(f"{path}: bad group size {self.group_size}")
        tensors = list(layout(self.version, self.config))
        types = {}  # (name, layer) -> (type, group size) of each matrix
        if self.version == 3:
            matrices = [t for t in tensors if t[0] not in VECTORS]
            with open(path, "rb") as f:
                f.seek(offset)
                table = f.read(8 * len(matrices))
            if len(table) < 8 * len(matrices):
                raise ExportError(f"{path}: truncated type table")
            for k, key in enumerate(matrices):
                t, g = struct.unpack_from("<ii", table, 8 * k)
                cols = self.config.shape(key[0])[1]
                if not (t == TYPE_FP32 and g == 0 or t == TYPE_INT8 and g > 0 and cols % g == 0
                        or t in BLOCK_BYTES and g == 0 and cols % Q4K_BLOCK == 0):
                    raise ExportError(f"{path}: {key[0]} of layer {key[1]}: bad type {t} / group size {g}")
                types[key] = (t, g)
            offset += len(table)
        elif self.version == 2:
            types = {t: (TYPE_INT8, self.group_size) for t in tensors if t[0] not in VECTORS}
        self.places = {}  # (name, layer) -> (offset, shape, (type, group size))
        for name, layer in tensors:
            shape, (t, g) = self.config.shape(name), types.get((name, layer), (TYPE_FP32, 0))
            self.places[name, layer] = (offset, shape, (t, g))
            n = math.prod(shape)
            offset += matrix_bytes(n, t, g)
        size = os.path.getsize(path)
        if offset != size:
            raise ExportError(f"{path}: file is {size} bytes, the header says {offset}")
        # Only now: the RoPE tables above have the file's own seq_len.
        self.config.seq_len = seq_len or seq
        self.config.check()

    def _place(self, name, layer):
        if name == "output" and self.config.shared_classifier:
            name = "tok_embeddings"
        return self.places[name, layer]

    def load(self, name, layer):
        np = self.np
        offset, shape, (t, g) = self._place(name, layer)
        n = math.prod(shape)
        if t == TYPE_FP32:
            return np.fromfile(self.path, dtype="<f4", count=n, offset=offset).reshape(shape)
        if t == TYPE_Q4K:
            return dequantize_q4_k(self._stored(name, layer)).reshape(shape)
        if t == TYPE_Q6K:
            return dequantize_q6_k(self._stored(name, layer)).reshape(shape)
        q, scales = self._stored(name, layer)
        return (q.astype(np.float32).reshape(-1, g) * scales[:, None]).reshape(shape)

    def source_type(self, name, layer):
        t, g = self._place(name, layer)[2]
        return {TYPE_FP32: "fp32", TYPE_INT8: f"int8/{g}", TYPE_Q4K: "q4k", TYPE_Q6K: "q6k"}[t]

    def exact_type(self, name, layer):
        _, shape, kind = self._place(name, layer)
        if kind[0] == TYPE_Q6K:  # a q6k matrix of an odd number of blocks (older export.py) goes as int8 per 16
            return q6k_type(shape)
        return kind if kind[0] != TYPE_FP32 else None

    def exact(self, name, layer):
        data = self._stored(name, layer)
        return q6k_kept(data) if self._place(name, layer)[2][0] == TYPE_Q6K else data

    def _stored(self, name, layer):
        """The matrix as the file stores it: q4k or q6k blocks, or (int8 values, fp32 scales)."""
        np = self.np
        offset, shape, (t, g) = self._place(name, layer)
        n = math.prod(shape)
        if t in BLOCK_BYTES:
            count = n // Q4K_BLOCK * BLOCK_BYTES[t]
            return np.fromfile(self.path, dtype=np.uint8, count=count, offset=offset).reshape(-1, BLOCK_BYTES[t])
        q = np.fromfile(self.path, dtype=np.int8, count=n, offset=offset)
        return q, np.fromfile(self.path, dtype="<f4", count=n // g, offset=offset + n)


# ---------------------------------------------------------------------------
# GGUF files (llama.cpp's format)
#
# Little-endian, versions 2 and 3: "GGUF", uint32 version, uint64 tensor count,
# uint64 metadata count; each metadata entry a string key, a uint32 value type and
# the value; each tensor's string name, uint32 n_dims, n_dims x uint64 ne (innermost
# first: ne[0] is the row length), uint32 ggml type and uint64 offset; then, from the
# next multiple of general.alignment (default 32), the tensor data, each tensor at
# its offset from there. A string is a uint64 byte count and UTF-8 bytes; an array a
# uint32 element type, a uint64 count and the elements (arrays may hold arrays).

GGUF_MAGIC = b"GGUF"
GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
GGUF_STRING, GGUF_ARRAY = 8, 9
GGUF_MAX_NESTING = 16  # arrays of arrays of ...: far deeper than any file needs

# Tensor types read here: ggml type id -> (name, values per block, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
              14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}
GGML_Q8_0 = 8
# the other ggml types, named in the error that refuses them
GGML_OTHER_TYPES = {4: "Q4_2, removed", 5: "Q4_3, removed", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K",
                    16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
                    22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
                    29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}


def is_gguf(path):
    with open(path, "rb") as f:
        return f.read(4) == GGUF_MAGIC


class GGUFTensor:
    def __init__(self, ne, ggml_type, offset):
        self.ne, self.type, self.offset = ne, ggml_type, offset

    @property
    def shape(self):
        """numpy's order: outermost first (GGUF lists ne innermost first)."""
        return tuple(reversed(self.ne))


class GGUFFile:
    """A GGUF file, memory-mapped: its metadata (key -> value) and its tensors' places.

    Only the standard library is needed for the metadata; tensor data (numpy) is read
    from the map one tensor at a time.
    """

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 24:
                raise ExportError(f"{path}: too short for a GGUF file")
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0
        magic, version = self._read("4sI", "the header")
        if magic != GGUF_MAGIC:
            raise ExportError(f"{path}: not a GGUF file (it does not start with \"GGUF\")")
        if version not in (2, 3):
            swapped = " (a big-endian file?)" if version & 0xFFFF == 0 else ""
            raise ExportError(f"{path}: GGUF version {version}{swapped}; only little-endian versions 2 and 3 "
                              "are supported")
        n_tensors, n_metadata = self._read("QQ", "the header")
        # the smallest entries: a tensor's name length, n_dims, one ne, type and offset; a key's length and type
        if n_tensors * 32 + n_metadata * 12 > len(self.map):
            raise ExportError(f"{path}: the header's counts ({n_tensors} tensors, {n_metadata} metadata entries) "
                              f"do not fit in a file of {len(self.map)} bytes")
        self.metadata = {}
        for _ in range(n_metadata):
            key = self._string("a metadata key")
            (kind,) = self._read("I", f"metadata key {key}")
            if key in self.metadata:
                raise ExportError(f"{path}: metadata key {key} appears twice")
            self.metadata[key] = self._value(kind, key, 0)
        alignment = self.metadata.get("general.alignment", 32)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
            raise ExportError(f"{path}: general.alignment is {alignment!r}, not a power of two")
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string("a tensor name")
            (n_dims,) = self._read("I", f"tensor {name}")
            if not 1 <= n_dims <= 4:
                raise ExportError(f"{path}: tensor {name} has {n_dims} dimensions (GGUF allows 1 to 4)")
            ne = self._read(f"{n_dims}Q", f"tensor {name}")
            ggml_type, offset = self._read("IQ", f"tensor {name}")
            if offset % alignment:
                raise ExportError(f"{path}: tensor {name} is at offset {offset}, not a multiple of the "
                                  f"alignment {alignment}")
            if name in self.tensors:
                raise ExportError(f"{path}: tensor {name} appears twice")
            self.tensors[name] = GGUFTensor(ne, ggml_type, offset)
        self.data_start = -(-self.pos // alignment) * alignment

    def _read(self, fmt, what):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.map):
            raise ExportError(f"{self.path}: the file ends inside {what} (truncated?)")
        values = struct.unpack_from("<" + fmt, self.map, self.pos)
        self.pos += size
        return values

    def _string(self, what):
        (n,) = self._read("Q", what)
        if n > len(self.map) - self.pos:
            raise ExportError(f"{self.path}: the file ends inside {what} (truncated?)")
        raw = self.map[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ExportError(f"{self.path}: {what} is not UTF-8 text")

    def _value(self, kind, key, depth):
        what = f"metadata key {key}"
        if kind in GGUF_SCALARS:
            return self._read(GGUF_SCALARS[kind], what)[0]
        if kind == GGUF_STRING:
            return self._string(what)
        if kind != GGUF_ARRAY:
            raise ExportError(f"{self.path}: {what} has value type {kind}, which GGUF does not define")
        if depth == GGUF_MAX_NESTING:
            raise ExportError(f"{self.path}: {what} nests arrays more than {GGUF_MAX_NESTING} deep")
        item, count = self._read("IQ", what)
        if item in GGUF_SCALARS:  # numbers: all at once
            if count * struct.calcsize(GGUF_SCALARS[item]) > len(self.map) - self.pos:
                raise ExportError(f"{self.path}: the file ends inside {what} (truncated?)")
            return list(self._read(f"{count}{GGUF_SCALARS[item]}", what))
        return [self._value(item, key, depth + 1) for _ in range(count)]

    def blocks(self, tensor):
        """The tensor's data as uint8 [n_blocks][bytes per block], a view of the map."""
        np = import_numpy()
        _, per_block, block_bytes = GGML_TYPES[tensor.type]
        n_blocks = math.prod(tensor.ne) // per_block
        return np.frombuffer(self.map, np.uint8, n_blocks * block_bytes,
                             self.data_start + tensor.offset).reshape(n_blocks, block_bytes)

    def read_float32(self, tensor):
        """The tensor in float32, in its shape: F32 as a view of the map, other types
        dequantized a slice of blocks at a time (so that the temporaries stay small)."""
        np = import_numpy()
        name, per_block, _ = GGML_TYPES[tensor.type]
        if name == "F32":
            values = np.frombuffer(self.map, "<f4", math.prod(tensor.ne), self.data_start + tensor.offset)
            return values.reshape(tensor.shape)
        blocks = self.blocks(tensor)
        out = np.empty((len(blocks), per_block), np.float32)
        step = max(1, (1 << 20) // per_block)
        with np.errstate(invalid="ignore"):  # an infinite fp16 scale times 0 gives NaN, as in ggml: no warning
            for begin in range(0, len(blocks), step):
                out[begin:begin + step] = DEQUANTIZE[name](blocks[begin:begin + step])
        return out.reshape(tensor.shape)

    def release(self):
        """Drop the pages read so far from this process (the page cache keeps them), so
        that its memory stays about one tensor's, whatever the size of the file."""
        if hasattr(self.map, "madvise"):
            self.map.madvise(mmap.MADV_DONTNEED)


def gguf_value(path, meta, key, kinds, default=None):
    """meta[key], checked to be one of the Python types kinds (bool is not a number);
    default when the key is absent, an error when there is no default."""
    if key not in meta:
        if default is None:
            raise ExportError(f"{path}: metadata key {key} is missing")
        return default
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ExportError(f"{path}: metadata key {key} is {value!r}, not of the expected type")
    return value


def gguf_int(path, meta, key, default=None):
    return gguf_value(path, meta, key, int, default)


def gguf_float(path, meta, key, default=None):
    return float(gguf_value(path, meta, key, (int, float), default))


def gguf_list(path, meta, key, kinds):
    """meta[key]: an array whose items are all of the Python types kinds."""
    value = gguf_value(path, meta, key, list)
    if not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value):
        raise ExportError(f"{path}: metadata key {key} is not an array of the expected type")
    return value


# Dequantization, by the formulas of ggml's block formats. Each function takes
# blocks as uint8 [n][bytes per block] and returns float32 [n][values per block],
# computed in float32 in the order ggml's reference code uses.

def f16_field(blocks, start):
    """The fp16 number at bytes start, start + 1 of each block, as float32 [n][1]."""
    np = import_numpy()
    return np.ascontiguousarray(blocks[:, start:start + 2]).view("<f2").astype(np.float32)


def nibbles(qs):
    """Values j and j + 16 of a 32-value block are byte j's low and high 4 bits."""
    np = import_numpy()
    return np.concatenate([qs & 0xF, qs >> 4], axis=1)


def fifth_bits(qh_bytes):
    """Bit j of the little-endian uint32 qh is the fifth (value 16) bit of value j."""
    np = import_numpy()
    qh = np.ascontiguousarray(qh_bytes).view("<u4")
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4


def dequantize_q4_0(b):  # fp16 d, 16 bytes of 4-bit q: (q - 8) * d
    return (nibbles(b[:, 2:18]).astype("f4") - 8) * f16_field(b, 0)


def dequantize_q4_1(b):  # fp16 d, fp16 m, 16 bytes of 4-bit q: q * d + m
    return nibbles(b[:, 4:20]) * f16_field(b, 0) + f16_field(b, 2)


def dequantize_q5_0(b):  # fp16 d, uint32 fifth bits, 16 bytes of low 4 bits: (q - 16) * d
    return ((nibbles(b[:, 6:22]) | fifth_bits(b[:, 2:6])).astype("f4") - 16) * f16_field(b, 0)


def dequantize_q5_1(b):  # fp16 d, fp16 m, uint32 fifth bits, 16 bytes of low 4 bits: q * d + m
    return (nibbles(b[:, 8:24]) | fifth_bits(b[:, 4:8])).astype("f4") * f16_field(b, 0) + f16_field(b, 2)


def dequantize_q8_0(b):  # fp16 d, 32 int8 q: q * d
    np = import_numpy()
    return b[:, 2:].view(np.int8) * f16_field(b, 0)


def k_scales(b):
    """Q4_K and Q5_K: the scale and the min of each of the 8 sub-blocks of 32 values,
    6-bit numbers packed in bytes 4-15, times the block's fp16 d and dmin (bytes 0-3).
    Sub-blocks 0-3 have the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks
    4-7 the nibbles of bytes 8-11, with the top 2 bits of bytes 0-3 and 4-7 above them."""
    np = import_numpy()
    s = b[:, 4:16]
    scale = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    minimum = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return f16_field(b, 0) * scale, f16_field(b, 2) * minimum


def dequantize_q4_k(b):
    """256 values in 8 sub-blocks of 32: scale * q - min. Bytes 16-143 hold q, each
    32 bytes giving two sub-blocks, the low nibbles first."""
    np = import_numpy()
    qs = b[:, 16:144].reshape(-1, 4, 32)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
    scale, minimum = k_scales(b)
    return (scale[:, :, None] * q - minimum[:, :, None]).reshape(-1, 256)


def dequantize_q5_k(b):
    """Q4_K's layout with a fifth bit per value: bytes 16-47 (qh), bit k of qh[l] for
    value l of sub-block k; the low 4 bits are in bytes 48-175."""
    np = import_numpy()
    qs = b[:, 48:176].reshape(-1, 4, 32)
    low = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
    high = ((b[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4
    scale, minimum = k_scales(b)
    return (scale[:, :, None] * (low | high) - minimum[:, :, None]).reshape(-1, 256)


def q6_k_parts(b):
    """Q6_K as int8 values q - 32 [n][16][16] and the fp32 scale d * scale of each 16
    [n][16] (exact: an fp16 times an int8). 256 values as two halves of 128: bytes 0-127
    the low 4 bits (64 per half), 128-191 the top 2 bits (32 per half), 192-207 an int8
    scale per 16 values, 208-209 fp16 d. In a half, value 32 * k + l (k = 0..3) has the
    low (k < 2) or high nibble of low byte l + 32 * (k % 2), and bits 2k, 2k + 1 of high
    byte l."""
    np = import_numpy()
    ql = b[:, 0:128].reshape(-1, 2, 2, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32)
    low = np.stack([ql[:, :, 0] & 0xF, ql[:, :, 1] & 0xF, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
    high = (qh >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3
    q = ((low | (high << 4)).astype(np.int8) - np.int8(32)).reshape(-1, 16, 16)
    return q, f16_field(b, 208) * b[:, 192:208].view(np.int8)


def dequantize_q6_k(b):
    """d * scale * (q - 32) (see q6_k_parts)."""
    q, scale = q6_k_parts(b)
    return (scale[:, :, None] * q).reshape(-1, 256)


def dequantize_f16(b):
    return b.view("<f2").astype("f4")


def dequantize_bf16(b):  # bfloat16 is the top half of a float32
    np = import_numpy()
    return (b.view("<u2").astype(np.uint32) << 16).view(np.float32)


DEQUANTIZE = {"F16": dequantize_f16, "BF16": dequantize_bf16, "Q4_0": dequantize_q4_0, "Q4_1": dequantize_q4_1,
              "Q5_0": dequantize_q5_0, "Q5_1": dequantize_q5_1, "Q8_0": dequantize_q8_0, "Q4_K": dequantize_q4_k,
              "Q5_K": dequantize_q5_k, "Q6_K": dequantize_q6_k}

# Version 3 keeps these GGUF types exactly: Q4_K and Q6_K as they are; Q8_0 (q * d) and
# Q4_0 ((q - 8) * d) as int8 with their scales.
EXACT_TYPES = {"Q4_K": (TYPE_Q4K, 0), "Q6_K": (TYPE_Q6K, 0), "Q8_0": (TYPE_INT8, 32), "Q4_0": (TYPE_INT8, 32)}

# A Q6_K matrix of an odd number of blocks (210 bytes each) would leave what follows it 2
# bytes off the 4-byte alignment run.c needs for float tensors (it refuses such a file).
# Version 3 stores it as int8 per 16 instead: q - 32 (-32..31) and the scale d * scale of
# each 16 (q6_k_parts), the same numbers exactly (an fp16 times an int8 is exact in fp32).
Q6K_INT8_GROUP = 16


def q6k_type(shape):
    """Version 3's (type, group size) for a Q6_K matrix of this shape: q6k, or int8 per 16
    when its blocks are an odd number."""
    return (TYPE_INT8, Q6K_INT8_GROUP) if math.prod(shape) // Q4K_BLOCK % 2 else (TYPE_Q6K, 0)


def exact_type_of(kind, shape):
    """The (type, group size) in which version 3 keeps a matrix of ggml type kind exactly
    (EXACT_TYPES, with q6k_type's exception); None: it is requantized."""
    t = EXACT_TYPES.get(kind)
    return q6k_type(shape) if t == (TYPE_Q6K, 0) else t


def q6k_kept(blocks):
    """Q6_K blocks (uint8 [n][210]) as q6k_type() stores them: the blocks themselves, or,
    for an odd number of them, (int8 values, fp32 scales per 16)."""
    if len(blocks) % 2 == 0:
        return blocks
    q, scale = q6_k_parts(blocks)
    return q.ravel(), scale.ravel()


def exact_parts(kind, blocks):
    """A matrix of a type EXACT_TYPES keeps, from its blocks (uint8 [n][block bytes]):
    Q4_K's and Q6_K's blocks as they are (Q6_K's as int8 per 16 when they are an odd
    number: q6k_kept), the others as (int8 values, fp32 scales)."""
    np = import_numpy()
    if kind == "Q4_K":
        return blocks
    if kind == "Q6_K":
        return q6k_kept(blocks)
    if kind == "Q8_0":
        q, scale = np.ascontiguousarray(blocks[:, 2:]).view(np.int8), f16_field(blocks, 0)
    else:
        q, scale = nibbles(blocks[:, 2:18]).astype(np.int8) - np.int8(8), f16_field(blocks, 0)
    return q.ravel(), scale.ravel()


# ===========================================================================
# Quantization as llama-quantize does it without an importance matrix (--quant): ggml's
# quantize_row_*_ref, step for step in float32 (sums added left to right as its loops
# add them), vectorized over blocks. Each quantizer takes float32 [n][values per block]
# and returns the blocks' bytes, uint8 [n][block bytes].

def nearest_int(v):
    """ggml's nearest_int: the low mantissa bits of v + 1.5 * 2^23 in float32, which is
    v rounded half to even (and, as in C, something definite for any input)."""
    np = import_numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        bits = (np.asarray(v, np.float32) + np.float32(12582912.0)).view(np.int32)
    return (bits & 0x7FFFFF) - 0x400000


def sum_in_order(a):
    """The sum along the last axis, left to right in float32 (numpy's sum is pairwise).
    Fast on Fortran-ordered arrays, whose columns are contiguous."""
    total = a[..., 0].copy()
    for i in range(1, a.shape[-1]):
        total += a[..., i]
    return total


def fp16_bytes(x):
    """float32 [n] -> fp16 (round to nearest even, as ggml's conversion) bytes [n][2]."""
    np = import_numpy()
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype("<f2").view(np.uint8).reshape(-1, 2)


def as_fp16(x):
    """x rounded to fp16 and back: the value a block's fp16 field holds."""
    np = import_numpy()
    return fp16_bytes(x).view("<f2").astype(np.float32).reshape(np.shape(x))


def inverse_or_zero(d):
    """id = d ? 1.0f/d : 0.0f"""
    np = import_numpy()
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)


def c_int8(v):
    """C's (int8_t) of a float on x86-64: truncated to int32 (INT_MIN when out of range
    or NaN), the low byte kept."""
    np = import_numpy()
    with np.errstate(invalid="ignore"):
        fits = np.abs(v) < 2.0 ** 31
        i = np.where(fits, np.trunc(np.where(fits, v, 0)), -2.0 ** 31).astype(np.int64)
    return ((i + 128) & 0xFF) - 128


def signed_absmax(x):
    """Each row's first value of the largest magnitude (ggml's `if (amax < fabsf(v))` loop)."""
    np = import_numpy()
    return x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]


def quantize_q8_0(x):
    """d = amax / 127, q = roundf(x / d) (half away from zero)."""
    np = import_numpy()
    d = np.abs(x).max(axis=1) / np.float32(127)
    with np.errstate(invalid="ignore", over="ignore"):
        v = x * inverse_or_zero(d)[:, None]
        t = np.trunc(v)
        q = t + np.where(np.abs(v - t) >= 0.5, np.sign(v), np.float32(0))
    return np.concatenate([fp16_bytes(d), c_int8(q).astype(np.int8).view(np.uint8)], axis=1)


def quantize_q5_0(x):
    """d = (value of largest magnitude) / -16, q = min(31, (int8)(x / d + 16.5)); the low 4
    bits of value j and j + 16 in byte j, the fifth bits in the uint32 at bytes 2-5."""
    np = import_numpy()
    d = signed_absmax(x) / np.float32(-16)
    with np.errstate(invalid="ignore", over="ignore"):
        xi = np.minimum(31, c_int8(x * inverse_or_zero(d)[:, None] + np.float32(16.5))) & 0xFF
    qh = (((xi >> 4) & 1) << np.arange(32)).sum(axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)
    qs = ((xi[:, :16] & 0xF) | ((xi[:, 16:] & 0xF) << 4)).astype(np.uint8)
    return np.concatenate([fp16_bytes(d), qh, qs], axis=1)


def quantize_q5_1(x):
    """d = (max - min) / 31, q = (uint8)((x - min) / d + 0.5); fp16 d and min, then
    Q5_0's fifth bits and low nibbles."""
    np = import_numpy()
    lo = x.min(axis=1)
    d = (x.max(axis=1) - lo) / np.float32(31)
    with np.errstate(invalid="ignore", over="ignore"):
        xi = c_int8((x - lo[:, None]) * inverse_or_zero(d)[:, None] + np.float32(0.5)) & 0xFF
    qh = (((xi >> 4) & 1) << np.arange(32)).sum(axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)
    qs = ((xi[:, :16] & 0xF) | ((xi[:, 16:] & 0xF) << 4)).astype(np.uint8)
    return np.concatenate([fp16_bytes(d), fp16_bytes(lo), qh, qs], axis=1)


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """ggml's make_qkx2_quants (squared error) on each row of x with weights w: levels 0..nmax
    for scale * L + min with min <= 0, the best of the scales (rmin + rdelta * i + nmax) /
    (max - min) for i = 0..nstep, each with its least-squares scale and min, by weighted
    error against nmax / (max - min). Returns (L, scale, -min)."""
    np = import_numpy()
    f = np.float32
    lo, hi = x.min(axis=1), x.max(axis=1)
    lo = np.where(lo > 0, f(0), lo)
    flat = hi == lo
    sum_w, sum_x = sum_in_order(w), sum_in_order(w * x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = f(nmax) / (hi - lo)
        scale = f(1) / iscale
        L = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax).astype(f)
        diff = scale[:, None] * L + lo[:, None] - x
        best = sum_in_order(w * (diff * diff))
        the_min = lo
        for step in range(nstep + 1):  # each try starts from the best min so far, as ggml's loop does
            iscale = (f(rmin) + f(rdelta) * f(step) + f(nmax)) / (hi - the_min)
            levels = np.clip(nearest_int(iscale[:, None] * (x - the_min[:, None])), 0, nmax).astype(f)
            wl = w * levels
            sum_l, sum_l2, sum_xl = sum_in_order(wl), sum_in_order(wl * levels), sum_in_order(wl * x)
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            positive = this_min > 0
            this_min = np.where(positive, f(0), this_min)
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            diff = this_scale[:, None] * levels + this_min[:, None] - x
            error = sum_in_order(w * (diff * diff))
            better = (D > 0) & (error < best)
            L = np.where(better[:, None], levels, L)
            best = np.where(better, error, best)
            scale = np.where(better, this_scale, scale)
            the_min = np.where(better, this_min, the_min)
    L[flat] = 0  # max == min: all levels 0, scale 0, the min kept
    return L.astype(np.int64), np.where(flat, f(0), scale), -np.where(flat, lo, the_min)


def quantize_k(x, nmax, rmin, rdelta, nstep):
    """quantize_row_q4_K_ref and q5_K_ref up to the packing: 8 sub-blocks of 32, each
    make_qkx2_quants(nmax, weights rms + |x|); the scales and mins as 6-bit multiples of
    fp16 d = max scale / 63 and dmin = max min / 63; then each value requantized with its
    sub-block's rounded scale and min (where that scale is not 0). Returns the 16 bytes
    of d, dmin and the packed scales, and the levels [n][256]."""
    np = import_numpy()
    f, nb = np.float32, len(x)
    sub = np.asfortranarray(x.reshape(nb * 8, 32))  # see sum_in_order
    rms = np.sqrt(sum_in_order(sub * sub) / f(32))
    L, scales, mins = make_qkx2_quants(sub, rms[:, None] + np.abs(sub), nmax, rmin, rdelta, nstep)
    scales, mins = scales.reshape(nb, 8), mins.reshape(nb, 8)
    max_scale, max_min = np.maximum(scales.max(axis=1), f(0)), np.maximum(mins.max(axis=1), f(0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ls = np.minimum(63, nearest_int(np.where(max_scale > 0, f(63) / max_scale, f(0))[:, None] * scales) & 0xFF)
        lm = np.minimum(63, nearest_int(np.where(max_min > 0, f(63) / max_min, f(0))[:, None] * mins) & 0xFF)
        d_field, dmin_field = max_scale / f(63), max_min / f(63)
        d = as_fp16(d_field)[:, None] * ls.astype(f)
        dm = as_fp16(dmin_field)[:, None] * lm.astype(f)
        again = nearest_int((x.reshape(nb, 8, 32) + dm[:, :, None]) / d[:, :, None])
    L = np.where((d != 0)[:, :, None], np.clip(again, 0, nmax), L.reshape(nb, 8, 32)).reshape(nb, 256)
    packed = np.empty((nb, 12), np.int64)  # sub-blocks 0-3 in 6 bits, 4-7 split over nibbles and top bits
    packed[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    packed[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return np.concatenate([fp16_bytes(d_field), fp16_bytes(dmin_field), packed.astype(np.uint8)], axis=1), L


def quantize_q4_k(x):
    """15 levels, scales (14 + 0.1 i) / (max - min) tried; per 64 values, the first 32
    in the low nibbles of 32 bytes and the next 32 in the high ones."""
    np = import_numpy()
    head, L = quantize_k(x, 15, -1.0, 0.1, 20)
    L = L.reshape(len(x), 4, 2, 32)
    return np.concatenate([head, (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(len(x), 128).astype(np.uint8)], axis=1)


def quantize_q5_k(x):
    """31 levels, scales (30.5 + 0.1 i) / (max - min) tried; Q4_K's nibbles of the low 4
    bits after 32 bytes of fifth bits (bit k of byte l: value l of sub-block k)."""
    np = import_numpy()
    head, L = quantize_k(x, 31, -0.5, 0.1, 15)
    L = L.reshape(len(x), 4, 2, 32)
    fifth = ((L >> 4) & 1) << (2 * np.arange(4)[None, :, None, None] + np.arange(2)[None, None, :, None])
    low = L & 0xF
    return np.concatenate([head, fifth.sum(axis=(1, 2)).astype(np.uint8),
                           (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(len(x), 128).astype(np.uint8)], axis=1)


def make_qx_quants_rmse1(x, nmax):
    """ggml's make_qx_quants(rmse_type 1, no weights) on each row of x: levels -nmax..nmax-1
    for scale * l, weights x^2, the best of the scales -(nmax + 0.1 i) / max for i = 0,
    -9..9 by sum(w x l)^2 / sum(w l^2), each with its least-squares scale. Returns
    (L = l + nmax, scale); a row of magnitude under 1e-15 gives L 0, scale 0."""
    np = import_numpy()
    f = np.float32
    top = signed_absmax(x)
    zero = np.abs(top) < f(1e-15)
    w = x * x

    def attempt(iscale):
        levels = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(f)
        return levels, sum_in_order(w * x * levels), sum_in_order(w * levels * levels)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L, sumlx, suml2 = attempt(f(-nmax) / top)
        scale = np.where(suml2 != 0, sumlx / suml2, f(0))
        best = scale * sumlx
        for step in [i for i in range(-9, 10) if i]:
            levels, sumlx, suml2 = attempt(-(f(nmax) + f(0.1) * f(step)) / top)
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            L = np.where(better[:, None], levels, L)
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    return np.where(zero[:, None], 0, L.astype(np.int64) + nmax), np.where(zero, f(0), scale)


def quantize_q6_k(x):
    """quantize_row_q6_K_ref: 16 sub-blocks of 16, each make_qx_quants(32, rmse 1); the
    scales as int8 multiples of fp16 d = (scale of largest magnitude) / -128; then each
    value requantized with its sub-block's rounded scale (where it is not 0). A block whose
    scales are all under 1e-15 is all zero bytes."""
    np = import_numpy()
    f, nb = np.float32, len(x)
    L, scales = make_qx_quants_rmse1(np.asfortranarray(x.reshape(nb * 16, 16)), 32)  # see sum_in_order
    scales = scales.reshape(nb, 16)
    top = signed_absmax(scales)
    empty = np.abs(top) < f(1e-15)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = f(-128) / top
        d_field = f(1) / iscale
        sc = ((np.minimum(127, nearest_int(iscale[:, None] * scales)) + 128) & 0xFF) - 128
        d = as_fp16(d_field)[:, None] * sc.astype(f)
        again = nearest_int(x.reshape(nb, 16, 16) / d[:, :, None])
    L = np.where((d != 0)[:, :, None], np.clip(again, -32, 31) + 32, L.reshape(nb, 16, 16)).reshape(nb, 2, 4, 32)
    ql = np.concatenate([L[:, :, 0] & 0xF | (L[:, :, 2] & 0xF) << 4, L[:, :, 1] & 0xF | (L[:, :, 3] & 0xF) << 4],
                        axis=2)  # per half of 128: values l and l + 64 in byte l, l + 32 and l + 96 in l + 32
    qh = L[:, :, 0] >> 4 | (L[:, :, 1] >> 4) << 2 | (L[:, :, 2] >> 4) << 4 | (L[:, :, 3] >> 4) << 6
    out = np.concatenate([ql.reshape(nb, 128).astype(np.uint8), qh.reshape(nb, 64).astype(np.uint8),
                          sc.astype(np.int8).view(np.uint8), fp16_bytes(d_field)], axis=1)
    out[empty] = 0
    return out


QUANTIZE = {"Q8_0": quantize_q8_0, "Q5_0": quantize_q5_0, "Q5_1": quantize_q5_1, "Q4_K": quantize_q4_k,
            "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k, "F16": lambda x: fp16_bytes(x.ravel()).reshape(len(x), -1)}
BLOCK_VALUES = {"Q8_0": 32, "Q5_0": 32, "Q5_1": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "F16": 1}


def quantize_blocks(kind, w):
    """float32 values (rows a whole number of blocks) -> uint8 [n][block bytes] of ggml type
    kind, in pieces of about a million values so that the temporaries stay small."""
    np = import_numpy()
    per_block = BLOCK_VALUES[kind]
    blocks = np.ascontiguousarray(w, np.float32).reshape(-1, per_block)
    step = max(1, (1 << 20) // per_block)
    return np.concatenate([QUANTIZE[kind](blocks[i:i + step]) for i in range(0, len(blocks), step)])


# Llama 3.1's and 3.2's low_freq_factor, high_freq_factor and original context: the
# first guess when a GGUF's rope_freqs.weight is turned back into the llama3 rule
LLAMA3_ROPE_DEFAULTS = (1.0, 4.0, 8192)


def llama3_multipliers(freqs, factor, low, high, original):
    """What transformers' llama3 rule (run.c's rope_frequency()) multiplies each frequency by."""
    np = import_numpy()
    wavelength = 2 * math.pi / freqs
    smooth = (original / wavelength - low) / (high - low)
    return np.where(wavelength < original / high, 1.0,
                    np.where(wavelength > original / low, 1 / factor, (1 - smooth) / factor + smooth))


def rope_band_edges(turns, kept, divided, smooth):
    """The llama3 band's edges in turns per position (slow = low_freq_factor / original,
    fast = high_freq_factor / original), from each pair's turns per position, which pairs
    keep their frequency or are divided by the full factor, and the blend s of the others."""
    np = import_numpy()
    band = ~kept & ~divided
    if band.sum() >= 2:  # s = (turns - slow) / (fast - slow): a line
        slope, intercept = np.polyfit(turns[band], smooth, 1)
        return -intercept / slope, -intercept / slope + 1 / slope
    # fewer: the edges are only bounded, slow above the divided pairs, fast below the kept ones
    below = turns[divided].max() if divided.any() else 0.0
    above = turns[kept].min() if kept.any() else math.inf
    if band.sum() == 1:
        # on the line through the pair (u, s), fast = slow + (u - slow) / s falls as slow rises to u
        u, s = turns[band][0], smooth[0]
        lowest = max(below, (above * s - u) / (s - 1)) if above < math.inf else below
        llama = u / (1 + 3 * s)  # the slow edge that makes high_freq_factor 4 low_freq_factor
        slow = llama if lowest < llama < u else (lowest + u) / 2
        return slow, slow + (u - slow) / s
    if above < math.inf:
        return below * (above / below) ** (1 / 3), below * (above / below) ** (2 / 3)
    return 2 * below, 8 * below


def rope_scaling_from_divisors(path, divisors, theta, head_size, known):
    """The llama3 rule's (factor, low_freq_factor, high_freq_factor, original context)
    that gives llama.cpp's per-pair frequency divisors (rope_freqs.weight); None when
    every divisor is 1. known: those of the four that the file's metadata gives.

    The largest divisor is the factor. Between the band edges (wavelengths original /
    high_freq_factor and original / low_freq_factor), 1/divisor = (1 - s) / factor + s
    with s linear in 1 / wavelength, so two pairs in the band fix both edges; with fewer,
    any edges between the kept and the divided pairs do (Llama's high_freq_factor =
    4 low_freq_factor when it fits). Only the edges matter, so the original context is
    the file's, or the one that makes low_freq_factor 1. Round numbers are tried first,
    and whatever is found must give every divisor back to float32 rounding."""
    np = import_numpy()
    d = np.asarray(divisors, np.float64)
    if not (np.all(np.isfinite(d)) and np.all(d >= 1)):
        raise ExportError(f"{path}: rope_freqs.weight holds a value that is not a number >= 1 "
                          "(a frequency divisor); run.c cannot run this model")
    if np.all(d == 1):
        return None
    factor = known.get("factor", float(d.max()))
    freqs = float(theta) ** -(np.arange(0, head_size, 2) / head_size)
    turns = freqs / (2 * math.pi)  # turns per position: 1 / wavelength, falling with the pair index
    kept, divided = d == 1, d == factor
    band = ~kept & ~divided
    # Edges from inconsistent metadata (a factor of 1, say) come out infinite or NaN, quietly:
    # they fail the check below.
    with np.errstate(divide="ignore", invalid="ignore"):
        slow, fast = rope_band_edges(turns, kept, divided, (1 / d[band] - 1 / factor) / (1 - 1 / factor))
    candidates = [(factor, known.get("low", LLAMA3_ROPE_DEFAULTS[0]), known.get("high", LLAMA3_ROPE_DEFAULTS[1]),
                   known.get("original", LLAMA3_ROPE_DEFAULTS[2]))]
    if 0 < slow < fast < math.inf:
        original = known.get("original") or max(1, round(1 / slow))
        low, high = known.get("low", slow * original), known.get("high", fast * original)
        candidates += [(factor, round(low, digits), round(high, digits), original) for digits in range(4)]
        candidates.append((factor, low, high, original))
    for factor, low, high, original in candidates:
        stored = (f32(factor), f32(low), f32(high), int(original))  # as the header holds them
        if 0 < stored[1] < stored[2] and 0 < stored[3] < 2 ** 31 and stored[0] > 0:
            if np.all(np.abs(llama3_multipliers(freqs, *stored) - 1 / d) <= 1e-6):
                return stored
    raise ExportError(f"{path}: rope_freqs.weight: no llama3 RoPE scaling (factor, low_freq_factor, "
                      f"high_freq_factor, original context) gives its {len(d)} frequency divisors; "
                      "run.c cannot run this model")


class GGUFSource(Source):
    """A GGUF file of architecture llama, qwen2 or qwen3. A llama file's query and key
    rows are already in the interleaved-pair order run.c rotates (llama.cpp's converter
    permutes them); qwen2 and qwen3 files keep Hugging Face's rotate-half order (llama.cpp
    rotates them NEOX-style), which is permuted here as for --hf."""

    ARCHITECTURES = ("llama", "qwen2", "qwen3")
    GGUF_NAMES = {
        "tok_embeddings": "token_embd.weight", "norm": "output_norm.weight", "output": "output.weight",
        "attention_norm": "blk.{}.attn_norm.weight", "wq": "blk.{}.attn_q.weight", "wk": "blk.{}.attn_k.weight",
        "wv": "blk.{}.attn_v.weight", "wo": "blk.{}.attn_output.weight", "ffn_norm": "blk.{}.ffn_norm.weight",
        "w1": "blk.{}.ffn_gate.weight", "w2": "blk.{}.ffn_down.weight", "w3": "blk.{}.ffn_up.weight",
        "bq": "blk.{}.attn_q.bias", "bk": "blk.{}.attn_k.bias", "bv": "blk.{}.attn_v.bias",
        "q_norm": "blk.{}.attn_q_norm.weight", "k_norm": "blk.{}.attn_k_norm.weight",
    }
    ROPE_FREQS = "rope_freqs.weight"
    SCALING_KEYS = {"factor": "{}.rope.scaling.factor", "low": "{}.rope.scaling.low_freq_factor",
                    "high": "{}.rope.scaling.high_freq_factor",
                    "original": "{}.rope.scaling.original_context_length"}

    def __init__(self, path, seq_len=None):
        self.path = path
        self.gguf = GGUFFile(path)
        meta, tensors = self.gguf.metadata, self.gguf.tensors
        arch = self.arch = meta.get("general.architecture")
        if arch not in self.ARCHITECTURES:
            raise ExportError(f"{path}: general.architecture is {arch!r}: only \"llama\" (Llama 2 and 3, "
                              "TinyLlama, Mistral), \"qwen2\" (Qwen2, Qwen2.5) and \"qwen3\" are supported")
        self.neox = arch != "llama"  # rotate-half query/key rows
        self._refuse_unsupported()
        dim = gguf_int(path, meta, f"{arch}.embedding_length")
        n_heads = self._per_layer(f"{arch}.attention.head_count")
        if "tokenizer.ggml.tokens" in meta:
            vocab = len(gguf_list(path, meta, "tokenizer.ggml.tokens", str))
        elif "token_embd.weight" in tensors and len(tensors["token_embd.weight"].ne) == 2:
            vocab = tensors["token_embd.weight"].ne[1]
        else:
            raise ExportError(f"{path}: no tokenizer.ggml.tokens and no 2-D token_embd.weight to give the "
                              "vocabulary size")
        # the embedding may have more rows than the tokenizer has pieces (Qwen's 151936 for 151669)
        if "token_embd.weight" in tensors and len(tensors["token_embd.weight"].ne) == 2:
            vocab = max(vocab, tensors["token_embd.weight"].ne[1])
        if gguf_int(path, meta, f"{arch}.vocab_size", vocab) != vocab:
            raise ExportError(f"{path}: {arch}.vocab_size is {meta[f'{arch}.vocab_size']}, but the token list "
                              f"(or token_embd.weight) has {vocab} tokens")
        key_length = gguf_int(path, meta, f"{arch}.attention.key_length", 0) or None
        self.config = Config(
            dim=dim,
            hidden_dim=self._per_layer(f"{arch}.feed_forward_length"),
            n_layers=gguf_int(path, meta, f"{arch}.block_count"),
            n_heads=n_heads,
            n_kv_heads=self._per_layer(f"{arch}.attention.head_count_kv", n_heads),
            vocab_size=vocab,
            seq_len=seq_len or gguf_int(path, meta, f"{arch}.context_length"),
            rope_theta=gguf_float(path, meta, f"{arch}.rope.freq_base", DEFAULT_ROPE_THETA),
            norm_eps=gguf_float(path, meta, f"{arch}.attention.layer_norm_rms_epsilon"),
            shared_classifier="output.weight" not in tensors,
            head_dim=key_length if arch == "qwen3" else None,
            qkv_bias=arch == "qwen2",
            qk_norm=arch == "qwen3")
        self.config.check()
        head_size = self.config.head_size
        for key in (f"{arch}.rope.dimension_count", f"{arch}.attention.key_length",
                    f"{arch}.attention.value_length"):
            if gguf_int(path, meta, key, head_size) != head_size:
                raise ExportError(f"{path}: {key} is {meta[key]}: run.c needs the head size, {head_size} "
                                  "(whole heads rotated, keys and values as wide); run.c cannot run this model")
        self._check_tensors()
        self.config.rope_scaling = self._rope_scaling()
        self.config.check()
        self.show_progress = len(self.gguf.map) > 100 * 10 ** 6
        self.q80_group_size = 32 if any(tensors[self._name(n, l)].type == GGML_Q8_0
                                        for n, l in self._model_tensors() if n not in VECTORS) else None

    def _refuse_unsupported(self):
        path, meta, arch = self.path, self.gguf.metadata, self.arch
        if gguf_int(path, meta, f"{arch}.expert_count", 0) > 0:
            raise ExportError(f"{path}: {arch}.expert_count is {meta[f'{arch}.expert_count']}: mixture-of-experts "
                              "models are not supported; run.c cannot run this model")
        window = gguf_int(path, meta, f"{arch}.attention.sliding_window", 0)
        if 0 < window < gguf_int(path, meta, f"{arch}.context_length", 0):
            raise ExportError(f"{path}: {arch}.attention.sliding_window is {window}: sliding-window attention "
                              "is not supported; run.c cannot run this model")

    def _per_layer(self, key, default=None):
        """A count that GGUF may give once or per layer; run.c needs one for all layers."""
        value = self.gguf.metadata.get(key, default)
        if isinstance(value, list) and value and all(v == value[0] for v in value):
            value = value[0]
        if isinstance(value, list):
            raise ExportError(f"{self.path}: metadata key {key} differs between layers; run.c needs one value")
        return gguf_int(self.path, {key: value} if value is not None else {}, key)

    def _name(self, name, layer):
        return self.GGUF_NAMES[name].format(layer)

    def _model_tensors(self):
        """(name, layer) of every tensor the model has, in llama2.c's names."""
        return list(layout(1, self.config))

    def _check_tensors(self):
        """Every tensor there and of the expected shape and a type read here, nothing else: before writing."""
        path, tensors = self.path, self.gguf.tensors
        wanted = {self._name(name, layer): self.config.shape(name) for name, layer in self._model_tensors()}
        wanted[self.ROPE_FREQS] = (self.config.head_size // 2,)
        for name, tensor in tensors.items():
            if name not in wanted:
                raise ExportError(f"{path}: tensor {name} is not one of a {self.arch} model's (run.c has no "
                                  "experts or other extra weights); run.c cannot run this model")
            if tensor.type not in GGML_TYPES:
                type_name = GGML_OTHER_TYPES.get(tensor.type, "unknown")
                supported = ", ".join(t[0] for t in GGML_TYPES.values())
                raise ExportError(f"{path}: tensor {name} has type {tensor.type} ({type_name}); supported: {supported}")
            if tensor.shape != wanted[name]:
                raise ExportError(f"{path}: tensor {name} has shape {list(tensor.shape)} "
                                  f"(ne {list(tensor.ne)}), expected {list(wanted[name])}")
            type_name, per_block, block_bytes = GGML_TYPES[tensor.type]
            if tensor.ne[0] % per_block:
                raise ExportError(f"{path}: tensor {name}: rows of {tensor.ne[0]} values are not whole "
                                  f"{type_name} blocks of {per_block}")
            end = self.gguf.data_start + tensor.offset + math.prod(tensor.ne) // per_block * block_bytes
            if end > len(self.gguf.map):
                raise ExportError(f"{path}: tensor {name} runs past the end of the file (truncated?)")
        missing = [name for name in wanted if name not in tensors and name != self.ROPE_FREQS]
        if missing:
            raise ExportError(f"{path}: tensor {missing[0]} is missing")

    def _rope_scaling(self):
        """Llama 3.1's RoPE scaling as Config.rope_scaling (None if there is none), from
        rope_freqs.weight and/or the llama.rope.scaling.* keys; other kinds refused."""
        path, meta, arch = self.path, self.gguf.metadata, self.arch
        scaling_keys = {field: key.format(arch) for field, key in self.SCALING_KEYS.items()}
        kind = gguf_value(path, meta, f"{arch}.rope.scaling.type", str, "none")
        if kind not in ("none", "llama3") or kind == "llama3" and arch != "llama":
            raise ExportError(f"{path}: {arch}.rope.scaling.type is {kind!r}: only Llama 3.1's RoPE scaling "
                              "(rope_freqs.weight, or type \"llama3\") is supported; run.c cannot run this model")
        known = {}
        for field, key in scaling_keys.items():
            if key in meta:
                known[field] = gguf_int(path, meta, key) if field == "original" else gguf_float(path, meta, key)
        if kind == "none":
            # without type llama3, a factor is llama.cpp's linear scaling
            for key in (f"{arch}.rope.scaling.factor", f"{arch}.rope.scale_linear"):
                if gguf_float(path, meta, key, 1.0) not in (0.0, 1.0):
                    raise ExportError(f"{path}: {key} is {meta[key]}: linear RoPE scaling is not supported; "
                                      "run.c cannot run this model")
            known = {k: v for k, v in known.items() if k == "original"}
        if self.ROPE_FREQS in self.gguf.tensors:
            divisors = self.gguf.read_float32(self.gguf.tensors[self.ROPE_FREQS])
            return rope_scaling_from_divisors(path, divisors, self.config.rope_theta, self.config.head_size, known)
        if kind == "none":
            return None
        missing = [key for field, key in scaling_keys.items() if field not in known]
        if missing:
            raise ExportError(f"{path}: {arch}.rope.scaling.type is \"llama3\" but {missing[0]} is missing "
                              f"(and there is no {self.ROPE_FREQS})")
        return tuple(known[field] for field in self.SCALING_KEYS)

    def _rows(self, name, values):
        """values (floats, or a quantized tensor's per-row parts, row after row) with the
        rows in run.c's order: qwen2/qwen3 query and key rows leave rotate-half order."""
        if not self.neox:
            return values
        rows = self.config.shape(name)[0]
        return to_interleaved(name, values.reshape(rows, -1), self.config).reshape(values.shape)

    def load(self, name, layer):
        self.gguf.release()
        return self._rows(name, self.gguf.read_float32(self.gguf.tensors[self._name(name, layer)]))

    def q80(self, name, layer, group_size):
        if self.source_type(name, layer) != "Q8_0" or group_size != 32:
            return None
        return self.exact(name, layer)

    def source_type(self, name, layer):
        return GGML_TYPES[self.gguf.tensors[self._name(name, layer)].type][0]

    def exact_type(self, name, layer):
        return exact_type_of(self.source_type(name, layer), self.config.shape(name))

    def exact(self, name, layer):
        self.gguf.release()
        parts = exact_parts(self.source_type(name, layer), self.gguf.blocks(self.gguf.tensors[self._name(name, layer)]))
        if isinstance(parts, tuple):
            return tuple(self._rows(name, p) for p in parts)
        return self._rows(name, parts).tobytes()


# --quant's schemes. Q4_K_M is llama.cpp's llama_tensor_get_type for a model without
# experts and without an importance matrix: Q4_K, but Q6_K for the classifier (the token
# embedding when it is shared), and for attn_v and ffn_down in the layers use_more_bits
# picks, and Q5_K for the other attn_v of a model llama.cpp calls 70B; q4k is Q4_K for
# every matrix. A row that is not whole blocks of the type falls back as llama.cpp's does.
QUANT_SCHEMES = ("q4_k_m", "q4k", "int8")
ROW_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def use_more_bits(layer, n_layers):
    """llama.cpp's choice of layers for more bits: the first and last eighth, and every
    third layer between."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def is_70b(config):
    """llama.cpp's model type 70B: 80 layers, for llama with fewer KV heads than heads
    (else 65B), for qwen2 always (its qwen3 has no 80-layer type)."""
    return config.n_layers == 80 and (config.qkv_bias or not config.qk_norm and config.n_kv_heads != config.n_heads)


def row_length(config, name):
    """The values in one row of a matrix (GGUF's ne[0]), which its blocks must divide."""
    return config.shape(name)[1]


def quant_type(scheme, config, name, layer):
    """The ggml type llama-quantize gives this matrix under scheme (q4_k_m or q4k)."""
    row = row_length(config, name)
    classifier = name == "output" or name == "tok_embeddings" and config.shared_classifier
    if scheme == "q4k":
        kind = "Q4_K"
    elif classifier:  # llama.cpp: Q8_0 when the row is not whole Q4_K blocks, else Q6_K
        kind = "Q6_K" if row % Q4K_BLOCK == 0 else "Q8_0"
    elif name in ("wv", "w2") and use_more_bits(layer, config.n_layers):
        kind = "Q6_K"
    else:
        kind = "Q5_K" if name == "wv" and is_70b(config) else "Q4_K"
    if row % BLOCK_VALUES[kind]:
        if kind not in ROW_FALLBACK:
            raise ExportError(f"--quant {scheme}: {name} has rows of {row} values, not whole blocks of 32 "
                              "(llama-quantize refuses it too)")
        kind = ROW_FALLBACK[kind]
    return kind if row % BLOCK_VALUES[kind] == 0 else "F16"


class QuantizedSource(Source):
    """--quant: another source's matrices in the ggml types llama-quantize would give them
    (quant_type), quantized as it quantizes from float32, and then handed to the writer as
    GGUFSource hands over a file of those types: Q4_K as q4k, Q6_K as q6k, Q8_0 as int8 exactly,
    the others (Q5_K, Q5_0, Q5_1, F16) dequantized for int8 at the group size. So --quant Q4_K_M of a
    model writes the same bytes as --gguf of llama-quantize's Q4_K_M file of it."""

    def __init__(self, source, scheme):
        self.source, self.config = source, source.config
        self.types = {(name, layer): quant_type(scheme, self.config, name, layer)
                      for name, layer in layout(3, self.config) if name not in VECTORS}
        self.show_progress = source.show_progress or sum(math.prod(self.config.shape(name))
                                                         for name, _ in self.types) > 10 ** 8

    def _blocks(self, name, layer):
        np = import_numpy()
        kind = self.types[name, layer]
        blocks = quantize_blocks(kind, self.source.tensor(name, layer))
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.isfinite(DEQUANTIZE[kind](blocks)).all()
        if not finite:  # llama-quantize's validation refuses these too
            where = name if layer is None else f"{name} of layer {layer}"
            raise ExportError(f"--quant: {where}: values beyond the range of {kind}'s fp16 fields")
        return blocks

    def load(self, name, layer):
        if name in VECTORS:
            return self.source.tensor(name, layer)
        return DEQUANTIZE[self.types[name, layer]](self._blocks(name, layer)).reshape(self.config.shape(name))

    def source_type(self, name, layer):
        return self.types[name, layer]

    def exact_type(self, name, layer):
        return exact_type_of(self.types[name, layer], self.config.shape(name))

    def exact(self, name, layer):
        parts = exact_parts(self.types[name, layer], self._blocks(name, layer))
        return parts if isinstance(parts, tuple) else parts.tobytes()


# ===========================================================================
# Writers

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def header_v1(config, version, group_size=0):
    """The 256-byte header of versions 1, 2 and 3."""
    c = config
    head = struct.pack("<Ii7iB", MAGIC, version, c.dim, c.hidden_dim, c.n_layers, c.n_heads,
                       c.n_kv_heads, c.vocab_size, c.seq_len, int(c.shared_classifier))
    head += struct.pack("<i", group_size)  # offset 37; 0 for version 1
    head += b"\0" * (44 - len(head))
    # 0 stands for the default, so files of older exporters read the same.
    theta = 0.0 if f32(c.rope_theta) == f32(DEFAULT_ROPE_THETA) else c.rope_theta
    eps = 0.0 if f32(c.norm_eps) == f32(DEFAULT_NORM_EPS) else c.norm_eps
    head += struct.pack("<ff", theta, eps)
    head += struct.pack("<fffi", *(c.rope_scaling or (0, 0, 0, 0)))  # offset 52
    # offset 68: head size, 0 when it is dim / n_heads; 72, 73: the Qwen flags
    standard = c.dim % c.n_heads == 0 and c.head_size == c.dim // c.n_heads
    head += struct.pack("<iBB", 0 if standard else c.head_size, int(c.qkv_bias), int(c.qk_norm))
    return head + b"\0" * (HEADER_SIZE - len(head))


def header_v0(config):
    """The 28-byte header of version 0: the config, vocab_size negative for a separate classifier."""
    c = config
    vocab = c.vocab_size if c.shared_classifier else -c.vocab_size
    return struct.pack("<7i", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.seq_len)


def rope_tables(config):
    """Version 0's freqs_cos and freqs_sin, computed as llama2.c's legacy export did.

    angle[t][i] = t * (1 / 10000^(2i/head_size)), each step rounded to float32 as torch
    did; cos and sin are then rounded correctly from that float32 angle. llama2.c's
    own files hold torch's values (Intel MKL's cos/sin on x86 Linux): the same angles,
    but about 5% of the entries differ from these in the last bit.
    """
    np = import_numpy()
    f32 = np.float32
    exponents = np.arange(0, config.head_size, 2, dtype=f32) / f32(config.head_size)
    freqs = f32(1) / (DEFAULT_ROPE_THETA ** exponents.astype(np.float64)).astype(f32)
    angles = np.outer(np.arange(config.seq_len, dtype=f32), freqs).astype(np.float64)
    return {"freqs_cos": np.cos(angles).astype(f32), "freqs_sin": np.sin(angles).astype(f32)}


def quantize_q80(w, group_size):
    """Symmetric int8 per group: scale = max|w|/127, q = w/scale rounded half to even.
    A million values at a time, so that the temporaries stay small next to w."""
    np = import_numpy()
    groups = w.reshape(-1, group_size)
    q = np.empty(groups.shape, np.int8)
    scale = np.empty(len(groups), np.float32)
    step = max(1, (1 << 20) // group_size)
    for begin in range(0, len(groups), step):
        part = groups[begin:begin + step].astype(np.float32)
        s = np.abs(part).max(axis=1) / np.float32(127.0)
        divisor = np.where(s == 0, np.float32(1.0), s)  # an all-zero group stays 0
        q[begin:begin + step] = np.clip(np.rint(part / divisor[:, None]), -127, 127)
        scale[begin:begin + step] = s
    return q, scale


def choose_group_size(requested, config):
    dim, hidden, q_dim = config.dim, config.hidden_dim, config.q_dim
    if requested > 0 and dim % requested == 0 and hidden % requested == 0 and q_dim % requested == 0:
        return requested
    g = 1 << max(0, requested.bit_length() - 1)  # largest power of two <= requested
    while dim % g or hidden % g or q_dim % g:
        g //= 2
    widths = f"dim {dim} and hidden_dim {hidden}" + (f" and q width {q_dim}" if q_dim != dim else "")
    note(f"group size {requested} does not divide {widths}; using {g}")
    return g


def write_checkpoint(source, out, version, group_size=0):
    """The header of this version, then each tensor in the order of LAYOUTS[version]."""
    c = source.config
    if version == 0:
        if c.rope_scaling:
            raise ExportError("version 0 has no place for RoPE scaling (rope_scaling llama3): use --version 1")
        if c.head_size * c.n_heads != c.dim or c.qkv_bias or c.qk_norm:
            raise ExportError("version 0 has no place for a head size of its own, q/k norms or q/k/v biases "
                              "(Qwen): use --version 1")
        if f32(c.rope_theta) != f32(DEFAULT_ROPE_THETA) or f32(c.norm_eps) != f32(DEFAULT_NORM_EPS):
            raise ExportError(f"version 0 cannot store rope_theta {c.rope_theta:g} or rms_norm_eps {c.norm_eps:g} "
                              f"(it assumes 10000 and 1e-5): use --version 1")
        out.write(header_v0(c))
        computed = rope_tables(c)
    else:
        out.write(header_v1(c, version, group_size if version == 2 else 0))
        computed = {}
    tensors = list(layout(version, c))
    types = {}
    if version == 3:  # the type table: what the source holds exactly is kept, the rest is int8
        for name, layer in tensors:
            if name not in VECTORS:
                types[name, layer] = source.exact_type(name, layer) or (TYPE_INT8, group_size)
                out.write(struct.pack("<ii", *types[name, layer]))
    for i, (name, layer) in enumerate(tensors, 1):
        if name in computed:
            out.write(computed[name])
        elif (name, layer) in types and types[name, layer] == source.exact_type(name, layer):
            data = source.exact(name, layer)
            for part in (data,) if types[name, layer][0] in BLOCK_BYTES else data:
                out.write(part)
        elif is_quantized(version, name):
            exact = source.q80(name, layer, group_size)
            q, scale = exact if exact is not None else quantize_q80(source.tensor(name, layer), group_size)
            out.write(q)
            out.write(scale)
        else:
            out.write(source.tensor(name, layer))
        if source.show_progress:
            print(f"\rexport.py: tensor {i} of {len(tensors)}, {out.tell() / 1e6:.0f} MB written",
                  end="\n" if i == len(tensors) else "", file=sys.stderr, flush=True)


def requantized_note(source, group_size):
    """Version 3: which matrices the source does not hold in a type kept exactly."""
    by_kind = {}
    for name, layer in layout(3, source.config):
        if name not in VECTORS and source.exact_type(name, layer) is None:
            by_kind.setdefault((name, source.source_type(name, layer)), []).append(layer)
    parts = [f"{name}{'' if layers == [None] else ' of layers ' + ', '.join(map(str, layers))} ({kind})"
             for (name, kind), layers in by_kind.items()]
    return f"quantized to int8 (group size {group_size}): {'; '.join(parts)}" if parts else None


def q6k_as_int8_notes(source):
    """Version 3: a line for each matrix (its layers together) of Q6_K blocks stored as
    int8 per 16 (q6k_type): the same values, not requantized."""
    by_name = {}
    for name, layer in layout(3, source.config):
        kind = None if name in VECTORS else source.source_type(name, layer)
        if kind in ("Q6_K", "q6k") and source.exact_type(name, layer) == (TYPE_INT8, Q6K_INT8_GROUP):
            by_name.setdefault((name, kind), []).append(layer)
    return [f"copied to int8 (group size {Q6K_INT8_GROUP}), the same values: "
            f"{name}{'' if layers == [None] else ' of layers ' + ', '.join(map(str, layers))} ({kind}, "
            f"{math.prod(source.config.shape(name)) // Q4K_BLOCK} blocks: an odd number of q6k blocks ends "
            f"2 bytes off the 4-byte alignment run.c needs)" for (name, kind), layers in by_name.items()]


def export_model(source, out, version, group_size):
    if version == 3:
        group_size = choose_group_size(group_size, source.config)
        message = requantized_note(source, group_size)
        if message:
            note(message)
        for message in q6k_as_int8_notes(source):
            note(message)
        write_checkpoint(source, out, 3, group_size)
        kinds = {}
        for name, layer in layout(3, source.config):
            if name not in VECTORS:
                t, g = source.exact_type(name, layer) or (TYPE_INT8, group_size)
                label = {TYPE_Q4K: "q4k", TYPE_Q6K: "q6k"}.get(t, f"int8/{g}")
                kinds[label] = kinds.get(label, 0) + 1
        return f"version 3 ({', '.join(f'{n} {k}' for k, n in kinds.items())}), {source.config}"
    if version != 2:
        write_checkpoint(source, out, version)
        return f"version {version}, {source.config}"
    group_size = choose_group_size(group_size, source.config)
    if source.q80_group_size and group_size != source.q80_group_size:
        note(f"the input's int8 (Q8_0) matrices are quantized again at group size {group_size}; "
             f"--group-size {source.q80_group_size} would copy them exactly")
    write_checkpoint(source, out, 2, group_size)
    return f"version 2 (group size {group_size}), {source.config}"


# ===========================================================================
# Command line

def write_atomically(path, write):
    """Call write(file) on a temporary file, renamed to path only on success."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            result = write(f)
        os.replace(tmp, path)
        return result
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Export models and tokenizers to the files run.c reads.",
        epilog="Examples are at the head of export.py.")
    parser.add_argument("out", help="output file")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf", metavar="DIR", help="Hugging Face Llama/Mistral model folder")
    source.add_argument("--meta", metavar="DIR", help="Meta params.json + consolidated.*.pth folder (torch)")
    source.add_argument("--checkpoint", metavar="FILE", help="llama2.c training checkpoint ckpt.pt (torch)")
    source.add_argument("--bin", metavar="FILE", help="a checkpoint run.c reads (version 0, 1, 2 or 3)")
    source.add_argument("--gguf", metavar="FILE", help="a GGUF file of architecture llama (llama.cpp's format)")
    source.add_argument("--tokenizer", metavar="FILE", help="tokenizer.model, tokenizer.json or a GGUF file")
    parser.add_argument("--version", type=int, choices=(0, 1, 2, 3), default=None,
                        help="output checkpoint version (default 1)")
    parser.add_argument("--quant", type=str.lower, choices=QUANT_SCHEMES, default=None,
                        help="version 3 with llama.cpp's types: Q4_K_M (llama-quantize's recipe and rounding), "
                             "q4k (Q4_K for every matrix) or int8 (as --version 3)")
    parser.add_argument("--group-size", type=int, default=64,
                        help="int8 group size of versions 2 and 3 (default 64)")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="sequence length to record (default: the model's; 4096 for --meta)")
    args = parser.parse_args(argv)
    if args.group_size <= 0:
        parser.error("--group-size must be positive")
    if args.quant and (args.tokenizer or args.version not in (None, 3)):
        parser.error("--quant writes a version 3 model checkpoint: not with --tokenizer or another --version")
    version = 3 if args.quant else 1 if args.version is None else args.version

    try:
        if args.tokenizer:
            what = write_atomically(args.out, lambda f: export_tokenizer(args.tokenizer, f))
        else:
            if args.hf:
                src = HuggingFaceSource(args.hf, args.seq_len)
            elif args.meta:
                src = MetaSource(args.meta, args.seq_len)
            elif args.checkpoint:
                src = TrainingCheckpointSource(args.checkpoint, args.seq_len)
            elif args.gguf:
                src = GGUFSource(args.gguf, args.seq_len)
            else:
                src = BinSource(args.bin, args.seq_len)
            if args.quant in ("q4_k_m", "q4k"):
                src = QuantizedSource(src, args.quant)
            what = write_atomically(args.out, lambda f: export_model(src, f, version, args.group_size))
    except ExportError as e:
        print(f"export.py: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"export.py: error: {e}", file=sys.stderr)
        return 1
    note(f"wrote {args.out}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
