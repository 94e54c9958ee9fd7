#!/bin/bash
# Verify the seven presets with two builds, interleaved (before, after, after, before), so a
# shared machine's load falls on both alike. Usage: bench/presets-before-after.sh BEFORE AFTER [OUT]
# BEFORE and AFTER are checkouts with dist/ built; plans are generated once, with AFTER's gen.
# ORDER="before after" runs each build once per preset (a quicker check on a quiet machine).
set -u
B=$1; A=$2; OUT=${3:-/tmp/pp-presets}
mkdir -p "$OUT"
for P in demo L1 L2 L3 D1 D2 D3; do
  [ -f "$OUT/$P.json" ] || node "$A/dist/cli/main.js" gen --preset $P -o "$OUT/$P.json" >/dev/null
done
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for P in demo L1 L2 L3 D1 D2 D3; do
  for W in ${ORDER:-before after after before}; do
    D=$B; [ $W = after ] && D=$A
    /usr/bin/time -f "%e %M" -o "$OUT/time.txt" node "$D/dist/cli/main.js" verify "$OUT/$P.json" --no-cache --json > "$OUT/$P.$W.json" 2>/dev/null; rc=$?
    v=$(node -e "try{const r=JSON.parse(require('fs').readFileSync('$OUT/$P.$W.json','utf8'));console.log(r.verdict, r.stages.length)}catch(e){console.log('?')}")
    echo "$P $W rc=$rc $v $(tail -1 "$OUT/time.txt") load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
echo "end $(date -u +%H:%M:%S)"
