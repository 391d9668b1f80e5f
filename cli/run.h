/* ringprof run [OPTIONS] -- CMD ARGS...: profile one command, as nsys
 * profile does.  A session opens as the command starts and stops when it
 * exits (also on Ctrl-C or SIGTERM, which reach the command's process
 * group); the command's process tree, followed in /proc while it runs,
 * becomes the session's process filter; the in-workload collectors are
 * set up in the command's environment.  With no daemon to talk to, a
 * private ringprofd runs for the command's lifetime. */
#ifndef RINGPROF_CLI_RUN_H
#define RINGPROF_CLI_RUN_H

/* argv[0] is "run".  socket: the global --socket, or NULL.  Returns the
 * command's exit status (128+N for a death by signal N), or 1 (ringprof
 * failed) / 2 (a usage error) when the command did not run. */
int rp_cli_run(int argc, char **argv, const char *socket);

#endif
