#include "symtest_child.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int symtest_args(int argc, char **argv, const char **path, uint8_t id[RP_BUILD_ID_MAX])
{
	static char real[PATH_MAX];
	if (argc != 3 || strlen(argv[2]) != 2 * RP_BUILD_ID_MAX || !realpath(argv[1], real)) {
		fprintf(stderr, "usage: %s SYMTEST BUILD_ID_HEX (40 hex digits)\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < RP_BUILD_ID_MAX; i++)
		sscanf(argv[2] + 2 * i, "%2hhx", &id[i]);
	*path = real;
	return 0;
}

int symtest_start(const char *path, struct symtest_child *c)
{
	int in[2], out[2];
	if (pipe(in) < 0)
		return -1;
	if (pipe(out) < 0) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	c->pid = fork();
	if (c->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in = in[1];
	c->out = fdopen(out[0], "r");
	return c->pid > 0 && c->out ? 0 : -1;
}

int symtest_end(struct symtest_child *c)
{
	close(c->in);
	fclose(c->out);
	int status;
	return waitpid(c->pid, &status, 0) == c->pid ? status : -1;
}
