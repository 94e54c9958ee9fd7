#!/usr/bin/env python3
"""PyTorch's numbers for the nonzero-routed switch MLP of test/import-dynsize.test.ts.

The graphs in that test are written by hand the way torch 2.x prints Megatron's legacy
SwitchMLP (megatron/legacy/model/transformer.py): an argmax router, `(max_ind == e).nonzero()`,
`x[local_indices, :]`, the expert MLP, `output_total[local_indices, :] = output`, the output
scaled by the routing probability. This runs that code eagerly (float64, autograd for the
backward, with a given output gradient) and writes its inputs and outputs under the names of the
test's contract, so the test can check that the imported single-device plan (dense masking,
plans/import/dynsize.ts) computes exactly these values, forward and backward.

With a second path it also writes PyTorch's numbers for the test's smaller program of the other
uses read densely (a sum over the selected rows, a scalar written into them, a softmax and a
mean along another dim of them), as eager code with `x[local_indices, :]`.

usage: /usr/bin/python3 tools/corpus/dynsize_switch_golden.py OUT.json [ROWOPS.json]
"""
import json
import sys

import torch
import torch.nn.functional as F

N, H, FF, E = 4, 4, 8, 2


def rowops(path: str) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4, 3, generator=g, dtype=torch.float64) * 2 - 1
    w = torch.rand(3, 2, generator=g, dtype=torch.float64) * 2 - 1
    local_indices = (torch.argmax(x @ w, dim=1) == 0).nonzero()
    assert 0 < local_indices.shape[0] < 4, 'every row selected or none: pick another seed'
    sel = x[local_indices, :]
    put = x.clone()
    put[local_indices, :] = 0.5
    soft = torch.zeros_like(x)
    soft[local_indices, :] = torch.softmax(sel, dim=-1)
    mean = x.new_zeros(4, 1)
    mean[local_indices, :] = sel.mean(2, keepdim=True)
    out = {'x_1': x.flatten().tolist(), 'w_1': w.flatten().tolist(), 'rowsum': sel.sum(0).flatten().tolist(),
           'put': put.flatten().tolist(), 'soft': soft.flatten().tolist(), 'mean': mean.flatten().tolist(),
           'x-selected': local_indices.flatten().tolist()}
    with open(path, 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    if len(sys.argv) == 3:
        rowops(sys.argv[2])
    # A seed whose routing sends tokens to both experts and leaves each some unselected rows
    # (so a junk row read anywhere would change the numbers).
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(N, H, generator=g, dtype=torch.float64) * 2 - 1
        wr = torch.rand(E, H, generator=g, dtype=torch.float64) * 2 - 1
        ws = [(torch.rand(FF, H, generator=g, dtype=torch.float64) * 2 - 1, torch.rand(H, FF, generator=g, dtype=torch.float64) * 2 - 1) for _ in range(E)]
        tangent = torch.rand(N, H, generator=g, dtype=torch.float64) * 2 - 1
        counts = torch.bincount(torch.argmax(F.softmax(x @ wr.t(), dim=1), dim=1), minlength=E)
        if bool((counts >= 1).all()) and bool((counts < N).all()):
            break
    inputs = {'x_1': x, 'wr_1': wr, 'tangents_1': tangent}
    for e, (w1, w2) in enumerate(ws):
        inputs[f'w1_{e}'] = w1
        inputs[f'w2_{e}'] = w2
    leaves = {k: v.clone().requires_grad_(k != 'tangents_1') for k, v in inputs.items()}
    hidden_states = leaves['x_1']
    # Megatron's legacy SwitchMLP.forward (expert-parallel size 1, no biases), as written there.
    route = F.softmax(hidden_states @ leaves['wr_1'].t(), dim=1)
    max_prob, max_ind = torch.max(route, dim=1)
    max_prob = torch.unsqueeze(max_prob, 1)
    output_total = torch.zeros_like(hidden_states)
    for expert_num in range(E):
        local_indices = (max_ind == expert_num).nonzero()
        hidden = hidden_states[local_indices, :]
        output = F.gelu(hidden @ leaves[f'w1_{expert_num}'].t()) @ leaves[f'w2_{expert_num}'].t()
        output_total[local_indices, :] = output
    output_total = output_total * max_prob
    output_total.backward(leaves['tangents_1'])
    out = {k: v.flatten().tolist() for k, v in inputs.items()}
    out['output'] = output_total.detach().flatten().tolist()
    out['grad.router'] = leaves['wr_1'].grad.flatten().tolist()
    out['grad.x'] = leaves['x_1'].grad.flatten().tolist()
    for e in range(E):
        out[f'grad.w1_{e}'] = leaves[f'w1_{e}'].grad.flatten().tolist()
        out[f'grad.w2_{e}'] = leaves[f'w2_{e}'].grad.flatten().tolist()
    out['x-seed'] = [seed]
    out['x-tokens-per-expert'] = counts.tolist()
    with open(sys.argv[1], 'w') as f:
        json.dump(out, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
