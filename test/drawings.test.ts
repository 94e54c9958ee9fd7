/**
 * Drawings and `explain` show every collective's kind, attributes and group, and paint red only
 * the tensors a witness shows wrong (issue 35, deliver 3). The HTML's SVG and the DOT are
 * parsed: a node is red when its fill is the failing colour.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXAMPLES, runCli } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'planproof-drawings-'));
const scaleTwice = `${EXAMPLES}buggy/mlp-dp2-loss-scale-twice.json`;
const missing = `${EXAMPLES}buggy/mlp-dp2-missing-grad-allreduce.json`;

/** Graphviz SVG nodes of one stage's drawing: title, class, red (filled with the failing colour). */
function svgNodes(html: string, stage: number): { title: string; cls: string; red: boolean }[] {
  const at = html.indexOf(`id="stage-${stage}"`);
  assert.ok(at >= 0, `stage ${stage} has a section`);
  const svg = html.slice(html.indexOf('<svg', at), html.indexOf('</svg>', at));
  return [...svg.matchAll(/<g id="node\d+" class="([^"]*)">\s*<title>([^<]*)<\/title>([\s\S]*?)<\/g>/g)].map((m) => ({
    cls: m[1] as string,
    title: (m[2] as string).replace(/&#45;/g, '-').replace(/&gt;/g, '>'),
    red: (m[3] as string).includes('fill="#ffcdd2"'),
  }));
}

/** DOT node ids drawn red. */
const dotRed = (dot: string): string[] => [...dot.matchAll(/^\s*"([^"]+)" \[[^\n]*fillcolor="#ffcdd2"/gm)].map((m) => m[1] as string).sort();

describe('drawings and explain: collectives with their reduce op and group; red only on failing tensors', function () {
  this.timeout(300_000);

  it('HTML of the avg-where-sum-is-due example: the all-reduce shows reduce: avg and group dp; g_w1 red, g_w1_part not', async () => {
    const f = join(dir, 'scale.html');
    const r = await runCli(['verify', scaleTwice, '--html', f, '--no-cache']);
    assert.equal(r.code, 1, r.stderr);
    const html = readFileSync(f, 'utf8');
    const nodes = svgNodes(html, 13);
    const coll = nodes.find((n) => n.title === 'C:g_w1_sum');
    assert.ok(coll !== undefined, 'the all-reduce is drawn');
    const at = html.indexOf('<title>C:g_w1_sum</title>');
    const label = html.slice(at, html.indexOf('</g>', at));
    for (const t of ['all_reduce', 'reduce: avg', 'group dp [0,1]']) assert.ok(label.includes(t), `${t} in ${label}`);
    const red = nodes.filter((n) => n.red).map((n) => n.title).sort();
    assert.deepEqual(red, ['L:t:g_w1', 'R0:t:g_w1', 'R1:t:g_w1']);
    // The class marks exactly the red nodes (what a stylesheet or a test selects).
    assert.deepEqual(nodes.filter((n) => n.cls.split(' ').includes('failing')).map((n) => n.title).sort(), red);
    assert.ok(nodes.some((n) => n.title === 'R0:t:g_w1_part' && !n.red), 'the correct addend is drawn, not red');
  });

  it('HTML of the README buggy example (missing all-reduce): red only on tensors the witness names', async () => {
    const f = join(dir, 'missing.html');
    const j = await runCli(['verify', missing, '--json', '--no-cache']);
    const rep = JSON.parse(j.stdout) as { stages: { index: number; status: string; witness?: { rank: number; tensor: string }[] }[] };
    const failing = rep.stages.filter((s) => s.status === 'not_equivalent');
    assert.ok(failing.length > 0);
    const r = await runCli(['verify', missing, '--html', f, '--no-cache']);
    assert.equal(r.code, 1, r.stderr);
    const html = readFileSync(f, 'utf8');
    for (const s of failing) {
      const named = new Set((s.witness ?? []).map((w) => w.tensor));
      const red = svgNodes(html, s.index).filter((n) => n.red && n.title.startsWith('R'));
      assert.ok(red.length > 0, `stage ${s.index}: a red tensor`);
      for (const n of red) assert.ok(named.has(n.title.replace(/^R\d+:t:/, '')), `stage ${s.index}: ${n.title} is red but no witness names it`);
    }
  });

  it('explain names the reduce op and group (table and --dot); the DOT paints only the failing tensors', async () => {
    const t = await runCli(['explain', scaleTwice, '13']);
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /all_reduce\(reduce: avg\) +g_w1_sum +g_w1 +g_w1_part \(group dp \[0,1\]\)/);
    const d = await runCli(['explain', scaleTwice, '13', '--dot']);
    assert.match(d.stdout, /"C:g_w1_sum" \[label="g_w1_sum\\nall_reduce\\nreduce: avg\\ngroup dp \[0,1\]"/);
    assert.deepEqual(dotRed(d.stdout), ['L:t:g_w1', 'R0:t:g_w1', 'R1:t:g_w1']);
  });
});
