#!/usr/bin/env python3
"""PyTorch's numbers for the nonzero-routed switch MLP of test/import-dynsize.test.ts.

The graphs in that test are written by hand the way torch 2.x prints Megatron's legacy
SwitchMLP (megatron/legacy/model/transformer.py): an argmax router, `(max_ind == e).nonzero()`,
`x[local_indices, :]`, the expert MLP, `output_total[local_indices, :] = output`, the output
scaled by the routing probability. This runs that code eagerly (float64, autograd for the
backward, with a given output gradient) and writes its inputs and outputs under the names of the
test's contract, so the test can check that the imported single-device plan (dense masking,
plans/import/dynsize.ts) computes exactly these values, forward and backward.

usage: /usr/bin/python3 tools/corpus/dynsize_switch_golden.py OUT.json
"""
import json
import sys

import torch
import torch.nn.functional as F

N, H, FF, E = 4, 4, 8, 2


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
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
