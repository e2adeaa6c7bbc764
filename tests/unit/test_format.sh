#!/usr/bin/env bash
# Every C, header and CUDA source is as .clang-format formats it (clang-format
# 14, Debian 12's), but libcommon/tok/unicode.c, which its script writes.
. "$(dirname "$0")/../tools/lib.sh"
if ! command -v clang-format >/dev/null || ! clang-format --version | grep -q "version 14\."; then
	skip format "no clang-format 14 (scripts/install-deps.sh)"
	exit 0
fi
cd "$PP_ROOT" || exit 1
bad=
for f in $(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || find libcommon kernels cmd tests bench \
	-name '*.[ch]' -o -name '*.cu'); do
	[ "$f" = libcommon/tok/unicode.c ] && continue
	clang-format "$f" | cmp -s "$f" - || bad="$bad $f"
done
if [ -z "$bad" ]; then
	pass format/tree
else
	fail format/tree "not as .clang-format formats them (clang-format -i FILE):$bad"
fi
