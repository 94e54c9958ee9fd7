#!/bin/bash
# What confirming a refutation of a specialized plan costs (stages/witness/guards.ts): each
# committed capture imported, then verified as imported ("guarded") and with its reads' records
# deleted ("plain": a stage witness anywhere refutes, the rule before guards).
# usage: bench/guards-cost.sh OUT_DIR [CAPTURE ...]   (run from the repository, after npx tsc)
set -u
OUT=$1; shift; mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CAPS=${*:-megatron_clip-bug adamw_mlp-bug zero_adamw_ddp-bug seq2seq_attn_ddp-bug hetero_regression_ddp-bug aux_flag_ddp-bug aux_flag_ddp moe_ep_alltoall-bug-router mobilenet_ddp mobilenet_ddp-bug}
for n in $CAPS; do
  node "$ROOT/dist/cli/main.js" import-graphs --dir "$ROOT/test/fixtures/capture/$n" -o "$OUT/$n.json" 2>/dev/null || { echo "$n: import failed"; continue; }
  node -e "const f=require('fs');const p=JSON.parse(f.readFileSync('$OUT/$n.json'));for(const k of ['x-planproof-guards','x-planproof-specialized','x-planproof-run-inputs'])delete p[k];f.writeFileSync('$OUT/$n.plain.json',JSON.stringify(p))"
  for v in plain guarded; do
    f=$OUT/$n.json; [ $v = plain ] && f=$OUT/$n.plain.json
    l=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%e s %U user" -o "$OUT/$n.$v.time" node "$ROOT/dist/cli/main.js" verify --infer --jobs 0 --no-answer-cache --no-cache "$f" > "$OUT/$n.$v.out" 2>&1
    echo "$n | $v | exit $? | $(tail -1 "$OUT/$n.$v.time") | load $l"
  done
done
