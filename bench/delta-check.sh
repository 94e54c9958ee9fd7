#!/usr/bin/env bash
# Incremental answers (cli/delta.ts) checked against full runs: N random edits of value-only
# attributes (a norm's eps, an optimizer step's hyperparameters) of a generated plan, each on
# both sides, the logical side only or the program side only, written in place. Each edit is
# verified by the executable with the cache; when that is answered incrementally, it is verified
# again with --no-cache (a full run). An incremental VERIFIED that the full run does not
# confirm is a disagreement; the script exits 1 if there is any.
# Usage: bench/delta-check.sh [PRESET] [N] [SEED]   (default: L1 30 1; build first)
set -uo pipefail
CLI=${CLI:-dist/cli/main.js}
P=${1:-L1}
N=${2:-30}
SEED=${3:-1}
STOP=${STOP:-20}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
node "$CLI" gen --preset "$P" --out "$TMP/base.json" || exit 2
cp "$TMP/base.json" "$TMP/w.json"
node "$CLI" verify "$TMP/w.json" --cache "$TMP/cache" >/dev/null || { echo "the base plan does not verify"; exit 2; }
incremental=0 confirmed=0 full=0 disagree=0 bothFull=0
for ((i = 0; i < N; i++)); do
  desc=$(node -e '
    const fs = require("fs");
    const [base, out, seed] = process.argv.slice(1);
    let s = Number(seed) >>> 0;
    const rnd = (n) => { s = (Math.imul(s ^ (s >>> 15), 2246822519) + 1013904223) >>> 0; return s % n; };
    const p = JSON.parse(fs.readFileSync(base, "utf8"));
    const keys = { rms_norm: ["eps"], rms_norm_backward: ["eps"], layer_norm: ["eps"], layer_norm_backward: ["eps"], adam_update: ["lr", "beta1", "eps", "weight_decay"], sgd_update: ["lr"] };
    const valued = p.logical.ops.filter((o) => keys[o.op] && o.attrs);
    const values = ["1/1000", 3, "2/9", 0, "1/100000", "9/10"];
    const edits = [];
    for (let k = 0, n = 1 + rnd(3); k < n; k++) {
      const o = valued[rnd(valued.length)];
      const ks = keys[o.op].filter((x) => x in o.attrs);
      const key = ks[rnd(ks.length)];
      const v = values[rnd(values.length)];
      const side = ["both", "both", "logical", "parallel"][rnd(4)];
      const lists = [...(side === "parallel" ? [] : [p.logical.ops]), ...(side === "logical" ? [] : p.parallel.programs.map((g) => g.ops))];
      for (const ops of lists) for (const x of ops) if (x.id === o.id && x.attrs && key in x.attrs) x.attrs[key] = v;
      edits.push(`${o.id}.${key}=${v}@${side}`);
    }
    fs.writeFileSync(out, JSON.stringify(p, null, 1));
    console.log(edits.join(" "));
  ' "$TMP/base.json" "$TMP/w.json" "$((SEED * 100003 + i))")
  # An edit the incremental check refuses is verified in full, which on a one-sided edit of a
  # large plan can take minutes: only whether the check answered matters here, so that run is
  # stopped after $STOP s.
  timeout "$STOP" node "$CLI" verify "$TMP/w.json" --cache "$TMP/cache" >"$TMP/out" 2>&1
  c=$?
  if grep -q '^incremental VERIFIED' "$TMP/out"; then
    node "$CLI" verify "$TMP/w.json" --no-cache >/dev/null 2>&1
    f=$?
    incremental=$((incremental + 1))
    if [ "$c" = 0 ] && [ "$f" = 0 ]; then confirmed=$((confirmed + 1)); else disagree=$((disagree + 1)); echo "DISAGREE: $desc (incremental $c, full $f)"; fi
    echo "edit $i: $desc -> incremental VERIFIED (exit $c); full run exit $f"
  else
    full=$((full + 1))
    [[ "$desc" != *@logical* && "$desc" != *@parallel* ]] && bothFull=$((bothFull + 1))
    echo "edit $i: $desc -> verified in full (exit $c$([ "$c" = 124 ] && echo ', stopped'))"
  fi
done
echo "$P, $N edits (seed $SEED): $incremental answered incrementally ($confirmed confirmed by the full run, $disagree disagreements); $full not answered incrementally ($bothFull of them edited on both sides only)"
[ "$disagree" = 0 ]
