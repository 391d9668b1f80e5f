/* A program annotated for ringprof.  Build it against an installed
 * libringprof with
 *   cc annotate.c $(pkg-config --cflags --libs ringprof)
 * and run it with ringprofd up to see "step" ranges in its profiles.
 * Without a daemon it runs just the same: annotations are then no-ops. */
#include <stdio.h>
#include <stdlib.h>

#include <ringprof/ringprof.h>

static double work(int n)
{
	double x = 0;
	for (int i = 1; i <= n; i++)
		x += 1.0 / i;
	return x;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 100;
	double x = 0;
	ringprof_thread_name("trainer");
	for (int step = 0; step < steps; step++) {
		ringprof_range_begin("step");
		x += work(100000);
		ringprof_counter("loss", 1.0 / (step + 1));
		ringprof_range_end();
	}
	ringprof_instant("done");
	printf("%d steps, result %.3f, connected %d, dropped %llu\n", steps, x,
	       ringprof_connected(), (unsigned long long)ringprof_dropped());
	return 0;
}
