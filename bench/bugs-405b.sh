#!/usr/bin/env bash
# Injects each catalog bug that applies to the 405B-SP plan (issue 37) and verifies it, one case
# at a time: gen (about a minute, 161 MB), then verify with the limits a plan this size needs.
# One markdown row per case: verdict (checked against the catalog's expected detection by
# bench/bug-row.mjs: "refused at load (expected: shape)", or marked unexpected), first stage not
# proved, wall and user CPU, peak RSS and the load before and after (the machine is shared, so
# wall time alone says little).
# Usage: bench/bugs-405b.sh [BUG ...]   (default: every bug gen does not refuse for this plan)
# CLI=path/to/cli/main.js selects another build; KEEP=dir keeps each report JSON there.
set -uo pipefail
CLI=${CLI:-dist/cli/main.js}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
GEN=(--model llama --layers 126 --hidden 16384 --heads 128 --kv-heads 8 --ffn 53248 --vocab 128256
  --seq 8192 --batch 2048 --dp 128 --tp 8 --pp 16 --micro 16 --sp)
bugs=("$@")
if [ ${#bugs[@]} -eq 0 ]; then
  # gen refuses the others at once ("not applicable to this configuration").
  bugs=(
    fanout-duplicate-grad loss-per-rank-normalization clip-local-norm dp-wrong-group square-exponent-one-rank
    grad-after-reducer sp-norm-grad-not-reduced sp-gather-before-norm dp-grad-allreduce-dropped dp-grad-allreduce-avg
    tp-forward-allreduce-dropped tp-backward-allreduce-dropped clip-one-rank accumulation-reset
    rope-backward-cos-sin-swapped rmsnorm-eps-one-rank pp-microbatch-order-swapped pp-stage-boundary-wrong-tensor
    norm-grad-scaled-by-tp stale-activation-in-backward allgather-to-allreduce adam-eps-one-rank
    allreduce-dropped-dataflow allreduce-to-allgather
  )
fi
load() { cut -d' ' -f1 /proc/loadavg; }
echo "| bug | verdict | first stage not proved | gen wall s | verify wall s | verify user s | peak RSS GB | load | start (UTC) |"
echo "|---|---|---|--:|--:|--:|--:|---|---|"
for bug in "${bugs[@]}"; do
  start=$(date -u +%H:%M)
  l0=$(load)
  if ! /usr/bin/time -f "%e" -o "$TMP/gtime" node "$CLI" gen "${GEN[@]}" --inject "$bug" -o "$TMP/bug.json" 2>"$TMP/gen.err"; then
    echo "| $bug | cannot inject: $(grep -v '^Run\|^Command' "$TMP/gen.err" | head -c 160 | tr '\n|' '  ') | | | | | | $l0 | $start |"
    continue
  fi
  gwall=$(tail -n 1 "$TMP/gtime")
  /usr/bin/time -f "%e %U %M" -o "$TMP/time" node "$CLI" verify --max-file-mb 300 --max-ops 1000000 \
    --max-claims 1000000 --no-cache --no-answer-cache --json "$TMP/bug.json" >"$TMP/out.json" 2>"$TMP/err" || true
  read -r wall user rss < <(tail -n 1 "$TMP/time")
  l1=$(load)
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$TMP/out.json" "$KEEP/$bug.json"; cp "$TMP/err" "$KEEP/$bug.err"; fi
  # Verdict and place, checked against the catalog's expected detection (bench/bug-row.mjs).
  row=$(node "$(dirname "$0")/bug-row.mjs" "$CLI" "$bug" "$TMP/out.json" "$TMP/err")
  echo "| $bug | ${row%%|*} | ${row#*|} | $gwall | $wall | $user | $(awk -v k="$rss" 'BEGIN{printf "%.2f", k/1048576}') | $l0 → $l1 | $start |"
  rm -f "$TMP/bug.json"
done
