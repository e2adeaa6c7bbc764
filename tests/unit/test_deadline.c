/* max_runtime's rule (libcommon/train/deadline.c): a run stops when the
 * time left no longer holds its next step and the save after it. */
#include "../../libcommon/train/deadline.h"
#include "../tools/harness.h"

int main(void)
{
	run_deadline d;
	deadline_init(&d, 0);
	deadline_step(&d, 1e9);
	CHECK(!deadline_near(&d), "deadline/no_limit", "a run without max_runtime never stops");
	deadline_init(&d, 3600);
	CHECK(deadline_elapsed(&d) >= 0 && deadline_elapsed(&d) < 600 && !deadline_near(&d),
	      "deadline/fresh", "elapsed %g s since the process started", deadline_elapsed(&d));
	deadline_step(&d, 1000);
	deadline_save(&d, 1700);
	CHECK(deadline_near(&d), "deadline/room_for_step_and_save",
	      "3600 s limit, steps of 1000 s and saves of 1700 s: 2 x 1000 + 1700 > time left");
	deadline_init(&d, 3600);
	deadline_step(&d, 100);
	deadline_save(&d, 100);
	CHECK(!deadline_near(&d), "deadline/room_left",
	      "3600 s limit, steps and saves of 100 s: the run goes on");
	TH_EXIT();
}
