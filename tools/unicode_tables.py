#!/usr/bin/env python3
"""Print the Unicode tables of run.c's byte-level tokenizers, as C: the classes of
Llama 3's (and Qwen's) pre-tokenizer, and Qwen's NFC normalizer.

usage: python3 tools/unicode_tables.py            # print the tables
       python3 tools/unicode_tables.py --check run.c   # exit 1 if run.c's copy differs

Llama 3's pre-tokenizer regex asks three questions of a character: is it a letter
(\\p{L}: categories Lu Ll Lt Lm Lo), a number (\\p{N}: Nd Nl No), or white space (\\s:
the White_Space property)? Hugging Face's tokenizers library answers them with
Oniguruma 6.9.8, whose tables are Unicode 14.0.0; Python 3.11's unicodedata is the
same version, and this script refuses any other. White_Space is not in unicodedata;
in Unicode 14.0.0 it is exactly the Zs, Zl and Zp characters plus U+0009..U+000D and
U+0085 (PropList.txt).

NFC (Qwen's normalizer) needs each character's canonical combining class, its
canonical decomposition (one level: run.c applies it again to the parts), and which
pairs compose back. A pair is left out when its character is a composition
exclusion: those are found as the characters that NFC of their own decomposition
does not give back, so every table here comes from unicodedata alone. Hangul
syllables are decomposed and composed by rule in run.c, and are not in the tables.
"""
import sys
import unicodedata

UNICODE_VERSION = "14.0.0"
BEGIN = "/* BEGIN unicode_tables.py output */"
END = "/* END unicode_tables.py output */"


def ranges(belongs):
    """Inclusive [first, last] runs of the code points for which belongs(cp) holds."""
    out = []
    for cp in range(0x110000):
        if belongs(cp):
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
    return out


def category_in(categories):
    return lambda cp: unicodedata.category(chr(cp)) in categories


def is_white_space(cp):
    return unicodedata.category(chr(cp)) in ("Zs", "Zl", "Zp") or 0x09 <= cp <= 0x0D or cp == 0x85


def combining_classes():
    """[first, last, class]: runs of code points with one nonzero combining class."""
    out = []
    for cp in range(0x110000):
        ccc = unicodedata.combining(chr(cp))
        if ccc:
            if out and out[-1][1] == cp - 1 and out[-1][2] == ccc:
                out[-1][1] = cp
            else:
                out.append([cp, cp, ccc])
    return out


def is_hangul_syllable(cp):
    return 0xAC00 <= cp <= 0xD7A3


def decompositions():
    """[code point, first, second]: the canonical decompositions, one level (second 0
    for a single code point)."""
    out = []
    for cp in range(0x110000):
        mapping = unicodedata.decomposition(chr(cp))
        if mapping and not mapping.startswith("<") and not is_hangul_syllable(cp):
            parts = [int(p, 16) for p in mapping.split()]
            out.append(parts and [cp] + parts + [0] * (2 - len(parts)))
        # run.c's buffer holds 4 code points for each one it decomposes
        assert len(unicodedata.normalize("NFD", chr(cp))) <= 4
    return out


def compositions(decomposed):
    """[first, second, composite], sorted by the pair: the decompositions into two code
    points that NFC composes back (all but the composition exclusions)."""
    out = []
    for cp, first, second in decomposed:
        if second and unicodedata.normalize("NFC", unicodedata.normalize("NFD", chr(cp))) == chr(cp):
            out.append([first, second, cp])
    return sorted(out)


def c_table(name, runs):
    width = len(runs[0])
    lines = [f"static const uint32_t {name}[][{width}] = {{"]
    row = "   "
    for run in runs:
        item = " {" + ", ".join(f"0x{v:X}" for v in run) + "},"
        if len(row) + len(item) > 120:  # the width of the rest of run.c
            lines.append(row)
            row = "   "
        row += item
    lines.append(row)
    lines.append("};")
    return "\n".join(lines)


def tables():
    parts = [BEGIN,
             f"/* Unicode {UNICODE_VERSION}: letters (L*), numbers (N*) and White_Space, as sorted,",
             " * inclusive ranges of code points. */",
             c_table("unicode_letters", ranges(category_in(("Lu", "Ll", "Lt", "Lm", "Lo")))),
             c_table("unicode_numbers", ranges(category_in(("Nd", "Nl", "No")))),
             c_table("unicode_white_space", ranges(is_white_space)),
             "/* NFC: canonical combining classes [first, last, class]; canonical decompositions",
             " * [code point, first, second (0: none)], one level; and the pairs that compose",
             " * [first, second, composite]. Hangul syllables are left to rules. */",
             c_table("nfc_combining_classes", combining_classes()),
             c_table("nfc_decompositions", decompositions()),
             c_table("nfc_compositions", compositions(decompositions())),
             END]
    return "\n".join(parts) + "\n"


def main():
    if unicodedata.unidata_version != UNICODE_VERSION:
        sys.exit(f"unicode_tables.py: this Python has Unicode {unicodedata.unidata_version}; "
                 f"the tables are Unicode {UNICODE_VERSION} (Python 3.11's)")
    text = tables()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        source = open(sys.argv[2], encoding="utf-8").read()
        start, end = source.find(BEGIN), source.find(END)
        if start < 0 or end < 0:
            sys.exit(f"unicode_tables.py: {sys.argv[2]} has no generated tables")
        if source[start:end + len(END) + 1] != text:
            sys.exit(f"unicode_tables.py: {sys.argv[2]}'s tables differ from Unicode {UNICODE_VERSION}'s")
        print(f"{sys.argv[2]}: the tables are Unicode {UNICODE_VERSION}'s")
    elif len(sys.argv) == 1:
        sys.stdout.write(text)
    else:
        sys.exit(__doc__.split("\n\n")[1])


main()
