#!/usr/bin/env python3
"""planproof relations for Entangle's Megatron bug graphs (github.com/nyu-systems/Entangle,
examples/data/BUG/{tp1,tp2.bug}/both.g0.r<k>.py: a one-layer Megatron GPT under tensor
parallelism, traced by torch 2.x as one joint forward + backward graph per rank):
  layernorm     bug_missing_layernorm_allreduce: with sequence parallelism, the pre-MLP
                LayerNorm weight gradient is never all-reduced over the sequence shards;
  wrong_config  bug_missing_allreduce_under_wrong_config: the gradient of fc2's input, checked
                as Megatron splits it (along the ffn dim);
  switchmlp     bug_missing_switchmlp_allreduce: the MLP is the legacy top-1 SwitchMLP with one
                expert, its tokens selected by `nonzero` (sizes `u0`, read by dense masking,
                docs/import.md "Data-dependent sizes"); the router's gradient is not all-reduced.

  layernorm-bw  the same bug 9 as Entangle itself checks it (examples/run_all.py runs
                detect_bug_missing_layernorm_allreduce.py with --graph_prefix bw.g0): the
                backward partitions bw.g0.r<k>.py alone, below.

Makes one `planproof import-graphs --dir` input: logical.py (the tp-1 graph), rank0.py,
rank1.py (the tp-2 graphs) and relations.json. The relations restate the preconditions of
Entangle's examples/detect_<BUG>.py:

  * the checked output: for layernorm the LayerNorm weight gradient `getitem_58`, and for
    switchmlp the router weight's gradient `t_20`, each the same on every rank as on one device
    (Entangle's `build_expected`: all_eq, so placement R); for wrong_config the node Entangle
    filters the output to, `mm_7` (fc2's input gradient), whose relation Entangle leaves to be
    found: here Megatron's split along dim 1;
  * its `concat_target` preconditions become assumptions on intermediate nodes (docs/import.md,
    "Assumptions on intermediate nodes"), each concatenated along the dim Entangle gives:
    - layernorm and wrong_config: the logits' gradient `mul_4` along the vocabulary, dim 2;
      for layernorm also the fc1 output `add_4` along dim 2 and the LayerNorm's input `add_3`
      and its saved mean and inverse deviation `getitem_53`, `getitem_54` along the sequence;
    - switchmlp: the logits' gradient `mul_47` (ranks: `mul_43`) along dim 2; the switch-MLP
      output `index_put` (ranks: `wait_tensor_10`, after the reduce-scatter), the routing choice
      `getitem_50` (an expert's index), the router's `sigmoid`, the router input `view_17`
      (ranks: `view_16`) and `new_zeros_1` along the tokens, dim 0. `sinkhorn` (Megatron's
      iterative normalization, an op with no exact rule: a loop until a tolerance) is assumed
      too: its only reader is the `max` whose index is the assumed `getitem_50`, so in the plan
      no op reads it and the assumption adds no claim about the checked output (Entangle leaves
      it out by making `getitem_50` a leaf);
    the word embeddings and the split weights as Megatron splits them;
  * every other graph input needs a relation in planproof (Entangle leaves them free): the
    parameters as Megatron lays them out under TP (QKV and fc1 split along rows, the projection
    and fc2 along columns, norms, row-parallel biases, the router and position embeddings
    replicated), the data inputs replicated with their value ranges, each `tangents_k` (the
    gradient accumulated into) as its parameter, the loss scale (the last tangent) replicated;
    module constants are 0 (Entangle's `get_lift_fresh_copy_constant_value`).

layernorm-bw: logical.py is tp1/bw.g0.r0.py and rank<k>.py tp2.bug/bw.g0.r<k>.py, AOTAutograd's
backward partitions, whose inputs are the forward's saved values, named by each side's own
forward (`getitem_35` is fc2's bias on the ranks and no input of the single-device backward).
A pairing is stated only where it is forced:
  * parameters by the name Entangle gives them: its loader (entangle/pgraph/pickleable.py,
    `load_pgraph` with the `both` graph as `helper_pg`) renames a bw input to the string its
    `tg.inplace_log_tensor` call logs in both.g0.r<k>.py (`getitem_1` ->
    'module.module.embedding.word_embeddings.weight'); here the same: a bw input is a parameter
    when both.g0.r<k>.py makes it as `auto_functionalized_v2(inplace_log_tensor, s=NAME,
    _all_bases=[clone(primals_K)])[1]`, paired with the logical input of the same NAME, placed
    as primals_K is (GPT_LAYER);
  * the detect script's concat_target preconditions on mul_4, add_4, add_3, getitem_53,
    getitem_54 (Entangle pairs them by name, as above for `layernorm`), and its checked output
    getitem_58, replicated;
  * nothing else: the other saved activations (`bitwise_or` is [1024, 32] on one device and
    [32, 1024] on a rank: one name, two tensors), the tangents and the module constants are
    read by no op the output depends on once the preconditions hold, so import-graphs leaves
    them out (docs/import.md, "Inputs no output reads"); the script lists them on stderr.

grad_accumulation  bug_grad_accumulation (bug 6): logical.py is 1step/fw.g0.r0.py (one step over N
                samples), rank0.py 2step.bug/fw.g0.r0.py (K micro-batches of N/K, each loss added
                without dividing by K); restates examples/detect_bug_grad_accumulation.py: the
                weight, bias and loss accumulator the same, micro-batch k's inputs and targets
                samples [k N/K, (k+1) N/K) of the step's; the output is the accumulated loss.
                (test/fixtures/entangle-bugs/grad_accumulation/relations.json states the same.)
loss_scale      bug_missing_allreduce_under_wrong_config/tp1/both.g1.r0.py, Megatron's
                `scale_loss` (loss times the loss scale, and its backward) traced as a second
                graph on one device; tp2.bug publishes no counterpart, so the graph is paired with
                itself on a mesh of one: that shows it imports, and its verdict says nothing about
                a parallel plan. SRC_TP2_DIR is ignored.

usage: entangle_bug_relations.py {layernorm|layernorm-bw|wrong_config|switchmlp|grad_accumulation|loss_scale} SRC_TP1_DIR SRC_TP2_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import sys

# primals_k: the parameter's placement under TP 2, read off the shapes of both signatures (a dim
# halved on the ranks is the split one). Megatron core's GPT layer:
GPT_LAYER = {
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
# ... and with the legacy SwitchMLP (one expert, no biases) in place of the MLP:
SWITCH_LAYER = {
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

# Per bug: the parameters' placements; Entangle's concat_target preconditions (rank node ->
# (logical node, dim)); the checked output (name, node, placement).
BUGS = {
    'layernorm': (
        GPT_LAYER,
        {'mul_4': ('mul_4', 2), 'add_4': ('add_4', 2), 'add_3': ('add_3', 0), 'getitem_53': ('getitem_53', 0), 'getitem_54': ('getitem_54', 0)},
        ('grad.pre_mlp_layernorm.weight', 'getitem_58', 'R'),
    ),
    'wrong_config': (
        GPT_LAYER,
        {'mul_4': ('mul_4', 2)},
        ('grad.fc2.input', 'mm_7', 'S(1)'),
    ),
    'switchmlp': (
        SWITCH_LAYER,
        {
            'mul_43': ('mul_47', 2),
            'wait_tensor_10': ('index_put', 0),
            'getitem_50': ('getitem_50', 0),
            'sigmoid': ('sigmoid', 0),
            'view_16': ('view_17', 0),
            'new_zeros_1': ('new_zeros_1', 0),
            # (not Entangle's: read by nothing once getitem_50 is assumed, see above)
            'sinkhorn': ('sinkhorn', 0),
        },
        ('grad.router.weight', 't_20', 'R'),
    ),
}


def signature(path: str) -> dict:
    """A graph's inputs in order: name -> annotation ("f16[1536]")."""
    text = open(path).read()
    sig = re.search(r'def forward\(self, (.*?)\):', text, re.S).group(1)
    return dict(re.findall(r'(\w+): "([^"]*)"', sig))


def logged_params(both_path: str) -> dict:
    """Entangle's names of a `both` graph's parameters: getitem node -> (logged name, K of primals_K)."""
    text = open(both_path).read()
    clones = dict(re.findall(r'\n\s+(clone(?:_\d+)?): "[^"]*" = torch\.ops\.aten\.clone\.default\((primals_\d+)\)', text))
    logs = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r"\n\s+(auto_functionalized_v2(?:_\d+)?) = torch\.ops\.higher_order\.auto_functionalized_v2\("
        r"torch\.ops\.tg\.inplace_log_tensor\.default, s = '([^']+)', _t_base_index = 0, _all_bases = \[(\w+)\]\)", text)}
    out = {}
    for m in re.finditer(r'\n\s+(getitem_\d+): "[^"]*" = (auto_functionalized_v2(?:_\d+)?)\[1\]', text):
        name, base = logs[m.group(2)]
        out[m.group(1)] = (name, int(clones[base][len('primals_'):]))
    return out


def layernorm_bw(src1: str, src2: str, out: str) -> None:
    """The relations of the bw partitions (docstring, layernorm-bw)."""
    _, assumed, (oname, onode, oplace) = BUGS['layernorm']
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src1, 'bw.g0.r0.py'), os.path.join(out, 'logical.py'))
    lsig = signature(os.path.join(src1, 'bw.g0.r0.py'))
    lnames = {name: (node, k) for node, (name, k) in logged_params(os.path.join(src1, 'both.g0.r0.py')).items() if node in lsig}
    inputs: dict = {}
    unpaired = []
    for r in range(2):
        shutil.copy(os.path.join(src2, f'bw.g0.r{r}.py'), os.path.join(out, f'rank{r}.py'))
        rsig = signature(os.path.join(src2, f'bw.g0.r{r}.py'))
        rlog = logged_params(os.path.join(src2, f'both.g0.r{r}.py'))
        for node in rsig:
            if node in assumed:
                continue
            if node in rlog and rlog[node][0] in lnames:
                name, k = rlog[node]
                lnode, lk = lnames[name]
                assert k == lk, f'{name}: primals_{k} on rank {r}, primals_{lk} on one device'
                spec = {'role': 'param', 'placements': [GPT_LAYER[k]]}
                if lnode != node:
                    spec['logical'] = lnode
                assert inputs.get(node, spec) == spec, f'{node} pairs differently on the ranks'
                inputs[node] = spec
            elif r == 0:
                unpaired.append(f'{node} ({"a logged parameter the single-device backward does not take" if node in rlog else "named alike on one device: a name alone is not taken as a pairing" if node in lsig else "ranks only"})')
    for node, (lnode, dim) in assumed.items():
        inputs[node] = {'placements': [f'S({dim})'], **({} if lnode == node else {'logical': lnode})}
    lonly = [n for n in lsig if n not in inputs and n not in rsig and not any(v.get('logical') == n for v in inputs.values())]
    print(f'layernorm-bw: {len(inputs)} relations; not stated (no pairing forced): ranks {", ".join(unpaired)}; one device only {", ".join(lonly)}', file=sys.stderr)
    relations = {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'tp', 'size': 2}]},
        'opMap': ['apex', 'tg'],
        'inputs': inputs,
        'outputs': [{'name': oname, 'node': onode, 'placements': [oplace]}],
    }
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


def write(out: str, relations: dict) -> None:
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


def grad_accumulation(src1: str, src2: str, out: str) -> None:
    """The relations of bug 6 (docstring, grad_accumulation)."""
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src1, 'fw.g0.r0.py'), os.path.join(out, 'logical.py'))
    shutil.copy(os.path.join(src2, 'fw.g0.r0.py'), os.path.join(out, 'rank0.py'))
    lsig, rsig = signature(os.path.join(src1, 'fw.g0.r0.py')), signature(os.path.join(src2, 'fw.g0.r0.py'))
    n = int(re.match(r'f32\[(\d+)\]', lsig['arg2_1']).group(1))
    m = int(re.match(r'f32\[(\d+)\]', rsig['arg2_1']).group(1))
    # arg0_1, arg1_1 weight and bias; arg2_1, arg3_1 inputs and targets; arg4_1 the accumulator;
    # then each further micro-batch's inputs and targets (arg5_1, arg6_1, ...).
    inputs = {'arg0_1': {'role': 'param', 'placements': ['R']}, 'arg1_1': {'role': 'param', 'placements': ['R']}}
    for k in range(n // m):
        for j, lnode in enumerate(('arg2_1', 'arg3_1')):
            node = lnode if k == 0 else f'arg{5 + 2 * (k - 1) + j}_1'
            assert rsig[node] == f'f32[{m}]', f'{node}: {rsig[node]}'
            inputs[node] = {'role': 'input', 'index': [[k * m, k * m + m]]} if k == 0 else {'logical': lnode, 'index': [[k * m, k * m + m]]}
        if k == 0:
            inputs['arg4_1'] = {'role': 'input', 'placements': ['R']}
    assert len(inputs) == len(rsig), f'{len(rsig)} rank inputs, {len(inputs)} related'
    write(out, {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'dp', 'size': 1}]},
        'inputs': inputs,
        'outputs': [{'name': 'loss_sum', 'placements': ['R']}],
    })


def loss_scale(src1: str, out: str) -> None:
    """tp1/both.g1.r0.py paired with itself (docstring, loss_scale)."""
    os.makedirs(out, exist_ok=True)
    for name in ('logical.py', 'rank0.py'):
        shutil.copy(os.path.join(src1, 'both.g1.r0.py'), os.path.join(out, name))
    text = open(os.path.join(src1, 'both.g1.r0.py')).read()
    names = re.findall(r'(\w+): "[^"]*";', text)  # the flattened primals and tangents
    returned = re.search(r'tree_unflatten\(\[([^\]]*)\]', text).group(1).replace(' ', '').split(',')
    write(out, {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'dp', 'size': 1}]},
        'inputs': {n: {'role': 'input', 'placements': ['R']} for n in names},
        'outputs': [{'name': f'out.{node}', 'node': node, 'placements': ['R']} for node in returned if node != 'None'],
    })


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == 'layernorm-bw':
        layernorm_bw(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) == 5 and sys.argv[1] == 'grad_accumulation':
        grad_accumulation(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) == 5 and sys.argv[1] == 'loss_scale':
        loss_scale(sys.argv[2], sys.argv[4])
        return
    if len(sys.argv) != 5 or sys.argv[1] not in BUGS:
        sys.exit(__doc__)
    params, assumed, (oname, onode, oplace) = BUGS[sys.argv[1]]
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
    for k, p in params.items():
        inputs[f'primals_{k}'] = {'role': 'param', 'placements': [p]}
        # tangents_1.. follow the parameters 6.. in order: the gradients accumulated into.
        inputs[f'tangents_{k - 5}'] = {'placements': [p]}
    inputs[f'tangents_{max(params) - 4}'] = {'placements': ['R']}  # the loss scale
    for node, (lnode, dim) in assumed.items():
        spec = {'placements': [f'S({dim})']}
        if node == 'getitem_50':
            # the routing choice: an expert's index (the router weight's rows)
            experts = int(re.search(r'primals_18: "f16\[(\d+), \d+\]"', text).group(1))
            spec['values'] = {'range': [0, experts]}
        if lnode != node:
            spec['logical'] = lnode
        inputs[node] = spec
    consts = set()
    for d in (src1, src2):
        consts |= set(re.findall(r'self\.(_tensor_constant\d+)', open(os.path.join(d, 'both.g0.r0.py')).read()))
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
