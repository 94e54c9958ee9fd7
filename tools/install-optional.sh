#!/usr/bin/env bash
# The Debian packages some tests use, and the one place they are listed (README "Set up",
# .ci/run): xmllint (libxml2-utils) validates JUnit XML against its schema, chromium renders the
# HTML report, tmux gives the progress bar a terminal, python3-torch (under Debian's
# /usr/bin/python3) runs the live capture tests, python3-junitparser reads JUnit XML back as a
# CI report tool would. Without them `npm test` skips those tests and says so; under CI=true it
# fails. Installs only what is missing; needs root or sudo.
set -uo pipefail
missing=()
command -v xmllint >/dev/null || missing+=(libxml2-utils)
[ -x "${PLANPROOF_CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
command -v tmux >/dev/null || missing+=(tmux)
[ -x /usr/bin/python3 ] || missing+=(python3)
/usr/bin/python3 -c 'import torch, torch.distributed' >/dev/null 2>&1 || missing+=(python3-torch)
/usr/bin/python3 -c 'import junitparser' >/dev/null 2>&1 || missing+=(python3-junitparser)
if [ ${#missing[@]} -eq 0 ]; then
  echo "optional packages: all present"
  exit 0
fi
echo "optional packages: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
