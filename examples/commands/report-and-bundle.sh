#!/usr/bin/env bash
# A report to send and a bundle to keep: one self-contained HTML file comparing GB300 NVL72 with
# Vera Rubin NVL72 on AgentX, and beside it the tables (CSV, JSON), charts, specs and versions of
# the same run; then the frontier's best points of each rack as CSV.
set -euo pipefail

rubinperf report -o racks.html --save-dir racks
cat racks/README.txt
rubinperf pareto --csv --frontier-only | head -5
