#!/usr/bin/env bash
# Injects catalog bugs into the large presets and verifies each as a user would (default
# flags, the CLI's own heap child); one markdown row per case: verdict, first stage not proved,
# wall time and peak RSS (GNU time). Issue 12's acceptance point on bugs at scale.
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
echo "| preset | bug | verdict | first stage not proved | wall s | peak RSS GB |"
echo "|---|---|---|---|--:|--:|"
for c in "${cases[@]}"; do
  preset=${c%%:*}
  bug=${c#*:}
  if ! node "$CLI" gen --preset "$preset" --inject "$bug" --out "$TMP/bug.json" 2>"$TMP/gen.err"; then
    echo "| $preset | $bug | cannot inject: $(head -c 160 "$TMP/gen.err" | tr '\n|' '  ') | | | |"
    continue
  fi
  /usr/bin/time -f "%e %M" -o "$TMP/time" node "$CLI" verify --json "$TMP/bug.json" >"$TMP/out.json" 2>"$TMP/err" || true
  read -r wall rss < <(tail -n 1 "$TMP/time")
  row=$(node -e '
    try {
      const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      const ne = r.stages.find((s) => s.status === "not_equivalent");
      const open = r.stages.find((s) => s.status !== "proved");
      const s = ne ?? open;
      const where = s === undefined ? "" : `${s.index} \`${s.logical}\``;
      process.stdout.write(`${r.verdict === "not_equivalent" ? "**NE**" : r.verdict}|${where}`);
    } catch (e) { process.stdout.write(`no report|${require("fs").readFileSync(process.argv[2], "utf8").slice(0, 160).replace(/[\n|]/g, " ")}`); }
  ' "$TMP/out.json" "$TMP/err")
  echo "| $preset | $bug | ${row%%|*} | ${row#*|} | $wall | $(awk -v k="$rss" 'BEGIN{printf "%.2f", k/1048576}') |"
  rm -f "$TMP/bug.json"
done
