#!/usr/bin/env bash
# Checks (or writes) tools/digests.lock: the sha256 of every component `make tools` builds.
# The same source and toolchain must give the same bytes; a mismatch means the build is
# not reproducible or the source changed without `make tools-lock`.
set -euo pipefail
mode=${1:?usage: digests.sh check|write OUT_DIR}
out=${2:?usage: digests.sh check|write OUT_DIR}
lock="$(dirname "$0")/digests.lock"
current=$(mktemp)
trap 'rm -f "$current"' EXIT
{
  echo "# sha256 of each component built by 'make tools' ($(rustc --version | cut -d' ' -f1-2))."
  echo "# Regenerate with 'make tools-lock' after changing tools/ and commit the result."
  for f in "$out"/*.wasm; do
    printf '%s sha256:%s\n' "$(basename "$f" .wasm)" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
  # py.run's bytes differ per build (componentize-py#247), so its source is what is pinned.
  py="$(dirname "$0")/py-run"
  printf 'py_run source sha256:%s\n' "$(cat "$py"/app.py "$py"/manifest.toml "$py"/wit/*.wit | sha256sum | cut -d' ' -f1)"
} >"$current"
case "$mode" in
  write) cp "$current" "$lock"; echo "wrote $lock" ;;
  check)
    if ! diff -u "$lock" "$current"; then
      echo "tools/digests.lock does not match the build above (- lock, + build)." >&2
      echo "If tools/ changed on purpose, run 'make tools-lock' and commit the lock." >&2
      exit 1
    fi
    echo "tool digests match tools/digests.lock" ;;
  *) echo "usage: digests.sh check|write OUT_DIR" >&2; exit 2 ;;
esac
