/* A JSON value's type in words, for the messages of the request parsers
 * (api.c's bodies, alerts.c's Alertmanager payloads): a module of its own
 * so that alerts.c, which api.c uses, does not include api.h back. */
#ifndef RINGPROF_JSONTYPE_H
#define RINGPROF_JSONTYPE_H

#include <jansson.h>

/* "an object", "an array", "a string", "a number", "a boolean", "null". */
const char *rp_json_type_name(const json_t *v);

#endif
