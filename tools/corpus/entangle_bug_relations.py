#!/usr/bin/env python3
"""planproof relations for two of Entangle's Megatron bug graphs (github.com/nyu-systems/Entangle,
examples/data/BUG/{tp1,tp2.bug}/both.g0.r<k>.py: a one-layer Megatron GPT under tensor
parallelism, traced by torch 2.x as one joint forward + backward graph per rank):
  layernorm     bug_missing_layernorm_allreduce: with sequence parallelism, the pre-MLP
                LayerNorm weight gradient is never all-reduced over the sequence shards;
  wrong_config  bug_missing_allreduce_under_wrong_config: the gradient of fc2's input, checked
                as Megatron splits it (along the ffn dim).

Makes one `planproof import-graphs --dir` input: logical.py (the tp-1 graph), rank0.py,
rank1.py (the tp-2 graphs) and relations.json. The relations restate the preconditions of
Entangle's examples/detect_<BUG>.py:

  * the checked output: for layernorm the LayerNorm weight gradient `getitem_58`, which must be
    the same on every rank as on one device (Entangle's `build_expected`: all_eq, so placement
    R); for wrong_config the node Entangle filters the output to, `mm_7` (fc2's input
    gradient), whose relation Entangle leaves to be found: here Megatron's split along dim 1;
  * its `concat_target` preconditions become assumptions on intermediate nodes (docs/import.md,
    "Assumptions on intermediate nodes"), each concatenated along the dim Entangle gives: the
    logits' gradient `mul_4` along dim 2 (both bugs); for layernorm also the fc1 output `add_4`
    along dim 2 and the LayerNorm's input `add_3` and its saved mean and inverse deviation
    `getitem_53`, `getitem_54` along the sequence, dim 0; the word embeddings, fc1 and fc2
    weights as Megatron splits them;
  * every other graph input needs a relation in planproof (Entangle leaves them free): the
    parameters as Megatron lays them out under TP (QKV and fc1 split along rows, the projection
    and fc2 along columns, norms and row-parallel biases replicated), the data inputs replicated
    with their value ranges, each `tangents_k` (the gradient accumulated into) as its parameter,
    the loss scale replicated; module constants are 0 (Entangle's
    `get_lift_fresh_copy_constant_value`).

usage: entangle_bug_relations.py {layernorm|wrong_config} SRC_TP1_DIR SRC_TP2_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import sys

# primals_k: the parameter's placement under TP 2 (Megatron core GPT layer), read off the
# shapes of both signatures (a dim halved on the ranks is the split one).
PARAMS = {
    6: 'S(0)',   # word embeddings (vocab parallel)
    7: 'R',      # position embeddings
    8: 'R', 9: 'R',  # input layernorm
    10: 'S(1)', 11: 'R',  # linear_proj (row parallel) and its bias
    12: 'S(0)', 13: 'S(0)',  # linear_qkv (column parallel)
    14: 'R', 15: 'R', 16: 'R', 17: 'R',  # q/k layernorm
    18: 'R', 19: 'R',  # pre-MLP layernorm
    20: 'S(0)', 21: 'S(0)',  # linear_fc1 (column parallel)
    22: 'S(1)', 23: 'R',  # linear_fc2 (row parallel) and its bias
    24: 'R', 25: 'R',  # final layernorm
}

# Per bug: Entangle's concat_target preconditions (rank node -> (logical node, dim)) and the
# checked output (name, node, placement).
BUGS = {
    'layernorm': (
        {'mul_4': ('mul_4', 2), 'add_4': ('add_4', 2), 'add_3': ('add_3', 0), 'getitem_53': ('getitem_53', 0), 'getitem_54': ('getitem_54', 0)},
        ('grad.pre_mlp_layernorm.weight', 'getitem_58', 'R'),
    ),
    'wrong_config': (
        {'mul_4': ('mul_4', 2)},
        ('grad.fc2.input', 'mm_7', 'S(1)'),
    ),
}


def main() -> None:
    if len(sys.argv) != 5 or sys.argv[1] not in BUGS:
        sys.exit(__doc__)
    assumed, (oname, onode, oplace) = BUGS[sys.argv[1]]
    src1, src2, out = sys.argv[2], sys.argv[3], sys.argv[4]
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
        # tangents_1..20 follow the parameters 6..25 in order: the gradients accumulated into.
        inputs[f'tangents_{k - 5}'] = {'placements': [p]}
    inputs['tangents_21'] = {'placements': ['R']}  # the loss scale
    for node, (lnode, dim) in assumed.items():
        spec = {'placements': [f'S({dim})']}
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
        'outputs': [{'name': oname, 'node': onode, 'placements': [oplace]}],
    }
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
