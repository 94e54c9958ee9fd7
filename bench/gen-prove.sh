#!/usr/bin/env bash
# Proves generated plans with the CLI as a user runs it (default worker pool, 2 jobs) and
# prints one markdown row per case: verdict, stages, wall time and peak RSS (GNU time).
# Usage: bench/gen-prove.sh [path/to/cli/main.js]   (default: dist/cli/main.js; build first)
set -euo pipefail
CLI=${1:-dist/cli/main.js}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cases=(
  "llama-seq8|--preset llama-tiny --dp 1 --tp 1 --micro 1 --seq 8 --batch 1"
  "llama-cp4-ring|--preset llama-tiny --dp 1 --tp 1 --micro 1 --cp 4 --seq 8 --batch 1"
  "llama-cp2-ring|--preset llama-tiny --dp 1 --tp 1 --micro 1 --cp 2 --seq 4 --batch 1"
  "gpt2-dp2-tp2-sp-mb2|--preset gpt2-tiny --sp"
  "moe-dp2-tp2-ep|--preset moe-tiny --dp 2 --tp 2 --ep"
  "moe-tp2-sp|--preset moe-tiny --dp 1 --tp 2 --sp --seq 2 --batch 1"
  "moe-cp2|--preset moe-tiny --dp 1 --cp 2 --seq 4 --batch 1"
  "moe-cp2-token|--preset moe-tiny --dp 1 --cp 2 --seq 4 --batch 1 --moe-layout token"
  "moe-dp2-tp2-sp-ep-token|--preset moe-tiny --dp 2 --tp 2 --sp --ep --seq 2 --batch 2 --moe-layout token"
)
echo "| case | gen options | verdict | stages | unknown | wall s | peak RSS MB |"
echo "|---|---|---|--:|--:|--:|--:|"
for c in "${cases[@]}"; do
  name=${c%%|*}
  opts=${c#*|}
  # shellcheck disable=SC2086
  if ! node "$CLI" gen $opts --out "$TMP/$name.json" 2>"$TMP/gen.err"; then
    echo "| $name | \`$opts\` | cannot generate: $(head -c 120 "$TMP/gen.err") | | | | |"
    continue
  fi
  /usr/bin/time -f "%e %M" -o "$TMP/time" node "$CLI" verify --json "$TMP/$name.json" >"$TMP/out.json" 2>/dev/null || true
  # GNU time prefixes "Command exited with non-zero status N" when verify is not "verified".
  read -r wall rss < <(tail -n 1 "$TMP/time")
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const unknown = r.stages.filter((s) => s.status === "unknown").length;
    process.stdout.write(`${r.verdict}|${r.stages.length}|${unknown}\n`);
  ' "$TMP/out.json" >"$TMP/row"
  IFS='|' read -r verdict stages unknown <"$TMP/row"
  echo "| $name | \`$opts\` | $verdict | $stages | $unknown | $wall | $((rss / 1024)) |"
done
