#!/usr/bin/env bash
# Man pages: every page under man/ passes `mandoc -T lint -W warning`, and
# every tool cmd/pp-*.c has its page man/man1/pp-*.1.
set -u
cd "$(dirname "$0")/.."
failed=0

if command -v mandoc >/dev/null 2>&1; then
	found=0
	for page in man/man[1-9]/*.[1-9]; do
		[ -f "$page" ] || continue
		found=1
		name=${page#man/}
		out=$(mandoc -T lint -W warning "$page" 2>&1)
		if [ -z "$out" ]; then
			echo "PASS: man/$name"
		else
			echo "FAIL: man/$name: $(printf '%s' "$out" | paste -sd ';' -)"
			failed=1
		fi
	done
	[ "$found" -eq 1 ] || echo "SKIP: man: no pages under man/"
else
	echo "SKIP: man: mandoc not installed"
fi

for src in cmd/pp-*.c; do
	[ -f "$src" ] || continue
	tool=$(basename "$src" .c)
	if [ -f "man/man1/$tool.1" ]; then
		echo "PASS: man/page-for/$tool"
	else
		echo "FAIL: man/page-for/$tool: $src has no man/man1/$tool.1"
		failed=1
	fi
done
exit "$failed"
