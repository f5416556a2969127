#!/usr/bin/env python3
"""Print the Unicode tables of run.c's Llama 3 pre-tokenizer, as C.

usage: python3 tools/unicode_tables.py            # print the tables
       python3 tools/unicode_tables.py --check run.c   # exit 1 if run.c's copy differs

Llama 3's pre-tokenizer regex asks three questions of a character: is it a letter
(\\p{L}: categories Lu Ll Lt Lm Lo), a number (\\p{N}: Nd Nl No), or white space (\\s:
the White_Space property)? Hugging Face's tokenizers library answers them with
Oniguruma 6.9.8, whose tables are Unicode 14.0.0; Python 3.11's unicodedata is the
same version, and this script refuses any other. White_Space is not in unicodedata;
in Unicode 14.0.0 it is exactly the Zs, Zl and Zp characters plus U+0009..U+000D and
U+0085 (PropList.txt).
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


def c_table(name, runs):
    lines = [f"static const uint32_t {name}[][2] = {{"]
    row = "   "
    for first, last in runs:
        item = f" {{0x{first:X}, 0x{last:X}}},"
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
