#!/usr/bin/env bash
# Injects catalog bugs into the large presets and verifies each as a user would (default
# flags, the CLI's own heap child); one markdown row per case: verdict, first stage not proved
# (or, for a plan refused at load, the op and why; bench/bug-row.mjs marks a detection other
# than the catalog expects as unexpected), wall and user CPU (GNU time counts the heap
# child), peak RSS and the load before and after (the machine is shared, so wall time alone says
# little). Issue 12's acceptance point on bugs at scale.
# Usage: bench/bugs-at-scale.sh [PRESET:BUG ...]   (default: the list below; build first)
# CLI=path/to/cli/main.js selects another build.
set -uo pipefail
CLI=${CLI:-dist/cli/main.js}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(
    L1:dp-grad-allreduce-dropped L1:dp-grad-allreduce-avg L1:rmsnorm-eps-one-rank L1:norm-eps-several-ranks
    L1:rope-backward-cos-sin-swapped L1:adam-eps-one-rank L1:accumulation-reset L1:loss-per-rank-normalization
    D3:ep-expert-grad-scaled D3:tp-forward-allreduce-dropped D3:tp-backward-allreduce-dropped D3:stale-activation-in-backward
    D3:moe-router-grad-not-synced D3:dp-grad-allreduce-avg D3:dp-grad-allreduce-dropped D3:accumulation-reset D3:adam-eps-one-rank
    L3:tp-forward-allreduce-dropped L3:tp-backward-allreduce-dropped L3:rope-backward-cos-sin-swapped L3:stale-activation-in-backward
    L3:norm-grad-scaled-by-tp L3:dp-grad-allreduce-avg L3:dp-grad-allreduce-dropped L3:accumulation-reset L3:dp-wrong-group
    L3:rmsnorm-eps-one-rank L3:adam-eps-one-rank
  )
fi
load() { cut -d' ' -f1 /proc/loadavg; }
echo "| preset | bug | verdict | first stage not proved | wall s | user s | peak RSS GB | load | start (UTC) |"
echo "|---|---|---|---|--:|--:|--:|---|---|"
for c in "${cases[@]}"; do
  preset=${c%%:*}
  bug=${c#*:}
  start=$(date -u +%H:%M)
  l0=$(load)
  if ! node "$CLI" gen --preset "$preset" --inject "$bug" --out "$TMP/bug.json" 2>"$TMP/gen.err"; then
    echo "| $preset | $bug | cannot inject: $(head -c 160 "$TMP/gen.err" | tr '\n|' '  ') | | | | | $l0 | $start |"
    continue
  fi
  /usr/bin/time -f "%e %U %M" -o "$TMP/time" node "$CLI" verify --json "$TMP/bug.json" >"$TMP/out.json" 2>"$TMP/err" || true
  read -r wall user rss < <(tail -n 1 "$TMP/time")
  l1=$(load)
  # Verdict and place, checked against the catalog's expected detection (bench/bug-row.mjs).
  row=$(node "$(dirname "$0")/bug-row.mjs" "$CLI" "$bug" "$TMP/out.json" "$TMP/err")
  echo "| $preset | $bug | ${row%%|*} | ${row#*|} | $wall | $user | $(awk -v k="$rss" 'BEGIN{printf "%.2f", k/1048576}') | $l0 → $l1 | $start |"
  rm -f "$TMP/bug.json"
done
