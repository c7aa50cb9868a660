#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the memory inspector's browser tests
# (tests/web/test_inspector_browser.py), from Debian's packages.
#
#   bash .ci/chromium.sh    installs chromium and chromium-driver if missing; exits 0
#                           when both are there, 1 when they could not be installed
#                           (the browser tests then skip, saying why; they fail
#                           instead when SPADE_MEMORY_REQUIRE_BROWSER=1, as .ci/run
#                           sets on CI)
#
# Nothing is downloaded but the Debian packages: the tests drive /usr/bin/chromium
# through /usr/bin/chromedriver, never a browser fetched by a driver manager.
set -uo pipefail

log() { echo "chromium.sh: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo -n "$@"
  else
    log "need root (or sudo) to run: $*"
    return 1
  fi
}

have() {
  { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } &&
    command -v chromedriver >/dev/null 2>&1
}

if have; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "no apt-get here: Chromium cannot be installed"
  exit 1
fi
log "installing chromium and chromium-driver from Debian"
export DEBIAN_FRONTEND=noninteractive
if { as_root apt-get update -qq && as_root apt-get install -y -qq chromium chromium-driver; } >&2; then
  have && exit 0
fi
log "could not install chromium and chromium-driver"
exit 1
