/* The names of the configuration's values (types.h). */
#include "types.h"

const char *const pp_family_names[] = {"llama", "mistral", "mixtral", "gemma", "gpt", NULL};
const char *const pp_recompute_names[] = {"none", "full", "minimal", "minimal_flash", NULL};
const char *const pp_fp8_recipe_names[] = {"none", "delayed", "current", NULL};
const char *const pp_task_format_names[] = {"jsonl", "hellaswag",  "arc",     "piqa",
					    "boolq", "winogrande", "lambada", NULL};

/* i's name in a NULL-terminated table of n names, or "unknown" */
static const char *name_of(const char *const *names, int n, int i)
{
	return i >= 0 && i < n ? names[i] : "unknown";
}

const char *pp_family_name(int family) { return name_of(pp_family_names, 5, family); }

const char *pp_recompute_name(int recompute) { return name_of(pp_recompute_names, 4, recompute); }
