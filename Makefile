# pp: make builds every tool; make test runs every test; make install installs.
CC      ?= cc
PREFIX  ?= /usr/local
VERSION := 0.1.0
PKGCFG  := $(shell pkg-config --exists hdf5 2>/dev/null && echo hdf5 || echo hdf5-serial) jansson libcrypto \
           pmix ompi-c zlib libzstd

CFLAGS  ?= -O3
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpointer-arith -Werror -fopenmp -fno-math-errno -g \
           -DPP_VERSION=\"$(VERSION)\" -DPP_SHARE_DIR=\"$(PREFIX)/share/pp\" \
           $(shell pkg-config --cflags $(PKGCFG))
# OpenBLAS built for OpenMP (Debian's libopenblas0-openmp) runs its threads in
# pp's OpenMP pool; the default pthreads build starts its own beside them and
# oversubscribes the cores (llama-110m trains 25% slower with it).
comma   := ,
OMPBLAS := $(wildcard /usr/lib/$(shell $(CC) -print-multiarch 2>/dev/null)/openblas-openmp/libopenblas.so.0)
BLAS    := $(if $(OMPBLAS),-L$(dir $(OMPBLAS)) -Wl$(comma)-rpath$(comma)$(dir $(OMPBLAS)) -l:libopenblas.so.0,-lopenblas)
LDLIBS  += $(shell pkg-config --libs $(PKGCFG)) $(BLAS) -lm -fopenmp

B       := build
LIBSRC  := $(wildcard libcommon/*/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c)

# The CUDA backend (kernels/cuda) is built when nvcc is found; CUDA=0 forces
# the CPU-only build. The binaries then link the CUDA runtime, cuBLASLt, cuDNN and
# NCCL, but touch no GPU until device=cuda is asked for, so they also start on
# machines without one. The F64 test build never includes CUDA.
CUDA    ?= 1
NVCC    := $(if $(filter 0,$(CUDA)),,$(shell command -v nvcc 2>/dev/null || \
	     { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; }))
ifneq ($(NVCC),)
CUDA_HOME   ?= $(patsubst %/bin/,%,$(dir $(realpath $(NVCC))))
CUSRC       := $(wildcard kernels/cuda/*.cu)
# -DPP_CUDA for the fp32 objects only (cmd/, tests/ and the library)
CUDA_CFLAGS := -DPP_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lcudnn -lnccl -lstdc++
NVFLAGS     ?= -O3
NVFLAGS     += -std=c++17 -g -lineinfo -DPP_CUDA \
	       -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	       -Xcompiler -Wall,-Wextra,-Werror,-fno-math-errno --Werror all-warnings
endif
# Objects rebuild when the build switches between CUDA and CPU-only, or when a
# library appears or changes version (boot.c looks for pmix.h itself): the
# stamp's name says the variant and its contents the libraries, and it is
# rewritten when either changes.
PKGSIG  := $(shell for p in $(PKGCFG); do pkg-config --modversion $$p 2>/dev/null || echo none; done | \
	     cksum | cut -d' ' -f1)
VARIANT := $(B)/obj/.variant-$(if $(NVCC),cuda,cpu)
$(shell mkdir -p $(B)/obj; [ "$$(cat $(VARIANT) 2>/dev/null)" = "$(PKGSIG)" ] || \
	{ rm -f $(B)/obj/.variant*; echo "$(PKGSIG)" >$(VARIANT); })
TOOLS   := $(patsubst cmd/%.c,$(B)/bin/%,$(wildcard cmd/pp-*.c))
LIB     := $(B)/libpp.a
LIB64   := $(B)/f64/libpp.a
# Tests: the unit tests (tests/unit/test_*.c) and the helper tools (tool_*.c of
# tests/tools and tests/gpu) each become build/tests/NAME; those that need
# double precision (finite differences) link the -DPP_F64 build.
F64TESTS := test_ops test_gradcheck
TESTSRC := $(wildcard tests/unit/test_*.c) $(wildcard tests/tools/tool_*.c) $(wildcard tests/gpu/tool_*.c)
TESTBIN := $(patsubst %.c,$(B)/tests/%,$(notdir $(TESTSRC))) $(B)/bench/tool_schedule

all: $(TOOLS)

$(B)/obj/%.o: %.c $(VARIANT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -MMD -MP -c $< -o $@
$(B)/obj/%.o: %.cu $(VARIANT)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(B)/f64/obj/%.o: %.c $(VARIANT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPP_F64 -MMD -MP -c $< -o $@

$(LIB): $(patsubst %.c,$(B)/obj/%.o,$(LIBSRC)) $(patsubst %.cu,$(B)/obj/%.o,$(CUSRC))
	@rm -f $@; ar rcs $@ $^
$(LIB64): $(patsubst %.c,$(B)/f64/obj/%.o,$(LIBSRC))
	@rm -f $@; ar rcs $@ $^

$(B)/bin/%: $(B)/obj/cmd/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# build/tests/NAME from tests/<folder>/NAME.c
test_name = $(basename $(notdir $(1)))
define test_rule
ifneq ($(filter $(call test_name,$(1)),$(F64TESTS)),)
$(B)/tests/$(call test_name,$(1)): $(B)/f64/obj/$(1:.c=.o) $(LIB64)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) -DPP_F64 $$^ -o $$@ $$(LDLIBS)
else
$(B)/tests/$(call test_name,$(1)): $(B)/obj/$(1:.c=.o) $(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $$^ -o $$@ $$(LDLIBS) $$(CUDA_LIBS)
endif
endef
$(foreach t,$(filter-out tests/unit/test_comm_order.c,$(TESTSRC)),$(eval $(call test_rule,$(t))))
$(B)/bench/tool_schedule: $(B)/obj/bench/tool_schedule.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# The NCCL backend built against tests/tools/cudastub, whose CUDA and NCCL calls
# the test implements as a model of streams and events: no GPU, no CUDA.
ORDERSRC := tests/unit/test_comm_order.c libcommon/comm/nccl.c libcommon/comm/comm.c
$(B)/tests/test_comm_order: $(ORDERSRC) $(wildcard tests/tools/cudastub/*.h) tests/tools/harness.h \
			    libcommon/comm/comm.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPP_CUDA -Itests/tools/cudastub $(ORDERSRC) $(LIB) -o $@ $(LDLIBS)

tests: $(TOOLS) $(TESTBIN)

deps:
	@scripts/install-deps.sh

test: deps
	@$(MAKE) --no-print-directory -j2 tests
	@tests/run.sh

# Man pages of every section under man/ (man1 tools, man5 formats, man7 the
# overview) go to share/man/manN; the batch scripts to share/pp/sbatch.
MANPAGES := $(wildcard man/man[1-9]/*.[1-9])
SHARE    := $(DESTDIR)$(PREFIX)/share
install: $(TOOLS)
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE)/pp/configs/models $(SHARE)/pp/configs/clusters \
		$(SHARE)/pp/sbatch
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 configs/models/*.json $(SHARE)/pp/configs/models
	install -m 644 configs/*.json $(SHARE)/pp/configs
	install -m 644 configs/clusters/*.json $(SHARE)/pp/configs/clusters
	install -m 644 sbatch/common.sh $(SHARE)/pp/sbatch
	install -m 755 sbatch/*.sub $(SHARE)/pp/sbatch
	@for p in $(MANPAGES); do \
		d=$(SHARE)/man/$$(basename $$(dirname $$p)); \
		echo "install -m 644 $$p $$d"; install -d $$d && install -m 644 $$p $$d || exit 1; \
	done

clean:
	rm -rf $(B)

.PHONY: all deps tests test install clean
.SECONDARY:
-include $(shell find $(B) -name '*.d' 2>/dev/null)
