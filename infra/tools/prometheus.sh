# shellcheck shell=bash
# Prometheus: Debian's `prometheus` package, for its `promtool` alone: the alert rules'
# unit tests (deploy/prometheus/alerts_test.yaml, run by tests/unit/test_alert_rules.py).
# A tool, not a service: installed, never started (the package would start a Prometheus
# server on :9090; a policy-rc.d refuses that for the install, and one already running is
# stopped). Without recommends: no node exporter on :9100. Sourced by infra/lib.sh.

PROMTOOL_BIN="${PROMTOOL_BIN:-/usr/bin/promtool}"

prometheus_installed() { [[ -x "$PROMTOOL_BIN" ]]; }

prometheus_install() {
    if prometheus_installed; then
        return 0
    fi
    log "prometheus: installing Debian package prometheus for promtool (apt-get; ~100 MB)"
    local sudo=() policy=/usr/sbin/policy-rc.d placed=0
    [[ "$(id -u)" == 0 ]] || sudo=(sudo)
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\n# infra/tools/prometheus.sh: no service starts during its install\nexit 101\n' |
            "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod +x "$policy" && placed=1
    fi
    local rc=0
    (apt_install prometheus prometheus) || rc=$?
    if ((placed)); then "${sudo[@]}" rm -f "$policy"; fi
    ((rc == 0)) || die "prometheus: apt-get install failed"
    # (A systemd host may have started it all the same: stopped and kept from booting.)
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
        "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
    prometheus_installed || die "prometheus: apt-get install finished but $PROMTOOL_BIN is missing"
    log "prometheus: installed $("$PROMTOOL_BIN" --version 2>&1 | head -1)"
}
