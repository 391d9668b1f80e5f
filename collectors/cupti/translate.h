/* CUPTI activity records -> ringprof events: the pure half of the CUPTI
 * injection library (libringprof-cupti.so), kept free of CUPTI calls and
 * process state so that tests can feed it record structs built from the
 * toolkit's own cupti_activity.h.
 *
 * Timestamps: the library registers a CUPTI timestamp callback that
 * returns CLOCK_MONOTONIC ns, so record times are already host time; the
 * translation only rejects records CUPTI could not complete (start 0,
 * end before start). */
#ifndef RINGPROF_CUPTI_TRANSLATE_H
#define RINGPROF_CUPTI_TRANSLATE_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "event.h"

/* GPUs one process can see (CUDA device ordinals). */
#define RP_CUPTI_MAX_DEV 64
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and its NUL. */
#define RP_CUPTI_UUID_LEN 41

/* One physical GPU as the driver lists it (/proc/driver/nvidia/gpus):
 * nvidia-smi numbers GPUs in PCI bus id order. */
struct rp_cupti_gpu {
	char bus_id[32];                 /* "0000:3b:00.0", lower case */
	char uuid[RP_CUPTI_UUID_LEN];    /* "GPU-..." */
};

/* The physical index (nvidia-smi's) of the GPU the process calls ordinal,
 * whose UUID is uuid ("" when unknown).  gpus (n rows, any order) is the
 * driver's list; cvd is CUDA_VISIBLE_DEVICES (NULL when unset).  By UUID
 * in the list when possible, else through CUDA_VISIBLE_DEVICES (indices or
 * UUIDs), else the ordinal itself. */
uint32_t rp_cupti_physical_index(const char *uuid, uint32_t ordinal, const char *cvd,
				 const struct rp_cupti_gpu *gpus, uint32_t n);

/* A CUDA UUID (16 bytes) in nvidia-smi's "GPU-8-4-4-4-12" form. */
void rp_cupti_format_uuid(const uint8_t raw[16], char out[RP_CUPTI_UUID_LEN]);

/* Resolves a runtime API callback id to its name (cuptiGetCallbackName in
 * the library, a table in tests); NULL: unknown. */
typedef const char *(*rp_cupti_api_name_fn)(uint32_t cbid);

/* Whether a runtime API call is too chatty to record (queries of state,
 * error polls): the list the library disables with
 * cuptiActivityEnableRuntimeApi.  Exposed so that the table is one. */
bool rp_cupti_api_noisy(uint32_t cbid);
/* The noisy table itself, for the library to iterate. */
extern const uint32_t rp_cupti_noisy_cbids[];
extern const unsigned rp_cupti_noisy_count;

/* Translates one activity record (a CUpti_Activity * of any kind).
 *   > 0: ev is filled (name points into rec, a static table, or namebuf of
 *        RP_NAME_MAX + 1 bytes); ev->u.gpu.device / ev->u.api.device is
 *        the process's CUDA ordinal, which the caller maps to a ring;
 *        NVTX markers (MARKER) are range begins, ends and instants;
 *   0:   a kind not recorded (it is counted, not an error);
 *   < 0: -EINVAL, a record of a recorded kind that cannot be right (no
 *        start, end before start): dropped and counted.
 * pid is the workload's, stamped into GPU activity. */
RP_MUST_CHECK int rp_cupti_translate(const void *rec, uint32_t pid, rp_cupti_api_name_fn api_name,
		       char *namebuf, struct rp_event *ev);

/* The device ordinal a DEVICE record (CUpti_ActivityDevice5) describes and
 * its UUID; false for any other kind. */
bool rp_cupti_device_record(const void *rec, uint32_t *ordinal,
			    char uuid[RP_CUPTI_UUID_LEN]);

#endif
