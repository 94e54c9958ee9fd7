#!/usr/bin/env python3
"""planproof relations for the GPT graphs Entangle publishes (github.com/nyu-systems/Entangle,
examples/data/gpt/paral{T}_layer{L}: Megatron GPT under TP + SP, forward graphs `fw.g0.r{k}.py`).

Makes one `planproof import-graphs --dir` input from a tp-1 config (the single-device graph)
and a tp-T config: logical.py, rank<k>.py and relations.json. The placements restate the
preconditions of Entangle's examples/verify_gpt.py (12 parameters per layer: QKV and fc1
split along rows, the projection and fc2 along columns, norms and biases of row-parallel
layers replicated; the word embeddings and the output layer split along the vocabulary), the
data inputs are replicated with their value ranges, module constants are 0 (as that file's
`get_lift_fresh_copy_constant_value`), dropout masks are paired by order, and the checked
output is the loss node `div_2`.

usage: entangle_gpt_relations.py T L SRC_TP1_DIR SRC_TPT_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import sys


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    tp, layers, src1, srct, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src1, 'fw.g0.r0.py'), os.path.join(out, 'logical.py'))
    for r in range(tp):
        shutil.copy(os.path.join(srct, f'fw.g0.r{r}.py'), os.path.join(out, f'rank{r}.py'))
    # The vocabulary and sequence sizes, from the single-device graph's signature.
    sig = open(os.path.join(src1, 'fw.g0.r0.py')).read()
    vocab = int(re.search(r'primals_1: "f32\[(\d+), \d+\]"', sig).group(1))
    n = 12
    seq = int(re.search(r'primals_%d: "f32\[(\d+), \d+\]"' % (5 + layers * n), sig).group(1))
    inputs = {}

    def rel(i: int, placement: str, role: str = 'param') -> dict:
        inputs[f'primals_{i}'] = {'role': role, 'placements': [placement]}
        return inputs[f'primals_{i}']

    per_layer = ['S(0)', 'S(0)', 'S(1)', 'R', 'R', 'R', 'S(0)', 'S(0)', 'S(1)', 'R', 'R', 'R']
    for layer in range(layers):
        for k, placement in enumerate(per_layer):
            rel(4 + k + layer * n, placement)
    rel(1, 'S(0)')
    rel(2, 'R')
    rel(3, 'R')
    rel(4 + layers * n, 'S(0)')  # output layer
    rel(5 + layers * n, 'R')  # position embeddings
    rel(6 + layers * n, 'R', 'input')['values'] = {'range': [0, vocab]}  # tokens
    rel(7 + layers * n, 'R', 'input')  # attention mask
    rel(8 + layers * n, 'R', 'input')['values'] = {'range': [0, seq]}  # position ids
    rel(9 + layers * n, 'R', 'input')['values'] = {'range': [0, vocab]}  # labels
    rel(10 + layers * n, 'R', 'input')  # loss mask
    consts = sorted(set(re.findall(r'self\.(_tensor_constant\d+)', open(os.path.join(srct, 'fw.g0.r0.py')).read())), key=lambda c: int(c[len('_tensor_constant'):]))
    relations = {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'tp', 'size': tp}]},
        'constants': {c: 0 for c in consts},
        'opMap': 'apex',
        'dropout': 'auto',
        'inputs': inputs,
        'outputs': [{'name': 'loss', 'node': 'div_2', 'placements': ['R']}],
    }
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
