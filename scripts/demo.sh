#!/usr/bin/env bash
# Shows lbd doing its main job on the built-in demo (e2e/demo.toml).
#
# lbd needs a kernel with IPVS. On a host that has it (as root) the demo runs
# here; elsewhere e2e/run.sh boots a Debian kernel under QEMU and runs the
# demo inside, in network namespaces: a client, a router, the director where
# lbd runs, and three real servers that answer with their name. It installs
# what it needs itself (apt-get, Go modules).
set -euo pipefail
cd "$(dirname "$0")/.."
exec env LBD_E2E_DEMO=1 e2e/run.sh -run '^TestDemo$' "$@"
