#!/usr/bin/env bash
# Fails when a C++ file of the project differs from .clang-format (the fix: `make format`).
#   scripts/check_format.sh SOURCE_DIR
# Exit 0: formatted; 1: files differ (listed, with the first differences); 77: no clang-format.
set -uo pipefail
cd "${1:?usage: check_format.sh SOURCE_DIR}"
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "SKIP: $CLANG_FORMAT is not installed (apt-get install clang-format; scripts/install-deps.sh does)"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
fi
# Many files per clang-format (starting one per file cost ~50 s of CPU under ctest's load): its
# -Werror diagnostics name each file that differs ("FILE:LINE:COL: error: code should be
# clang-formatted"), one batch per core at a time.
mapfile -t bad < <(printf '%s\0' "${files[@]}" | xargs -0 -n 64 -P "$(nproc)" \
  "$CLANG_FORMAT" --dry-run -Werror 2>&1 >/dev/null |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "${#bad[@]}" -gt 0 ]; then
  echo "${#bad[@]} of ${#files[@]} files differ from .clang-format ($("$CLANG_FORMAT" --version)); run 'make format':"
  printf '  %s\n' "${bad[@]}"
  "$CLANG_FORMAT" --dry-run "${bad[0]}" 2>&1 | head -20
  exit 1
fi
echo "${#files[@]} files match .clang-format"
