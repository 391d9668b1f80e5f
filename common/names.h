/* The one bound on the names ringprof gives things and takes from users:
 * devices (ring names), sessions, runs, rules, the names of [ring.NAME]
 * and [rule.NAME] sections.  RP_NAME_LEN bytes with the NUL. */
#ifndef RINGPROF_NAMES_H
#define RINGPROF_NAMES_H

#define RP_NAME_LEN 64

#endif
