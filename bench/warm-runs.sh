#!/usr/bin/env bash
# Cold and warm `verify` runs with the cache, as a user re-running CI would (default flags, the
# CLI's own heap child): per preset, an empty cache, the same plan again (answered from the
# answer cache), the same plan with --no-answer-cache (the proof cache only), and the plan with
# one layer's attribute changed on both sides (layer 3's attention rms_norm eps, in every
# micro-batch). One markdown row per run: exit code, whether the answer cache answered, wall
# time and peak RSS (GNU time). Issue 12's cache point.
# Usage: bench/warm-runs.sh [PRESET ...]   (default: L1 D3 L3; build first)
# CLI=path/to/cli/main.js selects another build.
set -uo pipefail
CLI=${CLI:-dist/cli/main.js}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(L1 D3 L3)
echo "| preset | run | exit | answered from | wall s | peak RSS GB |"
echo "|---|---|--:|---|--:|--:|"
row() { # preset label plan [flags...]
  local preset=$1 label=$2 plan=$3
  shift 3
  /usr/bin/time -f "%e %M" -o "$TMP/time" node "$CLI" verify "$plan" --cache "$TMP/cache" "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  local from="this run"
  grep -q '^cache       answer kept' "$TMP/out" && from="answer cache"
  read -r wall kb <"$TMP/time"
  echo "| $preset | $label | $code | $from | $wall | $(awk -v k="$kb" 'BEGIN{printf "%.2f", k/1048576}') |"
}
for p in "${presets[@]}"; do
  rm -rf "$TMP/cache"
  node "$CLI" gen --preset "$p" --out "$TMP/$p.json"
  # One layer's attribute changed on both sides: layer 3's first rms_norm eps.
  node -e '
    const fs = require("fs");
    const p = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    let n = 0;
    const all = [p.logical.ops, ...p.parallel.programs.map((g) => g.ops)];
    for (const ops of all) for (const o of ops) if (/(^|\/)l3\/rms_norm$/.test(o.id) && o.attrs && "eps" in o.attrs) { o.attrs.eps = "1/1000"; n++; }
    if (n < 2) { console.error("layer 3 rms_norm not found on both sides"); process.exit(1); }
    fs.writeFileSync(process.argv[2], JSON.stringify(p, null, 1));
  ' "$TMP/$p.json" "$TMP/$p-l3.json" || continue
  row "$p" "cold, empty cache" "$TMP/$p.json"
  row "$p" "same plan again" "$TMP/$p.json"
  row "$p" "same plan, --no-answer-cache" "$TMP/$p.json" --no-answer-cache
  row "$p" "layer 3 eps changed" "$TMP/$p-l3.json"
done
