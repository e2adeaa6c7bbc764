#!/usr/bin/env bash
# make install into a temporary prefix: every tool, every man page (man1,
# man5, man7) rendered by man from there, the configs and the batch scripts;
# the installed tools find their presets without PP_CONFIG_DIR, and a copy
# of the installed batch scripts plans its layout from the installed
# configs.
. "$(dirname "$0")/../tools/lib.sh"
prefix=$T/prefix
if ! make -C "$PP_ROOT" --no-print-directory install PREFIX="$prefix" >$T/install.log 2>&1; then
	fail install/make "make install failed: $(tail -n 3 $T/install.log)"
	exit 1
fi
pass install/make
missing=
for src in "$PP_ROOT"/cmd/pp-*.c; do
	tool=$(basename "$src" .c)
	[ -x "$prefix/bin/$tool" ] && "$prefix/bin/$tool" --version >/dev/null 2>&1 || missing+=" $tool"
done
check install/tools test -z "$missing"
missing=
for page in "$PP_ROOT"/man/man[1-9]/*.[1-9]; do
	sec=$(basename "$(dirname "$page")")
	[ -f "$prefix/share/man/$sec/$(basename "$page")" ] || missing+=" $sec/$(basename "$page")"
done
check install/man_pages test -z "$missing"
check install/sections test -d $prefix/share/man/man1 -a -d $prefix/share/man/man5 -a -d $prefix/share/man/man7
if command -v man >/dev/null 2>&1; then
	bad=
	for page in "$prefix"/share/man/man[1-9]/*; do
		out=$(MANWIDTH=80 man -l "$page" 2>&1 >/dev/null)
		[ -z "$out" ] && [ "$(MANWIDTH=80 man -l "$page" 2>/dev/null | wc -l)" -ge 10 ] || bad+=" $(basename "$page")"
	done
	check install/man_renders test -z "$bad"
	check install/man_by_name bash -c "MANPATH=$prefix/share/man MANWIDTH=80 man 7 pp 2>/dev/null | grep -q 'pp-tokenize'"
else
	skip install/man_renders "man (man-db) not installed"
	skip install/man_by_name "man (man-db) not installed"
fi
check install/configs test -f $prefix/share/pp/configs/models/llama2-70b.json -a -f $prefix/share/pp/configs/tiny-llama.json
check install/sbatch test -f $prefix/share/pp/sbatch/common.sh -a -x $prefix/share/pp/sbatch/gpt3-175b.sub
presets_found() { env -u PP_CONFIG_DIR "$prefix/bin/pp-train" model=llama2-7b --print-config | jq -e ".model.d_model == 4096" >/dev/null; }
check install/presets_found presets_found
mkdir -p $T/work && cp -r $prefix/share/pp/sbatch $T/work/
plan_from_copy() {
	(cd $T/work && env -u PP_CONFIG_DIR PATH="$prefix/bin:$PATH" PP_PLAN_ONLY=1 bash sbatch/llama2-70b.sub) |
		jq -e '.layout.world == 64' >/dev/null
}
check install/sbatch_copy_plans plan_from_copy
