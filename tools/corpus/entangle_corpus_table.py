#!/usr/bin/env python3
"""The tables bench/entangle-corpus.sh ends with: one row per import configuration, then one row
per published graph file (every .py under OUT/data) saying which configurations read it, as
what, and their import exit codes and verify verdicts; last, how many files imported. A file
counts only if some configuration that reads it imported with exit 0.

Reads OUT/configs.tsv (config, import exit, import time, verdict, verify time) and
OUT/files.tsv (config, role, file relative to OUT/data), both written by the bench.

usage: entangle_corpus_table.py OUT_DIR
"""
import os
import sys


def rows(path: str) -> list:
    with open(path) as f:
        return [line.rstrip('\n').split('\t') for line in f if line.strip()]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    configs = {c[0]: c[1:] for c in rows(os.path.join(out, 'configs.tsv'))}
    print('| config | import exit | import | verdict | verify |\n|---|---|---|---|---|')
    for c, (code, itime, verdict, vtime) in configs.items():
        print(f'| {c} | {code} | {itime} | {verdict} | {vtime} |')
    readers: dict = {}
    for c, role, f in rows(os.path.join(out, 'files.tsv')):
        readers.setdefault(f, []).append((c, role))
    data = os.path.join(out, 'data')
    files = sorted(os.path.relpath(os.path.join(d, n), data) for d, _, ns in os.walk(data) for n in ns if n.endswith('.py'))
    # Per file, each reading config's verdict by its first word(s) and its verify user CPU (details above).
    short = {c: (v[2].split(':')[0], v[3].split(', ')[1] if ', ' in v[3] else v[3]) for c, v in configs.items()}
    print('\n| file | read by (as) | import exit | verdict | verify user CPU |\n|---|---|---|---|---|')
    ok = 0
    for f in files:
        rs = readers.get(f, [])
        ok += any(configs[c][0] == '0' for c, _ in rs)
        cells = [', '.join(f'{c} ({role})' for c, role in rs) or 'none']
        cells += ['; '.join(configs[c][0] for c, _ in rs) or '-']
        cells += ['; '.join(short[c][k] for c, _ in rs) or '-' for k in (0, 1)]
        print(f'| {f} | ' + ' | '.join(cells) + ' |')
    print(f'\n{ok} of {len(files)} files imported')


if __name__ == '__main__':
    main()
