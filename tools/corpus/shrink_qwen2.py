#!/usr/bin/env python3
"""Entangle's vLLM Qwen2 graphs (examples/data/qwen2/paral{T}_layer1/fw.g0.r{k}.py) at test widths.

The graphs as published run 32,768 tokens through Qwen2-1.5B's widths (hidden 1536, 12 query and 2
key/value heads of 128, ffn 8960, vocabulary 151,936): far past what a numeric witness can
evaluate. This rewrites every size in the printed text, per file, to a small model with the same
structure (hidden 32, 8 query and 2 key/value heads of 4, ffn 48, vocabulary 64, 8 tokens), so
a bug twin is refuted with a witness. Only sizes change: statements, names and source lines stay.

usage: shrink_qwen2.py SRC_QWEN2_DIR OUT_DIR   (writes OUT_DIR/paral{1,2,4}_layer1/fw.g0.r{k}.py)
"""
import os
import re
import sys

# Per tensor-parallel width: published size -> test size (each value means one thing in a file).
COMMON = {32768: 8, 151936: 64, 1536: 32, 128: 4}
MAPS = {
    1: {**COMMON, 12: 8, 256: 8, 1792: 40, 2048: 48, 8960: 48, 17920: 96},
    2: {**COMMON, 6: 4, 768: 16, 896: 20, 1024: 24, 4480: 24, 8960: 48, 75968: 32},
    4: {**COMMON, 3: 2, 384: 8, 512: 12, 640: 16, 2240: 12, 4480: 24, 37984: 16, 75968: 32, 113952: 48},
}
# Single digits are head counts only inside shape lists; elsewhere they are dims and flags.
SMALL = {1: {12}, 2: {6}, 4: {3}}


def shrink(text: str, tp: int) -> str:
    m = MAPS[tp]

    def big(x: re.Match) -> str:
        n = int(x.group(0))
        if n not in m:
            raise SystemExit(f'tp{tp}: no test size for {n}')
        return str(m[n])

    def in_list(x: re.Match) -> str:
        items = x.group(1).split(', ')
        return '[' + ', '.join(str(m[int(i)]) if i.isdigit() and int(i) in SMALL[tp] else i for i in items) + ']'

    out = []
    for line in text.split('\n'):
        if line.lstrip().startswith('#'):
            out.append(line)
            continue
        line = re.sub(r'\[([-\d, ]+)\]', in_list, line)
        # Numbers of two or more digits, not an exponent (1e-06) nor part of a name (arg10_1).
        line = re.sub(r'(?<![\w.\-])\d{2,}(?![\w.])', big, line)
        out.append(line)
    return '\n'.join(out)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    for tp in (1, 2, 4):
        d = f'paral{tp}_layer1'
        os.makedirs(os.path.join(dst, d), exist_ok=True)
        for k in range(tp):
            f = f'fw.g0.r{k}.py'
            with open(os.path.join(src, d, f)) as fh:
                text = fh.read()
            with open(os.path.join(dst, d, f), 'w') as fh:
                fh.write(shrink(text, tp))


if __name__ == '__main__':
    main()
