#!/usr/bin/env python3
"""planproof relations for Entangle's switch-MLP bug graphs (github.com/nyu-systems/Entangle,
examples/data/bug_missing_switchmlp_allreduce/{tp1,tp2.bug}/both.g0.r<k>.py: a one-layer
Megatron GPT whose MLP is the legacy top-1 SwitchMLP with one expert, traced by torch 2.x as
one joint graph per rank, with the expert's tokens selected by `nonzero`: sizes `u0`, read by
dense masking, docs/import.md "Data-dependent sizes").

Makes one `planproof import-graphs --dir` input: logical.py (the tp-1 graph), rank0.py,
rank1.py (the tp-2 graphs, tensor and sequence parallel) and relations.json. The relations
restate the preconditions of Entangle's examples/detect_bug_missing_switchmlp_allreduce.py:

  * the region is the backward from its forced leaves to the router weight's gradient `t_20`,
    which must be the same on every rank as on one device (Entangle's `build_expected`:
    all_eq, so placement R);
  * its `concat_target` preconditions become assumptions on intermediate nodes (docs/import.md,
    "Assumptions on intermediate nodes"), each concatenated along the dim Entangle gives:
    the logits' gradient `mul_47` (ranks: `mul_43`) along the vocabulary, dim 2; the switch-MLP
    output `index_put` (ranks: `wait_tensor_10`, after the reduce-scatter), the routing choice
    `getitem_50`, the router's `sigmoid`, the router input `view_17` (ranks: `view_16`) and
    `new_zeros_1` along the tokens, dim 0; the word embeddings (`primals_6`) along the vocabulary;
  * `sinkhorn` (Megatron's iterative normalization, an op with no exact rule: a loop until a
    tolerance) is assumed too, along the tokens: its only reader is the `max` whose index is the
    assumed `getitem_50`, so in the plan no op reads it (an unused input) and the assumption adds
    no claim about the checked output; Entangle leaves it out by making `getitem_50` a leaf;
  * every other graph input needs a relation in planproof (Entangle leaves them free): the
    parameters as Megatron lays them out under TP (QKV and fc1 split along rows, the projection
    and fc2 along columns, norms, the router and position embeddings replicated), the data
    inputs replicated with their value ranges, each `tangents_k` (the gradient accumulated into)
    as its parameter, the loss scale replicated; module constants are 0 (Entangle's
    `get_lift_fresh_copy_constant_value`).

usage: entangle_switchmlp_relations.py SRC_TP1_DIR SRC_TP2_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import sys

# primals_k: the parameter's placement under TP 2 (Megatron core GPT layer, one expert).
PARAMS = {
    6: 'S(0)',   # word embeddings (vocab parallel)
    7: 'R',      # position embeddings
    8: 'R', 9: 'R',  # input layernorm
    10: 'S(1)',  # linear_proj (row parallel)
    11: 'S(0)',  # linear_qkv (column parallel)
    12: 'R', 13: 'R', 14: 'R', 15: 'R',  # q/k layernorm
    16: 'R', 17: 'R',  # pre-MLP layernorm
    18: 'R',     # router
    19: 'S(0)',  # expert dense_h_to_4h (column parallel)
    20: 'S(1)',  # expert dense_4h_to_h (row parallel)
    21: 'R', 22: 'R',  # final layernorm
}

# Entangle's concat_target preconditions: rank node -> (logical node, dim).
ASSUMED = {
    'mul_43': ('mul_47', 2),
    'wait_tensor_10': ('index_put', 0),
    'getitem_50': ('getitem_50', 0),
    'sigmoid': ('sigmoid', 0),
    'view_16': ('view_17', 0),
    'new_zeros_1': ('new_zeros_1', 0),
    # (not Entangle's: read by nothing once getitem_50 is assumed, see above)
    'sinkhorn': ('sinkhorn', 0),
}


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src1, src2, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src1, 'both.g0.r0.py'), os.path.join(out, 'logical.py'))
    for r in range(2):
        shutil.copy(os.path.join(src2, f'both.g0.r{r}.py'), os.path.join(out, f'rank{r}.py'))
    text = open(os.path.join(src1, 'both.g0.r0.py')).read()
    vocab = int(re.search(r'primals_6: "f16\[(\d+), \d+\]"', text).group(1))
    seq = int(re.search(r'primals_1: "i64\[\d+, (\d+)\]"', text).group(1))
    inputs = {
        'primals_1': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, vocab]}},  # tokens
        'primals_2': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, vocab]}},  # labels
        'primals_3': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, 2]}},  # loss mask (0/1)
        'primals_4': {'role': 'input', 'placements': ['R']},  # attention mask
        'primals_5': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, seq]}},  # position ids
    }
    for k, p in PARAMS.items():
        inputs[f'primals_{k}'] = {'role': 'param', 'placements': [p]}
        # tangents_1..17 follow the parameters 6..22 in order: the gradients accumulated into.
        inputs[f'tangents_{k - 5}'] = {'placements': [p]}
    inputs['tangents_18'] = {'placements': ['R']}  # the loss scale
    experts = int(re.search(r'primals_18: "f16\[(\d+), \d+\]"', text).group(1))
    for node, (lnode, dim) in ASSUMED.items():
        spec = {'placements': [f'S({dim})']}
        if node == 'getitem_50':
            spec['values'] = {'range': [0, experts]}  # the routing choice: an expert's index
        if lnode != node:
            spec['logical'] = lnode
        inputs[node] = spec
    consts = set()
    for f in ['both.g0.r0.py']:
        for d in (src1, src2):
            consts |= set(re.findall(r'self\.(_tensor_constant\d+)', open(os.path.join(d, f)).read()))
    relations = {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'tp', 'size': 2}]},
        'constants': {c: 0 for c in sorted(consts, key=lambda c: int(c[len('_tensor_constant'):]))},
        'opMap': ['apex', 'tg'],
        'dropout': 'auto',
        'inputs': inputs,
        'outputs': [{'name': 'grad.router.weight', 'node': 't_20', 'placements': ['R']}],
    }
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
