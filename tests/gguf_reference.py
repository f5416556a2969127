"""GGUF, llama.cpp's file format, in numpy: what tests/test_export.py builds GGUF files
with and checks export.py's --gguf output against.

- a GGUF writer, and a minimal reader to check it, from the specification (ggml's
  docs/gguf.md: header, metadata value types, tensor infos, alignment);
- llama.cpp's reference quantizers (quantize_row_*_ref in ggml-quants.c) and
  dequantizers (the block layouts of ggml-common.h, the dequantize_row_* formulas);
- random blocks of each type, and a Hugging Face Llama's tensors and metadata as
  llama.cpp's converter (convert_hf_to_gguf.py) writes them.

It shares no code with export.py, so a misreading of the format in one is not
repeated in the other.
"""

import json
import math
import os
import struct

import numpy as np

# ---------------------------------------------------------------------------
# The file: metadata value types, tensor types, the writer and a reader

GGUF_VALUE_TYPES = {"uint8": (0, "<u1"), "int8": (1, "<i1"), "uint16": (2, "<u2"), "int16": (3, "<i2"),
                    "uint32": (4, "<u4"), "int32": (5, "<i4"), "float32": (6, "<f4"), "bool": (7, "?"),
                    "string": (8, None), "array": (9, None), "uint64": (10, "<u8"), "int64": (11, "<i8"),
                    "float64": (12, "<f8")}
# ggml type: (id, values per block, bytes per block)
GGML_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
              "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
              "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}
F32 = np.float32


def gguf_value(vtype, value):
    """One metadata value's bytes: scalars little-endian, a string as uint64 length +
    UTF-8 bytes (no terminator), an array as uint32 element type, uint64 count, then the
    elements (themselves arrays for a nested array)."""
    if vtype == "string":
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(raw)) + raw
    if vtype == "array":
        etype, items = value
        head = struct.pack("<IQ", GGUF_VALUE_TYPES[etype][0], len(items))
        if isinstance(items, np.ndarray):
            return head + items.astype(GGUF_VALUE_TYPES[etype][1]).tobytes()
        return head + b"".join(gguf_value(etype, v) for v in items)
    return np.array(value, dtype=GGUF_VALUE_TYPES[vtype][1]).tobytes()


def write_gguf(file, kv, tensors, version=3, alignment=None):
    """Write a GGUF file: "GGUF", uint32 version, uint64 tensor count, uint64 metadata
    count, the metadata (key string, uint32 value type, value), the tensor infos (name,
    uint32 n_dims, uint64 dims innermost first, uint32 ggml type, uint64 offset from the
    start of the data), zero padding to the alignment, then each tensor's data at its
    offset, padded to the alignment. kv: [(key, value type, value)]; tensors: [(name,
    numpy shape (outermost first), ggml type name, bytes)]. alignment: written as
    general.alignment (uint32); None = no key, the default 32. Returns where the fields
    are, for the damaged-file tests."""
    align = alignment or 32
    kv = list(kv) + ([("general.alignment", "uint32", alignment)] if alignment else [])
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)))
    where = {"kv": {}, "tensors": {}}
    for key, vtype, value in kv:
        where["kv"][key] = len(out)  # the key's length field
        out += gguf_value("string", key) + struct.pack("<I", GGUF_VALUE_TYPES[vtype][0]) + gguf_value(vtype, value)
    offset = 0
    for name, shape, tname, raw in tensors:
        _, qk, block_bytes = GGML_TYPES[tname]
        dims = [int(d) for d in reversed(shape)]
        assert dims[0] % qk == 0 and len(raw) == int(np.prod(dims)) // qk * block_bytes, name
        out += gguf_value("string", name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        where["tensors"][name] = (len(out) - 8 * len(dims), len(out), offset)  # dims, type field, data offset
        out += struct.pack("<IQ", GGML_TYPES[tname][0], offset)
        offset += len(raw) + (-len(raw) % align)
    out += bytes(-len(out) % align)
    where["data"] = len(out)
    with open(file, "wb") as f:
        f.write(out)
        for *_, raw in tensors:
            f.write(raw)
            f.write(bytes(-len(raw) % align))
    return where


def read_gguf(file):
    """A minimal GGUF reader (to check write_gguf): (version,
    {key: (type, value)}, {name: (dims, type id, bytes)}, alignment, data start)."""
    with open(file, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def value(t):
        nonlocal pos
        if t == 8:
            n = take("<Q")
            pos += n
            return data[pos - n:pos].decode("utf-8")
        if t == 9:
            et, n = take("<IQ")
            return [value(et) for _ in range(n)]
        fmt = next(f for i, f in GGUF_VALUE_TYPES.values() if i == t)
        v = np.frombuffer(data, dtype=fmt, count=1, offset=pos)[0]
        pos += np.dtype(fmt).itemsize
        return v.item()

    assert data[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    kv = {}
    for _ in range(n_kv):
        key = value(8)
        t = take("<I")
        kv[key] = (t, value(t))
    infos = []
    for _ in range(n_tensors):
        name = value(8)
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, dims, take("<I"), take("<Q")))
    align = kv.get("general.alignment", (4, 32))[1]
    start = pos + (-pos % align)
    tensors = {}
    for name, dims, t, off in infos:
        _, qk, bs = next(v for v in GGML_TYPES.values() if v[0] == t)
        assert off % align == 0
        tensors[name] = (dims, t, data[start + off:start + off + int(np.prod(dims)) // qk * bs])
    return version, kv, tensors, align, start


# ---------------------------------------------------------------------------
# Quantizers: llama.cpp's reference ones (quantize_row_*_ref in ggml-quants.c), step
# for step in float32 (sums left to right as its loops add; no fused multiply-add),
# vectorized over blocks. x: float32 [n_blocks][values per block]; each returns the
# blocks' bytes [n_blocks][block bytes].

def fp16_bits(values):
    """float32 -> IEEE half (round to nearest even) bits, as uint16."""
    return np.asarray(values, dtype=F32).astype("<f2").view("<u2")


def half(bits):
    """Little-endian fp16 bytes [..., 2] (uint8) or bits (uint16) -> float32."""
    bits = np.ascontiguousarray(bits)
    if bits.dtype == np.uint8:
        bits = bits.view("<u2")[..., 0]
    return bits.view("<f2").astype(F32)


def bf16_round(a):
    """float32 -> nearest bfloat16 (ties to even), returned as float32 values."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (bits.astype(np.uint32) << 16).view(np.float32)


def seq_sum(a):
    """Sum along the last axis, left to right in float32 (a C loop's order)."""
    return np.cumsum(a, axis=-1, dtype=F32)[..., -1]


def nearest_int(v):
    """ggml's nearest_int, its 1.5 * 2^23 trick done as C does it: round half to even,
    and for inputs far out of range (inf and NaN from subnormal blocks) the same bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        bits = (np.asarray(v, dtype=F32) + F32(12582912)).view(np.int32).astype(np.int64)
    return (bits & 0x7FFFFF) - 0x400000


def int8_cast(v):
    """(int8_t) of a float as gcc compiles it for x86-64: cvttss2si to int32, whose answer
    for NaN and out-of-range values is 0x80000000, then the low byte. (Inf and NaN come
    from blocks of subnormals, whose 1/d overflows.)"""
    v = np.asarray(v, dtype=np.float64)
    inside = np.isfinite(v) & (np.abs(v) < 2.0 ** 31)
    i = np.where(inside, np.trunc(np.where(inside, v, 0)), -(2.0 ** 31)).astype(np.int64)
    return (i & 0xFF) - ((i & 0x80) << 1)


def blocks_of(nb, *fields):
    """Concatenate per-block byte fields (uint8 arrays [nb][k] or uint16 [nb])."""
    parts = [f.astype("<u2").view(np.uint8).reshape(nb, 2) if f.dtype != np.uint8 else f.reshape(nb, -1)
             for f in fields]
    return np.concatenate(parts, axis=1)


def signed_max(x):
    """Per block, the value of largest magnitude (the first one on ties), as ggml's loops find it."""
    return x[np.arange(x.shape[0]), np.argmax(np.abs(x), axis=1)]


def inverse(d):
    """id = d ? 1.0f/d : 0.0f"""
    return np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)


def quantize_q8_0(x):
    d = (np.abs(x).max(axis=1) / F32(127)).astype(F32)
    v = (x * inverse(d)[:, None]).astype(np.float64)
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)  # roundf: half away from zero
    return blocks_of(len(x), fp16_bits(d), q.astype(np.int8).view(np.uint8))


def pack_nibbles(lo, hi):
    return (lo | (hi << 4)).astype(np.uint8)


def quantize_q4_0(x):
    d = (signed_max(x) / F32(-8)).astype(F32)
    xi = np.minimum(15, int8_cast((x * inverse(d)[:, None]).astype(F32) + F32(8.5)))
    return blocks_of(len(x), fp16_bits(d), pack_nibbles(xi[:, :16], xi[:, 16:]))


def quantize_q4_1(x):
    lo, hi = x.min(axis=1), x.max(axis=1)
    d = ((hi - lo) / F32(15)).astype(F32)
    xi = np.minimum(15, np.trunc(((x - lo[:, None]) * inverse(d)[:, None]).astype(F32) + F32(0.5))).astype(np.int64)
    return blocks_of(len(x), fp16_bits(d), fp16_bits(lo), pack_nibbles(xi[:, :16], xi[:, 16:]))


def q5_high_bits(xi):
    """qh: bit j = fifth bit of value j (j < 16), bit j + 16 = fifth bit of value j + 16."""
    bits = (xi >> 4) & 1
    qh = (bits << np.arange(32, dtype=np.int64)).sum(axis=1).astype("<u4")
    return qh.view(np.uint8).reshape(len(xi), 4)


def quantize_q5_0(x):
    d = (signed_max(x) / F32(-16)).astype(F32)
    xi = np.minimum(31, int8_cast((x * inverse(d)[:, None]).astype(F32) + F32(16.5))) & 0xFF
    return blocks_of(len(x), fp16_bits(d), q5_high_bits(xi), pack_nibbles(xi[:, :16] & 15, xi[:, 16:] & 15))


def quantize_q5_1(x):
    lo, hi = x.min(axis=1), x.max(axis=1)
    d = ((hi - lo) / F32(31)).astype(F32)
    xi = np.trunc(((x - lo[:, None]) * inverse(d)[:, None]).astype(F32) + F32(0.5)).astype(np.int64)
    return blocks_of(len(x), fp16_bits(d), fp16_bits(lo), q5_high_bits(xi),
                     pack_nibbles(xi[:, :16] & 15, xi[:, 16:] & 15))


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """ggml's make_qkx2_quants on every row of x (weights w): the scale and min of an
    asymmetric nmax-level quantization found by trying nstep + 1 scales around
    nmax / (max - min) and solving the weighted least squares for each.
    Returns (levels L, scale, the_min = -min)."""
    lo = np.minimum(x.min(axis=1), F32(0))  # if (min > 0) min = 0
    hi = x.max(axis=1)
    flat = hi == lo
    span = np.where(flat, F32(1), hi - lo).astype(F32)
    sum_w, sum_x = seq_sum(w), seq_sum(w * x)
    iscale = (F32(nmax) / span).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    L = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax).astype(F32)
    diff = scale[:, None] * L + lo[:, None] - x
    best = seq_sum(w * (diff * diff))
    for step in range(nstep + 1):
        # ggml divides by max - min with the best min so far (lo), not the first one
        iscale = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / np.where(flat, F32(1), hi - lo)).astype(F32)
        l = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax).astype(F32)
        wl = w * l
        sum_l, sum_l2, sum_xl = seq_sum(wl), seq_sum(wl * l), seq_sum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        solvable = D > 0
        D = np.where(solvable, D, F32(1))
        this_scale = ((sum_w * sum_xl - sum_x * sum_l) / D).astype(F32)
        this_min = ((sum_l2 * sum_x - sum_l * sum_xl) / D).astype(F32)
        clamp = this_min > 0
        this_min = np.where(clamp, F32(0), this_min)
        this_scale = np.where(clamp, sum_xl / np.where(sum_l2 != 0, sum_l2, F32(1)), this_scale).astype(F32)
        diff = this_scale[:, None] * l + this_min[:, None] - x
        err = seq_sum(w * (diff * diff))
        better = solvable & (err < best)
        L = np.where(better[:, None], l, L)
        best = np.where(better, err, best)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    L[flat] = 0
    scale = np.where(flat, F32(0), scale)
    return L.astype(np.int64), scale.astype(F32), (-lo).astype(F32)


def pack_k_scales(ls, lm):
    """The 12 bytes holding eight 6-bit scales and mins of a Q4_K/Q5_K block."""
    s = np.zeros((len(ls), 12), dtype=np.int64)
    s[:, 0:4] = ls[:, 0:4]
    s[:, 4:8] = lm[:, 0:4]
    s[:, 8:12] = (ls[:, 4:8] & 15) | ((lm[:, 4:8] & 15) << 4)
    s[:, 0:4] |= (ls[:, 4:8] >> 4) << 6
    s[:, 4:8] |= (lm[:, 4:8] >> 4) << 6
    return s.astype(np.uint8)


def quantize_k(x, nmax, rmin, rdelta, nstep):
    """quantize_row_q4_K_ref / q5_K_ref up to the levels: (d bits, dmin bits, scales bytes, L [nb][256])."""
    nb = len(x)
    xs = x.reshape(nb * 8, 32)
    av_x = np.sqrt(seq_sum(xs * xs) / F32(32)).astype(F32)
    L, scales, mins = make_qkx2_quants(xs, av_x[:, None] + np.abs(xs), nmax, rmin, rdelta, nstep)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 256)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    inv_scale = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)), F32(0)).astype(F32)
    inv_min = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0)).astype(F32)
    ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF)
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF)
    d_bits, dmin_bits = fp16_bits(max_scale / F32(63)), fp16_bits(max_min / F32(63))
    d = (half(d_bits)[:, None] * ls.astype(F32)).astype(F32)  # per sub-block
    dm = (half(dmin_bits)[:, None] * lm.astype(F32)).astype(F32)
    xs = x.reshape(nb, 8, 32)
    requant = np.clip(nearest_int((xs + dm[:, :, None]) / np.where(d != 0, d, F32(1))[:, :, None]), 0, nmax)
    L = np.where((d != 0)[:, :, None], requant, L.reshape(nb, 8, 32)).reshape(nb, 256)  # if (!d) continue
    return d_bits, dmin_bits, pack_k_scales(ls, lm), L


def quantize_q4_k(x):
    d, dmin, scales, L = quantize_k(x, 15, -1.0, 0.1, 20)
    L = L.reshape(len(x), 4, 2, 32)  # 64-value chunks: low nibbles = first 32, high = next 32
    return blocks_of(len(x), d, dmin, scales, pack_nibbles(L[:, :, 0], L[:, :, 1]).reshape(len(x), 128))


def quantize_q5_k(x):
    d, dmin, scales, L = quantize_k(x, 31, -0.5, 0.1, 15)
    L = L.reshape(len(x), 4, 2, 32)
    qs = pack_nibbles(L[:, :, 0] & 15, L[:, :, 1] & 15).reshape(len(x), 128)
    chunk = np.arange(4)[None, :, None]
    qh = ((((L[:, :, 0] >> 4) & 1) << (2 * chunk)) | (((L[:, :, 1] >> 4) & 1) << (2 * chunk + 1))).sum(axis=1)
    return blocks_of(len(x), d, dmin, scales, qh.astype(np.uint8), qs)


def make_qx_quants_rmse1(x, nmax):
    """ggml's make_qx_quants(n, nmax, x, L, rmse_type 1, no weights) on every row of x:
    symmetric levels -nmax..nmax-1, weights x^2, 19 scales tried. Returns (L + nmax, scale)."""
    mx = signed_max(x)
    zero = np.abs(mx) < F32(1e-15)
    mx = np.where(zero, F32(1), mx).astype(F32)

    def try_scale(iscale):
        l = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(F32)
        w = x * x
        return l, seq_sum(w * x * l), seq_sum(w * l * l)

    l, sumlx, suml2 = try_scale((F32(-nmax) / mx).astype(F32))
    L = l
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0)).astype(F32)
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        l, sumlx, suml2 = try_scale((-(F32(nmax) + F32(0.1) * F32(step)) / mx).astype(F32))
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = np.where(better[:, None], l, L)
        scale = np.where(better, sumlx / np.where(suml2 > 0, suml2, F32(1)), scale).astype(F32)
        best = np.where(better, scale * sumlx, best).astype(F32)
    L = np.where(zero[:, None], -nmax, L)
    return L.astype(np.int64) + nmax, np.where(zero, F32(0), scale).astype(F32)


def quantize_q6_k(x):
    nb = len(x)
    L, scales = make_qx_quants_rmse1(x.reshape(nb * 16, 16), 32)
    L, scales = L.reshape(nb, 256), scales.reshape(nb, 16)
    max_scale = signed_max(scales)
    empty = np.abs(max_scale) < F32(1e-15)
    iscale = (F32(-128) / np.where(empty, F32(1), max_scale)).astype(F32)
    d_bits = fp16_bits(F32(1) / iscale)
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales))
    d = (half(d_bits)[:, None] * sc.astype(F32)).astype(F32)
    xs = x.reshape(nb, 16, 16)
    requant = np.clip(nearest_int(xs / np.where(d != 0, d, F32(1))[:, :, None]), -32, 31) + 32
    L = np.where((d != 0)[:, :, None], requant, L.reshape(nb, 16, 16)).reshape(nb, 2, 4, 32)
    ql = np.concatenate([pack_nibbles(L[:, :, 0] & 15, L[:, :, 2] & 15),
                         pack_nibbles(L[:, :, 1] & 15, L[:, :, 3] & 15)], axis=2).reshape(nb, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6))
    out = blocks_of(nb, ql, qh.astype(np.uint8).reshape(nb, 64), sc.astype(np.int8).view(np.uint8), d_bits)
    out[empty] = 0  # an all-zero block: memset 0
    return out


QUANTIZERS = {"Q8_0": quantize_q8_0, "Q4_0": quantize_q4_0, "Q4_1": quantize_q4_1, "Q5_0": quantize_q5_0,
              "Q5_1": quantize_q5_1, "Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}


def gguf_encode(values, tname):
    """float32 values (last axis innermost) -> the tensor's bytes as ggml type tname."""
    x = np.ascontiguousarray(values, dtype=F32)
    if tname == "F32":
        return x.astype("<f4").tobytes()
    if tname == "F16":
        return x.astype("<f2").tobytes()
    if tname == "BF16":
        return (bf16_round(x).view(np.uint32) >> 16).astype("<u2").tobytes()
    return QUANTIZERS[tname](x.reshape(-1, GGML_TYPES[tname][1])).tobytes()


# ---------------------------------------------------------------------------
# Reference dequantizers, from each block layout (ggml-common.h) and llama.cpp's
# dequantize_row_* formulas, in float32 in the same order of operations. Each takes a
# tensor's bytes and returns (values, size): size is the sum of the magnitudes of the
# terms added in float32, so 2^-23 * size bounds one rounding. wrong=True gives the same
# function with one deliberate mistake, to show that the comparison catches one.

def ref_float(raw, tname, wrong=False):
    if tname == "F32":
        y = np.frombuffer(raw, dtype=">f4" if wrong else "<f4").astype(F32)
    elif tname == "F16":
        y = np.frombuffer(raw, dtype="<f2").astype(F32)
        y = np.abs(y) if wrong else y  # mistake: the sign bit ignored
    else:  # BF16: the upper half of a float32
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        y = (((bits << 16) | (0x8000 if wrong else 0)).astype(np.uint32)).view(F32)  # mistake: a stray bit
    return y, np.zeros(len(y))


def ref_blocks(raw, tname):
    _, qk, bs = GGML_TYPES[tname]
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, bs)


def nibbles(qs):
    """qs [nb][16] -> values [nb][32]: low nibbles are values 0-15, high nibbles 16-31."""
    return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int64)


def ref_q8_0(raw, wrong=False):
    b = ref_blocks(raw, "Q8_0")
    q = b[:, 2:].view(np.uint8 if wrong else np.int8).astype(F32)  # mistake: unsigned
    y = q * half(b[:, 0:2])[:, None]
    return y.ravel(), np.abs(y).ravel().astype(np.float64)


def ref_q4_0(raw, wrong=False):
    b = ref_blocks(raw, "Q4_0")
    q = nibbles(b[:, 2:18]) - (7 if wrong else 8)  # mistake: offset 7
    y = q.astype(F32) * half(b[:, 0:2])[:, None]
    return y.ravel(), np.abs(y).ravel().astype(np.float64)


def ref_q4_1(raw, wrong=False):
    b = ref_blocks(raw, "Q4_1")
    d, m = half(b[:, 0:2])[:, None], half(b[:, 2:4])[:, None]
    t = nibbles(b[:, 4:20]).astype(F32) * d
    y = (t - m) if wrong else (t + m)  # mistake: the min subtracted
    return y.ravel(), (np.abs(t) + np.abs(m)).ravel().astype(np.float64)


def q5_values(qh_bytes, qs, wrong):
    qh = qh_bytes.copy().view("<u4")[:, :1].astype(np.int64)  # [nb][1]
    j = np.arange(16)
    high0 = ((qh >> j) << 4) & 0x10
    high1 = (qh >> (j + (16 if wrong else 12))) & 0x10  # bit j + 16 (mistake: bit j + 20)
    return np.concatenate([(qs & 15) | high0, (qs >> 4) | high1], axis=1).astype(np.int64)


def ref_q5_0(raw, wrong=False):
    b = ref_blocks(raw, "Q5_0")
    y = (q5_values(b[:, 2:6], b[:, 6:22], wrong) - 16).astype(F32) * half(b[:, 0:2])[:, None]
    return y.ravel(), np.abs(y).ravel().astype(np.float64)


def ref_q5_1(raw, wrong=False):
    b = ref_blocks(raw, "Q5_1")
    d, m = half(b[:, 0:2])[:, None], half(b[:, 2:4])[:, None]
    t = q5_values(b[:, 4:8], b[:, 8:24], wrong).astype(F32) * d
    return (t + m).ravel(), (np.abs(t) + np.abs(m)).ravel().astype(np.float64)


def k_scale_min(s, j, wrong=False):
    """get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 scale bytes."""
    s = s.astype(np.int64)
    if j < 4:
        return s[:, j] & 63, s[:, j + 4] & 63
    if wrong:  # mistake: the top bits of the scale taken from the min's byte
        return (s[:, j + 4] & 15) | ((s[:, j] >> 6) << 4), (s[:, j + 4] >> 4) | ((s[:, j - 4] >> 6) << 4)
    return (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4), (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)


def ref_k(raw, tname, wrong=False):
    b = ref_blocks(raw, tname)
    d, dmin = half(b[:, 0:2]), half(b[:, 2:4])
    scales = b[:, 4:16]
    qh = b[:, 16:48].astype(np.int64) if tname == "Q5_K" else None
    qs = b[:, 48:176] if tname == "Q5_K" else b[:, 16:144]
    ys, sizes = [], []
    for chunk in range(4):  # 64 values: 32 from the low nibbles, 32 from the high
        q = qs[:, 32 * chunk:32 * chunk + 32].astype(np.int64)
        for half_ in range(2):
            sc, m = k_scale_min(scales, 2 * chunk + half_, wrong and tname == "Q4_K")
            d1, m1 = d * sc.astype(F32), dmin * m.astype(F32)
            v = (q >> 4) if half_ else (q & 15)
            if qh is not None:
                bit = chunk if wrong else 2 * chunk + half_  # Q5_K mistake: the wrong bit of qh
                v = v + np.where(qh & (1 << bit), 16, 0)
            t = d1[:, None] * v.astype(F32)
            ys.append(t - m1[:, None])
            sizes.append(np.abs(t) + np.abs(m1)[:, None])
    return np.concatenate(ys, axis=1).ravel(), np.concatenate(sizes, axis=1).ravel().astype(np.float64)


def ref_q6_k(raw, wrong=False):
    b = ref_blocks(raw, "Q6_K")
    ql, qh, sc, d = b[:, 0:128].astype(np.int64), b[:, 128:192].astype(np.int64), \
        b[:, 192:208].view(np.int8).astype(F32), half(b[:, 208:210])
    y = np.empty((len(b), 256), dtype=F32)
    for n in range(2):  # 128 values each
        lq, hq, s = ql[:, 64 * n:64 * n + 64], qh[:, 32 * n:32 * n + 32], sc[:, 8 * n:8 * n + 8]
        for k, (low, shift) in enumerate(((lq[:, :32] & 15, 0), (lq[:, 32:] & 15, 2),
                                          (lq[:, :32] >> 4, 4), (lq[:, 32:] >> 4, 6))):
            q = (low | (((hq >> shift) & 3) << 4)) - 32
            for l16 in range(2):
                is_ = l16 + (k if wrong else 2 * k)  # mistake: scale index is + k
                cols = slice(128 * n + 32 * k + 16 * l16, 128 * n + 32 * k + 16 * l16 + 16)
                y[:, cols] = (d * s[:, is_])[:, None] * q[:, 16 * l16:16 * l16 + 16].astype(F32)
    return y.ravel(), np.abs(y).ravel().astype(np.float64)


REFERENCE_DEQUANT = {"F32": lambda r, w=False: ref_float(r, "F32", w), "F16": lambda r, w=False: ref_float(r, "F16", w),
                     "BF16": lambda r, w=False: ref_float(r, "BF16", w), "Q8_0": ref_q8_0, "Q4_0": ref_q4_0,
                     "Q4_1": ref_q4_1, "Q5_0": ref_q5_0, "Q5_1": ref_q5_1,
                     "Q4_K": lambda r, w=False: ref_k(r, "Q4_K", w), "Q5_K": lambda r, w=False: ref_k(r, "Q5_K", w),
                     "Q6_K": ref_q6_k}

# ---------------------------------------------------------------------------
# What the tests write: random blocks of each type, and a Hugging Face Llama as
# llama.cpp's converter writes it


def random_blocks(rng, tname, n_values):
    """Random tensor bytes of type tname: random quants and scale bytes, the fp16 scales
    drawn from ordinary values and extremes (65504, the smallest subnormal, the smallest
    normal, 0, -0, negative), negative mins, and about one block in twenty all zero."""
    _, qk, bs = GGML_TYPES[tname]
    nb = n_values // qk
    if tname in ("F16", "BF16", "F32"):
        if tname == "F32":
            bits = rng.integers(0, 2 ** 32, size=n_values, dtype=np.uint64).astype(np.uint32)
            bits[(bits & 0x7F800000) == 0x7F800000] &= 0xBFFFFFFF  # no Inf/NaN
            special = [0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000001, 0x00800000, 0x80000000, 0]
            bits[:len(special)] = special
            return bits.astype("<u4").tobytes()
        bits = rng.integers(0, 2 ** 16, size=n_values, dtype=np.uint64).astype(np.uint16)
        exp_mask, special = ((0x7C00, [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x8000, 0])
                             if tname == "F16" else (0x7F80, [0x7F7F, 0xFF7F, 0x0001, 0x8001, 0x0080, 0x8000, 0]))
        bits[(bits & exp_mask) == exp_mask] &= ~np.uint16(0x4000)  # no Inf/NaN
        bits[:len(special)] = special
        return bits.astype("<u2").tobytes()
    b = rng.integers(0, 256, size=(nb, bs), dtype=np.uint64).astype(np.uint8)

    def scales(sign):
        v = (rng.standard_normal(nb) * 0.01).astype(F32)
        if sign < 0:
            v = -np.abs(v)
        extremes = np.array([65504, -65504, 2.0 ** -24, -(2.0 ** -24), 2.0 ** -14, 0.0, -0.0, 1.0, -3.0], dtype=F32)
        pick = rng.random(nb) < 0.2
        v[pick] = extremes[rng.integers(0, len(extremes), int(pick.sum()))]
        return fp16_bits(v).view(np.uint8).reshape(nb, 2)

    d_at = {"Q6_K": 208}.get(tname, 0)
    b[:, d_at:d_at + 2] = scales(+1)
    if tname in ("Q4_1", "Q5_1", "Q4_K", "Q5_K"):
        b[:, 2:4] = scales(-1 if tname in ("Q4_1", "Q5_1") else +1)  # the min (dmin: both signs)
    b[rng.random(nb) < 0.05] = 0
    return b.tobytes()


def llama_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute: Hugging Face's rotate-half
    query/key rows -> interleaved pairs, per head (keys with n_kv_heads)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_LAYER = [("attn_norm", "input_layernorm"), ("ffn_down", "mlp.down_proj"), ("ffn_gate", "mlp.gate_proj"),
              ("ffn_up", "mlp.up_proj"), ("ffn_norm", "post_attention_layernorm"), ("attn_k", "self_attn.k_proj"),
              ("attn_output", "self_attn.o_proj"), ("attn_q", "self_attn.q_proj"), ("attn_v", "self_attn.v_proj")]


def gguf_arch(config):
    """The GGUF architecture of a Hugging Face config: qwen2, qwen3, or llama."""
    return config.get("model_type") if config.get("model_type") in ("qwen2", "qwen3") else "llama"


def gguf_llama_tensors(weights, config, matrix_type, norm_type="F32"):
    """Hugging Face weights -> GGUF tensors named and ordered as llama.cpp's converter
    writes them (token_embd, each block's tensors, output_norm, output unless tied), the
    query and key rows of a llama model permuted as it permutes them (qwen2 and qwen3
    keep Hugging Face's order; their biases and q/k norms are F32 as the converter
    keeps 1-D tensors). matrix_type: a ggml type name, or a function giving one for a
    matrix's name. [(name, shape, type, bytes)]"""
    heads, kvh = config["num_attention_heads"], config["num_key_value_heads"]
    llama = gguf_arch(config) == "llama"
    items = [("token_embd.weight", weights["model.embed_tokens.weight"], matrix_type)]
    extra = [("attn_q.bias", "self_attn.q_proj.bias"), ("attn_k.bias", "self_attn.k_proj.bias"),
             ("attn_v.bias", "self_attn.v_proj.bias"), ("attn_q_norm.weight", "self_attn.q_norm.weight"),
             ("attn_k_norm.weight", "self_attn.k_norm.weight")]
    for i in range(config["num_hidden_layers"]):
        for short, hf in GGUF_LAYER:
            w = weights[f"model.layers.{i}.{hf}.weight"]
            if short == "attn_q" and llama:
                w = llama_permute(w, heads)
            elif short == "attn_k" and llama:
                w = llama_permute(w, kvh)
            items.append((f"blk.{i}.{short}.weight", w, norm_type if short.endswith("norm") else matrix_type))
        for short, hf in extra:
            if f"model.layers.{i}.{hf}" in weights:
                items.append((f"blk.{i}.{short}", weights[f"model.layers.{i}.{hf}"], "F32"))
    items.append(("output_norm.weight", weights["model.norm.weight"], norm_type))
    if not config["tie_word_embeddings"]:
        items.append(("output.weight", weights["lm_head.weight"], matrix_type))
    items = [(name, w, t(name) if callable(t) else t) for name, w, t in items]
    return [(name, w.shape, t, gguf_encode(w, t)) for name, w, t in items]


def gguf_llama_kv(config, file_type, counts="uint32"):
    """The llama.* (qwen2.*, qwen3.*) metadata llama.cpp's converter writes (counts as
    uint32 there; key and value length only for a head_dim of the config's own)."""
    dim, heads, arch = config["hidden_size"], config["num_attention_heads"], gguf_arch(config)
    hd = config.get("head_dim") or dim // heads
    kv = [("general.architecture", "string", arch), ("general.name", "string", f"test_export tiny {arch}"),
          (f"{arch}.context_length", counts, config["max_position_embeddings"]),
          (f"{arch}.embedding_length", counts, dim), (f"{arch}.block_count", counts, config["num_hidden_layers"]),
          (f"{arch}.feed_forward_length", counts, config["intermediate_size"]),
          (f"{arch}.rope.dimension_count", counts, hd), (f"{arch}.attention.head_count", counts, heads),
          (f"{arch}.attention.head_count_kv", counts, config["num_key_value_heads"]),
          (f"{arch}.rope.freq_base", "float32", config["rope_theta"]),
          (f"{arch}.attention.layer_norm_rms_epsilon", "float32", config["rms_norm_eps"]),
          (f"{arch}.vocab_size", counts, config["vocab_size"]), ("general.file_type", "uint32", file_type),
          ("general.quantization_version", "uint32", 2)]
    if config.get("head_dim"):
        kv += [(f"{arch}.attention.key_length", counts, hd), (f"{arch}.attention.value_length", counts, hd)]
    return kv


def llama2_vocab_kv(model_file):
    """tokenizer.ggml.* for Llama 2's SentencePiece vocabulary (model_file: its
    tokenizer.model), as llama.cpp's converter writes it: each piece's text (with its
    U+2581), score and type (1 normal, 2 unknown, 3 control, 5 unused, 6 byte)."""
    import sentencepiece  # only this function needs it, and only some tests call it
    sp = sentencepiece.SentencePieceProcessor(model_file=model_file)
    n = sp.vocab_size()
    types = np.array([2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                      else 6 if sp.is_byte(i) else 1 for i in range(n)], dtype=np.int32)
    return [("tokenizer.ggml.model", "string", "llama"), ("tokenizer.ggml.pre", "string", "default"),
            ("tokenizer.ggml.tokens", "array", ("string", [sp.id_to_piece(i) for i in range(n)])),
            ("tokenizer.ggml.scores", "array", ("float32", np.array([sp.get_score(i) for i in range(n)], F32))),
            ("tokenizer.ggml.token_type", "array", ("int32", types)),
            ("tokenizer.ggml.bos_token_id", "uint32", 1), ("tokenizer.ggml.eos_token_id", "uint32", 2),
            ("tokenizer.ggml.unknown_token_id", "uint32", 0), ("tokenizer.ggml.add_bos_token", "bool", True),
            ("tokenizer.ggml.add_eos_token", "bool", False)]


def llama3_vocab_kv(folder):
    """tokenizer.ggml.* for Llama 3 (model "gpt2", pre "llama-bpe"), as llama.cpp's
    converter writes it from tokenizer.json: the vocabulary's strings (GPT-2's byte
    characters) by id, the 256 added tokens (control: type 3), the merges as "a b"."""
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    n = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    tokens, types = [None] * n, np.ones(n, dtype=np.int32)
    for piece, i in tok["model"]["vocab"].items():
        tokens[i] = piece
    for a in tok["added_tokens"]:
        tokens[a["id"]], types[a["id"]] = a["content"], 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    kv = [("tokenizer.ggml.model", "string", "gpt2"), ("tokenizer.ggml.pre", "string", "llama-bpe"),
          ("tokenizer.ggml.tokens", "array", ("string", tokens)), ("tokenizer.ggml.token_type", "array", ("int32", types)),
          ("tokenizer.ggml.merges", "array", ("string", merges)), ("tokenizer.ggml.bos_token_id", "uint32", 128000),
          ("tokenizer.ggml.eos_token_id", "uint32", 128001), ("tokenizer.ggml.add_bos_token", "bool", True)]
    config_file = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(config_file):
        with open(config_file, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
        if isinstance(template, str):
            kv.append(("tokenizer.chat_template", "string", template))
    return kv


def llama3_rope_factors(config):
    """rope_freqs.weight as llama.cpp's converter computes it for rope_type "llama3": per
    RoPE pair, the number its frequency is divided by (1 kept, factor divided, smoothed
    between). (The converter reads original_max_position_embeddings from the top of
    config.json, default 8192, where Llama 3.1's config has it inside rope_scaling,
    also 8192; here it is rope_scaling's.)"""
    s = config["rope_scaling"]
    hd = config["hidden_size"] // config["num_attention_heads"]
    freqs = F32(1) / (F32(config["rope_theta"]) ** (np.arange(0, hd, 2, dtype=F32) / F32(hd)))
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], \
        s["original_max_position_embeddings"]
    out = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=F32)
