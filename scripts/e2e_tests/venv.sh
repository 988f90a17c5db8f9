# Sourced by scripts/e2e and scripts/bench: make sure .venv/e2e exists and holds
# scripts/e2e_tests/requirements.txt, then set $E2E_PY to its python.
# Expects $REPO to be the repository root.

E2E_VENV="$REPO/.venv/e2e"
E2E_REQS="$REPO/scripts/e2e_tests/requirements.txt"
E2E_PY="$E2E_VENV/bin/python"

if [ ! -x "$E2E_PY" ]; then
    echo "e2e: creating virtualenv $E2E_VENV" >&2
    "${PYTHON:-python3}" -m venv "$E2E_VENV" || return 1
fi

# Reinstall only when requirements.txt changed since the last successful install.
_e2e_stamp="$E2E_VENV/.requirements.sha256"
_e2e_want="$(sha256sum "$E2E_REQS" | cut -d' ' -f1)"
if [ "$(cat "$_e2e_stamp" 2>/dev/null)" != "$_e2e_want" ]; then
    echo "e2e: installing $E2E_REQS" >&2
    "$E2E_PY" -m pip install --disable-pip-version-check -q -r "$E2E_REQS" || return 1
    echo "$_e2e_want" > "$_e2e_stamp"
fi
unset _e2e_stamp _e2e_want
