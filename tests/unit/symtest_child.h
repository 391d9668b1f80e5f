/* symtest (tests/unit/symtest.c) run by the procinfo and symbolizer
 * tests: its arguments, and the program started with pipes on its stdin
 * and stdout. */
#ifndef RINGPROF_SYMTEST_CHILD_H
#define RINGPROF_SYMTEST_CHILD_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "event.h"

/* "SYMTEST BUILD_ID_HEX": symtest's absolute path (mappings name files
 * by absolute path) and its build-id.  0, or 2 after printing the usage. */
int symtest_args(int argc, char **argv, const char **path, uint8_t id[RP_BUILD_ID_MAX]);

struct symtest_child {
	pid_t pid;
	int in;   /* its stdin: closing it ends it */
	FILE *out; /* its stdout: "NAME ADDRESS LINE" per function */
};

/* Starts symtest; -1 when it cannot. */
int symtest_start(const char *path, struct symtest_child *c);
/* Closes its stdin and waits for it; its wait status, or -1. */
int symtest_end(struct symtest_child *c);

#endif
