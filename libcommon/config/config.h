/* Run configuration: JSON files (jansson) + key=value overrides, resolved
 * against a model preset and validated before anything is allocated.
 *
 * Resolution order: the --cfg file (or {}), then each override "a.b=v" (v is
 * parsed as JSON when it parses, else taken as a string), then the model
 * preset named by model.preset (a string "model": "x" means {"preset": "x"})
 * under the preset's own keys, then defaults for every missing key. */
#ifndef PP_CONFIG_H
#define PP_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/error.h"
#include "types.h"

/* Loads and validates. cfg_path may be NULL. Exit-2 class errors
 * (PP_EUSAGE) name the key and value at fault. */
int pp_config_load(pp_config *c, const char *cfg_path, int n_overrides, char *const *overrides,
		   pp_err *e);
/* The same with a JSON text (a checkpoint's config) in place of the file. */
int pp_config_load_text(pp_config *c, const char *json_text, int n_overrides,
			char *const *overrides, pp_err *e);
/* The same from an already resolved JSON text (a checkpoint's config). */
int pp_config_from_json(pp_config *c, const char *json_text, pp_err *e);
void pp_config_free(pp_config *c);
/* The resolved config as pretty JSON (caller frees). */
char *pp_config_dump(const pp_config *c);
/* Directory holding the models/NAME.json presets: $PP_CONFIG_DIR, else ../configs beside the
 * executable, else the installed share directory. */
const char *pp_config_dir(void);

#endif
