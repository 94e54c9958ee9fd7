#!/usr/bin/env python3
"""Writes the scale-only malformed plans of test/fixtures/invalid/ (8192 ranks, a few KB each):
mistakes that show on one rank or one pipeline stage of thousands. Run from the repo root:
python3 tools/gen_scale_fixtures.py"""
import json

OUT = 'test/fixtures/invalid/'


def write(name, plan):
    with open(OUT + name, 'w') as f:
        json.dump(plan, f, indent=1)
        f.write('\n')


def chain(mesh, programs, n):
    """x (input, [n]) -> y = identity(x) (output)."""
    return {
        'format': 'planproof/v1',
        'mesh': {'axes': mesh},
        'logical': {
            'tensors': [{'id': 'x', 'shape': [n], 'role': 'input'}, {'id': 'y', 'shape': [n], 'role': 'output'}],
            'ops': [{'id': 'f', 'op': 'identity', 'inputs': ['x'], 'outputs': ['y']}],
        },
        'parallel': {'programs': programs},
        'contract': {'inputs': ['x'], 'outputs': ['y']},
    }


def rows(lo, hi):
    return [[{'expr': lo}, {'expr': hi}]]


# 1. Each rank holds two rows of x as two stripes, [2dp, 2dp+1) and [2dp+1, 2dp+2); on rank
# 4095 only, the second stripe is shifted back by one: it overlaps the first.
only4095 = 'max(0, 1 - max(dp - 4095, 4095 - dp))'
write('scale-lineage-overlap-rank4095.json', chain([{'name': 'dp', 'size': 8192}], [{
    'name': 'dp replica',
    'ranks': 'all',
    'tensors': [
        {'id': 'x', 'shape': [2], 'lineage': {'logical': 'x', 'index': [[[{'expr': '2*dp'}, {'expr': '2*dp + 1'}], [{'expr': f'2*dp + 1 - {only4095}'}, {'expr': f'2*dp + 2 - {only4095}'}]]]}},
        {'id': 'y', 'shape': [2], 'lineage': {'logical': 'y', 'index': [[[{'expr': '2*dp'}, {'expr': '2*dp + 1'}], [{'expr': '2*dp + 1'}, {'expr': '2*dp + 2'}]]]}},
    ],
    'ops': [{'id': 'f', 'op': 'identity', 'inputs': ['x'], 'outputs': ['y']}],
}], 16384))

# 2. Two programs by `where` on a 2 x 4096 mesh; the second lists b = 0..4094, so rank 8191
# (a=1, b=4095) runs nothing.
prog = lambda name, where: {
    'name': name,
    'ranks': {'where': where},
    'tensors': [
        {'id': 'x', 'shape': [1], 'lineage': {'logical': 'x', 'index': rows('b', 'b + 1')}},
        {'id': 'y', 'shape': [1], 'lineage': {'logical': 'y', 'index': rows('b', 'b + 1')}},
    ],
    'ops': [{'id': 'f', 'op': 'identity', 'inputs': ['x'], 'outputs': ['y']}],
}
write('scale-where-leaves-rank8191.json', chain([{'name': 'a', 'size': 2}, {'name': 'b', 'size': 4096}], [prog('a0', {'a': 0}), prog('a1', {'a': 1, 'b': list(range(4095))})], 4096))

# 3. A 16-stage pipeline over pp x dp = 16 x 512: stage 0 computes y and sends it on; each
# stage receives it from the previous one and passes it on; stage 15 also sends it back to
# stage 0 (shift pp -15), where nothing receives it.
lin = lambda t: {'logical': t, 'index': rows('dp', 'dp + 1')}
first = {'name': 'stage0', 'ranks': {'where': {'pp': 0}}, 'tensors': [{'id': 'x', 'shape': [1], 'lineage': lin('x')}, {'id': 'y', 'shape': [1], 'lineage': lin('y')}],
         'ops': [{'id': 'f', 'op': 'identity', 'inputs': ['x'], 'outputs': ['y']}, {'id': 'send_y', 'op': 'send', 'inputs': ['y'], 'outputs': [], 'peer': {'shift': {'pp': 1}}}]}
middle = {'name': 'stages 1-14', 'ranks': {'where': {'pp': list(range(1, 15))}}, 'tensors': [{'id': 'y', 'shape': [1], 'lineage': lin('y')}],
          'ops': [{'id': 'recv_y', 'op': 'recv', 'inputs': [], 'outputs': ['y'], 'peer': {'shift': {'pp': -1}}}, {'id': 'send_y', 'op': 'send', 'inputs': ['y'], 'outputs': [], 'peer': {'shift': {'pp': 1}}}]}
last = {'name': 'stage15', 'ranks': {'where': {'pp': 15}}, 'tensors': [{'id': 'y', 'shape': [1], 'lineage': lin('y')}],
        'ops': [{'id': 'recv_y', 'op': 'recv', 'inputs': [], 'outputs': ['y'], 'peer': {'shift': {'pp': -1}}}, {'id': 'send_back', 'op': 'send', 'inputs': ['y'], 'outputs': [], 'peer': {'shift': {'pp': -15}}}]}
write('scale-send-without-recv-pp15.json', chain([{'name': 'pp', 'size': 16}, {'name': 'dp', 'size': 512}], [first, middle, last], 512))
