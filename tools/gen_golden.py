#!/usr/bin/python3
"""Golden vectors from real PyTorch for every op in ops/.

Run with Debian's python3-torch (1.13, in the system Python 3.11):

    apt-get install python3-torch
    /usr/bin/python3 tools/gen_golden.py            # writes test/fixtures/golden/ops.json

Each case: the op name and attributes as a plan writes them, float64 inputs, the outputs
PyTorch computes, and, for differentiable ops, torch.autograd's input gradients for a given
output gradient (`seed`). Collectives are computed as PyTorch computes them over the
members' tensors (torch.distributed's reduction semantics on stacked inputs). The output is
deterministic (fixed seed), so re-running reproduces the committed file byte for byte.
"""
import json
import os
import sys
from fractions import Fraction

import torch
import torch.nn.functional as F

torch.manual_seed(20261121)
DT = torch.float64
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'golden', 'ops.json')


def rnd(*shape, positive=False):
    x = torch.rand(*shape, dtype=DT) * 2 - 1
    return x.abs() + 0.5 if positive else x


def enc(t):
    t = t.detach().to(DT).contiguous()
    return {'shape': list(t.shape), 'data': [float(v) for v in t.reshape(-1).tolist()]}


def scalar(v):
    """A plan attribute's exact scalar ('p/q' strings are exact rationals) as a float."""
    return float(Fraction(v)) if isinstance(v, str) else float(v)


cases = []


def case(op, attrs, inputs, fn, diff=None, positive=(), note='', ints=None):
    """fn(*tensors) -> tensor or tuple of tensors. diff: input indices that get gradients.
    ints: {input index: the values that integer input may take} (symbolic ids in the test)."""
    ins = [rnd(*s, positive=(i in positive)) if isinstance(s, tuple) else s for i, s in enumerate(inputs)]
    if diff is None:
        diff = list(range(len(ins)))
    leaves = [x.clone().requires_grad_(i in diff) for i, x in enumerate(ins)]
    out = fn(*leaves)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    entry = {'op': op, 'attrs': attrs, 'note': note, 'inputs': [enc(x) for x in ins], 'outputs': [enc(o) for o in outs]}
    if ints:
        entry['ints'] = {str(i): list(v) for i, v in ints.items()}
    if diff:
        seeds = [rnd(*o.shape) if o.dim() > 0 else rnd(1).reshape(()) for o in outs]
        wrt = [leaves[i] for i in diff]
        live = [(o, sd) for o, sd in zip(outs, seeds) if o.requires_grad]  # integer outputs (indices) have no gradient
        grads = torch.autograd.grad([o for o, _ in live], wrt, grad_outputs=[sd for _, sd in live], allow_unused=True)
        gin = [None] * len(ins)
        for i, g in zip(diff, grads):
            gin[i] = enc(g if g is not None else torch.zeros_like(ins[i]))
        entry['grad'] = {'seed': [enc(s) for s in seeds], 'inputs': gin}
    cases.append(entry)


def backward_case(op, attrs, x_shape, fwd, saved='input', note=''):
    """Golden for an explicit backward op (grad_out, saved) -> grad_in, from autograd of fwd."""
    x = rnd(*x_shape).requires_grad_(True)
    y = fwd(x)
    g = rnd(*y.shape)
    (gx,) = torch.autograd.grad(y, x, grad_outputs=g)
    s = x if saved == 'input' else y
    cases.append({'op': op, 'attrs': attrs, 'note': note, 'inputs': [enc(g), enc(s)], 'outputs': [enc(gx)]})


def collective(op, attrs, member_shapes, fn, src=None, note=''):
    """fn(list of member tensors) -> list of member outputs (None where a member gets none)."""
    ins = [rnd(*s) for s in member_shapes]
    outs = fn(ins)
    group = list(range(len(ins)))
    cases.append({
        'op': op, 'attrs': attrs, 'note': note, 'group': group,
        'memberInputs': [enc(x) if (src is None or i == src) else None for i, x in enumerate(ins)],
        'memberOutputs': [None if o is None else enc(o) for o in outs],
    })


# ---- element-wise
for shapes, note in [(((2, 3), (3,)), 'broadcast row'), (((4,), (4,)), 'same shape'), (((2, 1, 3), (1, 4, 1)), 'both broadcast, size-1 dims')]:
    case('add', {}, list(shapes), torch.add, note=note)
    case('sub', {}, list(shapes), torch.sub, note=note)
    case('mul', {}, list(shapes), torch.mul, note=note)
    case('div', {}, list(shapes), torch.div, positive=(1,), note=note)
for s in [(3,), (2, 2), (1, 1)]:
    case('neg', {}, [s], torch.neg)
    case('identity', {}, [s], lambda x: x.clone())
for factor, s in [('1/3', (2, 3)), (-2, (4,)), ('7/2', (1,))]:
    case('scale', {'factor': factor}, [s], lambda x, f=factor: x * scalar(f))

# ---- activations and their backward ops
for s in [(5,), (2, 3), (1,)]:
    case('exp', {}, [s], torch.exp)
    case('tanh', {}, [s], torch.tanh)
    case('sigmoid', {}, [s], torch.sigmoid)
    case('silu', {}, [s], F.silu)
    for approx in ['none', 'tanh']:
        case('gelu', {'approximate': approx}, [s], lambda x, a=approx: F.gelu(x, approximate=a))
        backward_case('gelu_backward', {'approximate': approx}, s, lambda x, a=approx: F.gelu(x, approximate=a))
    backward_case('silu_backward', {}, s, F.silu)
    backward_case('tanh_backward', {}, s, torch.tanh, saved='output')
    backward_case('sigmoid_backward', {}, s, torch.sigmoid, saved='output')

# ---- matmul / linear
for a, b, note in [((2, 3), (3, 4), '2-D'), ((3,), (3, 2), '1-D @ 2-D'), ((2, 3), (3,), '2-D @ 1-D'), ((3,), (3,), 'dot'), ((2, 1, 2, 3), (4, 3, 2), 'batched, broadcast batch')]:
    case('matmul', {}, [a, b], torch.matmul, note=note)
case('linear', {}, [(2, 3), (4, 3), (4,)], F.linear, note='with bias')
case('linear', {}, [(2, 2, 3), (4, 3)], F.linear, note='no bias, 3-D input')
case('linear', {}, [(1, 3), (1, 3), (1,)], F.linear, note='size-1 dims')

# ---- reductions, softmax, expand
for s, attrs in [((2, 3, 4), {'dims': [1]}), ((2, 3), {'keepdim': True}), ((2, 3, 4), {'dims': [0, -1], 'keepdim': True}), ((1, 5), {'dims': [0]})]:
    dims = attrs.get('dims', list(range(len(s))))
    keep = attrs.get('keepdim', False)
    case('sum', attrs, [s], lambda x, d=dims, k=keep: torch.sum(x, dim=d, keepdim=k))
    case('mean', attrs, [s], lambda x, d=dims, k=keep: torch.mean(x, dim=d, keepdim=k))
for s, dim in [((2, 4), 1), ((3, 2, 2), 0), ((1, 5), -1)]:
    case('softmax', {'dim': dim}, [s], lambda x, d=dim: torch.softmax(x, dim=d))
    case('log_softmax', {'dim': dim}, [s], lambda x, d=dim: torch.log_softmax(x, dim=d))
    backward_case('softmax_backward', {'dim': dim}, s, lambda x, d=dim: torch.softmax(x, dim=d), saved='output')
for s, shape in [((3, 1), [2, 3, 4]), ((1,), [3]), ((2, 1), [-1, 5])]:
    case('expand', {'shape': shape}, [s], lambda x, sh=shape: x.expand(*sh))

# ---- layout
for s, d0, d1 in [((2, 3, 4), 0, 2), ((2, 3), 0, 1), ((1, 2, 3), -1, -2)]:
    case('transpose', {'dim0': d0, 'dim1': d1}, [s], lambda x, a=d0, b=d1: torch.transpose(x, a, b))
for s, dims in [((2, 3, 4), [2, 0, 1]), ((2, 3), [1, 0]), ((1, 2, 1), [1, 2, 0])]:
    case('permute', {'dims': dims}, [s], lambda x, p=dims: x.permute(*p))
for s, shape in [((2, 6), [3, -1]), ((2, 3, 2), [12]), ((1, 4), [2, 1, 2])]:
    case('reshape', {'shape': shape}, [s], lambda x, sh=shape: x.reshape(*sh))
for s, dim, start, end in [((2, 5), 1, 1, 3), ((4, 2), 0, 0, 4), ((3, 3, 2), -2, 2, 3)]:
    case('slice', {'dim': dim, 'start': start, 'end': end}, [s], lambda x, d=dim, a=start, b=end: torch.narrow(x, d, a, b - a))
for s, dim, before, after in [((2, 3), -1, 1, 2), ((2, 3), 0, 0, 1), ((1,), 0, 2, 0)]:
    pad = [0, 0] * (len(s) - 1 - (dim % len(s))) + [before, after]
    case('pad', {'dim': dim, 'before': before, 'after': after}, [s], lambda x, p=pad: F.pad(x, p))
case('concat', {'dim': 0}, [(2, 3), (1, 3)], lambda a, b: torch.cat([a, b], 0))
case('concat', {'dim': -1}, [(2, 1), (2, 2), (2, 3)], lambda a, b, c: torch.cat([a, b, c], -1))
case('concat', {'dim': 1}, [(1, 2)], lambda a: torch.cat([a], 1), note='single input')
for s, dim, sizes in [((5, 2), 0, [2, 3]), ((2, 6), 1, [1, 1, 4]), ((3,), 0, [3])]:
    case('split', {'dim': dim, 'sizes': sizes}, [s], lambda x, d=dim, z=sizes: torch.split(x, z, d))

# ---- norms
def rms_norm(x, w, k, eps):
    """RMSNorm as Llama's module computes it (torch 1.13 has no F.rms_norm)."""
    dims = tuple(range(x.dim() - k, x.dim()))
    y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return y if w is None else y * w


for s, k, eps, affine in [((2, 4), 1, '1/100000', True), ((3, 2, 3), 2, '1/10', True), ((2, 1, 3), 1, '1/1000', False)]:
    ns = list(s[len(s) - k:])
    a = {'normalized_dims': k, 'eps': eps}
    if affine:
        case('layer_norm', a, [s, tuple(ns), tuple(ns)], lambda x, w, b, n=ns, e=eps: F.layer_norm(x, n, w, b, scalar(e)))
        case('rms_norm', a, [s, tuple(ns)], lambda x, w, kk=k, e=eps: rms_norm(x, w, kk, scalar(e)))
    else:
        case('layer_norm', a, [s], lambda x, n=ns, e=eps: F.layer_norm(x, n, None, None, scalar(e)))
        case('rms_norm', a, [s], lambda x, kk=k, e=eps: rms_norm(x, None, kk, scalar(e)))
    # Explicit backward ops: autograd of the forward, outputs grad_x[, grad_w[, grad_b]].
    x = rnd(*s).requires_grad_(True)
    w = rnd(*ns).requires_grad_(True) if affine else None
    b = rnd(*ns).requires_grad_(True) if affine else None
    for op, fwd, params in [('layer_norm_backward', lambda: F.layer_norm(x, ns, w, b, scalar(eps)), [x] + ([w, b] if affine else [])),
                            ('rms_norm_backward', lambda: rms_norm(x, w, k, scalar(eps)), [x] + ([w] if affine else []))]:
        y = fwd()
        g = rnd(*y.shape)
        grads = torch.autograd.grad(y, params, grad_outputs=g)
        ins = [enc(g), enc(x)] + ([enc(w)] if affine else [])
        cases.append({'op': op, 'attrs': a, 'note': 'autograd of the forward', 'inputs': ins, 'outputs': [enc(t) for t in grads]})

# ---- losses
for s, red in [((3, 2), 'mean'), ((4,), 'sum'), ((1, 1), 'mean')]:
    case('mse_loss', {'reduction': red}, [s, s], lambda p, t, r=red: F.mse_loss(p, t, reduction=r))
    p, t = rnd(*s), rnd(*s)
    pp = p.clone().requires_grad_(True)
    loss = F.mse_loss(pp, t, reduction=red)
    g = rnd(1).reshape(())
    (gp,) = torch.autograd.grad(loss, pp, grad_outputs=g)
    cases.append({'op': 'mse_loss_backward', 'attrs': {'reduction': red}, 'note': 'autograd of mse_loss', 'inputs': [enc(p), enc(t), enc(g)], 'outputs': [enc(gp)]})

# ---- optimizer: torch.optim.SGD's own step
for s, lr, wd in [((2, 3), '1/10', None), ((4,), 0.05, '1/100'), ((1,), 1, 0.5)]:
    p0, g0 = rnd(*s), rnd(*s)
    param = torch.nn.Parameter(p0.clone())
    param.grad = g0.clone()
    opt = torch.optim.SGD([param], lr=scalar(lr), weight_decay=scalar(wd) if wd is not None else 0)
    opt.step()
    attrs = {'lr': lr} if wd is None else {'lr': lr, 'weight_decay': wd}
    cases.append({'op': 'sgd_update', 'attrs': attrs, 'note': 'torch.optim.SGD step', 'inputs': [enc(p0), enc(g0)], 'outputs': [enc(param)]})

# ---- transformer pieces: SwiGLU, dropout with its mask, rotary embedding (HF convention)
for s_ in [(2, 4), (3,), (1, 2, 2)]:
    case('swiglu', {}, [s_, s_], lambda a, b: F.silu(a) * b)
for s_, p_ in [((2, 4), '1/10'), ((5,), '1/2'), ((1, 3), 0)]:
    mask = torch.bernoulli(torch.full(s_, 1 - scalar(p_), dtype=DT))
    case('dropout', {'p': p_}, [s_, mask], lambda x, m, pp=p_: x * m / (1 - scalar(pp)), diff=[0])


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


for xs, ts in [((2, 3, 4), (3, 4)), ((1, 2, 1, 2), (2, 1, 2)), ((4, 6), (4, 6))]:
    case('rope', {}, [xs, ts, ts], lambda x, c, s: x * c + rotate_half(x) * s, note='x * cos + rotate_half(x) * sin')

# ---- attention: scaled dot product, causal mask, grouped-query heads, online-softmax blocks
def scores(q, k, causal, scale, q_off=0, k_off=0):
    g = q.shape[-3] // k.shape[-3]
    k2 = k.repeat_interleave(g, dim=-3)
    sc = (q @ k2.transpose(-1, -2)) * (scalar(scale) if scale is not None else 1 / (q.shape[-1] ** 0.5))
    if causal:
        i = torch.arange(q.shape[-2]).unsqueeze(-1) + q_off
        j = torch.arange(k.shape[-2]).unsqueeze(0) + k_off
        sc = sc.masked_fill(j > i, float('-inf'))
    return sc


def attn(q, k, v, causal=False, scale=None):
    g = q.shape[-3] // k.shape[-3]
    return torch.softmax(scores(q, k, causal, scale), dim=-1) @ v.repeat_interleave(g, dim=-3)


def attn_partial(q, k, v, causal, scale, q_off, k_off):
    g = q.shape[-3] // k.shape[-3]
    sc = scores(q, k, causal, scale, q_off, k_off)
    m = sc.max(dim=-1).values
    p = torch.exp(sc - m.unsqueeze(-1))
    l_ = p.sum(dim=-1)
    return (p @ v.repeat_interleave(g, dim=-3)) / l_.unsqueeze(-1), m, l_


ATT = [((2, 3, 4), (2, 3, 4), (2, 3, 4), False, None, 'plain, 2 heads'),
       ((1, 2, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2), True, None, 'causal, batch dim'),
       ((4, 3, 2), (2, 3, 2), (2, 3, 3), True, '1/2', 'grouped-query: 4 q heads on 2 kv heads, causal, scale 1/2')]
for qs, ks, vs, causal, scale, note in ATT:
    attrs = {'causal': True} if causal else {}
    if scale is not None:
        attrs['scale'] = scale
    case('attention', attrs, [qs, ks, vs], lambda q, k, v, c=causal, sc=scale: attn(q, k, v, c, sc), note=note)
    q, k, v = rnd(*qs).requires_grad_(True), rnd(*ks).requires_grad_(True), rnd(*vs).requires_grad_(True)
    o = attn(q, k, v, causal, scale)
    g = rnd(*o.shape)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_outputs=g)
    cases.append({'op': 'attention_backward', 'attrs': attrs, 'note': 'autograd of attention: ' + note, 'inputs': [enc(g), enc(q), enc(k), enc(v), enc(o)], 'outputs': [enc(dq), enc(dk), enc(dv)]})
for qs, ks, causal, q_off, k_off, note in [((2, 2, 3), (2, 3, 3), False, 0, 0, 'one block'),
                                           ((1, 2, 2), (1, 2, 2), True, 2, 0, 'causal, keys from an earlier chunk'),
                                           ((1, 3, 2), (1, 2, 2), True, 1, 1, 'causal, diagonal chunk with offsets')]:
    attrs = {'causal': True, 'q_offset': q_off, 'k_offset': k_off} if causal else {}
    ins = [rnd(*qs), rnd(*ks), rnd(*ks)]
    outs = attn_partial(*ins, causal, None, q_off, k_off)
    cases.append({'op': 'attention_partial', 'attrs': attrs, 'note': note, 'inputs': [enc(x) for x in ins], 'outputs': [enc(x) for x in outs]})
# The block backward, from autograd: the queries' gradient flows only through this block's
# scores (the other block's use a detached copy), the keys and values are the block's own.
for qs, k1s, k2s, causal, note in [((2, 2, 3), (2, 2, 3), (2, 1, 3), False, 'first of two key blocks'),
                                   ((1, 2, 3, 2), (1, 2, 1, 2), (1, 2, 2, 2), True, 'causal: an earlier chunk (all visible) of a diagonal query chunk'),
                                   ((4, 2, 2), (2, 2, 2), (2, 1, 2), True, 'grouped-query, causal diagonal block (offsets 1)')]:
    q = rnd(*qs).requires_grad_(True)
    k1, v1 = rnd(*k1s).requires_grad_(True), rnd(*k1s).requires_grad_(True)
    k2, v2 = rnd(*k2s), rnd(*k2s)
    n1 = k1s[-2]
    # Causal cases: the queries sit at the end of the keys' span (diagonal last block).
    q_off = k1s[-2] + k2s[-2] - qs[-2] if causal else 0
    first_causal = note.startswith('grouped')
    if first_causal:
        # The block under test is the diagonal one: keys [k2; k1] with k1 last.
        keys, vals = torch.cat([k2, k1], dim=-2), torch.cat([v2, v1], dim=-2)
        sc_blk = scores(q, k1, True, None, q_off, k2s[-2])
        sc_oth = scores(q.detach(), k2, True, None, q_off, 0)
        sc = torch.cat([sc_oth, sc_blk], dim=-1)
        attrs = {'causal': True, 'q_offset': q_off, 'k_offset': k2s[-2]}
    else:
        keys, vals = torch.cat([k1, k2], dim=-2), torch.cat([v1, v2], dim=-2)
        sc_blk = scores(q, k1, causal, None, q_off, 0)
        sc_oth = scores(q.detach(), k2, causal, None, q_off, n1)
        sc = torch.cat([sc_blk, sc_oth], dim=-1)
        attrs = {'causal': True, 'q_offset': q_off} if causal else {}
    gq = q.shape[-3] // k1.shape[-3]
    o = torch.softmax(sc, dim=-1) @ vals.repeat_interleave(gq, dim=-3)
    m = sc.max(dim=-1).values
    l_ = torch.exp(sc - m.unsqueeze(-1)).sum(dim=-1)
    g = rnd(*o.shape)
    dq, dk, dv = torch.autograd.grad(o, (q, k1, v1), grad_outputs=g)
    cases.append({'op': 'attention_partial_backward', 'attrs': attrs, 'note': 'autograd through one key block: ' + note,
                  'inputs': [enc(x) for x in (g, q, k1, v1, o, m, l_)], 'outputs': [enc(dq), enc(dk), enc(dv)]})
for rows, dv in [((2, 3), 4), ((1,), 2), ((2, 1, 2), 3)]:
    o1, o2 = rnd(*rows, dv), rnd(*rows, dv)
    m1, m2 = rnd(*rows) * 3, rnd(*rows) * 3
    l1, l2 = rnd(*rows, positive=True), rnd(*rows, positive=True)
    m = torch.maximum(m1, m2)
    w1, w2 = l1 * torch.exp(m1 - m), l2 * torch.exp(m2 - m)
    l_ = w1 + w2
    o = (o1 * w1.unsqueeze(-1) + o2 * w2.unsqueeze(-1)) / l_.unsqueeze(-1)
    cases.append({'op': 'attention_combine', 'attrs': {}, 'note': 'rescale-and-combine', 'inputs': [enc(x) for x in (o1, m1, l1, o2, m2, l2)], 'outputs': [enc(o), enc(m), enc(l_)]})

# ---- optimizers with state, and gradient clipping (torch's own implementations)
for s_, lr, mom, damp, wd, nest, first in [((2, 3), '1/10', '9/10', 0, None, False, False), ((4,), 0.05, '1/2', '1/10', '1/100', False, True), ((3,), 1, '9/10', 0, '1/10', True, False)]:
    p0, g0, b0 = rnd(*s_), rnd(*s_), rnd(*s_)
    param = torch.nn.Parameter(p0.clone())
    param.grad = g0.clone()
    opt = torch.optim.SGD([param], lr=scalar(lr), momentum=scalar(mom), dampening=scalar(damp), weight_decay=scalar(wd) if wd is not None else 0, nesterov=nest)
    if not first:
        opt.state[param] = {'momentum_buffer': b0.clone()}
    opt.step()
    attrs = {'lr': lr, 'momentum': mom}
    if damp != 0:
        attrs['dampening'] = damp
    if wd is not None:
        attrs['weight_decay'] = wd
    if nest:
        attrs['nesterov'] = True
    if first:
        attrs['first_step'] = True
    buf = opt.state[param]['momentum_buffer']
    cases.append({'op': 'sgd_momentum_update', 'attrs': attrs, 'note': 'torch.optim.SGD step' + (' (first step)' if first else ''), 'inputs': [enc(p0), enc(g0), enc(b0)], 'outputs': [enc(param), enc(buf)]})

for cls, s_, lr, b1, b2, eps, wd, step in [(torch.optim.Adam, (2, 3), '1/1000', '9/10', '999/1000', '1/100000000', None, 1),
                                           (torch.optim.Adam, (4,), '1/100', '4/5', '99/100', '1/1000', '1/10', 3),
                                           (torch.optim.AdamW, (3,), '1/10', '9/10', '999/1000', '1/100000000', '1/100', 2),
                                           (torch.optim.AdamW, (1, 2), 1, '1/2', '3/4', '1/10', '1/2', 5)]:
    p0, g0, m0, v0 = rnd(*s_), rnd(*s_), rnd(*s_), rnd(*s_).abs()
    param = torch.nn.Parameter(p0.clone())
    param.grad = g0.clone()
    kwargs = {'lr': scalar(lr), 'betas': (scalar(b1), scalar(b2)), 'eps': scalar(eps), 'foreach': False}
    kwargs['weight_decay'] = scalar(wd) if wd is not None else 0
    opt = cls([param], **kwargs)
    opt.state[param] = {'step': torch.tensor(float(step - 1)), 'exp_avg': m0.clone(), 'exp_avg_sq': v0.clone()}
    opt.step()
    st = opt.state[param]
    attrs = {'lr': lr, 'beta1': b1, 'beta2': b2, 'eps': eps, 'step': step}
    if wd is not None:
        attrs['weight_decay'] = wd
    if cls is torch.optim.AdamW:
        attrs['decoupled_weight_decay'] = True
    cases.append({'op': 'adam_update', 'attrs': attrs, 'note': f'{cls.__name__} step {step}', 'inputs': [enc(p0), enc(g0), enc(m0), enc(v0)], 'outputs': [enc(param), enc(st['exp_avg']), enc(st['exp_avg_sq'])]})

for shapes, max_norm in [([(2, 3), (4,)], '1/2'), ([(3,)], 100), ([(1, 2), (2,), (1,)], '1/10')]:
    grads = [rnd(*sh) for sh in shapes]
    params = [torch.nn.Parameter(torch.zeros(sh, dtype=DT)) for sh in shapes]
    for p_, g_ in zip(params, grads):
        p_.grad = g_.clone()
    total = torch.nn.utils.clip_grad_norm_(params, scalar(max_norm))
    coef = torch.clamp(scalar(max_norm) / (total + 1e-6), max=1.0)
    cases.append({'op': 'clip_grad_norm', 'attrs': {'max_norm': max_norm}, 'note': 'torch.nn.utils.clip_grad_norm_', 'inputs': [enc(g) for g in grads], 'outputs': [enc(p_.grad) for p_ in params]})
    total_sq = sum((g * g).sum() for g in grads)
    cases.append({'op': 'clip_coef', 'attrs': {'max_norm': max_norm}, 'note': 'the factor clip_grad_norm_ applies', 'inputs': [enc(total_sq)], 'outputs': [enc(coef)]})

# ---- integer-indexed ops: ids are symbolic in the test (one-hot indicators over `ints`)
def grad_case(op, attrs, fwd, leaf_shape, other, order, ints, note=''):
    """Golden for a backward op from autograd: fwd(leaf, *other) -> y; inputs ordered by `order`
    over {'g': seed, 'leaf': leaf, 0..: other}."""
    leaf = rnd(*leaf_shape).requires_grad_(True)
    y = fwd(leaf, *other)
    g = rnd(*y.shape) if y.dim() > 0 else rnd(1).reshape(())
    (gl,) = torch.autograd.grad(y, leaf, grad_outputs=g)
    named = {'g': g, 'leaf': leaf}
    named.update({i: o for i, o in enumerate(other)})
    cases.append({'op': op, 'attrs': attrs, 'note': note, 'inputs': [enc(named[k]) for k in order], 'outputs': [enc(gl)], 'ints': {str(i): list(v) for i, v in ints.items()}})


for ids, V, D, note in [(torch.tensor([0, 2, 2, 3]), 4, 3, 'repeated id'), (torch.tensor([[1, 0], [0, 1]]), 2, 2, '2-D ids'), (torch.tensor([0]), 1, 1, 'size-1 table')]:
    case('embedding', {}, [ids, (V, D)], F.embedding, diff=[1], ints={0: range(V)}, note=note)
    grad_case('embedding_backward', {'num_embeddings': V}, lambda w, i: F.embedding(i, w), (V, D), [ids], ['g', 0], {1: range(V)}, note=note)
for xs, idx, note in [((2, 4), torch.tensor([[3, 0, 3], [1, 1, 2]]), 'repeated index'), ((3, 2), torch.tensor([[1], [0], [1]]), 'one index per row'), ((2, 2, 3), torch.tensor([[[2, 0], [1, 1]], [[0, 0], [2, 1]]]), '3-D')]:
    C = xs[-1]
    case('gather', {}, [xs, idx], lambda x, i: torch.gather(x, -1, i), diff=[0], ints={1: range(C)}, note=note)
    grad_case('gather_backward', {'size': C}, lambda x, i: torch.gather(x, -1, i), xs, [idx], ['g', 0], {1: range(C)}, note=note)
for ids, start, end, note in [(torch.tensor([0, 3, 4, 7, 5]), 4, 8, 'upper half of 8'), (torch.tensor([[1, 2], [3, 0]]), 0, 2, 'lower half, 2-D'), (torch.tensor([2]), 2, 3, 'one-id range')]:
    mask = lambda i, s=start, e=end: (i < s) | (i >= e)
    case('vocab_mask', {'start': start, 'end': end}, [ids], lambda i, m=mask: m(i).to(DT), diff=[], ints={0: range(8)}, note=note)

    def local(i, s=start, m=mask):
        out = i - s
        out[m(i)] = 0  # Megatron's VocabParallelEmbedding: masked_input[input_mask] = 0
        return out
    case('vocab_local_ids', {'start': start, 'end': end}, [ids], local, diff=[], ints={0: range(8)}, note=note)
for cs, note in [(((2, 3), (2, 3)), 'same shape'), (((2, 1), (2, 3)), 'broadcast condition'), (((3,), (1,)), 'broadcast value')]:
    cond = torch.tensor([[True], [False]]) if cs[0] == (2, 1) else (torch.tensor([True, False, True]) if cs[0] == (3,) else torch.tensor([[True, False, False], [False, True, True]]))
    case('where', {}, [cond, cs[1], cs[1] if cs[0] != (3,) else (3,)], torch.where, diff=[1, 2], ints={0: [0, 1]}, note=note)
for s in [(4,), (2, 3), (1,)]:
    case('log', {}, [s], torch.log, positive=(0,))
for s, attrs in [((2, 3, 4), {'dims': [1]}), ((2, 3), {'keepdim': True}), ((1, 5), {'dims': [-1], 'keepdim': True})]:
    case('amax', attrs, [s], lambda x, d=attrs.get('dims', list(range(len(s)))), k=attrs.get('keepdim', False): torch.amax(x, dim=d, keepdim=k), diff=[])

# ---- cross-entropy: labels symbolic over their classes plus the ignore index
for (N, C), labels, attrs, note in [
    ((4, 5), torch.tensor([1, -100, 4, 0]), {'reduction': 'mean'}, 'default ignore_index present'),
    ((3, 4), torch.tensor([3, 3, 0]), {'reduction': 'sum'}, 'sum'),
    ((3, 3), torch.tensor([2, 1, 2]), {'reduction': 'mean', 'ignore_index': 2}, 'ignore_index 2, one label counted'),
    ((2, 4), torch.tensor([0, -100]), {'reduction': 'none'}, 'none'),
    ((1, 1), torch.tensor([0]), {'reduction': 'mean'}, 'size-1'),
]:
    ign = attrs.get('ignore_index', -100)
    dom = sorted(set(range(C)) | {ign})
    kw = {'reduction': attrs['reduction'], 'ignore_index': ign}
    case('cross_entropy', attrs, [(N, C), labels], lambda x, t, k=kw: F.cross_entropy(x, t, **k), diff=[0], ints={1: dom}, note=note)
    grad_case('cross_entropy_backward', attrs, lambda x, t, k=kw: F.cross_entropy(x, t, **k), (N, C), [labels], ['g', 'leaf', 0], {2: dom}, note=note)

# ---- MoE: top-k routing, dropless dispatch / combine (Megatron's permutation: a stable sort
# of the flattened routing choices by expert, then index_select of the token rows)
for s, k, note in [((3, 4), 2, 'top-2 of 4'), ((2, 3), 3, 'k = all (a full sort)'), ((2, 2, 3), 1, 'top-1, 3-D')]:
    case('topk', {'k': k}, [s], lambda x, kk=k: torch.topk(x, kk, dim=-1), diff=[0], note=note)


def permute(x, idx, w=None):
    """Rows of the routing slots sorted by expert (stable), and the slot of each sorted row."""
    N, k = idx.shape
    order = torch.sort(idx.reshape(-1), stable=True).indices
    rows = x.index_select(0, order // k)
    if w is not None:
        rows = rows * w.reshape(-1).index_select(0, order).unsqueeze(-1)
    return rows, order


def dispatch(x, idx, E, w=None):
    rows, order = permute(x, idx, w)
    counts = torch.bincount(idx.reshape(-1), minlength=E).tolist()
    n, D = idx.numel(), x.shape[1]
    out, start = [], 0
    for e in range(E):
        seg = rows[start:start + counts[e]]
        out.append(torch.cat([seg, torch.zeros(n - counts[e], D, dtype=DT)]))
        start += counts[e]
    return torch.stack(out)


def gather_slots(y, idx):
    """Megatron's unpermute: the expert output row of every slot, [N, k, F]."""
    E, n, F_ = y.shape
    flat = idx.reshape(-1)
    counts = torch.bincount(flat, minlength=E).tolist()
    sorted_rows = torch.cat([y[e, :counts[e]] for e in range(E)])
    order = torch.sort(flat, stable=True).indices
    slots = torch.empty_like(order)
    slots[order] = torch.arange(n)
    return sorted_rows.index_select(0, slots).reshape(idx.shape[0], idx.shape[1], F_)


for (N, D), idx, E, weighted, note in [
    ((3, 2), torch.tensor([[1, 0], [1, 2], [0, 1]]), 3, False, 'top-2 of 3 experts'),
    ((4, 3), torch.tensor([[2], [0], [2], [2]]), 4, True, 'top-1, weighted, an idle expert'),
    ((1, 2), torch.tensor([[0]]), 1, False, 'one token, one expert'),
]:
    case('moe_dispatch', {'experts': E}, [(N, D), idx] + ([tuple(idx.shape)] if weighted else []), lambda x, i, *w, e=E: dispatch(x, i, e, w[0] if w else None),
         diff=[0, 2] if weighted else [0], ints={1: range(E)}, note=note)
    n = idx.numel()
    case('moe_gather', {}, [(E, n, D), idx], gather_slots, diff=[0], ints={1: range(E)}, note=note)
    case('moe_combine', {}, [(E, n, D), idx] + ([tuple(idx.shape)] if weighted else []),
         lambda y, i, *w: (gather_slots(y, i) * (w[0].unsqueeze(-1) if w else 1)).sum(1), diff=[0, 2] if weighted else [0], ints={1: range(E)}, note=note)



def dispatch_token(x, idx, E, w=None):
    """layout 'token': slot s = (i, j) at row s of its expert's buffer (a one-hot scatter)."""
    N, k = idx.shape
    rows = x.repeat_interleave(k, dim=0)
    if w is not None:
        rows = rows * w.reshape(-1, 1)
    onehot = torch.nn.functional.one_hot(idx.reshape(-1), E).to(DT)  # [n, E]
    return onehot.t().unsqueeze(-1) * rows.unsqueeze(0)


def gather_token(y, idx):
    N, k = idx.shape
    n = N * k
    return y[idx.reshape(-1), torch.arange(n)].reshape(N, k, y.shape[2])


for (N, D), idx, E, weighted, note in [
    ((3, 2), torch.tensor([[1, 0], [1, 2], [0, 1]]), 3, False, 'token layout, top-2 of 3 experts'),
    ((4, 3), torch.tensor([[2], [0], [2], [2]]), 4, True, 'token layout, top-1, weighted, an idle expert'),
]:
    case('moe_dispatch', {'experts': E, 'layout': 'token'}, [(N, D), idx] + ([tuple(idx.shape)] if weighted else []), lambda x, i, *w, e=E: dispatch_token(x, i, e, w[0] if w else None),
         diff=[0, 2] if weighted else [0], ints={1: range(E)}, note=note)
    n = idx.numel()
    case('moe_gather', {'layout': 'token'}, [(E, n, D), idx], gather_token, diff=[0], ints={1: range(E)}, note=note)
    case('moe_combine', {'layout': 'token'}, [(E, n, D), idx] + ([tuple(idx.shape)] if weighted else []),
         lambda y, i, *w: (gather_token(y, i) * (w[0].unsqueeze(-1) if w else 1)).sum(1), diff=[0, 2] if weighted else [0], ints={1: range(E)}, note=note)

# ---- collectives (group semantics of torch.distributed over the members' tensors)
def stacked_reduce(xs, how):
    st = torch.stack(xs)
    return {'sum': st.sum(0), 'avg': st.mean(0), 'max': st.max(0).values, 'min': st.min(0).values}[how]


for how in ['sum', 'avg', 'max', 'min']:
    collective('all_reduce', {'reduce': how}, [(2, 3)] * 2, lambda xs, h=how: [stacked_reduce(xs, h)] * len(xs))
collective('all_reduce', {'reduce': 'sum'}, [(3,)] * 4, lambda xs: [stacked_reduce(xs, 'sum')] * 4, note='4 members')
for dim, shapes in [(0, [(2, 3)] * 2), (1, [(2, 1)] * 3), (-1, [(1, 2)] * 2)]:
    collective('all_gather', {'dim': dim}, shapes, lambda xs, d=dim: [torch.cat(xs, d)] * len(xs))
for dim, how, shapes in [(0, 'sum', [(4, 2)] * 2), (1, 'avg', [(2, 6)] * 3), (0, 'max', [(2,)] * 2)]:
    collective('reduce_scatter', {'dim': dim, 'reduce': how}, shapes, lambda xs, d=dim, h=how: list(torch.chunk(stacked_reduce(xs, h), len(xs), d)))
for sd, cd, shapes in [(0, 1, [(4, 2)] * 2), (1, 0, [(2, 6)] * 3), (0, 0, [(4,)] * 2)]:
    collective('all_to_all', {'split_dim': sd, 'concat_dim': cd}, shapes,
               lambda xs, s=sd, c=cd: [torch.cat([torch.chunk(x, len(xs), s)[j] for x in xs], c) for j in range(len(xs))])
for src, shapes in [(0, [(2, 2)] * 2), (2, [(3,)] * 3), (1, [(1, 4)] * 2)]:
    collective('broadcast', {'src': src}, shapes, lambda xs, s=src: [xs[s]] * len(xs), src=src)
for s in [(2, 3), (1,), (4, 1)]:
    collective('send_recv', {}, [s, s], lambda xs: [None, xs[0]], src=0)

# ---- added after the first generation (appended so that the cases above keep their random draws)
for s in [(5,), (2, 3), (1,)]:
    case('sqrt', {}, [s], torch.sqrt, positive=(0,))

# ---- comparisons, the lattice ops and positions (issue 33)
for rel, fn in [('gt', torch.gt), ('ge', torch.ge), ('lt', torch.lt), ('le', torch.le), ('eq', torch.eq), ('ne', torch.ne)]:
    a = rnd(2, 3)
    b = a.clone()
    b[0] = rnd(3)  # row 1 ties: eq, ge and le see equal values
    case('compare', {'rel': rel}, [a, b], lambda x, y, f=fn: f(x, y).to(DT), diff=[], note='ties in row 1')
    case('compare', {'rel': rel}, [rnd(2, 1), rnd(3)], lambda x, y, f=fn: f(x, y).to(DT), diff=[], note='broadcast')
    case('compare', {'rel': rel}, [torch.tensor([0, 1, 2, 3]), torch.tensor([2])], lambda x, y, f=fn: f(x, y).to(DT), diff=[], ints={0: range(4), 1: range(4)}, note='integer ids')
for op, fn in [('maximum', torch.maximum), ('minimum', torch.minimum)]:
    for shapes in [((2, 3), (3,)), ((2, 1), (2, 3)), ((4,), (4,))]:
        case(op, {}, list(shapes), fn)
for shape, dim, step, note in [([4], 0, 1, 'arange'), ([2, 3], 1, '1/2', 'fractional step'), ([3, 2], 0, -2, 'negative step')]:
    case('iota', {'shape': shape, 'dim': dim, 'step': step}, [rnd(1).reshape(())],
         lambda s, sh=shape, d=dim, st=step: (s + torch.arange(sh[d], dtype=DT).mul(scalar(st)).reshape([-1 if i == d else 1 for i in range(len(sh))]).expand(*sh)), diff=[], note=note)
for xs, ms in [((2, 3), (2, 3)), ((2, 3), (2, 1)), ((4,), (4,))]:
    case('assert_mask', {}, [xs, torch.ones(*ms)], lambda x, m: torch.where(m.bool(), x, x), diff=[0], ints={1: [1]}, note='a full mask')

os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, 'w') as f:
    json.dump({'generator': 'tools/gen_golden.py', 'torch': torch.__version__, 'python': sys.version.split()[0], 'cases': cases}, f, separators=(',', ':'))
    f.write('\n')
print(f'{len(cases)} cases -> {os.path.relpath(OUT)}')
