#!/usr/bin/env python3
"""Generates src/text/unicode_tables.cpp and src/text/unicode_lower_tables.cpp: the per-code-point
tables kiln::text's BERT tokenizer needs (the lower-casing map in a file of its own).

The tokenizer must give the ids Hugging Face's BertTokenizer gives. In transformers 5 that class is
backed by the `tokenizers` Rust library (BertNormalizer + BertPreTokenizer + WordPiece), which
mixes Unicode versions: lower-casing and White_Space come from Rust's std (Unicode 16), the
category tests (control/format/private-use, punctuation, non-spacing marks) and NFD come from
older crates. Python's `unicodedata` (Unicode 14 here) disagrees with it on a few hundred code
points, so this script asks `tokenizers` itself, code point by code point, and uses `unicodedata`
only to cross-check and to report how many answers differ from the Unicode categories.

Tables written (every table sorted by code point, so the C++ side binary-searches):
  kClassRanges   [first, last, class]: 1 = removed by clean_text (Cc except \t\n\r, Cf, Co,
                 U+0000, U+FFFD), 2 = whitespace (becomes ' '), 3 = punctuation (split out)
  kCjkRanges     [first, last]: characters surrounded by spaces when tokenize_chinese_chars
  kStripDrop     [first, last]: characters strip_accents removes (NFD gives only Mn marks)
  kStripMap      {cp, offset, length} into kStripPool: NFD-then-drop-Mn result where it is
                 neither the character itself nor empty (Hangul syllables are decomposed by
                 the algorithm in unicode.cpp instead and are checked here)
  kLowerMap      {cp, offset, length} into kLowerPool: per-character lower-casing (no
                 context: final sigma stays sigma, as in tokenizers)

Usage: python3 scripts/gen_unicode_tables.py [out_dir]   (default src/text; needs the `tokenizers` package)
"""
import collections
import os
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers, pre_tokenizers

OUT_DIR = sys.argv[1] if len(sys.argv) > 1 else "src/text"

clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
cjk = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
pre = pre_tokenizers.BertPreTokenizer()

S_BASE, L_BASE, V_BASE, T_BASE, L_COUNT, V_COUNT, T_COUNT = 0xAC00, 0x1100, 0x1161, 0x11A7, 19, 21, 28
N_COUNT, S_COUNT = V_COUNT * T_COUNT, 19 * 21 * 28


def hangul(cp):
    s = cp - S_BASE
    out = [L_BASE + s // N_COUNT, V_BASE + (s % N_COUNT) // T_COUNT]
    if s % T_COUNT:
        out.append(T_BASE + s % T_COUNT)
    return out


classes = {}  # cp -> class
cjk_set, strip_drop, strip_map, lower_map = set(), set(), {}, {}
disagree = collections.Counter()
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue  # surrogates: never produced by the UTF-8 decoder
    c = chr(cp)
    cat = unicodedata.category(c)
    r = clean.normalize_str("a" + c + "a")
    if r == "aa":
        cls = 1
    elif r == "a a" and c != "a":
        cls = 2
    elif cp != 0x20 and len(pre.pre_tokenize_str("a" + c + "a")) == 3:
        cls = 3
    else:
        cls = 0
    if cls:
        classes[cp] = cls
    ucd = 1 if (cp in (0, 0xFFFD) or (cat in ("Cc", "Cf", "Co") and c not in "\t\n\r")) else \
        2 if (c in "\t\n\r" or cat == "Zs") else \
        3 if (cat.startswith("P") or (cp < 128 and not c.isalnum() and 33 <= cp <= 126)) else 0
    if ucd != cls:
        disagree["class"] += 1
    if cjk.normalize_str(c) == " " + c + " ":
        cjk_set.add(cp)
    s = [ord(x) for x in strip.normalize_str(c)]
    if S_BASE <= cp < S_BASE + S_COUNT:
        assert s == hangul(cp), hex(cp)
    elif not s:
        strip_drop.add(cp)
    elif s != [cp]:
        strip_map[cp] = s
    nfd = [ord(x) for x in unicodedata.normalize("NFD", c) if unicodedata.category(x) != "Mn"]
    if nfd != s:
        disagree["strip"] += 1
    lo = [ord(x) for x in lower.normalize_str(c)]
    if lo != [cp]:
        lower_map[cp] = lo
    if lo != [ord(x) for x in c.lower()]:
        disagree["lower"] += 1


def ranges(cps):
    out = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


class_ranges = []
for cp in sorted(classes):
    if class_ranges and class_ranges[-1][1] == cp - 1 and class_ranges[-1][2] == classes[cp]:
        class_ranges[-1][1] = cp
    else:
        class_ranges.append([cp, cp, classes[cp]])


def emit_map(name, m):
    pool, entries = [], []
    for cp in sorted(m):
        entries.append((cp, len(pool), len(m[cp])))
        pool.extend(m[cp])
    # MapEntry holds the offset in 16 bits and the length in 8.
    assert len(pool) < 1 << 16 and max(n for _, _, n in entries) < 1 << 8, name
    lines = [f"const MapEntry k{name}Map[] = {{"]
    lines += wrap([f"{{0x{a:X},{b},{n}}}" for a, b, n in entries])
    lines.append("};")
    lines.append(f"const size_t k{name}MapSize = {len(entries)};")
    lines.append(f"const char32_t k{name}Pool[] = {{")
    lines += wrap([f"0x{x:X}" for x in pool])
    lines.append("};")
    return lines


def wrap(items, width=100):
    lines, cur = [], ""
    for it in items:
        if len(cur) + len(it) + 1 > width:
            lines.append(cur)
            cur = ""
        cur += it + ","
    if cur:
        lines.append(cur)
    return lines


def header():
    return [
        "// Generated by scripts/gen_unicode_tables.py from tokenizers "
        f"{tokenizers.__version__} (BertNormalizer, BertPreTokenizer); do not edit.",
        f"// Code points where these tables differ from Python's unicodedata {unicodedata.unidata_version}: "
        f"classes {disagree['class']}, strip_accents {disagree['strip']}, lower-casing {disagree['lower']}.",
        '#include "text/unicode.h"',
        "",
        "namespace kiln::text::unicode {",
        "",
    ]


def write(name, body):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        f.write("\n".join(header() + body + ["", "}  // namespace kiln::text::unicode", ""]))
    return path


out = ["const ClassRange kClassRanges[] = {"]
out += wrap([f"{{0x{a:X},0x{b:X},{c}}}" for a, b, c in class_ranges])
out += ["};", f"const size_t kClassRangesSize = {len(class_ranges)};", ""]
for name, cps in (("Cjk", cjk_set), ("StripDrop", strip_drop)):
    rs = ranges(cps)
    out.append(f"const CodeRange k{name}Ranges[] = {{")
    out += wrap([f"{{0x{a:X},0x{b:X}}}" for a, b in rs])
    out += ["};", f"const size_t k{name}RangesSize = {len(rs)};", ""]
out += emit_map("Strip", strip_map)
paths = [write("unicode_tables.cpp", out), write("unicode_lower_tables.cpp", emit_map("Lower", lower_map))]
print(f"{', '.join(paths)}: {len(class_ranges)} class ranges, {len(ranges(cjk_set))} CJK ranges, "
      f"{len(ranges(strip_drop))} strip-drop ranges, {len(strip_map)} strip maps, {len(lower_map)} lower maps; "
      f"differences from unicodedata: {dict(disagree)}")
