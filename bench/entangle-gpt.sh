#!/bin/bash
# Entangle's published Megatron GPT exports (examples/data/gpt of github.com/nyu-systems/Entangle)
# imported and verified: tp 2, 4, 6, 8 x 1, 2, 4, 8 layers against the tp-1 graphs.
# usage: bench/entangle-gpt.sh ENTANGLE_GPT_DIR OUT_DIR   (ENTANGLE_GPT_DIR holds paral<T>_layer<L>/fw.g0.r<k>.py)
set -u
SRC=$1; OUT=$2; ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
for t in 2 4 6 8; do for l in 1 2 4 8; do
  c=tp${t}_l${l}
  python3 "$ROOT/tools/corpus/entangle_gpt_relations.py" $t $l "$SRC/paral1_layer$l" "$SRC/paral${t}_layer$l" "$OUT/$c" || continue
  /usr/bin/time -f "%e s %U user %M KB" -o "$OUT/$c.imp.time" node "$ROOT/dist/cli/main.js" import-graphs --dir "$OUT/$c" -o "$OUT/$c.json" > "$OUT/$c.imp" 2>&1 || { echo "$c: import failed: $(tail -2 "$OUT/$c.imp")"; continue; }
  /usr/bin/time -f "%e s %U user %M KB" -o "$OUT/$c.time" node "$ROOT/dist/cli/main.js" verify --no-cache --no-answer-cache "$OUT/$c.json" > "$OUT/$c.out" 2>&1
  echo "$c | import $(cat "$OUT/$c.imp.time") | $(grep ^verdict "$OUT/$c.out" | cut -c13-60) | verify $(cat "$OUT/$c.time")"
done; done
