#!/usr/bin/env bash
# Regenerates the committed capture fixtures (test/fixtures/capture/) with Debian's
# python3-torch: each example, correct and with --bug, captured on 2 gloo processes, with
# the logical run's input and output values (values.json: the numeric check of the mapping). The
# fixtures let npm test import and verify real captures without Python (test/capture.test.ts).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=test/fixtures/capture
py=${PYTHON:-/usr/bin/python3}
for spec in "tp_mlp tp" "ddp_mlp dp" "ops_mix dp"; do
  set -- $spec
  for bug in "" "--bug"; do
    name=$1${bug:+-bug}
    rm -rf "$out/$name"
    "$py" tools/capture/planproof_capture.py --nproc 2 --axis "$2" --values --out "$out/$name" "examples/torch/$1.py" $bug
    rm -f "$out/$name"/meta.*.json "$out/$name"/capture-stats.json
  done
done
