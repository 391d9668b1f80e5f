/* Sessions: a time window of every device ring, frozen into
 *   <logdir>/<run>/plugins/profile/<id>/
 *     <host>.manifest.json     what was asked, what was covered, who asked
 *     <host>.<device>.chunks   the window's sealed chunks, verbatim, by seq
 *     <host>.open              only while the host writes the session
 * so that the session can be exported (again) later.  Several hosts may
 * write one session (the same id in a shared log directory): every file
 * is named after its host, as XProf names its per-host files.  Host names
 * in file names have ':' and '/' replaced by '_'.
 *
 * A session pins each ring from the first chunk of its window, so nothing
 * in the window is lost to wrap-around while it is copied: snapshots whose
 * window lies in the past and start/stop sessions longer than the ring
 * horizon alike.  Chunks that overlap the window's edges are kept whole;
 * readers filter events by the manifest's window.
 *
 * Thread model: one thread drives a session (open, add_ring, pump,
 * close); the rings' writer threads may call into it through pins. */
#ifndef RINGPROF_SESSION_H
#define RINGPROF_SESSION_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "ringfile.h"

enum rp_session_kind {
	RP_SESSION_SNAPSHOT = 1, /* [T-N, T], T now or in the past */
	RP_SESSION_MANUAL = 2,   /* start ... stop */
	RP_SESSION_CAPTURE = 3,  /* start, stopped after a duration */
};

enum rp_session_state {
	RP_SESSION_OPEN = 1,
	RP_SESSION_COMPLETE = 2,
	RP_SESSION_FAILED = 3,
};

struct rp_session_opts {
	const char *logdir;
	const char *run;          /* checked by the caller (rp_check_name) */
	const char *id;           /* NULL: from the wall time of start_ns */
	const char *host;         /* host name for file names and manifest */
	enum rp_session_kind kind;
	uint64_t start_ns;        /* window in host clock ns */
	uint64_t end_ns;          /* UINT64_MAX while open */
	/* The window's length as asked (a snapshot's last); 0: end - start.
	 * Longer when the host clock, which starts at boot, cut the window:
	 * "requested" then keeps the start asked for in start_wall_ns. */
	uint64_t asked_ns;
	int64_t wall_offset_ns;   /* wall = host + offset, at the trigger */
	const char *source;       /* "cli", "api", "library", "python", ... */
	const char *reason;       /* free text, may be NULL */
	json_t *trigger_extra;    /* merged into manifest "trigger"; borrowed */
	/* Formats to export once the session is complete (NULL-terminated
	 * names; NULL: none): its manifest lists each under "exports" as
	 * {"state": "pending"} for the exporter to update. */
	const char *const *exports;
	/* Shared with the other open sessions (borrowed; NULL: none): reads
	 * each chunk from its ring once for all of them. */
	struct rp_session_cache *cache;
};

#define RP_SESSION_MANIFEST_SUFFIX ".manifest.json"
#define RP_SESSION_OPEN_SUFFIX ".open"
/* A <host>.open marker is touched at least every tenth of this while its
 * session is open; one older was left by a daemon that died. */
#define RP_SESSION_OPEN_FRESH_NS (600ull * 1000000000ull)

struct rp_session;
struct rp_session_cache;

/* Create the session directory and claim it for opts->host (its .open
 * marker).  A generated id that is taken gets a suffix (_1, _2, ...).  A
 * given id that is taken is joined when the directory holds nothing of
 * this host yet (other hosts' parts of one session), else -EEXIST.
 * Errors name the directory and the fix (-EACCES, -ENOSPC, -EROFS). */
RP_MUST_CHECK int rp_session_open(const struct rp_session_opts *opts, struct rp_session **out,
		    struct rp_err *err);
/* Include one device ring (borrowed: it must outlive the session).  The
 * window's first chunk is looked for among completed writes, so seal and
 * sync the ring up to the window's start first (the daemon flushes before
 * it adds rings), or a chunk still in flight could fall before the pin. */
RP_MUST_CHECK int rp_session_add_ring(struct rp_session *s, const char *device,
			struct rp_ringfile *rf, struct rp_err *err);
/* Copy chunks sealed since the last pump, and chunks the pins saved;
 * keeps the .open marker fresh. */
RP_MUST_CHECK int rp_session_pump(struct rp_session *s, struct rp_err *err);
/* The processes whose events the session is about (ringprof run's
 * process tree, a request's pids and cgroup): written to the manifest as
 * "filter": {"pids": [...], "cgroup": "..."}, whose pids the exports and
 * summaries of the session apply; cgroup (may be NULL) is a record of
 * where they came from.  Before close; -ENOMEM. */
RP_MUST_CHECK int rp_session_set_filter(struct rp_session *s, const uint32_t *pids, size_t n,
					const char *cgroup);
/* Last pump for the window ending at end_ns (the caller has flushed the
 * drains up to then), unpin, write <host>.manifest.json and remove the
 * .open marker.  The state becomes COMPLETE, or FAILED with the error in
 * the manifest. */
RP_MUST_CHECK int rp_session_close(struct rp_session *s, uint64_t end_ns, struct rp_err *err);

const char *rp_session_name(const struct rp_session *s);
const char *rp_session_path(const struct rp_session *s);
enum rp_session_state rp_session_state_of(const struct rp_session *s);
/* The session object of docs/api.md (new reference). */
json_t *rp_session_to_json(const struct rp_session *s);
/* Unpins if still open (the session is then left FAILED on disk). */
void rp_session_free(struct rp_session *s);

/* Record the state of one export (docs/export.md: {"state": "written",
 * "bytes": N} or {"state": "failed", "error": "..."}) of host's part of
 * the complete session in the directory dirfd (dir in messages): its
 * manifest's "exports" gets format: state, replaced whole (a reader sees
 * the old manifest or the new; no link in the directory is followed). */
RP_MUST_CHECK int rp_session_set_export(int dirfd, const char *dir, const char *host, const char *format,
			  json_t *state, struct rp_err *err);

/* A read cache shared by the sessions open at one time: a pump pass
 * (rp_session_cache_begin, rp_session_pump of each session, then
 * rp_session_cache_end, which frees what the pass read) reads each new
 * chunk of a ring once, up to 64 MiB per ring, for all of them (closing
 * pumps read the ring themselves).  Used under the same serialisation as
 * the sessions' pumps; read_bytes from any thread. */
RP_MUST_CHECK int rp_session_cache_new(struct rp_session_cache **out);
void rp_session_cache_begin(struct rp_session_cache *c);
void rp_session_cache_end(struct rp_session_cache *c);
/* Bytes the sessions sharing c read from their rings, in total. */
uint64_t rp_session_cache_read_bytes(const struct rp_session_cache *c);
void rp_session_cache_free(struct rp_session_cache *c);

/* Rewrites a host name, in place, as session file names spell it: ':'
 * and '/' become '_'. */
void rp_session_file_host(char *host);

/* Reading a session back.  Every host's manifest in session directory
 * dir, sorted by host: a new JSON array (empty while none is written),
 * each with "path" set to dir as this host sees it.  Unreadable manifests
 * are left out; -errno when dir cannot be read. */
RP_MUST_CHECK int rp_session_manifests(const char *dir, json_t **out, struct rp_err *err);
/* The same for the directory open as dirfd (path dir, for "path" and
 * errors).  Only regular files up to RP_SAFEFS_META_MAX are read, never
 * through a link nor blocking on a FIFO. */
RP_MUST_CHECK int rp_session_manifests_at(int dirfd, const char *dir, json_t **out, struct rp_err *err);
/* Iterate one device's chunks file. */
struct rp_session_chunks;
RP_MUST_CHECK int rp_session_chunks_open(const char *path, struct rp_session_chunks **out,
			   struct rp_err *err);
/* 1 with a chunk (borrowed until the next call), 0 at the end, -EBADMSG
 * for a corrupt chunk (skipped; the next call continues after it). */
RP_MUST_CHECK int rp_session_chunks_next(struct rp_session_chunks *c, const void **chunk,
			   size_t *len, struct rp_chunk_header *hdr,
			   struct rp_err *err);
void rp_session_chunks_close(struct rp_session_chunks *c);

#endif
