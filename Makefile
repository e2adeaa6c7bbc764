# pp: make builds every tool; make test runs every test; make install installs.
CC      ?= cc
PREFIX  ?= /usr/local
VERSION := 0.1.0
PKGCFG  := $(shell pkg-config --exists hdf5 2>/dev/null && echo hdf5 || echo hdf5-serial) jansson \
           pmix ompi-c

CFLAGS  ?= -O3
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp -fno-math-errno -g \
           -DPP_VERSION=\"$(VERSION)\" -DPP_SHARE_DIR=\"$(PREFIX)/share/pp\" \
           $(shell pkg-config --cflags $(PKGCFG))
LDLIBS  += $(shell pkg-config --libs $(PKGCFG)) -lopenblas -lm -fopenmp

B       := build
LIBSRC  := $(wildcard libcommon/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c)
TOOLS   := $(patsubst cmd/%.c,$(B)/bin/%,$(wildcard cmd/pp-*.c))
LIB     := $(B)/libpp.a
LIB64   := $(B)/f64/libpp.a
# tests that need double precision (finite differences) link the -DPP_F64 build
F64TESTS := test_ops test_gradcheck
TESTSRC := $(wildcard tests/test_*.c)
TESTBIN := $(patsubst tests/%.c,$(B)/tests/%,$(TESTSRC) $(wildcard tests/tool_*.c))

all: $(TOOLS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(B)/f64/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPP_F64 -MMD -MP -c $< -o $@

$(LIB): $(patsubst %.c,$(B)/obj/%.o,$(LIBSRC))
	@rm -f $@; ar rcs $@ $^
$(LIB64): $(patsubst %.c,$(B)/f64/obj/%.o,$(LIBSRC))
	@rm -f $@; ar rcs $@ $^

$(B)/bin/%: $(B)/obj/cmd/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(B)/tests/%: $(B)/obj/tests/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(addprefix $(B)/tests/,$(F64TESTS)): $(B)/tests/%: $(B)/f64/obj/tests/%.o $(LIB64)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPP_F64 $^ -o $@ $(LDLIBS)

tests: $(TOOLS) $(TESTBIN)

deps:
	@scripts/install-deps.sh

test: deps
	@$(MAKE) --no-print-directory -j2 tests
	@tests/run.sh

install: $(TOOLS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/pp/configs/models \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 configs/models/*.json $(DESTDIR)$(PREFIX)/share/pp/configs/models
	install -m 644 configs/*.json $(DESTDIR)$(PREFIX)/share/pp/configs
	install -m 644 man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 man/man5/*.5 $(DESTDIR)$(PREFIX)/share/man/man5

clean:
	rm -rf $(B)

.PHONY: all deps tests test install clean
.SECONDARY:
-include $(shell find $(B) -name '*.d' 2>/dev/null)
