#!/bin/bash
# Entangle's published graphs (examples/data of github.com/nyu-systems/Entangle: 106 printed FX
# graphs; aws_llama holds HLO only) imported and verified, each file by at least one configuration:
# GPT tp 2-8 x 1-8 layers, vLLM Qwen2 tp 2 and 4, and the reproduced bugs, with relations from the
# shipped tools/corpus/*_relations.py. Ends with a per-config table, a per-file table and
# "N of 106 files imported" (tools/corpus/entangle_corpus_table.py).
# usage: bench/entangle-corpus.sh ENTANGLE_REPO_OR_DATA_DIR OUT_DIR
#   ENTANGLE_REPO_OR_DATA_DIR: a git repository (bare or not) of Entangle, read at HEAD, or a copy
#   of its examples/data.
set -u
SRC=$1; OUT=$(mkdir -p "$2" && cd "$2" && pwd); ROOT=$(cd "$(dirname "$0")/.." && pwd); D=$OUT/data; C=$OUT/cfg
TOOLS=$ROOT/tools/corpus; TIME=(/usr/bin/time -f "%e s wall, %U s user, %M KB")
rm -rf "$D" "$C" "$OUT/configs.tsv" "$OUT/files.tsv"; mkdir -p "$D" "$C"
if git -C "$SRC" rev-parse --git-dir > /dev/null 2>&1; then
  git -C "$SRC" archive HEAD ':(glob)examples/data/**/*.py' | tar -x -C "$OUT" --strip-components=1
else
  (cd "$SRC" && find . -name '*.py' -exec cp --parents {} "$D" \;)
fi

# cfg NAME LOGICAL_FILE RANK_FILE...: record which data files config NAME reads, import it, verify.
cfg() {
  local c=$1 k=0 code verdict=- vtime=-; printf '%s\tlogical\t%s\n' "$c" "$2" >> "$OUT/files.tsv"; shift 2
  for f in "$@"; do printf '%s\trank %d\t%s\n' "$c" $k "$f" >> "$OUT/files.tsv"; k=$((k + 1)); done
  "${TIME[@]}" -o "$OUT/$c.imp.time" node "$ROOT/dist/cli/main.js" import-graphs --dir "$C/$c" -o "$OUT/$c.json" > "$OUT/$c.imp" 2>&1
  code=$?
  if [ $code = 0 ]; then
    "${TIME[@]}" -o "$OUT/$c.time" node "$ROOT/dist/cli/main.js" verify --infer --no-cache --no-answer-cache "$OUT/$c.json" > "$OUT/$c.out" 2>&1
    verdict=$(grep -m1 '^verdict' "$OUT/$c.out" | sed 's/^verdict *//; s/ proved equivalent in exact arithmetic;.*//; s/ (at most.*//; s/the stage is too large: its tensors hold/too large:/' | cut -c1-160); vtime=$(tail -1 "$OUT/$c.time")
  else verdict="import failed: $(grep -m1 -i 'error\|planproof:' "$OUT/$c.imp" | cut -c1-120)"; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$c" $code "$(tail -1 "$OUT/$c.imp.time")" "${verdict:--}" "$vtime" >> "$OUT/configs.tsv"
  echo "$c: import exit $code; $verdict; verify $vtime" >&2
}
ranks() { local k; for ((k = 0; k < $2; k++)); do echo "$1.g0.r$k.py"; done; }  # ranks DIR/PREFIX T

for t in 2 4 6 8; do for l in 1 2 4 8; do
  python3 "$TOOLS/entangle_gpt_relations.py" $t $l "$D/gpt/paral1_layer$l" "$D/gpt/paral${t}_layer$l" "$C/gpt_tp${t}_l$l" &&
    cfg gpt_tp${t}_l$l gpt/paral1_layer$l/fw.g0.r0.py $(ranks gpt/paral${t}_layer$l/fw $t)
done; done
for t in 2 4; do
  python3 "$TOOLS/entangle_qwen2_relations.py" $t "$D/qwen2/paral1_layer1" "$D/qwen2/paral${t}_layer1" "$C/qwen2_tp$t" &&
    cfg qwen2_tp$t qwen2/paral1_layer1/fw.g0.r0.py $(ranks qwen2/paral${t}_layer1/fw $t)
done
B=bug_missing_layernorm_allreduce
python3 "$TOOLS/entangle_bug_relations.py" layernorm "$D/$B/tp1" "$D/$B/tp2.bug" "$C/layernorm" &&
  cfg layernorm $B/tp1/both.g0.r0.py $(ranks $B/tp2.bug/both 2)
python3 "$TOOLS/entangle_bug_relations.py" layernorm-bw "$D/$B/tp1" "$D/$B/tp2.bug" "$C/layernorm-bw" 2> "$OUT/layernorm-bw.rel" &&
  cfg layernorm-bw $B/tp1/bw.g0.r0.py $(ranks $B/tp2.bug/bw 2)
B=bug_missing_allreduce_under_wrong_config
python3 "$TOOLS/entangle_bug_relations.py" wrong_config "$D/$B/tp1" "$D/$B/tp2.bug" "$C/wrong_config" &&
  cfg wrong_config $B/tp1/both.g0.r0.py $(ranks $B/tp2.bug/both 2)
python3 "$TOOLS/entangle_bug_relations.py" loss_scale "$D/$B/tp1" - "$C/loss_scale" &&
  cfg loss_scale $B/tp1/both.g1.r0.py $B/tp1/both.g1.r0.py
B=bug_missing_switchmlp_allreduce
python3 "$TOOLS/entangle_bug_relations.py" switchmlp "$D/$B/tp1" "$D/$B/tp2.bug" "$C/switchmlp" &&
  cfg switchmlp $B/tp1/both.g0.r0.py $(ranks $B/tp2.bug/both 2)
B=bug_grad_accumulation
python3 "$TOOLS/entangle_bug_relations.py" grad_accumulation "$D/$B/1step" "$D/$B/2step.bug" "$C/grad_accumulation" &&
  cfg grad_accumulation $B/1step/fw.g0.r0.py $B/2step.bug/fw.g0.r0.py
python3 "$TOOLS/entangle_corpus_table.py" "$OUT"
