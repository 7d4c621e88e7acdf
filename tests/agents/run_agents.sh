#!/usr/bin/env bash
# The coding agents stage of scripts/test (issue 46): Claude Code, Codex CLI, Qwen Code and
# OpenCode, at the exact npm versions pinned below, against `qwen35 serve` on the bundled model.
#   tests/agents/run_agents.sh [BINARY] [agents_test.py options...]
# QWEN35_AGENTS_TIMEOUT=S: seconds one agent run may take (default 300; the whole test 5 of them).
# QWEN35_AGENTS_INSTALL_ONLY=1: install the pinned agents and stop (scripts/test does this while
# the build compiles).
# Installs the agents under build/npm in one npm run, skipped when the pinned versions are there
# (1.3 GB: the agents ship native binaries). Where the kernel allows an unprivileged network
# namespace, the server and the agents run in one with only loopback up, so no agent can reach
# anything but the local server; elsewhere the agents' own switches (tests/agents/agents.py)
# are all that keeps them off the network.
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=${1:-build/qwen35}
shift || true
pins=('@anthropic-ai/claude-code@2.1.332' '@openai/codex@0.171.0' '@qwen-code/qwen-code@0.24.4'
      'opencode-ai@1.18.33')
installed() {  # NAME@VERSION: is that version under build/npm?
  local pkg=${1%@*} want=${1##*@}
  [ "$(node -p "try{require('./build/npm/node_modules/$pkg/package.json').version}catch(e){''}")" = "$want" ]
}
missing=0
for p in "${pins[@]}"; do installed "$p" || missing=1; done
if [ "$missing" = 1 ]; then
  # The agents' postinstall scripts put their native binaries in place: they must run.
  timeout 600 npm install --no-audit --no-fund --prefix build/npm "${pins[@]}" >/dev/null
fi
if [ "${QWEN35_AGENTS_INSTALL_ONLY:-0}" = 1 ]; then exit 0; fi
run=(timeout $((5 * ${QWEN35_AGENTS_TIMEOUT:-300} + 60)) python3 tests/agents/agents_test.py "$binary" "$PWD/build/npm/node_modules" "$@")
if unshare -rn true 2>/dev/null && command -v ip >/dev/null; then
  echo "agents: in a network namespace with loopback only"
  unshare -rn sh -c 'ip link set lo up && exec "$@"' sh "${run[@]}"
else
  echo "agents: no network namespace here; the agents' own switches keep them offline"
  "${run[@]}"
fi
