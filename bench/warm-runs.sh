#!/usr/bin/env bash
# Cold and warm `verify` runs with the cache, as a user re-running CI after editing the plan
# file would (default flags, the CLI's own heap child). Per preset, on one working copy of the
# generated plan: an empty cache; the same plan again (answered from the answer cache); the same
# plan with --no-answer-cache (the proof cache only); then the file edited in place:
#  - layer 3's first rms_norm eps changed on both sides (an incremental answer, cli/delta.ts);
#  - also layer 3's q projection's AdamW lr changed on both sides (incremental again);
#  - then that eps changed on the parallel side only (a bug: verified in full, NOT EQUIVALENT).
# One markdown row per run: exit code, what answered, wall time and peak RSS (GNU time).
# Issue 12's cache point.
# Usage: bench/warm-runs.sh [PRESET ...]   (default: L1 D3 L3; build first)
# CLI=path/to/cli/main.js selects another build.
set -uo pipefail
CLI=${CLI:-dist/cli/main.js}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(L1 D3 L3)
echo "| preset | run | exit | answered by | wall s | peak RSS GB |"
echo "|---|---|--:|---|--:|--:|"
row() { # preset label plan [flags...]
  local preset=$1 label=$2 plan=$3
  shift 3
  /usr/bin/time -f "%e %M" -o "$TMP/time" node "$CLI" verify "$plan" --cache "$TMP/cache" "$@" >"$TMP/out" 2>"$TMP/err"
  local code=$?
  local from="a full run"
  grep -q '^cache       answer kept' "$TMP/out" && from="answer cache"
  grep -q '^incremental VERIFIED' "$TMP/out" && from="incremental check"
  # GNU time writes "Command exited with non-zero status N" first when the exit code is not 0.
  read -r wall kb < <(tail -n 1 "$TMP/time")
  echo "| $preset | $label | $code | $from | $wall | $(awk -v k="$kb" 'BEGIN{printf "%.2f", k/1048576}') |"
}
# edit FILE SIDE KEY VALUE OPID-REGEX: sets attrs[KEY] on the matching ops, in place.
edit() {
  node -e '
    const fs = require("fs");
    const [file, side, key, value, re] = process.argv.slice(1);
    const p = JSON.parse(fs.readFileSync(file, "utf8"));
    const rx = new RegExp(re);
    let n = 0;
    const lists = [...(side === "parallel" ? [] : [p.logical.ops]), ...(side === "logical" ? [] : p.parallel.programs.map((g) => g.ops))];
    for (const ops of lists) for (const o of ops) if (rx.test(o.id) && o.attrs && key in o.attrs) { o.attrs[key] = value; n++; }
    if (n < (side === "both" ? 2 : 1)) { console.error(`no ${key} on ${re}`); process.exit(1); }
    fs.writeFileSync(file, JSON.stringify(p, null, 1));
  ' "$@"
}
for p in "${presets[@]}"; do
  rm -rf "$TMP/cache"
  node "$CLI" gen --preset "$p" --out "$TMP/$p.json"
  row "$p" "cold, empty cache" "$TMP/$p.json"
  row "$p" "same plan again" "$TMP/$p.json"
  row "$p" "same plan, --no-answer-cache" "$TMP/$p.json" --no-answer-cache
  edit "$TMP/$p.json" both eps 1/1000 '(^|/)l3/rms_norm$' || continue
  row "$p" "edited: layer 3 eps, both sides" "$TMP/$p.json"
  edit "$TMP/$p.json" both lr 1/7 '^l3\.attn\.q\.new$' || continue
  row "$p" "edited: also layer 3 q lr, both sides" "$TMP/$p.json"
  edit "$TMP/$p.json" parallel eps 1/999 '(^|/)l3/rms_norm$' || continue
  row "$p" "edited: that eps on the parallel side only" "$TMP/$p.json"
done
