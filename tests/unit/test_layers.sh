#!/usr/bin/env bash
# The source tree's layers (tests/tools/layers.py): no file of libcommon,
# kernels or cmd includes from a folder of its own layer or a higher one,
# and the modules' includes form no cycle. The checker itself is shown to
# catch both on a copy of the tree with a planted upward include and a
# planted cycle.
. "$(dirname "$0")/../tools/lib.sh"
layers=$PP_ROOT/tests/tools/layers.py
python3 "$layers" "$PP_ROOT" >$T/layers.txt 2>&1
check layers/tree grep -q " 0 violation(s)$" $T/layers.txt || cat $T/layers.txt

# a copy with a model file including the plan (above it), and a cycle
mkdir -p $T/tree
cp -r "$PP_ROOT/libcommon" "$PP_ROOT/kernels" "$PP_ROOT/cmd" $T/tree/
echo '#include "../plan/plan.h"' >>$T/tree/libcommon/model/stage.c
echo '#include "../base/log.h"' >>$T/tree/libcommon/base/error.h
echo '#include "error.h"' >>$T/tree/libcommon/base/log.h
python3 "$layers" $T/tree >$T/planted.txt 2>&1
planted() {
	grep -q "libcommon/model/stage.c: includes libcommon/plan/plan.h: plan (layer 6) is not below model (layer 4)" $T/planted.txt &&
		grep -q "include cycle: libcommon/base/error -> libcommon/base/log -> libcommon/base/error" $T/planted.txt
}
check layers/catches_planted planted || cat $T/planted.txt
