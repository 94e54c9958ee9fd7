#!/usr/bin/env python3
"""Entangle's bug-9 backward partitions (test/fixtures/entangle-bugs/layernorm-bw) at test widths.

The graphs as published are a one-layer Megatron GPT at sequence 1024, micro-batch 32, hidden
1536 (32 heads of 48), ffn 6144, vocabulary 98,304: the LayerNorm weight gradient's stage holds
10^8 elements, past what a numeric witness evaluates. This rewrites every size in the printed
text to a model with the same structure: sequence 4, micro-batch 2, 2 heads of 2 (hidden 4),
ffn 16, vocabulary 8, 8 positions. Each published size means one thing in these files, so one
map serves all three: 1024 is the sequence and also micro-batch x heads (32 x 32), so both
become 4 (2 x 2); 32 is the micro-batch and the heads, both 2; the products follow (32768 =
sequence x batch -> 8, 1048576 -> 16, and each rank's halves). Only sizes change: statements,
names, literals other than sizes (dims, the attention scale 1/sqrt(48), eps) and comments stay,
so the bug and its fix are the same statements at a width a witness reaches.

usage: shrink_entangle_bw.py SRC_DIR OUT_DIR   (logical.py, rank0.py, rank1.py; relations.json copied)
"""
import os
import re
import shutil
import sys

SIZES = {
    1024: 4, 32: 2, 48: 2, 144: 6, 1536: 4, 4608: 12, 6144: 16, 98304: 8, 32768: 8, 1048576: 16,
    2048: 8,
    # the ranks' halves (TP 2): heads 16, sequence shard and batch x heads 512, hidden / 2, qkv
    # rows 2304, ffn / 2, vocabulary / 2, and the products
    16: 1, 512: 2, 768: 2, 2304: 6, 3072: 8, 49152: 4, 16384: 4, 524288: 8,
}
# Numbers below this are dims, flags and group sizes: left as they are.
SMALLEST = 16
TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d+(?:\.\d+)?(?:e-?\d+)?\b")


def shrink_line(line: str, where: str) -> str:
    if line.lstrip().startswith('#'):
        return line

    def one(m: re.Match) -> str:
        tok = m.group(0)
        if tok[0] in '\'"':
            # annotations ("f16[1024, 32, 1536]") hold sizes; other strings (group names) do not
            return '"' + TOKEN.sub(one, tok[1:-1]) + '"' if tok[0] == '"' else tok
        if not tok.isdigit() or int(tok) < SMALLEST:
            return tok
        if int(tok) not in SIZES:
            raise SystemExit(f'{where}: no test size for {tok}')
        return str(SIZES[int(tok)])

    return TOKEN.sub(one, line)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    for f in sorted(os.listdir(src)):
        if f.endswith('.py'):
            lines = open(os.path.join(src, f)).read().split('\n')
            start = next(i for i, l in enumerate(lines) if 'def forward(' in l)
            body = lines[:start] + [shrink_line(l, f'{f}:{start + k + 1}') for k, l in enumerate(lines[start:])]
            open(os.path.join(out, f), 'w').write('\n'.join(body))
    shutil.copy(os.path.join(src, 'relations.json'), os.path.join(out, 'relations.json'))


if __name__ == '__main__':
    main()
