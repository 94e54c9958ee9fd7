#!/usr/bin/env python3
"""planproof relations for the vLLM Qwen2 graphs Entangle publishes (github.com/nyu-systems/Entangle,
examples/data/qwen2/paral{T}_layer1: vLLM's Qwen2 decoder layer under tensor parallelism, forward
graphs `fw.g0.r{k}.py` as torch.compile prints them, with vLLM's custom kernels).

Makes one `planproof import-graphs --dir` input from the tp-1 graph (the single-device side) and a
tp-T config: logical.py, rank<k>.py and relations.json. The placements restate the preconditions
of Entangle's examples/verify_qwen2.py, read from the graphs' own shapes:
- the token ids and positions replicated, with their value ranges (the vocabulary; the rows of
  the rotary cos/sin cache);
- the word embeddings split along the vocabulary (vLLM's VocabParallelEmbedding);
- the fused QKV weight and bias: each rank holds its query heads, then its key and value heads
  (QKVParallelLinear). With fewer key/value heads than ranks, consecutive ranks hold the same
  key/value head (vLLM replicates them): Entangle's `make_qkv_precondition`;
- the fused gate/up weight: each rank holds its slice of the gate rows, then the same slice of
  the up rows (MergedColumnParallelLinear);
- o_proj and down_proj split along their input dim (RowParallelLinear), norms and the rotary
  cache replicated.
The checked output is the layer's hidden state (the graph's first returned value), equal on every
rank. Entangle states the embedding's equality as an assumption (its "HACK" precondition); here it
is proved.

usage: entangle_qwen2_relations.py T SRC_TP1_DIR SRC_TPT_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import sys


def signature(path: str) -> dict:
    """Input name -> shape, from the printed forward's signature."""
    text = open(path).read()
    sig = re.search(r'def forward\(self, (.*?)\):', text).group(1)
    return {m.group(1): [int(d) for d in m.group(3).split(', ')] for m in re.finditer(r'(\w+): "(\w+)\[([\d, ]+)\]"', sig)}


def returned(path: str) -> str:
    return re.search(r'return \((\w+),', open(path).read()).group(1)


def stripes(ranges: list) -> list:
    """A striped dim index: ranges as integer-expression pairs of the mesh coordinate `tp`."""
    return [[{'expr': s}, {'expr': e}] for s, e in ranges]


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    tp, src1, srct, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src1, 'fw.g0.r0.py'), os.path.join(out, 'logical.py'))
    for r in range(tp):
        shutil.copy(os.path.join(srct, f'fw.g0.r{r}.py'), os.path.join(out, f'rank{r}.py'))
    logical = signature(os.path.join(src1, 'fw.g0.r0.py'))
    local = signature(os.path.join(srct, 'fw.g0.r0.py'))
    vocab = logical['arg1_1'][0]
    cache_rows = logical['arg5_1'][0]
    # Head counts, from the views the attention kernel's query and key are given.
    text = open(os.path.join(src1, 'fw.g0.r0.py')).read()
    views = [(int(a), int(b)) for a, b in re.findall(r'aten\.view\.default\(getitem_\d+, \[-1, (\d+), (\d+)\]\)', text)]
    q_heads, head_size = views[0]
    kv_heads = views[1][0]
    q_size, kv_size = q_heads * head_size, kv_heads * head_size
    q_per = q_size // tp
    kv_per = max(1, kv_heads // tp) * head_size
    # Ranks per key/value head when the heads are fewer than the ranks (vLLM replicates them).
    gap = max(1, tp // kv_heads)
    kv_index = f'(tp // {gap})'
    qkv = stripes([
        (f'{q_per} * tp', f'{q_per} * tp + {q_per}'),
        (f'{q_size} + {kv_per} * {kv_index}', f'{q_size} + {kv_per} * {kv_index} + {kv_per}'),
        (f'{q_size + kv_size} + {kv_per} * {kv_index}', f'{q_size + kv_size} + {kv_per} * {kv_index} + {kv_per}'),
    ])
    ffn = logical['arg9_1'][0] // 2
    f_per = local['arg9_1'][0] // 2
    gate_up = stripes([(f'{f_per} * tp', f'{f_per} * tp + {f_per}'), (f'{ffn} + {f_per} * tp', f'{ffn} + {f_per} * tp + {f_per}')])
    inputs = {
        'arg0_1': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, vocab]}},
        'arg1_1': {'role': 'param', 'placements': ['S(0)']},
        'arg2_1': {'role': 'param', 'placements': ['R']},
        'arg3_1': {'role': 'param', 'index': [qkv]},
        'arg4_1': {'role': 'param', 'index': [qkv, '*']},
        'arg5_1': {'role': 'input', 'placements': ['R']},
        'arg6_1': {'role': 'input', 'placements': ['R'], 'values': {'range': [0, cache_rows]}},
        'arg7_1': {'role': 'param', 'placements': ['S(1)']},
        'arg8_1': {'role': 'param', 'placements': ['R']},
        'arg9_1': {'role': 'param', 'index': [gate_up, '*']},
        'arg10_1': {'role': 'param', 'placements': ['S(1)']},
        'arg11_1': {'role': 'param', 'placements': ['R']},
    }
    node = returned(os.path.join(srct, 'fw.g0.r0.py'))
    relations = {
        'format': 'planproof-relations/v1',
        'mesh': {'axes': [{'name': 'tp', 'size': tp}]},
        'opMap': 'vllm',
        'inputs': inputs,
        'outputs': [{'name': 'hidden', 'node': node, 'logicalNode': returned(os.path.join(src1, 'fw.g0.r0.py')), 'placements': ['R']}],
        'groups': {'tp:0': {'axes': ['tp']}},
    }
    with open(os.path.join(out, 'relations.json'), 'w') as f:
        json.dump(relations, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
