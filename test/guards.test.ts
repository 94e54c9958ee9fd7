/**
 * Witnesses of specialized plans (stages/witness/guards.ts, docs/engine.md "Witnesses of
 * specialized plans"): on a captured plan whose program read values into Python, "NOT
 * EQUIVALENT" needs a whole-plan draw that keeps every read. examples/torch/aux_flag_ddp.py
 * branches on `has_aux.any()`: rank 1 read False and skipped the auxiliary head. Its correct
 * program was refuted at a draw where rank 1's rows carry a label; now it is VERIFIED on the
 * inputs where the reads come out as in the run (stages/witness/pins.ts: rows 2-3 of has_aux
 * are 0 there), and its twin is refuted by a whole-plan witness. Edited plans show each check can fail.
 * `float(t)` in the user's script is the traced read (tools/capture/capture_reads.py): a logged
 * `float(loss)` leaves no guard, and the loss scaler's `float(t) == float("inf")` is a comparison.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FIXTURES, runCli } from './helpers.js';
import { needs, TOOLS } from './optional.js';

type Json = Record<string, unknown>;

async function imported(name: string): Promise<{ dir: string; plan: string; raw: Json }> {
  const dir = mkdtempSync(join(tmpdir(), 'pp-guards-'));
  const plan = join(dir, `${name}.json`);
  const imp = await runCli(['import-graphs', '--dir', `${FIXTURES}capture/${name}`, '-o', plan]);
  assert.equal(imp.code, 0, imp.stderr);
  return { dir, plan, raw: JSON.parse(readFileSync(plan, 'utf8')) as Json };
}

const verify = (plan: string): Promise<{ code: number; stdout: string; stderr: string }> => runCli(['verify', '--infer', '--jobs', '0', '--no-answer-cache', plan]);

describe('witnesses of specialized plans keep every value read into Python', function () {
  this.timeout(300_000);

  it('the capture records a guard per read: the value read, on every program', async () => {
    const { raw } = await imported('aux_flag_ddp');
    const guards = raw['x-planproof-guards'] as Json[];
    // One `has_aux.any()` per program: True on the single device and rank 0, False on rank 1.
    const any = guards.filter((g) => /aux_flag_ddp\.py:\d+/.test(String(g['where'])) && g['cmp'] === 'eq');
    assert.deepEqual(
      any.map((g) => [g['program'], g['values']]),
      [
        ['logical', [1]],
        [0, [1]],
        [1, [0]],
      ],
    );
  });

  it('the correct program whose rank 1 skips the branch is VERIFIED on the inputs where the reads come out as in the run (the elements they imply held), never NOT EQUIVALENT', async () => {
    const { plan } = await imported('aux_flag_ddp');
    const v = await verify(plan);
    assert.equal(v.code, 0, v.stdout);
    // rank 1 read has_aux[2:4].any() as 0: on every such input both elements are 0, and only that is assumed.
    assert.match(v.stdout, /VERIFIED \(for the values the program read into Python\): .*proved for the inputs where the values read into Python come out as in the captured run, on which has_aux\[2\] = 0, has_aux\[3\] = 0 \(implied by the reads at \S*aux_flag_ddp\.py:\d+/);
    assert.match(v.stdout, /specialized: inputs held at the values the reads imply: has_aux\[2\] = 0, has_aux\[3\] = 0 \(x-planproof-pins\)/);
  });

  it('the library verifies it the same way, in this thread', async () => {
    const { plan } = await imported('aux_flag_ddp');
    const lib = (await import('../index.js')) as typeof import('../index.js');
    const r = lib.verifyPlan(lib.loadPlan(plan));
    assert.equal(r.verdict, 'verified', r.summary);
    assert.match(r.summary, /on which has_aux\[2\] = 0, has_aux\[3\] = 0/);
  });

  it('without the pins the same program is UNKNOWN naming the read: a proof for every input fails, and no witness keeps the reads', async () => {
    const { dir, raw } = await imported('aux_flag_ddp');
    // A rank-1 guard recording a value no categorical input decides (a count read as 0 or 1: any value of rows 2-3)
    // pins nothing: the plan is verified as before, for every input.
    const guards = raw['x-planproof-guards'] as Json[];
    const g = guards.find((x) => x['program'] === 1 && x['cmp'] === 'eq') ?? assert.fail('no rank-1 guard');
    g['values'] = [1];
    const plan = join(dir, 'no-pins.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    // Rank 1's graph skips the branch its (edited) read says it took: never VERIFIED.
    assert.notEqual(v.code, 0, v.stdout);
    assert.doesNotMatch(v.stdout, /x-planproof-pins/);
  });

  it('x-planproof-pins is checked: malformed is exit 2 naming its JSON path; a pin that does not fit the plan (a value outside the declared values, another shape) is not applied', async () => {
    const { dir, raw } = await imported('aux_flag_ddp');
    const plan = join(dir, 'pins.json');
    raw['x-planproof-pins'] = { has_aux: [[2, 0]] };
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 2, v.stdout);
    assert.match(v.stdout + v.stderr, /\$\.x-planproof-pins\.has_aux: must be \{ "shape"/);
    // A pin the reads do not imply (has_aux[3] = 1 contradicts rank 1's read; has_aux[0] = 1 is
    // not forced: rank 0 read any() of rows 0-1 as 1) is refused, naming it: it would narrow the
    // verdict to inputs the program may never run on.
    for (const [el, v] of [[3, 1], [0, 1]]) {
      raw['x-planproof-pins'] = { has_aux: { shape: [4], at: [[el, v]] } };
      writeFileSync(plan, JSON.stringify(raw));
      const u = await verify(plan);
      assert.equal(u.code, 2, u.stdout);
      assert.match(u.stdout + u.stderr, new RegExp(`\\$\\.x-planproof-pins\\.has_aux: has_aux\\[${el}\\] = ${v} is not implied by the values the program read into Python`));
    }
    // Written with another shape or a value outside {0, 1} a pin does not fit and is dropped; one
    // the reads imply is applied: either way the pins applied are the implied ones.
    for (const pin of [{ shape: [2, 2], at: [[3, 1]] }, { shape: [4], at: [[3, 0.5]] }, { shape: [4], at: [[3, 0]] }]) {
      raw['x-planproof-pins'] = { has_aux: pin };
      writeFileSync(plan, JSON.stringify(raw));
      const w = await verify(plan);
      assert.equal(w.code, 0, w.stdout);
      assert.match(w.stdout, /specialized: inputs held at the values the reads imply: has_aux\[2\] = 0, has_aux\[3\] = 0 \(x-planproof-pins\)/);
    }
  });

  it('its twin (divided by the rank count of labelled rows) is NOT EQUIVALENT by a whole-plan witness that keeps every read', async () => {
    const { plan } = await imported('aux_flag_ddp-bug');
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /NOT EQUIVALENT \(for the values the program read into Python\)[\s\S]*a whole-plan witness keeps every value the program read into Python: with the captured run's values of has_aux \(the inputs the reads depend on\), certified witness \(interval arithmetic at seed \d+/);
  });

  it('without the run values, a random draw that keeps all three reads refutes it too', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    assert.ok(raw['x-planproof-run-inputs'] !== undefined);
    delete raw['x-planproof-run-inputs'];
    const plan = join(dir, 'drawn.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /a whole-plan witness keeps every value the program read into Python: certified witness \(interval arithmetic at seed \d+/);
  });

  it('the twin with a guard no draw keeps (a read value edited) is never refuted', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    const guards = raw['x-planproof-guards'] as Json[];
    const g = guards.find((x) => x['program'] === 1 && x['cmp'] === 'eq') ?? assert.fail('no rank-1 guard');
    g['values'] = [7];
    const plan = join(dir, 'edited.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 3, v.stdout);
    assert.match(v.stdout, /\(each of \d+ draws: the value read into Python at \S*aux_flag_ddp\.py:\d+ \(7\) is 0 at these inputs\)/);
  });

  it('a plan that lists a read but records no guard for it is never refuted', async () => {
    const { dir, raw } = await imported('aux_flag_ddp-bug');
    delete raw['x-planproof-guards'];
    const plan = join(dir, 'legacy.json');
    writeFileSync(plan, JSON.stringify(raw));
    const v = await verify(plan);
    assert.equal(v.code, 3, v.stdout);
    assert.match(v.stdout, /read into Python, and the plan records no guard for it \(x-planproof-guards\)/);
    // Without the read listed either, the plan is an ordinary plan: its stage witness refutes.
    delete raw['x-planproof-specialized'];
    writeFileSync(plan, JSON.stringify(raw));
    const w = await verify(plan);
    assert.equal(w.code, 1, w.stdout);
  });

  it('a comparison guard (megatron_clip: clip_coeff < 1.0) is kept at the run values: its twin stays refuted', async () => {
    const { plan, raw } = await imported('megatron_clip-bug');
    const guards = raw['x-planproof-guards'] as Json[];
    assert.ok(guards.some((g) => g['cmp'] === 'lt' && g['otherValue'] === 1 && typeof g['outcome'] === 'boolean'), JSON.stringify(guards));
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /a whole-plan witness keeps every value the program read into Python/);
  });

  it("AdamW's step counter (an input, incremented, then read) is kept at the run values: the twin stays refuted", async () => {
    const { plan } = await imported('adamw_mlp-bug');
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /with the captured run's values of (w[12]_step, )*w[12]_step \(the inputs the reads depend on\)/);
  });

  it("the loss scaler's `cpu_sum = float(x.float().sum())` (seq2seq_attn_ddp) is the traced read: each check is three comparisons with their outcome, never the exact sum", async () => {
    const { raw } = await imported('seq2seq_attn_ddp-bug');
    const guards = (raw['x-planproof-guards'] as Json[]).filter((g) => /seq2seq_attn_ddp\.py:\d+$/.test(String(g['where'])));
    assert.ok(guards.length > 0);
    assert.ok(!guards.some((g) => 'values' in g), 'a guard keeps the exact value of a float(t)');
    const checks = new Map<string, string[]>();
    for (const g of guards) {
      const key = `${String(g['program'])}/${String(g['tensor'])}`;
      const other = g['other'] === g['tensor'] ? 'itself' : String(g['other'] ?? g['otherValue']);
      checks.set(key, [...(checks.get(key) ?? []), `${String(g['cmp'])} ${other} ${String(g['outcome'])}`]);
    }
    for (const c of checks.values()) assert.deepEqual(c, ['eq inf false', 'eq -inf false', 'ne itself false']);
  });
});

// A training step as people write it: the loss logged with `running_loss += float(loss)`, and
// (--scaler) apex's / fairseq's overflow check before the step. --bug: the model not in DDP.
const SCALER = [
  'import sys',
  'import torch',
  'import torch.distributed as dist',
  'import torch.nn as nn',
  'import torch.nn.functional as F',
  'from torch.nn.parallel import DistributedDataParallel as DDP',
  '',
  '',
  'def has_overflow(params):',
  '    for p in params:',
  '        cpu_sum = float(p.grad.float().sum())',
  '        if cpu_sum == float("inf") or cpu_sum == -float("inf") or cpu_sum != cpu_sum:',
  '            return True',
  '    return False',
  '',
  '',
  'def step(cap):',
  '    ws, rank = dist.get_world_size(), dist.get_rank()',
  '    torch.manual_seed(0)',
  '    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))',
  '    for name, p in model.named_parameters():',
  '        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")',
  '    net = model if "--bug" in sys.argv else DDP(model)',
  '    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)',
  '    x = cap.replicate(torch.randn(8, 4), name="x")',
  '    y = cap.replicate(torch.randn(8, 2), name="y")',
  '    running_loss = 0.0',
  '    with cap.trace():',
  '        xb, yb = x.chunk(ws)[rank], y.chunk(ws)[rank]',
  '        optimizer.zero_grad()',
  '        loss = F.mse_loss(net(xb), yb)',
  '        loss.backward()',
  '        running_loss += float(loss)',
  '        if "--scaler" not in sys.argv or not has_overflow(model.parameters()):',
  '            optimizer.step()',
  '        print("loss %.4f" % running_loss)',
  '    for name, p in model.named_parameters():',
  '        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")',
  '',
].join('\n');

describe("float(t) in the user's script is the traced read (live capture, Debian python3-torch)", function () {
  this.timeout(600_000);
  before(function () {
    needs(this, TOOLS.torch);
  });
  const dir = mkdtempSync(join(tmpdir(), 'pp-float-'));
  const script = join(dir, 'train.py');
  writeFileSync(script, SCALER);
  const capture = async (name: string, args: string[]): Promise<{ plan: string; raw: Json }> => {
    const plan = join(dir, `${name}.json`);
    const cap = await runCli(['capture', '--nproc', '2', '--axis', 'dp', '--out', plan, '--', script, ...args]);
    assert.equal(cap.code, 0, cap.stderr);
    return { plan, raw: JSON.parse(readFileSync(plan, 'utf8')) as Json };
  };

  it('a loss only logged (`running_loss += float(loss)`) leaves no guard and no read: VERIFIED for every input @full', async () => {
    const { plan, raw } = await capture('logged', []);
    assert.equal(raw['x-planproof-guards'], undefined);
    assert.equal(raw['x-planproof-specialized'], undefined);
    const v = await verify(plan);
    assert.equal(v.code, 0, v.stdout);
    assert.doesNotMatch(v.stdout, /read into Python/);
  });

  it('the overflow check (`float(t) == float("inf")`, `!= itself`) is comparison guards: the twin NOT EQUIVALENT by a whole-plan witness, the correct step VERIFIED @full', async () => {
    const bug = await capture('scaler-bug', ['--scaler', '--bug']);
    const guards = bug.raw['x-planproof-guards'] as Json[];
    // 4 parameters' checks on each of 3 programs, each == inf, == -inf, != itself (all False)
    assert.equal(guards.length, 36, JSON.stringify(guards));
    assert.deepEqual(new Set(guards.map((g) => `${String(g['cmp'])} ${g['other'] === g['tensor'] ? 'itself' : String(g['otherValue'])} ${String(g['outcome'])}`)), new Set(['eq inf false', 'eq -inf false', 'ne itself false']));
    const v = await verify(bug.plan);
    assert.equal(v.code, 1, v.stdout);
    assert.match(v.stdout, /NOT EQUIVALENT \(for the values the program read into Python\)[\s\S]*a whole-plan witness keeps every value the program read into Python/);
    const ok = await capture('scaler', ['--scaler']);
    assert.equal((await verify(ok.plan)).code, 0);
    // An overflow the draws cannot make (an edited outcome: the sum was +inf) is never refuted.
    const eqInf = guards.find((g) => g['cmp'] === 'eq' && g['otherValue'] === 'inf') ?? assert.fail('no == inf guard');
    eqInf['outcome'] = true;
    const edited = join(dir, 'edited.json');
    writeFileSync(edited, JSON.stringify(bug.raw));
    const e = await verify(edited);
    assert.equal(e.code, 3, e.stdout);
    assert.match(e.stdout, /\(a comparison 'eq' that came out true\) is not certainly the same at these inputs/);
  });

  it('the overflow check in a module of its own (`from scaling import has_overflow`, beside the script) imports as for `python train.py`, and its float(t) is the traced read too @full', async () => {
    const sub = mkdtempSync(join(tmpdir(), 'pp-float-mod-'));
    const at = SCALER.indexOf('def has_overflow');
    const end = SCALER.indexOf('def step');
    writeFileSync(join(sub, 'scaling.py'), SCALER.slice(at, end));
    const train = join(sub, 'train.py');
    writeFileSync(train, SCALER.slice(0, at) + 'from scaling import has_overflow\n\n\n' + SCALER.slice(end));
    const plan = join(sub, 'bug.json');
    const cap = await runCli(['capture', '--nproc', '2', '--axis', 'dp', '--out', plan, '--', train, '--scaler', '--bug']);
    assert.equal(cap.code, 0, cap.stderr);
    const raw = JSON.parse(readFileSync(plan, 'utf8')) as Json;
    const guards = raw['x-planproof-guards'] as Json[];
    assert.equal(guards.length, 36, JSON.stringify(guards));
    assert.ok(guards.every((g) => /scaling\.py:\d+$/.test(String(g['where'])) && !('values' in g)), JSON.stringify(guards[0]));
    const v = await verify(plan);
    assert.equal(v.code, 1, v.stdout);
  });
});
