/* libFuzzer target: the run-config parser on arbitrary bytes. The input is
 * split at NUL bytes: the first part is a JSON text for pp_config_from_json
 * (a checkpoint's resolved config), the next ones (at most 8) are key=value
 * overrides for pp_config_load with no config file, which resolves model
 * presets from $PP_CONFIG_DIR. Checks: every error has a message, and a
 * config that loads dumps to JSON that loads back to the same dump (what
 * resuming from a checkpoint relies on). Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OVERRIDES 8

/* A loaded config must dump, and its dump must load back to the same dump. */
static void round_trip(pp_config *c)
{
	char *dump = pp_config_dump(c);
	if (!dump)
		__builtin_trap();
	pp_config back;
	pp_err e = {0};
	if (pp_config_from_json(&back, dump, &e))
		__builtin_trap(); /* a resolved config does not load back */
	char *again = pp_config_dump(&back);
	if (!again || strcmp(dump, again))
		__builtin_trap(); /* it loads back as a different config */
	free(again);
	free(dump);
	pp_config_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;

	pp_config c;
	pp_err e = {0};
	/* the JSON part ends at the first NUL */
	if (pp_config_from_json(&c, buf, &e)) {
		if (!e.msg[0])
			__builtin_trap(); /* an error must say what is wrong */
	} else {
		round_trip(&c);
		pp_config_free(&c);
	}

	char *ov[MAX_OVERRIDES];
	int n = 0;
	for (char *p = memchr(buf, 0, size + 1); p && p < buf + size && n < MAX_OVERRIDES;) {
		ov[n++] = ++p;
		p = memchr(p, 0, (size_t)(buf + size - p) + 1);
	}
	if (n) {
		memset(&e, 0, sizeof e);
		if (pp_config_load(&c, NULL, n, ov, &e)) {
			if (!e.msg[0])
				__builtin_trap();
		} else {
			round_trip(&c);
			pp_config_free(&c);
		}
	}
	free(buf);
	return 0;
}
