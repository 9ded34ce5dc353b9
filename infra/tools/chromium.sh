# shellcheck shell=bash
# Chromium: Debian's `chromium` package, the headless browser the ops console's browser test
# drives through playwright (`executable_path`; `playwright install` cannot download browsers
# here). A tool, not a service: installed, never started. Sourced by infra/lib.sh.

CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"

chromium_installed() { [[ -x "$CHROMIUM_BIN" ]]; }

chromium_install() {
    if chromium_installed; then
        return 0
    fi
    log "chromium: installing Debian package chromium (apt-get; ~100 MB, about a minute)"
    apt_install chromium chromium fonts-dejavu-core  # a font, so the screenshots show text
    chromium_installed || die "chromium: apt-get install finished but $CHROMIUM_BIN is missing"
    log "chromium: installed $("$CHROMIUM_BIN" --version 2>/dev/null || echo '(version unknown)')"
}
