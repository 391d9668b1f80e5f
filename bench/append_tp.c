/* Instantiates the LTTng-UST probes and tracepoint definitions of
 * append_tp.h in this one translation unit (the lttng-ust 2.13 pattern). */
#define TRACEPOINT_CREATE_PROBES
#define TRACEPOINT_DEFINE
#include "append_tp.h"
