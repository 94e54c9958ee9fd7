/**
 * The HTML report (`planproof verify --html FILE`): one self-contained file for the engineer
 * who must understand a failing stage. Verdict, a stage table (sortable, filterable by
 * status), and for every failing or unknown stage its dataflow drawn as SVG (logical side,
 * parallel side per rank with the collectives, the stage's tensor highlighted), the witness
 * values, the diagnosis and the normal-form difference.
 *
 * Layout is Graphviz's (compiled to WebAssembly, @hpcc-js/wasm-graphviz), run here while the
 * report is written, so the file holds plain SVG: no script or font is fetched when it is
 * opened (its Content-Security-Policy forbids any network access), and the page's own script
 * only sorts and filters the table.
 */
import type { LoadedPlan } from '../lineage/load.js';
import { DECIDED_BY_TEXT, ranksText, type StageReport, type VerifyReport } from '../stages/report.js';
import { planStages, stageView, type StageView } from '../stages/decompose/stageview.js';
import { stageDot } from './dot.js';
import { stageOp } from './junit.js';
import { formatIssue, type PlanIssue } from '../plans/errors.js';

/** HTML text or attribute value. */
function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

/** Stages drawn at most: past it the report names the others without a drawing. */
const MAX_DRAWN = 40;
/** A stage with more parallel ops and collective members than this is not drawn (the layout would be unreadable and slow). */
const MAX_DRAWN_OPS = 400;

const STATUS = { proved: 'proved', not_equivalent: 'not equivalent', unknown: 'unknown' } as const;

function num(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toPrecision(8);
}

/** Graphviz's SVG without its XML prolog and doctype, ready to inline. */
function inlineSvg(svg: string): string {
  const i = svg.indexOf('<svg');
  return i < 0 ? svg : svg.slice(i);
}

type Layout = (dot: string) => string;

/** The drawing of one stage, or why there is none. */
function drawing(s: StageReport, view: StageView | undefined, layout: Layout): string {
  if (view === undefined) return '<p class="note">not drawn: the stage was not decomposed rank by rank (the plan is past the per-rank stage bound)</p>';
  const size = view.parallelOps.length + view.collectives.reduce((n, c) => n + c.members.length, 0);
  if (size > MAX_DRAWN_OPS) return `<p class="note">not drawn: ${size} parallel ops and collective calls (more than ${MAX_DRAWN_OPS}); planproof explain PLAN ${s.index} --dot writes its graph</p>`;
  const svg = layout(stageDot(view, { failing: s.status === 'not_equivalent', failingRanks: s.failingRanks, ...(s.witness === undefined || s.witness.length === 0 ? {} : { failingTensors: s.witness }) }));
  return `<div class="graph" data-stage="${s.index}">${inlineSvg(svg)}</div>`;
}

function witnessTable(s: StageReport): string {
  const w = s.witness ?? [];
  if (w.length === 0) return '';
  const rows = w.map((m) => `<tr><td>${m.rank}</td><td>${esc(m.tensor)}</td><td>${esc(`${m.logical}[${m.element.join(', ')}]`)}</td><td>${esc(m.kind)}</td><td class="n">${esc(num(m.parallel))}</td><td class="n">${esc(num(m.expected))}</td></tr>`);
  return `<h4>Witness values</h4><table class="witness"><thead><tr><th>rank</th><th>tensor</th><th>logical element</th><th>kind</th><th>parallel holds</th><th>${w.some((m) => m.kind === 'replica') ? 'expected (logical or other replica)' : 'logical value'}</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

function detail(s: StageReport, view: StageView | undefined, layout: Layout, drawn: boolean): string {
  const parts: string[] = [];
  parts.push(`<section class="stage ${s.status}" id="stage-${s.index}">`);
  parts.push(`<h3>Stage ${s.index}: ${esc(s.logical)} <span class="badge ${s.status}">${STATUS[s.status]}</span></h3>`);
  parts.push(`<p>logical op <code>${esc(stageOp(s))}</code>${s.op?.loc === undefined ? '' : ` at <code>${esc(s.op.loc)}</code>`}; ranks ${esc(s.rankCount === undefined ? ranksText(s.ranks) : `${s.rankCount} rank(s)`)}${s.failingRanks.length > 0 ? `; failing ranks ${esc(s.failingRanks.join(', '))}` : ''}</p>`);
  if (s.diagnosis !== undefined) parts.push(`<p class="diagnosis"><b>Looks like:</b> ${esc(s.diagnosis)}</p>`);
  parts.push(witnessTable(s));
  if (s.reason !== undefined) parts.push(`<h4>${s.status === 'unknown' ? 'Why unknown' : 'Normal-form difference'}</h4><pre class="reason">${esc(s.reason)}</pre>`);
  parts.push('<h4>Dataflow</h4>');
  parts.push(drawn ? drawing(s, view, layout) : `<p class="note">not drawn: only the first ${MAX_DRAWN} failing or unknown stages are</p>`);
  parts.push('</section>');
  return parts.join('\n');
}

const CSS = `
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.5em}h3{font-size:1.05em}h4{font-size:.95em;margin:.8em 0 .3em}
.verdict{padding:.7em 1em;border-radius:6px;margin:.8em 0;font-size:1.05em}
.verdict.verified{background:#e8f5e9;border:1px solid #2e7d32}.verdict.not_equivalent{background:#ffebee;border:1px solid #c62828}.verdict.unknown{background:#fff8e1;border:1px solid #f9a825}
.badge{display:inline-block;padding:0 .5em;border-radius:3px;font-size:.85em;font-weight:600}
.badge.proved{background:#c8e6c9}.badge.not_equivalent{background:#ffcdd2;color:#b71c1c}.badge.unknown{background:#ffecb3}
table{border-collapse:collapse;font-size:.9em}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f5f5f5}#stages th{cursor:pointer;user-select:none}#stages th.asc::after{content:" \\25B2"}#stages th.desc::after{content:" \\25BC"}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.not_equivalent td{background:#fff5f5}tr.unknown td{background:#fffdf0}
.controls{margin:.5em 0}.controls label{margin-right:1em}
pre.reason{white-space:pre-wrap;background:#fafafa;border:1px solid #eee;padding:.5em;font-size:.85em}
section.stage{border-top:1px solid #ccc;margin-top:1em;padding-top:.3em}
.graph{overflow:auto;border:1px solid #eee;max-height:900px}
.note{color:#666;font-style:italic}.meta td:first-child{font-weight:600}
`;

/** Sorts the stage table by a clicked column and filters it by status and text: nothing else runs. */
const SCRIPT = `
(function(){
  var table=document.getElementById('stages');var body=table.tBodies[0];
  var rows=Array.prototype.slice.call(body.rows);
  var heads=table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads,function(th,col){
    th.addEventListener('click',function(){
      var asc=!th.classList.contains('asc');
      Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});
      th.classList.add(asc?'asc':'desc');
      var numeric=th.getAttribute('data-type')==='number';
      rows.sort(function(a,b){
        var x=a.cells[col].getAttribute('data-v')||a.cells[col].textContent;
        var y=b.cells[col].getAttribute('data-v')||b.cells[col].textContent;
        var c=numeric?(Number(x)-Number(y)):x.localeCompare(y);
        return asc?c:-c;
      });
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
  var boxes=document.querySelectorAll('input[name=status]');var text=document.getElementById('filter-text');
  function apply(){
    var on={};Array.prototype.forEach.call(boxes,function(b){on[b.value]=b.checked;});
    var q=text.value.toLowerCase();var shown=0;
    rows.forEach(function(r){
      var ok=on[r.getAttribute('data-status')]&&(q===''||r.textContent.toLowerCase().indexOf(q)>=0);
      r.hidden=!ok;if(ok)shown++;
    });
    document.getElementById('shown').textContent=String(shown);
  }
  Array.prototype.forEach.call(boxes,function(b){b.addEventListener('change',apply);});
  text.addEventListener('input',apply);
  apply();
})();
`;

/**
 * The report as one HTML document. `plan` is the plan as loaded (full shapes): stages are drawn
 * from its decomposition, matched to the report's stages by logical tensor.
 */
export async function htmlReport(r: VerifyReport & { readonly reduction?: { readonly ran: boolean } }, plan: LoadedPlan): Promise<string> {
  const open = r.stages.filter((s) => s.status !== 'proved');
  let layout: Layout = () => '';
  let views = new Map<string, StageView>();
  if (open.length > 0) {
    const { Graphviz } = await import('@hpcc-js/wasm-graphviz');
    const gv = await Graphviz.load();
    layout = (dot) => gv.dot(dot);
    if (r.decomposition === undefined) {
      const stages = planStages(plan);
      const want = new Set(open.slice(0, MAX_DRAWN).map((s) => s.logical));
      views = new Map(stages.filter((s) => want.has(plan.logical.tensors.name(s.logical))).map((s) => [plan.logical.tensors.name(s.logical), stageView(plan, stages, s)]));
    }
  }
  const counts = { proved: 0, not_equivalent: 0, unknown: 0 };
  for (const s of r.stages) counts[s.status]++;
  const head = r.verdict === 'verified' ? 'VERIFIED' : r.verdict === 'not_equivalent' ? 'NOT EQUIVALENT' : 'UNKNOWN';
  const rows = r.stages.map((s) => {
    const by = s.status !== 'proved' ? '' : s.decidedBy === 'z3' ? 'Z3' : DECIDED_BY_TEXT[s.decidedBy ?? 'normal'];
    const extra = s.coveredBy === undefined ? '' : ` (same canonical stage as #${s.coveredBy})`;
    const link = s.status === 'proved' ? esc(s.logical) : `<a href="#stage-${s.index}">${esc(s.logical)}</a>`;
    return `<tr class="${s.status}" data-status="${s.status}"><td class="n" data-v="${s.index}">${s.index}</td><td>${link}</td><td>${esc(stageOp(s))}</td><td>${esc(s.rankCount === undefined ? ranksText(s.ranks) : `${s.rankCount} rank(s)`)}</td><td data-v="${s.status}"><span class="badge ${s.status}">${STATUS[s.status]}</span></td><td>${esc(by + extra)}</td><td class="n" data-v="${s.ms}">${s.ms.toFixed(1)}</td></tr>`;
  });
  const details = open.map((s, i) => detail(s, views.get(s.logical), layout, i < MAX_DRAWN));
  const meta: [string, string][] = [
    ['plan', `${r.name === '' ? '(unnamed)' : r.name} (${r.file})`],
    ['stages', `${r.stages.length}: ${counts.proved} proved, ${counts.not_equivalent} not equivalent, ${counts.unknown} unknown`],
    ['numeric', r.numeric.evaluated ? `${r.numeric.claimsChecked} claims evaluated at random inputs (seed ${r.numeric.seed}): ${r.numeric.mismatches === 0 ? 'all agree' : `${r.numeric.mismatches} differ`}` : `not evaluated (${r.numeric.reason ?? ''})`],
    ['time', `${(r.ms / 1000).toFixed(2)} s`],
  ];
  // Witness elements of a reduced proof index the reduced tensors (the text report says so too).
  if (r.reduction?.ran === true) meta.push(['shape reduction', 'proved at reduced shapes (docs/engine.md, "Shape reduction"): witness elements index the reduced tensors; the drawings show the plan as written']);
  if (r.verdict === 'not_equivalent') meta.push(['witness inputs', `the contract inputs drawn uniformly from [-1, 1), each within its domain (integer values as declared, masks 0/1, second moments and square-root arguments >= 0), with seed ${r.numeric.seed} (planproof verify --seed ${r.numeric.seed} reproduces them)`]);
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>planproof: ${esc(head)} ${esc(r.name)}</title>
<style>${CSS}</style>
</head>
<body>
<h1>planproof report: ${esc(r.name === '' ? r.file : r.name)}</h1>
<div class="verdict ${r.verdict}" id="verdict"><b>${head}</b>: ${esc(r.summary)}</div>
<table class="meta"><tbody>${meta.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join('')}</tbody></table>
<h2>Stages</h2>
<div class="controls">
<label><input type="checkbox" name="status" value="proved" checked> proved (${counts.proved})</label>
<label><input type="checkbox" name="status" value="not_equivalent" checked> not equivalent (${counts.not_equivalent})</label>
<label><input type="checkbox" name="status" value="unknown" checked> unknown (${counts.unknown})</label>
<label>filter <input type="search" id="filter-text" placeholder="tensor, op, rank"></label>
<span><span id="shown">${r.stages.length}</span> shown</span>
</div>
<table id="stages">
<thead><tr><th data-type="number">#</th><th>tensor</th><th>logical op</th><th>ranks</th><th>result</th><th>decided by</th><th data-type="number">ms</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody>
</table>
${open.length === 0 ? '' : `<h2>Failing and unknown stages</h2>\n${details.join('\n')}`}
<p class="note">Written by planproof verify --html. Drawings laid out by Graphviz (WebAssembly) when the report was written: boxes are ops, hexagons collectives, ellipses tensors; dashed ellipses are the stage's assumed inputs, bold ones its obligations, red the obligations that fail.</p>
<script>${SCRIPT}</script>
</body>
</html>
`;
}

/** An invalid plan as an HTML page: every issue, nothing drawn (the exit code is 2). */
export function htmlInvalid(file: string, issues: readonly PlanIssue[]): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>planproof: INVALID ${esc(file)}</title>
<style>${CSS}</style>
</head>
<body>
<h1>planproof report: ${esc(file)}</h1>
<div class="verdict unknown" id="verdict"><b>INVALID PLAN</b>: ${issues.length} issue(s); nothing was proved</div>
<ul>${issues.map((i) => `<li><code>${esc(formatIssue(file, i))}</code></li>`).join('')}</ul>
</body>
</html>
`;
}
