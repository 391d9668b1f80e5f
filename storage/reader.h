/* One host's part of a session, read back for export.
 *
 * Opening reads the metadata of every chunk of every device (process and
 * thread names, command lines, executable mappings, the CPU sampling
 * rate): what the window's events need, wherever in the session it was
 * recorded.  rp_reader_each then hands the window's events to a callback,
 * device by device in manifest order, each device's chunks in seq order
 * (one thread's events are in time order; events of different threads or
 * devices are not sorted against each other).
 *
 * Ranges are matched here, so that every format agrees on them: an end
 * whose begin lies before the window is left out, and a range still open
 * at the end of the window is closed there (truncated).  Begins are
 * passed as they come; ends carry their begin's time, name and depth.
 *
 * Memory depends on the number of processes, threads, open ranges and
 * mapped files, not on the session's size.  Timestamps are host clock
 * (CLOCK_MONOTONIC) ns; wall clock = host + rp_reader_wall_offset_ns. */
#ifndef RINGPROF_READER_H
#define RINGPROF_READER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "event.h"
#include "symbolize.h"

struct rp_reader;

/* manifest: one element of rp_session_manifests(session_dir) (borrowed
 * for the reader's life).  sym: NULL for the defaults. */
RP_MUST_CHECK int rp_reader_open(const char *session_dir, json_t *manifest,
		   const struct rp_symbolizer_opts *sym, struct rp_reader **out,
		   struct rp_err *err);
void rp_reader_free(struct rp_reader *r);

json_t *rp_reader_manifest(const struct rp_reader *r);
const char *rp_reader_host(const struct rp_reader *r);
/* The requested window, host clock ns, both ends included. */
uint64_t rp_reader_start_ns(const struct rp_reader *r);
uint64_t rp_reader_end_ns(const struct rp_reader *r);
int64_t rp_reader_wall_offset_ns(const struct rp_reader *r);

size_t rp_reader_device_count(const struct rp_reader *r);

/* As the rings name them: "host", "gpu0", "tpu1", "neuron0", ... */
const char *rp_reader_device_name(const struct rp_reader *r, size_t device);
/* What the device is: kind, index and stable id from its device_info
 * events, else (rings recorded before them) from its name
 * (rp_device_identify).  NULL for an index out of range. */
const struct rp_device_identity *rp_reader_device_identity(const struct rp_reader *r,
							   size_t device);

/* Names recorded for a process or thread, NULL when none was. */
const char *rp_reader_process_name(const struct rp_reader *r, uint32_t pid);
const char *rp_reader_process_cmdline(const struct rp_reader *r, uint32_t pid);
const char *rp_reader_thread_name(const struct rp_reader *r, uint32_t pid, uint32_t tid);
/* The CPU sampling rate in force at ts (Hz), 0 when the session has none. */
double rp_reader_sample_hz_at(const struct rp_reader *r, uint64_t ts);
/* Names CPU sample frames; holds every recorded mapping. */
struct rp_symbolizer *rp_reader_symbolizer(struct rp_reader *r);

/* Looking at one job: only the events of the processes named by pid or
 * by name (the process's recorded name, its comm) pass rp_reader_each;
 * host-wide events (pid 0: counters, the sampler's lost samples) pass
 * too, except CPU samples (pid 0 is the idle task).  No pid and no name:
 * every event.  Names are borrowed for the reader's life. */
#define RP_FILTER_MAX 64
struct rp_reader_filter {
	uint32_t pids[RP_FILTER_MAX];
	unsigned npids;
	const char *comms[RP_FILTER_MAX];
	unsigned ncomms;
};

/* A pid list as typed ("4242" or "4242,4243") or a name, into f.
 * -EINVAL (not a pid, over RP_FILTER_MAX of them) with a message. */
RP_MUST_CHECK int rp_reader_filter_add_pids(struct rp_reader_filter *f, const char *list, struct rp_err *err);
RP_MUST_CHECK int rp_reader_filter_add_comm(struct rp_reader_filter *f, const char *name, struct rp_err *err);
/* f in words for a header, "pid 4242, comm trainer"; "" for no filter. */
const char *rp_reader_filter_text(const struct rp_reader_filter *f, char *buf, size_t len);

/* From now on rp_reader_each hands on only what f lets pass (NULL or
 * empty: the session's own filter, the manifest's "filter" that ringprof
 * run records, else all; copied).  Names match the processes whose recorded name is one of
 * them.  -ENOMEM. */
RP_MUST_CHECK int rp_reader_set_filter(struct rp_reader *r, const struct rp_reader_filter *f);
/* The filter in force: NULL when none; *pids (sorted) and the count
 * returned: the processes it lets pass, those given by pid and those
 * whose name matched. */
const struct rp_reader_filter *rp_reader_filter(const struct rp_reader *r, const uint32_t **pids,
						size_t *npids);

struct rp_reader_event {
	const struct rp_event *ev; /* borrowed for the callback */
	size_t device;             /* index, see rp_reader_device_name */
	/* RP_EV_RANGE_BEGIN and RP_EV_RANGE_END: nesting depth on its thread,
	 * 0 for a top-level range. */
	unsigned depth;
	/* RP_EV_RANGE_END only: */
	uint64_t begin_ts;
	const char *range_name;    /* the begin's name, borrowed for the callback */
	bool truncated;            /* closed at the window's end */
};

/* 0 to go on, or a negative errno that stops rp_reader_each. */
typedef int (*rp_reader_fn)(void *ctx, const struct rp_reader_event *e);

/* Every event of the window except the metadata kinds (process and
 * thread names, command lines, mappings), which the accessors above give.
 * Corrupt chunks are skipped and counted.  Returns 0, fn's error, or a
 * negative errno when a file cannot be read.  May be called again. */
RP_MUST_CHECK int rp_reader_each(struct rp_reader *r, rp_reader_fn fn, void *ctx, struct rp_err *err);

/* Chunks skipped as corrupt by the last rp_reader_each. */
uint64_t rp_reader_corrupt_chunks(const struct rp_reader *r);

#endif
