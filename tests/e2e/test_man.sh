#!/usr/bin/env bash
# Man pages: every page under man/ passes `mandoc -T lint -W warning` and
# renders with `man -l`; every tool cmd/pp-*.c has its page man/man1/pp-*.1,
# and its --help and its page list the same options (for a tool with
# commands, each `TOOL COMMAND --help` against that command's SYNOPSIS; else
# the options of --help against the page's OPTIONS list; --help and
# --version, which every tool has, aside).
set -u
cd "$(dirname "$0")/../.."
export PATH=$PWD/build/bin:$PATH
failed=0
ok() { echo "PASS: $1"; }
bad() { echo "FAIL: $1: $2"; failed=1; }

if command -v mandoc >/dev/null 2>&1; then
	found=0
	for page in man/man[1-9]/*.[1-9]; do
		[ -f "$page" ] || continue
		found=1
		name=${page#man/}
		out=$(mandoc -T lint -W warning "$page" 2>&1)
		if [ -z "$out" ]; then ok "man/$name"; else bad "man/$name" "$(printf '%s' "$out" | paste -sd ';' -)"; fi
	done
	[ "$found" -eq 1 ] || echo "SKIP: man: no pages under man/"
else
	echo "SKIP: man: mandoc not installed"
fi

if command -v man >/dev/null 2>&1; then
	for page in man/man[1-9]/*.[1-9]; do
		[ -f "$page" ] || continue
		name=${page#man/}
		err=$(MANWIDTH=80 man -l "$page" 2>&1 >/dev/null) && out=$(MANWIDTH=80 man -l "$page" 2>/dev/null)
		if [ -n "$err" ] || [ "$(wc -l <<<"$out")" -lt 10 ]; then
			bad "man/renders/$name" "man -l: ${err:-only $(wc -l <<<"$out") lines}"
		else
			ok "man/renders/$name"
		fi
	done
else
	echo "SKIP: man/renders: man (man-db) not installed"
fi

# help_opts CMD...: the options a --help lists, one per line
help_opts() {
	"$@" --help 2>/dev/null | sed -n '/^options:/,$p' | grep -oE '^  -[-a-zA-Z0-9]+' | tr -d ' ' |
		grep -vxE -- '--help|--version' | sort -u
}
# page_opts PAGE: the options of the OPTIONS section's list
page_opts() {
	awk '/^\.Sh /{s = ($2 == "OPTIONS")} s && /^\.It Fl /{print "-" $3}' "$1" |
		grep -vxE -- '--help|--version' | sort -u
}
# synopsis_opts PAGE COMMAND: the options of COMMAND's lines in SYNOPSIS
synopsis_opts() {
	awk -v c="$2" '/^\.Sh /{s = ($2 == "SYNOPSIS")} s && /^\.Nm/{blk = 0} s && $0 == ".Cm " c {blk = 1}
		s && blk' "$1" | grep -oE 'Fl -?[a-zA-Z0-9-]+' | awk '{print "-" $2}' |
		grep -vxE -- '--help|--version' | sort -u
}
same() { # NAME HELP PAGE
	if [ -z "$2" ] && [ -z "$3" ]; then
		bad "$1" "no options found in --help nor in the page"
	elif [ "$2" = "$3" ]; then
		ok "$1"
	else
		bad "$1" "--help only: $(comm -23 <(echo "$2") <(echo "$3") | paste -sd ' '); page only: $(comm -13 <(echo "$2") <(echo "$3") | paste -sd ' ')"
	fi
}

for src in cmd/pp-*.c; do
	[ -f "$src" ] || continue
	tool=$(basename "$src" .c)
	page=man/man1/$tool.1
	if [ ! -f "$page" ]; then
		bad "man/page-for/$tool" "$src has no $page"
		continue
	fi
	ok "man/page-for/$tool"
	if ! command -v "$tool" >/dev/null 2>&1; then
		bad "man/options/$tool" "$tool is not built (make)"
		continue
	fi
	cmds=$("$tool" --help 2>/dev/null | sed -n '/^commands:/,/^$/p' | grep -oE '^  [a-z][-a-z0-9]*' | tr -d ' ')
	if [ -n "$cmds" ]; then
		for c in $cmds; do
			same "man/options/$tool-$c" "$(help_opts "$tool" "$c")" "$(synopsis_opts "$page" "$c")"
		done
	else
		same "man/options/$tool" "$(help_opts "$tool")" "$(page_opts "$page")"
	fi
done
exit "$failed"
