/* ringprof doctor [--pid PID] [--json]: checks this host's set-up for
 * ringprof, one line per check: OK, WARN or FAIL with the fix.  Hardware
 * that is absent (no NVIDIA driver, no Neuron device) is OK, "not
 * present": nothing is wrong with a host that has none. */
#ifndef RINGPROF_CLI_DOCTOR_H
#define RINGPROF_CLI_DOCTOR_H

/* argv[0] is "doctor"; socket: the global --socket, or NULL.  Exit status
 * 1 when a check failed, 2 for a usage error, else 0. */
int rp_cli_doctor(int argc, char **argv, const char *socket);

#endif
