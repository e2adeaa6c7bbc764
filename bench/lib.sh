# Shared parts of the bench/*.sh scripts, sourced after `set -euo pipefail`:
# the repository root, the built tools, a scratch directory, the Python that
# runs PyTorch (on the BLAS pp links: scripts/blas-env.sh), and pp-train and
# PyTorch runs read back into JSON. The arithmetic and the tables live in
# bench/benchlib.py.

# bench_init NAME: cd to the repository root; $root, $bench_self (the
# calling script's path), $bench_cwd (the caller's directory), $bench_tmp (removed on exit unless
# PP_BENCH_KEEP=1), PP_CONFIG_DIR; bench_a3mega, the keys of MaxText's A3
# Mega recipe (configs/llama2-7b-a3mega.json) on one GPU: fsdp 1, dp 1, the
# same 4 x 4096 tokens per GPU (its layers: bench_fit_layers)
bench_init() {
	bench_name=$1
	bench_self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
	bench_cwd=$PWD
	cd "$(dirname "${BASH_SOURCE[0]}")/.."
	root=$PWD
	export PP_CONFIG_DIR=${PP_CONFIG_DIR:-$root/configs}
	. "$root/scripts/blas-env.sh"
	bench_a3mega=(--cfg "$root/configs/llama2-7b-a3mega.json" dp=1 fsdp=1 global_batch=4)
	bench_tmp=$(mktemp -d "${TMPDIR:-/tmp}/pp-bench-$bench_name.XXXXXX")
	if [ "${PP_BENCH_KEEP:-0}" = 1 ]; then
		echo "$bench_name: keeping $bench_tmp" >&2
	else
		trap 'rm -rf "$bench_tmp"' EXIT
	fi
}

# bench_out PATH: PATH for writing, relative to the caller's directory;
# exits 1 when its directory is not writable
bench_out() {
	local p=$1
	[[ $p == /* ]] || p=$bench_cwd/$p
	[ -d "$(dirname "$p")" ] && [ -w "$(dirname "$p")" ] || die "$1: cannot write in $(dirname "$p")"
	echo "$p"
}

die() { echo "$bench_name: $*" >&2; exit 1; }
usage_error() { echo "$bench_name: $* (see --help)" >&2; exit 2; }
say() { echo "$bench_name: $*" >&2; }

# bench_ints NAME... : each variable holds a non-negative integer (the
# message names option --NAME, with - for _; -n for n)
bench_ints() {
	local v flag
	for v in "$@"; do
		flag=--${v//_/-}
		[ "$v" != n ] || flag=-n
		[[ ${!v} =~ ^[0-9]+$ ]] || usage_error "$flag ${!v}: expected an integer"
	done
}

# bench_tool NAME: the path of build/bin/NAME, or exit 1
bench_tool() {
	local t=$root/build/bin/$1
	[ -x "$t" ] || die "$t not found: run make first"
	echo "$t"
}

# benchlib ARGS...: bench/benchlib.py under the system python3
benchlib() { python3 "$root/bench/benchlib.py" "$@"; }

# bench_python DEVICE: the python that runs bench/torch_train.py: $PP_PYTHON
# if set; for cuda the first python3 on PATH, which must see a GPU; for cpu
# the reference venv of scripts/setup-reference.sh
bench_python() {
	local py=${PP_PYTHON:-}
	if [ -z "$py" ] && [ "$1" = cuda ]; then
		py=$(command -v python3) || die "no python3 on PATH for the PyTorch side"
	elif [ -z "$py" ]; then
		py=$("$root/scripts/setup-reference.sh") ||
			die "the PyTorch environment is not available (scripts/setup-reference.sh)"
	fi
	local check='import torch, transformers'
	[ "$1" = cuda ] && check+='; import sys; sys.exit(0 if torch.cuda.is_available() else 3)'
	local rc=0
	HF_HUB_OFFLINE=1 "$py" -c "$check" 2>"$bench_tmp/python.log" || rc=$?
	[ "$rc" -ne 3 ] || die "$py: torch $("$py" -c 'import torch; print(torch.__version__)') sees no CUDA device"
	[ "$rc" -eq 0 ] || die "$py cannot import torch and transformers: $(tail -n 1 "$bench_tmp/python.log")"
	echo "$py"
}

# bench_limit TIME_LIMIT BUDGET RUNS_LEFT: the wall-clock limit of the next
# run: TIME_LIMIT, cut to an equal share of what is left of BUDGET seconds
# (counted from the script's start) among the RUNS_LEFT runs still to go, so
# that the script ends within BUDGET however slow a run is; 0 = none
bench_limit() {
	local l=$1 budget=$2 left=$3 share
	if [ "$budget" -gt 0 ]; then
		share=$(((budget - SECONDS) / left))
		[ "$share" -ge 1 ] || share=1
		if [ "$l" -eq 0 ] || [ "$share" -lt "$l" ]; then l=$share; fi
	fi
	echo "$l"
}

# bench_timeout SECONDS CMD...: CMD under a wall-clock limit (0: none);
# exit status 124 when it ran out
bench_timeout() {
	local s=$1; shift
	if [ "$s" -gt 0 ]; then timeout --kill-after=10 "$s" "$@"; else "$@"; fi
}

# bench_profile LIMIT TITLE CMD...: CMD once more under PP_CUDA_PROFILE=1
# (kernels/cuda/profile.cu), apart from the timed runs; prints TITLE and the
# per-op table the CUDA backend writes at exit, or why there is none
bench_profile() {
	local limit=$1 title=$2 rc=0 log=$bench_tmp/profile.log
	shift 2
	echo
	echo "$title"
	say "profile: $title ..."
	PP_CUDA_PROFILE=1 bench_timeout "$limit" "$@" >/dev/null 2>"$log" || rc=$?
	if grep -q '^pp: cuda profile' "$log"; then
		sed -n '/^pp: cuda profile/,$p' "$log"
	elif [ "$rc" -ne 0 ]; then
		echo "no profile: exited $rc: $(grep -v '^$' "$log" | tail -n 1)"
	else
		echo "no profile: the run did not use the CUDA backend"
	fi
}

# bench_pp_train TAG WARMUP LIMIT KEY=VALUE...: resolves the config into
# $bench_tmp/TAG.json, trains in $bench_tmp/run-TAG (log: TAG.pp.log) and
# writes the steady-state figures to $bench_tmp/TAG.pp.json; on failure
# returns 1 with the reason in $bench_tmp/TAG.pp.err
bench_pp_train() {
	local tag=$1 warmup=$2 limit=$3; shift 3
	local pp args=("$@" run_dir="$bench_tmp/run-$tag") rc=0 t0=$SECONDS
	pp=$(bench_tool pp-train)
	rm -f "$bench_tmp/$tag.pp.json" "$bench_tmp/$tag.pp.err"
	if ! "$pp" "${args[@]}" --print-config >"$bench_tmp/$tag.json" 2>"$bench_tmp/$tag.cfg.log"; then
		echo "pp-train rejected the config: $(tail -n 1 "$bench_tmp/$tag.cfg.log")" >"$bench_tmp/$tag.pp.err"
		return 1
	fi
	say "$tag: pp-train ..."
	bench_timeout "$limit" "$pp" "${args[@]}" 2>"$bench_tmp/$tag.pp.log" || rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "pp-train ran past the ${limit} s limit" >"$bench_tmp/$tag.pp.err"
	elif [ "$rc" -ne 0 ]; then
		echo "pp-train exited $rc: $(grep -v '^$' "$bench_tmp/$tag.pp.log" | tail -n 1)" >"$bench_tmp/$tag.pp.err"
	elif ! benchlib pp-metrics "$bench_tmp/run-$tag/metrics.jsonl" "$warmup" \
		>"$bench_tmp/$tag.pp.json" 2>"$bench_tmp/$tag.pp.err"; then
		rc=1
	fi
	if [ "$rc" -ne 0 ]; then
		rm -f "$bench_tmp/$tag.pp.json"
		say "$tag: pp-train failed: $(cat "$bench_tmp/$tag.pp.err"); last lines of its log:"
		tail -n 5 "$bench_tmp/$tag.pp.log" >&2
		return 1
	fi
	say "$tag: pp-train $(printf %.1f "$(benchlib get "$bench_tmp/$tag.pp.json" tokens_per_s)") tok/s ($((SECONDS - t0)) s with start-up)"
}

# bench_torch TAG PYTHON LIMIT ARGS...: bench/torch_train.py on the resolved
# config $bench_tmp/TAG.json; its JSON in $bench_tmp/TAG.torch.json (log:
# TAG.torch.log); on failure returns 1 with the reason in TAG.torch.err
bench_torch() {
	local tag=$1 py=$2 limit=$3; shift 3
	local rc=0 t0=$SECONDS
	rm -f "$bench_tmp/$tag.torch.json" "$bench_tmp/$tag.torch.err"
	say "$tag: PyTorch ..."
	bench_timeout "$limit" "$py" "$root/bench/torch_train.py" --config "$bench_tmp/$tag.json" "$@" \
		>"$bench_tmp/$tag.torch.json" 2>"$bench_tmp/$tag.torch.log" || rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "torch_train.py ran past the ${limit} s limit" >"$bench_tmp/$tag.torch.err"
	elif [ "$rc" -ne 0 ]; then
		echo "torch_train.py exited $rc: $(grep -v '^$' "$bench_tmp/$tag.torch.log" | tail -n 1)" >"$bench_tmp/$tag.torch.err"
	fi
	if [ "$rc" -ne 0 ]; then
		rm -f "$bench_tmp/$tag.torch.json"
		say "$tag: PyTorch failed: $(cat "$bench_tmp/$tag.torch.err"); last lines of its log:"
		tail -n 5 "$bench_tmp/$tag.torch.log" >&2
		return 1
	fi
	say "$tag: PyTorch $(printf %.1f "$(benchlib get "$bench_tmp/$tag.torch.json" tokens_per_s)") tok/s ($((SECONDS - t0)) s)"
}

# bench_commit: the short commit of the working tree ("unknown" outside git),
# "+dirty" when it has changes
bench_commit() {
	local c
	c=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
	git -C "$root" diff --quiet HEAD 2>/dev/null || c+=+dirty
	echo "$c"
}

# bench_gpu_name: the first GPU's name from nvidia-smi, or nothing
bench_gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true; }

# bench_cpu_cluster FILE: a nominal cluster description of one CPU core
# (no FP8 products), for the --smoke runs that simulate on the CPU
bench_cpu_cluster() {
	cat >"$1" <<'EOF'
{"name": "cpu-1", "description": "one CPU core", "gpus_per_node": 1,
 "gpu": {"name": "CPU core", "bf16_tflops": 0.05, "fp32_tflops": 0.05, "fp8_tflops": 0, "hbm_gib": 8, "hbm_gbps": 10},
 "intra_node": {"name": "none", "bus_gbps": 1, "latency_us": 10},
 "inter_node": {"name": "none", "bus_gbps": 1, "latency_us": 100}}
EOF
}

# bench_cluster NAME: the cluster description (configs/clusters) of a GPU
# named NAME (bench_gpu_name): h200, a100-sxm, else dgx-h100
bench_cluster() {
	case $1 in
	*H200*) echo h200 ;;
	*A100*) echo a100-sxm ;;
	*) echo dgx-h100 ;;
	esac
}

# bench_fit_layers FRACTION KEY=VALUE...: the most of the 7B's layers (32,
# 28, ... 2) with which pp-init --plan of the run fits in FRACTION of the
# first GPU's memory; dies when none does
bench_fit_layers() {
	local fraction=$1 gib l
	shift
	gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1 |
		awk -v f="$fraction" '{ print $1 * f / 1024 }')
	for l in 32 28 24 20 16 12 8 4 2; do
		"$(bench_tool pp-init)" --plan --json "$@" model.n_layers=$l >"$bench_tmp/plan.json" 2>/dev/null || continue
		if jq -e --argjson g "$gib" '.memory.total_gib <= $g' "$bench_tmp/plan.json" >/dev/null; then
			echo $l
			return 0
		fi
	done
	die "no layer count of the 7B fits in $gib GiB"
}
