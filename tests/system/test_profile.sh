#!/usr/bin/env bash
# Profiles: pp-train's per-rank HDF5 profiles (profile_steps) and
# pp-merge-profile's trace and pipeline analysis.
#   - one process: the window's steps and events, the timing line that
#     leaves the warm-up out, the trace to a file, gzipped and to stdout;
#   - pp=4 under srun on the local Slurm cluster (mpirun without root): the
#     merged trace is a valid Chrome trace (JSON schema), nests strictly on
#     every thread, and joins every send to its receive on the neighbouring
#     stage;
#   - clocks skewed on purpose (debug.clock_offset_s on one rank) merge in
#     causal order, and do not without alignment (--no-align);
#   - the measured bubble of each schedule on passes of fixed length
#     (debug.fwd_ms, debug.bwd_ms, debug.bwd_w_ms) against its theory:
#     GPipe p=4 m=4 (3/7), 1F1B m=16 (3/19), interleaved v=2 (3/35), ZB-H1
#     (3/51), within 5 points, the last three below GPipe's and 1F1B's;
#   - bad profiles (truncated, not HDF5, another format or version, two runs,
#     one rank twice) and bad profile_steps get clear errors.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
common="model=llama-tiny microbatch=1 seq_len=32 lr_schedule.warmup_steps=1 save_on_completion=false"

# --- one process -----------------------------------------------------------------
run=$T/single
if ! pp-train $common global_batch=4 steps=5 profile_steps=2:4 run_dir=$run 2>$T/single.log; then
	fail profile/single/train "$(tail -n 3 $T/single.log)"
else
	check profile/single/file test -s $run/profile/rank-00000.h5
	check profile/single/timing_leaves_out_warmup grep -q "timing: .* over 4 steps (1 warm-up step left out" $T/single.log
	pp-merge-profile $run --json >$T/single.json 2>$T/err.log
	check profile/single/window $PY -c "
import json, sys
j = json.load(open('$T/single.json'))
assert j['steps'] == [2, 4] and j['ranks'] == 1, j['steps']
ops = {t['name']: t['count'] for t in j['top_ops']}
# 2 steps x 4 microbatches of forward and backward; one optimizer and data per step
assert ops['forward'] == 8 and ops['backward'] == 8 and ops['optimizer'] == 2 and ops['data'] == 2, ops
assert abs(sum(j['step_breakdown_ms'][k] for k in ('compute', 'exposed_comm', 'bubble', 'optimizer', 'io', 'other')) - j['step_breakdown_ms']['step']) < 0.05 * j['step_breakdown_ms']['step']
"
	pp-merge-profile $run -o $T/single.json.gz 2>$T/err.log &&
		check profile/single/gzip_trace $PY tests/tools/trace_check.py $T/single.json.gz --min-flows 0
	pp-merge-profile -o - $run 2>$T/err.log >$T/stdout.json
	check profile/single/stdout_trace $PY tests/tools/trace_check.py $T/stdout.json --min-flows 0
	expect_fail profile/single/stdout_and_report 2 "cannot go there too" pp-merge-profile -o - --summary $run
fi

# --- pp=4: the merged trace ------------------------------------------------------
launch_desc=srun
slurm_up 2>$T/slurm.log
case $? in
0) launch() { local n=$1; shift; srun -n "$n" --mpi=pmix pp-train "$@"; } ;;
3 | 4)
	launch_desc=mpirun
	launch() { local n=$1; shift; mpirun -n "$n" --allow-run-as-root --oversubscribe pp-train "$@"; } ;;
*)
	fail profile/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"
	exit 1 ;;
esac

# bubble RUN WANT: the measured bubble within 5 points of the analysis's
# theory, which is WANT (a fraction) to within a point
bubble() {
	$PY - "$1" "$2" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
b, want = j["bubble"], float(sys.argv[2])
print(f"measured {100 * b['measured']:.1f}%, theory {100 * b['theory']:.1f}% ({b['formula']}), by hand {100 * want:.1f}%")
sys.exit(0 if abs(b["measured"] - b["theory"]) <= 0.05 and abs(b["theory"] - want) <= 0.01 else 1)
EOF
}

frac() { awk -v a="$1" -v b="$3" 'BEGIN { printf "%.12f", a / b }'; }
declare -A measured
# sched NAME RANKS WANT ARGS...: run a schedule on fixed-length passes, merge
sched() {
	local name=$1 n=$2 want=$3
	shift 3
	local dir=$T/$name
	if ! launch "$n" $common steps=3 profile_steps=2:4 run_dir=$dir --quiet "$@" >$T/$name.log 2>&1; then
		fail "profile/bubble/$name" "$launch_desc exited $?: $(grep -m1 error $T/$name.log)"
		return 1
	fi
	if ! pp-merge-profile $dir --json >$T/$name.json 2>$T/err.log; then
		fail "profile/bubble/$name" "pp-merge-profile: $(cat $T/err.log)"
		return 1
	fi
	local got
	if got=$(bubble $T/$name.json "$want"); then
		pass "profile/bubble/$name ($got)"
	else
		fail "profile/bubble/$name" "$got"
	fi
	measured[$name]=$($PY -c "import json; print(json.load(open('$T/$name.json'))['bubble']['measured'])")
}

pp4="pp=4 model.n_layers=8"
if sched gpipe 4 "$(frac 3 / 7)" $pp4 schedule=gpipe global_batch=4 debug.fwd_ms=10 debug.bwd_ms=20; then
	pp-merge-profile $T/gpipe -o $T/gpipe.trace.json 2>$T/err.log
	if out=$($PY tests/tools/trace_check.py $T/gpipe.trace.json --causal --min-flows 48 2>&1); then
		pass "profile/pp4/trace ($launch_desc: $out)"
	else
		fail profile/pp4/trace "$out"
	fi
fi
# passes of 20 and 40 ms: a rank's fixed costs per pass (the transfers, the
# scheduler of 4 ranks on fewer cores) stay small beside them
sched 1f1b 4 "$(frac 3 / 19)" $pp4 schedule=1f1b global_batch=16 debug.fwd_ms=20 debug.bwd_ms=40
sched interleaved 4 "$(frac 3 / 35)" $pp4 schedule=interleaved1f1b virtual_stages=2 \
	global_batch=16 debug.fwd_ms=20 debug.bwd_ms=40
sched zbh1 4 "$(frac 3 / 51)" $pp4 schedule=zbh1 global_batch=16 debug.fwd_ms=25 \
	debug.bwd_ms=50 debug.bwd_w_ms=25
if [ -n "${measured[gpipe]:-}" ] && [ -n "${measured[1f1b]:-}" ] && [ -n "${measured[interleaved]:-}" ] &&
	[ -n "${measured[zbh1]:-}" ]; then
	check profile/bubble/order awk -v g=${measured[gpipe]} -v o=${measured[1f1b]} -v i=${measured[interleaved]} \
		-v z=${measured[zbh1]} 'BEGIN { exit !(o < g && i < o && z < o) }'
	# the trace of an interleaved and a ZB-H1 run: their actions nest and pair up too
	for s in interleaved zbh1; do
		pp-merge-profile $T/$s -o $T/$s.trace.json.gz 2>$T/err.log
		if out=$($PY tests/tools/trace_check.py $T/$s.trace.json.gz --causal --min-flows 100 2>&1); then
			pass "profile/trace/$s ($out)"
		else
			fail "profile/trace/$s" "$out"
		fi
	done
fi

# --- clocks skewed on purpose --------------------------------------------------------
skew=$T/skew
if launch 2 $common pp=2 global_batch=4 steps=3 profile_steps=2:4 run_dir=$skew --quiet \
	debug.clock_offset_rank=1 debug.clock_offset_s=5 >$T/skew.log 2>&1; then
	pp-merge-profile $skew -o $T/skew.json --summary >$T/skew.txt 2>&1
	pp-merge-profile $skew -o $T/noalign.json --no-align >/dev/null 2>&1
	check profile/skew/aligned_causal $PY tests/tools/trace_check.py $T/skew.json --causal --min-flows 16
	check profile/skew/unaligned_acausal $PY tests/tools/trace_check.py $T/noalign.json --acausal --min-flows 16
	check profile/skew/correction_reported grep -q "largest correction 5.0" $T/skew.txt
else
	fail profile/skew "$launch_desc exited: $(grep -m1 error $T/skew.log)"
fi
# another run of the same layout: its files merge with the first's only when forced
other=$T/other
launch 2 $common pp=2 global_batch=4 steps=3 profile_steps=2:4 run_dir=$other --quiet >$T/other.log 2>&1
slurm_down

# --- bad input -------------------------------------------------------------------
if [ -s $run/profile/rank-00000.h5 ] && [ -s $skew/profile/rank-00001.h5 ] && [ -s $other/profile/rank-00001.h5 ]; then
	good=$run/profile/rank-00000.h5
	mkdir -p $T/bad
	head -c 3000 $good >$T/bad/truncated.h5
	expect_fail profile/bad/truncated 1 "truncated.h5: .*(truncated|HDF5)" pp-merge-profile $T/bad/truncated.h5
	head -c 5000 /dev/urandom >$T/bad/random.h5
	expect_fail profile/bad/not_hdf5 1 "random.h5: not an HDF5 file" pp-merge-profile $T/bad/random.h5
	cp $good $T/bad/version.h5
	$PY -c "import h5py, numpy; f = h5py.File('$T/bad/version.h5', 'r+'); f.attrs['version'] = numpy.int64(2); f.close()"
	expect_fail profile/bad/version 1 "version.h5: profile version 2; this pp reads version 1" \
		pp-merge-profile $T/bad/version.h5
	cp $good $T/bad/format.h5
	$PY -c "import h5py; f = h5py.File('$T/bad/format.h5', 'r+'); del f.attrs['format']; f.close()"
	expect_fail profile/bad/not_a_profile 1 "format.h5: not a pp profile" pp-merge-profile $T/bad/format.h5
	cp $good $T/bad/events.h5
	$PY -c "import h5py; f = h5py.File('$T/bad/events.h5', 'r+'); e = f['events'][:]; e['step'][0] = 99; del f['events']; f['events'] = e; f.close()"
	expect_fail profile/bad/event_out_of_window 1 "events.h5: event 0 .*outside the window" \
		pp-merge-profile $T/bad/events.h5
	expect_fail profile/bad/two_runs 2 "different runs \(--force" pp-merge-profile $skew/profile/rank-00000.h5 \
		$other/profile/rank-00001.h5
	check profile/bad/two_runs_forced pp-merge-profile --force $skew/profile/rank-00000.h5 \
		$other/profile/rank-00001.h5 -o $T/forced.json
	expect_fail profile/bad/two_layouts 2 "have different layouts" pp-merge-profile --force $good \
		$other/profile/rank-00001.h5
	expect_fail profile/bad/same_rank_twice 2 "both profiles of rank 0" pp-merge-profile $good $good
	mkdir -p $T/empty
	expect_fail profile/bad/empty_dir 2 "holds no profiles" pp-merge-profile $T/empty
fi
expect_fail profile/config/empty_window 2 "key 'profile_steps'.*got \"3:3\"" pp-train $common profile_steps=3:3
expect_fail profile/config/not_a_window 2 "key 'profile_steps'" pp-train $common profile_steps=two
pp-train $common global_batch=4 steps=2 profile_steps=5:9 run_dir=$T/past 2>$T/past.log
check profile/config/window_past_steps_warns grep -q "profile_steps=5:9: no step of this run" $T/past.log
check profile/config/window_past_steps_no_file test ! -e $T/past/profile

# --- pp-init --plan: each schedule's own theory -------------------------------------------
# at p=4, m=8: zbh1's bubble is 3/27 (1F1B's would be 3/11), its peak
# activations 4, 3, 2, 1, and the state it holds until the weight gradients
# min(p, m) = 4 microbatches on every rank
plan() { pp-init model=llama-tiny model.n_layers=8 pp=4 global_batch=8 microbatch=1 --plan --json "$@"; }
plan schedule=zbh1 >$T/plan-zbh1.json 2>$T/err.log
check profile/plan/zbh1 $PY -c "
import json
j = json.load(open('$T/plan-zbh1.json'))
l, m = j['layout'], j['memory']
assert abs(l['bubble'] - 3 / 27) < 1e-12 and l['peak_activations'] == [4, 3, 2, 1], l
assert l['peak_wstash'] == [1, 2, 3, 4] and m['in_flight'] == 4, (l, m)
"
plan schedule=interleaved1f1b virtual_stages=2 >$T/plan-int.json 2>$T/err.log
check profile/plan/interleaved $PY -c "
import json
l = json.load(open('$T/plan-int.json'))['layout']
assert abs(l['bubble'] - 3 / 19) < 1e-12 and l['peak_activations'] == [11, 9, 7, 5], l
"
