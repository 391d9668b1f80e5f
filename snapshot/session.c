/* Sessions (session.h).
 *
 * Each device has a copy cursor: the seq of the next chunk to write to its
 * .chunks file.  A pump writes, in seq order, the window's chunks still in
 * the ring and those the pin's save function handed over before the ring
 * overwrote them.  A seq found in neither is a gap; a gap is only written
 * off as lost once it is settled (its write cannot still be in flight and
 * its overwrite, had there been one, has been saved), so a pump never
 * races the ring's writer into a false loss. */
#include "session.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "parse.h"
#include "safefs.h"

/* Saved chunks held for all devices together; beyond this the writer's
 * hand-overs are counted as lost instead of growing without bound. */
#define PENDING_MAX_BYTES (256ull << 20)
/* Generated ids taken already get _1 .. _MAX_SUFFIX. */
#define MAX_SUFFIX 1000
/* Longest given id: leaves room for the path around it. */
#define ID_MAX 128
/* A reader's buffer to start with; grown up to RP_CHUNK_MAX for a larger chunk. */
#define READ_BLOCK (1u << 20)

enum saved_kind {
	SAVED_CHUNK,   /* a copy of the chunk seq */
	SAVED_OUTSIDE, /* seq .. last_seq were outside the window: no copy */
	SAVED_LOST,    /* seq .. last_seq were in the window but over the bound */
};

/* What a ring's writer handed over before overwriting it, in seq order. */
struct saved {
	struct saved *next;
	enum saved_kind kind;
	uint64_t seq, last_seq;
	size_t len;
	struct rp_chunk_header hdr;
	unsigned char data[];
};

/* Counts of a chunk copied while the window's end was still open: the
 * chunk is re-counted at close when it reaches past the end. */
struct provisional {
	uint64_t off, last_ts, events, drops;
	size_t len;
};

struct device {
	struct rp_session *s;
	char *name;
	char *file;               /* path of the .chunks file */
	struct rp_ringfile *rf;
	struct rp_ringfile_pin *pin;
	uint32_t slot_count;
	int fd;
	/* Written by the driving thread, read by the writer's save. */
	_Atomic uint64_t cursor;
	/* Guarded by s->lock. */
	struct saved *head, *tail;

	/* Driving thread only. */
	uint64_t off;             /* bytes written */
	uint64_t chunks, events, dropped, lost;
	uint64_t first_ts, last_ts;
	uint64_t resume_ts;       /* first_ts of the last chunk written */
	/* What the device is, from the device_info events at the head of
	 * the chunks copied (kind 0: none seen yet). */
	struct rp_device_identity id;
	uint64_t held_from;       /* oldest data the ring held when added; UINT64_MAX: none */
	double horizon_s;
	struct provisional *prov;
	size_t nprov, prov_cap;
};

struct rp_session {
	char *id, *run, *host, *path, *source, *reason;
	char *file_host;          /* host as it appears in file names */
	int dirfd;                /* the session directory; -1 when not made */
	char *marker;             /* <file_host>.open in it, while open */
	uint64_t touched_ns;      /* CLOCK_MONOTONIC of the marker's last touch */
	json_t *trigger_extra;
	json_t *exports;          /* format name: its export's state */
	json_t *filter;           /* {"pids": [...]} or NULL */
	enum rp_session_kind kind;
	enum rp_session_state state;
	bool manifest_written;
	uint64_t start_ns;
	uint64_t end_ns;          /* writes under lock: save reads it */
	uint64_t asked_ns;        /* see rp_session_opts */
	int64_t wall_offset_ns;
	int64_t created_wall_ns;
	struct rp_err error;      /* why the session failed */
	struct rp_chunk_reader *reader;
	struct rp_session_cache *cache; /* NULL: none */

	pthread_mutex_t lock;     /* end_ns, pending lists, pending_bytes */
	uint64_t pending_bytes;

	struct device **devs;
	size_t ndevs;
};

static const char *kind_name(enum rp_session_kind k)
{
	return k == RP_SESSION_SNAPSHOT ? "snapshot" : k == RP_SESSION_MANUAL ? "session" : "capture";
}

static const char *state_name(enum rp_session_state st)
{
	return st == RP_SESSION_OPEN ? "open" : st == RP_SESSION_COMPLETE ? "complete" : "failed";
}

static bool overlaps(uint64_t t0, uint64_t t1, const struct rp_chunk_header *h)
{
	return h->last_ts >= t0 && h->first_ts <= t1;
}

static int write_error(struct rp_err *err, int e, const char *path)
{
	if (e == ENOSPC || e == EDQUOT)
		return rp_err_set(err, -e, "log directory full while writing %s: free space or lower "
				  "retention", path);
	return rp_err_set(err, -e, "writing %s failed: %s: check the disk", path, strerror(e));
}

static int write_all(int fd, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- directories ---- */

static int dir_error(struct rp_err *err, int e, const char *dir, const char *logdir)
{
	switch (e) {
	case EACCES:
	case EPERM:
		return rp_err_set(err, -EACCES, "cannot create %s: log directory %s is not writable "
				  "by uid %u: fix its permissions or choose another --logdir", dir,
				  logdir, (unsigned)geteuid());
	case EROFS:
		return rp_err_set(err, -EROFS, "cannot create %s: log directory %s is on a read-only "
				  "file system: remount it read-write or choose another --logdir",
				  dir, logdir);
	case ENOSPC:
	case EDQUOT:
		return rp_err_set(err, -ENOSPC, "cannot create %s: log directory %s is full: free "
				  "space or lower retention", dir, logdir);
	case ENOTDIR:
		return rp_err_set(err, -ENOTDIR, "cannot create %s: a part of log directory %s is a "
				  "file, not a directory: fix the path or choose another --logdir",
				  dir, logdir);
	default:
		return rp_err_set(err, -e, "cannot create %s: %s: check log directory %s or choose "
				  "another --logdir", dir, strerror(e), logdir);
	}
}

static char *join(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *join(const char *fmt, ...)
{
	char *out;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&out, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : out;
}

/* Claim s->path for this host with its .open marker, made only while the
 * host has no marker and no manifest there: several hosts share one
 * directory when they write one session, each host once. */
static int claim(struct rp_session *s, const char *logdir, struct rp_err *err)
{
	char *marker = join("%s" RP_SESSION_OPEN_SUFFIX, s->file_host);
	char *manifest = join("%s" RP_SESSION_MANIFEST_SUFFIX, s->file_host);
	int rc = 0;
	if (!marker || !manifest) {
		rc = rp_err_set(err, -ENOMEM, "out of memory creating a session");
		goto out;
	}
	int fd = openat(s->dirfd, marker, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC,
			0640);
	int e = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	struct stat st;
	if (e == 0 && fstatat(s->dirfd, manifest, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		(void)unlinkat(s->dirfd, marker, 0);
		e = EEXIST;
	}
	if (e == EEXIST)
		rc = rp_err_set(err, -EEXIST, "session '%s' already exists in run '%s' (%s) with the "
				"files of host %s: choose another name", s->id, s->run, s->path,
				s->host);
	else if (e)
		rc = dir_error(err, e, s->path, logdir);
	if (rc == 0) {
		s->marker = marker;
		marker = NULL;
		s->touched_ns = rp_clock_now_ns();
	}
out:
	free(marker);
	free(manifest);
	return rc;
}

/* A directory the daemon cannot use safely (a planted link, another
 * owner's) keeps safefs's message; other errors name the log directory. */
static int walk_error(struct rp_err *err, int rc, const char *dir, const char *logdir)
{
	return rc == -ELOOP || rc == -EPERM || rc == -EINVAL ? rc : dir_error(err, -rc, dir, logdir);
}

/* Create (or, for a given id, join) the session's own directory in pfd
 * (path profile) and claim it; a generated id that is taken gets a
 * suffix.  One that is a link or not the daemon's is refused. */
static int make_session_dir(struct rp_session *s, int pfd, const char *profile,
			    const char *logdir, bool given, struct rp_err *err)
{
	for (int i = 0; i <= MAX_SUFFIX; i++) {
		char *id = i ? join("%s_%d", s->id, i) : strdup(s->id);
		char *path = id ? join("%s/%s", profile, id) : NULL;
		if (!path) {
			free(id);
			return rp_err_set(err, -ENOMEM, "out of memory creating a session");
		}
		bool made = mkdirat(pfd, id, 0750) == 0;
		int e = made ? 0 : errno, rc = 0;
		if (made || (e == EEXIST && given)) {
			free(s->id);
			s->id = id;
			s->path = path;
			s->dirfd = rp_safefs_open_dir(pfd, id, 0750, RP_SAFEFS_OWNED, profile, err);
			rc = s->dirfd < 0 ? walk_error(err, s->dirfd, path, logdir)
					  : claim(s, logdir, err);
			if (rc < 0 && made)
				(void)unlinkat(pfd, id, AT_REMOVEDIR);
			return rc;
		}
		if (e != EEXIST)
			rc = dir_error(err, e, path, logdir);
		free(id);
		free(path);
		if (rc < 0)
			return rc;
	}
	return rp_err_set(err, -EEXIST, "sessions %s to %s_%d already exist in run '%s' (%s): "
			  "give the session a name", s->id, s->id, MAX_SUFFIX, s->run, profile);
}

void rp_session_file_host(char *host)
{
	for (char *p = host; *p; p++)
		if (*p == ':' || *p == '/')
			*p = '_';
}

int rp_session_open(const struct rp_session_opts *opts, struct rp_session **out,
		    struct rp_err *err)
{
	*out = NULL;
	if (!opts->logdir || !opts->logdir[0] || !opts->run || !opts->host || !opts->source ||
	    opts->kind < RP_SESSION_SNAPSHOT || opts->kind > RP_SESSION_CAPTURE ||
	    opts->start_ns > opts->end_ns)
		return rp_err_set(err, -EINVAL, "invalid session options: logdir, run, host and "
				  "source are required and the window must not end before it starts");
	if (opts->id) {
		int rc = rp_check_name(opts->id, ID_MAX, "session name", err);
		if (rc < 0)
			return rc;
	}
	struct rp_session *s = calloc(1, sizeof(*s));
	if (!s)
		return rp_err_set(err, -ENOMEM, "out of memory creating a session");
	pthread_mutex_init(&s->lock, NULL);
	s->dirfd = -1;
	s->kind = opts->kind;
	s->state = RP_SESSION_OPEN;
	s->start_ns = opts->start_ns;
	s->end_ns = opts->end_ns;
	s->asked_ns = opts->asked_ns;
	s->wall_offset_ns = opts->wall_offset_ns;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	s->created_wall_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	char generated[32];
	if (!opts->id)
		rp_session_id_from_time((int64_t)opts->start_ns + opts->wall_offset_ns, generated);
	s->id = strdup(opts->id ? opts->id : generated);
	s->run = strdup(opts->run);
	s->host = strdup(opts->host);
	if ((s->file_host = strdup(opts->host)))
		rp_session_file_host(s->file_host);
	s->source = strdup(opts->source);
	s->reason = opts->reason ? strdup(opts->reason) : NULL;
	s->trigger_extra = opts->trigger_extra ? json_deep_copy(opts->trigger_extra) : NULL;
	s->cache = opts->cache;
	s->exports = json_object();
	bool listed = s->exports != NULL;
	for (const char *const *f = opts->exports; f && *f && listed; f++)
		listed = json_object_set_new(s->exports, *f,
					     json_pack("{s:s}", "state", "pending")) == 0;
	char *profile = join("%s/%s/plugins/profile", opts->logdir, opts->run);
	char *rel = join("%s/plugins/profile", opts->run);
	int rc = 0, logfd = -1, pfd = -1;
	if (!s->id || !s->run || !s->host || !s->file_host || !s->source ||
	    (opts->reason && !s->reason) ||
	    (opts->trigger_extra && !s->trigger_extra) || !listed || !profile || !rel ||
	    rp_chunk_reader_new(&s->reader) < 0)
		rc = rp_err_set(err, -ENOMEM, "out of memory creating a session");
	/* Below the log directory (group-writable in deployments) nothing
	 * is reached by path: a planted link or a run directory of another
	 * user is refused. */
	if (rc == 0 && (logfd = rp_safefs_open_root(opts->logdir, 0750, true, err)) < 0)
		rc = dir_error(err, -logfd, opts->logdir, opts->logdir);
	if (rc == 0 && (pfd = rp_safefs_open_dir(logfd, rel, 0750,
						 RP_SAFEFS_CREATE | RP_SAFEFS_OWNED,
						 opts->logdir, err)) < 0)
		rc = walk_error(err, pfd, profile, opts->logdir);
	if (rc == 0)
		rc = make_session_dir(s, pfd, profile, opts->logdir, opts->id != NULL, err);
	if (pfd >= 0)
		close(pfd);
	if (logfd >= 0)
		close(logfd);
	free(rel);
	free(profile);
	if (rc < 0) {
		/* Nothing was created on disk: no manifest to leave behind. */
		s->manifest_written = true;
		rp_session_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* ---- saving chunks on the ring writer's thread ---- */

static void append_saved(struct rp_session *s, struct device *d, struct saved *e)
{
	s->pending_bytes += sizeof(*e) + e->len;
	if (d->tail)
		d->tail->next = e;
	else
		d->head = e;
	d->tail = e;
}

/* Extend the last run of the same kind, or start a new one. */
static void note_run(struct rp_session *s, struct device *d, enum saved_kind kind, uint64_t seq)
{
	struct saved *t = d->tail;
	if (t && t->kind == kind && t->last_seq + 1 == seq) {
		t->last_seq = seq;
		return;
	}
	struct saved *e = malloc(sizeof(*e));
	if (!e)
		return; /* the seq stays a gap and is written off when settled */
	*e = (struct saved){ .kind = kind, .seq = seq, .last_seq = seq };
	append_saved(s, d, e);
}

static int save_chunk(void *ctx, const void *chunk, size_t len, const struct rp_chunk_header *hdr)
{
	struct device *d = ctx;
	struct rp_session *s = d->s;
	pthread_mutex_lock(&s->lock);
	if (hdr->seq >= atomic_load(&d->cursor)) {
		struct saved *e = NULL;
		if (!overlaps(s->start_ns, s->end_ns, hdr))
			note_run(s, d, SAVED_OUTSIDE, hdr->seq);
		else if (s->pending_bytes + sizeof(*e) + len > PENDING_MAX_BYTES ||
			 !(e = malloc(sizeof(*e) + len)))
			note_run(s, d, SAVED_LOST, hdr->seq);
		if (e) {
			*e = (struct saved){ .kind = SAVED_CHUNK, .seq = hdr->seq, .last_seq = hdr->seq,
					     .len = len, .hdr = *hdr };
			memcpy(e->data, chunk, len);
			append_saved(s, d, e);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void free_saved(struct rp_session *s, struct device *d)
{
	pthread_mutex_lock(&s->lock);
	while (d->head) {
		struct saved *e = d->head;
		d->head = e->next;
		s->pending_bytes -= sizeof(*e) + e->len;
		free(e);
	}
	d->tail = NULL;
	pthread_mutex_unlock(&s->lock);
}

static void unpin_all(struct rp_session *s)
{
	for (size_t i = 0; i < s->ndevs; i++) {
		rp_ringfile_unpin(s->devs[i]->rf, s->devs[i]->pin);
		s->devs[i]->pin = NULL;
	}
}

/* The session fails: stop pinning, drop what was saved, keep the reason. */
static void fail(struct rp_session *s, const struct rp_err *why)
{
	s->state = RP_SESSION_FAILED;
	s->error = *why;
	unpin_all(s);
	for (size_t i = 0; i < s->ndevs; i++)
		free_saved(s, s->devs[i]);
}

/* ---- adding rings ---- */

static void free_device(struct device *d)
{
	if (!d)
		return;
	if (d->fd >= 0)
		close(d->fd);
	free(d->name);
	free(d->file);
	free(d->prov);
	free(d);
}

/* The seq to copy from: the first chunk overlapping the window, or the
 * next one to be written when none does yet. */
static int first_seq(struct rp_session *s, struct rp_ringfile *rf, uint64_t *seq)
{
	*seq = rp_ringfile_next_seq(rf);
	struct rp_ringfile_iter *it;
	int rc = rp_ringfile_iter_new(rf, s->start_ns, s->end_ns, &it);
	if (rc < 0)
		return rc;
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	if (rp_ringfile_iter_next(it, &chunk, &len, &h) == 1)
		*seq = h.seq;
	rp_ringfile_iter_free(it);
	return 0;
}

static void ring_horizon(struct device *d)
{
	struct rp_ringfile_stats st;
	rp_ringfile_stats(d->rf, &st);
	d->slot_count = st.slot_count;
	d->horizon_s = st.chunks ? (double)(st.last_ts - st.first_ts) / 1e9 : 0;
}

/* The .chunks file's name in the session directory (d->file is its path). */
static const char *chunks_name(const struct device *d)
{
	return d->file + strlen(d->s->path) + 1;
}

static int add_ring(struct rp_session *s, const char *device, struct rp_ringfile *rf,
		    struct rp_err *err)
{
	struct device *d = calloc(1, sizeof(*d));
	struct device **devs = realloc(s->devs, (s->ndevs + 1) * sizeof(*devs));
	if (devs)
		s->devs = devs;
	if (!d || !devs) {
		free(d);
		return rp_err_set(err, -ENOMEM, "out of memory adding ring %s to session %s",
				  device, s->id);
	}
	d->s = s;
	d->rf = rf;
	d->fd = -1;
	d->name = strdup(device);
	d->file = join("%s/%s.%s.chunks", s->path, s->file_host, device);
	if (!d->name || !d->file) {
		free_device(d);
		return rp_err_set(err, -ENOMEM, "out of memory adding ring %s to session %s",
				  device, s->id);
	}
	ring_horizon(d);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	d->held_from = st.chunks ? st.first_ts : UINT64_MAX;
	uint64_t from;
	int rc = first_seq(s, rf, &from);
	if (rc < 0) {
		free_device(d);
		return rp_err_set(err, rc, "cannot read ring %s for session %s: %s", device, s->id,
				  strerror(-rc));
	}
	atomic_store(&d->cursor, from);
	/* O_RDWR: chunks copied while the window was open are read back at
	 * close to count the events past its end. */
	d->fd = openat(s->dirfd, chunks_name(d),
		       O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (d->fd < 0) {
		int e = errno;
		rc = e == EEXIST ? rp_err_set(err, -EEXIST, "ring %s is already part of session %s "
					      "(%s exists): add each device once", device, s->id,
					      d->file)
				 : write_error(err, e, d->file);
		free_device(d);
		return rc;
	}
	rc = rp_ringfile_pin(rf, from, UINT64_MAX, save_chunk, d, &d->pin);
	if (rc < 0) {
		(void)unlinkat(s->dirfd, chunks_name(d), 0);
		free_device(d);
		return rp_err_set(err, rc, "cannot pin ring %s for session %s: %s", device, s->id,
				  strerror(-rc));
	}
	s->devs[s->ndevs++] = d;
	return 0;
}

int rp_session_add_ring(struct rp_session *s, const char *device, struct rp_ringfile *rf,
			struct rp_err *err)
{
	if (s->state != RP_SESSION_OPEN)
		return rp_err_set(err, -EINVAL, "session %s is %s: rings can only join an open "
				  "session", s->id, state_name(s->state));
	/* A session without one of its devices would be incomplete without
	 * saying so: it fails, and its manifest says why. */
	struct rp_err why = { 0 };
	int rc = add_ring(s, device, rf, &why);
	if (rc < 0) {
		fail(s, &why);
		if (err)
			*err = why;
	}
	return rc;
}

/* ---- copying ---- */

/* Events and drops of one chunk stamped inside [start_ns, end]. */
static int count_window(struct rp_session *s, const void *chunk, size_t len,
			const struct rp_chunk_header *h, uint64_t end, uint64_t *events,
			uint64_t *drops, struct rp_err *err)
{
	*events = *drops = 0;
	if (h->first_ts >= s->start_ns && h->last_ts <= end) {
		*events = h->event_count;
		*drops = h->dropped;
		return 0;
	}
	int rc = rp_chunk_reader_load(s->reader, chunk, len, err);
	struct rp_event ev;
	while (rc == 0 && (rc = rp_chunk_reader_next(s->reader, &ev, err)) == 1) {
		rc = 0;
		if (ev.ts < s->start_ns || ev.ts > end)
			continue;
		(*events)++;
		if (ev.kind == RP_EV_DROPS)
			*drops += ev.u.drops.count;
	}
	if (rc < 0)
		rp_err_prefix(err, "counting the events of chunk %llu for session %s",
			      (unsigned long long)h->seq, s->id);
	return rc;
}

static int write_chunk(struct rp_session *s, struct device *d, const void *chunk, size_t len,
		       const struct rp_chunk_header *h, struct rp_err *err)
{
	uint64_t events, drops;
	int rc = count_window(s, chunk, len, h, s->end_ns, &events, &drops, err);
	if (rc < 0)
		return rc;
	/* Until the device has a uid: a device's first uid may come after
	 * its first chunk (a producer that attached later).  Only the
	 * chunk's head is decoded, where the writer puts device_info; a chunk
	 * that cannot be read there is copied all the same (readers skip it). */
	if (!d->id.uid[0])
		(void)rp_chunk_reader_device_info(s->reader, chunk, len, &d->id, NULL);
	if (s->end_ns == UINT64_MAX) {
		if (d->nprov == d->prov_cap) {
			size_t cap = d->prov_cap ? d->prov_cap * 2 : 64;
			struct provisional *p = realloc(d->prov, cap * sizeof(*p));
			if (!p)
				return rp_err_set(err, -ENOMEM, "out of memory copying ring %s for "
						  "session %s", d->name, s->id);
			d->prov = p;
			d->prov_cap = cap;
		}
		d->prov[d->nprov++] = (struct provisional){ d->off, h->last_ts, events, drops, len };
	}
	rc = write_all(d->fd, chunk, len);
	if (rc < 0)
		return write_error(err, -rc, d->file);
	/* Start write-back of every full 8 MiB as the copy goes, so that the
	 * closing fsync finds little left to do and disk writes overlap the
	 * reads from the ring. */
	enum { WRITEBACK_STEP = 8 << 20 };
	if ((d->off + len) / WRITEBACK_STEP != d->off / WRITEBACK_STEP)
		sync_file_range(d->fd, (off_t)((d->off + len) / WRITEBACK_STEP - 1) * WRITEBACK_STEP,
				WRITEBACK_STEP, SYNC_FILE_RANGE_WRITE);
	d->off += len;
	d->chunks++;
	d->events += events;
	d->dropped += drops;
	if (d->chunks == 1 || h->first_ts < d->first_ts)
		d->first_ts = h->first_ts;
	if (h->last_ts > d->last_ts)
		d->last_ts = h->last_ts;
	d->resume_ts = h->first_ts;
	atomic_store(&d->cursor, h->seq + 1);
	return 0;
}

/* Whether seqs up to `last`, missing from both the ring and the saved
 * list, are gone for good: none can still be in flight (a ring has fewer
 * writes in flight than slots) or be overwritten without its save being
 * listed already (next was read before the ring was looked at).  After
 * unpin (final) nothing more can arrive. */
static bool settled(const struct device *d, uint64_t last, uint64_t next, bool final)
{
	return final || last + d->slot_count < next;
}

static int use_saved(struct rp_session *s, struct device *d, const struct saved *e,
		     struct rp_err *err)
{
	uint64_t cursor = atomic_load(&d->cursor);
	uint64_t from = e->seq > cursor ? e->seq : cursor;
	d->lost += from - cursor;
	if (e->kind == SAVED_CHUNK && overlaps(s->start_ns, s->end_ns, &e->hdr))
		return write_chunk(s, d, e->data, e->len, &e->hdr, err);
	if (e->kind == SAVED_LOST)
		d->lost += e->last_seq + 1 - from;
	atomic_store(&d->cursor, e->last_seq + 1);
	return 0;
}

/* Write the saved chunks before seq `upto` and account for the gaps up to
 * it.  1: the cursor is at upto; 0: held back at an unsettled gap. */
static int catch_up(struct rp_session *s, struct device *d, uint64_t upto, uint64_t next,
		    bool final, struct rp_err *err)
{
	for (;;) {
		uint64_t cursor = atomic_load(&d->cursor);
		struct saved part; /* the part of a run before upto */
		pthread_mutex_lock(&s->lock);
		struct saved *e = d->head;
		bool stale = e && e->last_seq < cursor;
		bool ready = e && e->seq < upto &&
			     (e->seq <= cursor || settled(d, e->seq - 1, next, final));
		bool split = !stale && ready && e->kind != SAVED_CHUNK && e->last_seq >= upto;
		if (split) {
			/* A run the ring also returned a chunk of (read before
			 * its overwrite): that chunk is kept. */
			part = *e;
			part.last_seq = upto - 1;
			e->seq = upto;
		} else if (stale || ready) {
			d->head = e->next;
			if (!d->head)
				d->tail = NULL;
			s->pending_bytes -= sizeof(*e) + e->len;
		}
		pthread_mutex_unlock(&s->lock);
		if (stale) {
			free(e);
			continue;
		}
		if (!ready) {
			if (e && e->seq < upto)
				return 0;
			break;
		}
		int rc = use_saved(s, d, split ? &part : e, err);
		if (!split)
			free(e);
		if (rc < 0)
			return rc;
	}
	uint64_t cursor = atomic_load(&d->cursor);
	if (upto == UINT64_MAX || upto <= cursor)
		return 1;
	if (!settled(d, upto - 1, next, final))
		return 0;
	d->lost += upto - cursor;
	atomic_store(&d->cursor, upto);
	return 1;
}

/* ---- the read cache shared by open sessions ---- */

/* Chunks one refresh read, held for the rest of the pump pass. */
#define CACHE_MAX_BYTES (64u << 20)

struct cached {
	size_t len;
	struct rp_chunk_header hdr;
	unsigned char data[];
};

struct cache_ring {
	struct rp_ringfile *rf;
	uint64_t pass;            /* of its last refresh */
	uint64_t lo, hi;          /* that refresh read the chunks in [lo, hi) */
	struct cached **items;    /* by seq */
	size_t n, bytes;
};

struct rp_session_cache {
	uint64_t pass;
	struct cache_ring *rings;
	size_t nrings;
	_Atomic uint64_t read_bytes;
};

int rp_session_cache_new(struct rp_session_cache **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->pass = 1; /* rings not seen yet have pass 0: refreshed on first use */
	return 0;
}

static void cache_drop(struct cache_ring *cr)
{
	for (size_t i = 0; i < cr->n; i++)
		free(cr->items[i]);
	free(cr->items);
	cr->items = NULL;
	cr->n = cr->bytes = 0;
}

void rp_session_cache_end(struct rp_session_cache *c)
{
	for (size_t i = 0; i < c->nrings; i++)
		cache_drop(&c->rings[i]);
}

void rp_session_cache_begin(struct rp_session_cache *c)
{
	rp_session_cache_end(c);
	c->pass++;
}

uint64_t rp_session_cache_read_bytes(const struct rp_session_cache *c)
{
	return atomic_load(&c->read_bytes);
}

void rp_session_cache_free(struct rp_session_cache *c)
{
	if (!c)
		return;
	rp_session_cache_end(c);
	free(c->rings);
	free(c);
}

/* Read ring rf's chunks sealed since the last pass (from `from` when it
 * was not refreshed then), up to CACHE_MAX_BYTES: the rest waits for the
 * next pass. */
static int cache_refresh(struct rp_session_cache *c, struct cache_ring *cr, uint64_t from)
{
	if (cr->pass + 1 != c->pass)
		cr->hi = from;
	cr->pass = c->pass;
	cr->lo = cr->hi;
	struct rp_ringfile_iter *it;
	int rc = rp_ringfile_iter_new(cr->rf, 0, UINT64_MAX, &it);
	if (rc < 0)
		return rc;
	rp_ringfile_iter_skip_below(it, cr->hi);
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	while (cr->bytes < CACHE_MAX_BYTES && (rc = rp_ringfile_iter_next(it, &chunk, &len, &h)) == 1) {
		atomic_fetch_add(&c->read_bytes, len);
		struct cached *e = malloc(sizeof(*e) + len);
		struct cached **items = e ? realloc(cr->items, (cr->n + 1) * sizeof(*items)) : NULL;
		if (!items) {
			free(e);
			rc = -ENOMEM;
			break;
		}
		cr->items = items;
		e->len = len;
		e->hdr = h;
		memcpy(e->data, chunk, len);
		cr->items[cr->n++] = e;
		cr->bytes += len;
		cr->hi = h.seq + 1;
	}
	rp_ringfile_iter_free(it);
	return rc < 0 ? rc : 0;
}

/* The cache of ring rf for this pass, refreshed on first use; NULL with
 * *rc set when it cannot be had (the session reads the ring itself). */
static struct cache_ring *cache_ring(struct rp_session_cache *c, struct rp_ringfile *rf,
				     uint64_t from, int *rc)
{
	struct cache_ring *cr = NULL;
	for (size_t i = 0; i < c->nrings && !cr; i++)
		if (c->rings[i].rf == rf)
			cr = &c->rings[i];
	if (!cr) {
		struct cache_ring *rings = realloc(c->rings, (c->nrings + 1) * sizeof(*rings));
		if (!rings) {
			*rc = -ENOMEM;
			return NULL;
		}
		c->rings = rings;
		cr = &c->rings[c->nrings++];
		*cr = (struct cache_ring){ .rf = rf };
	}
	if (cr->pass != c->pass && (*rc = cache_refresh(c, cr, from)) < 0) {
		cache_drop(cr);
		cr->pass = 0; /* the next use reads again, from its cursor */
		return NULL;
	}
	return cr;
}

/* ---- pumping ---- */

/* Copy one chunk the ring held (read from it or from the cache), after
 * the saved chunks and gaps before it.  1: copied; 0: held back at an
 * unsettled gap (*held); negative: error. */
static int copy_chunk(struct rp_session *s, struct device *d, const void *chunk, size_t len,
		      const struct rp_chunk_header *h, uint64_t next, bool final, bool *held,
		      struct rp_err *err)
{
	if (h->seq < atomic_load(&d->cursor))
		return 1;
	int rc = catch_up(s, d, h->seq, next, final, err);
	*held = rc == 0;
	if (rc <= 0)
		return rc;
	rc = write_chunk(s, d, chunk, len, h, err);
	return rc < 0 ? rc : 1;
}

/* The pass's chunks from the shared cache: -EAGAIN when it does not
 * reach back to the cursor (the session reads the ring itself). */
static int copy_cached(struct rp_session *s, struct device *d, uint64_t t0, uint64_t next,
		       bool *held, struct rp_err *err)
{
	int rc = 0;
	uint64_t cursor = atomic_load(&d->cursor);
	struct cache_ring *cr = cache_ring(s->cache, d->rf, cursor, &rc);
	if (!cr || cursor < cr->lo)
		return -EAGAIN;
	for (size_t i = 0; i < cr->n; i++) {
		const struct cached *e = cr->items[i];
		if (!overlaps(t0, s->end_ns, &e->hdr))
			continue;
		rc = copy_chunk(s, d, e->data, e->len, &e->hdr, next, false, held, err);
		if (rc <= 0)
			return rc;
	}
	return 0;
}

static int pump_device(struct rp_session *s, struct device *d, bool final, struct rp_err *err)
{
	uint64_t next = rp_ringfile_next_seq(d->rf);
	/* Between pumps, look only from the last chunk copied on: chunks of
	 * the window further back (out of order) reach the cursor through the
	 * pin's save once overwritten.  The final pump looks at everything. */
	uint64_t t0 = s->start_ns;
	if (!final && d->chunks && d->resume_ts > t0)
		t0 = d->resume_ts;
	bool held = false;
	/* Sessions open together share one read of the ring per pass; the
	 * final pumps read what the pass has not, themselves. */
	int rc = !final && s->cache ? copy_cached(s, d, t0, next, &held, err) : -EAGAIN;
	if (rc == -EAGAIN) {
		struct rp_ringfile_iter *it;
		rc = rp_ringfile_iter_new(d->rf, t0, s->end_ns, &it);
		if (rc < 0)
			return rp_err_set(err, rc, "cannot read ring %s for session %s: %s", d->name,
					  s->id, strerror(-rc));
		const void *chunk;
		size_t len;
		struct rp_chunk_header h;
		rp_ringfile_iter_skip_below(it, atomic_load(&d->cursor));
		for (;;) {
			int r = rp_ringfile_iter_next(it, &chunk, &len, &h);
			if (r < 0)
				rc = rp_err_set(err, r, "cannot read ring %s for session %s: %s", d->name,
						s->id, strerror(-r));
			if (r <= 0)
				break;
			if (s->cache)
				atomic_fetch_add(&s->cache->read_bytes, len);
			rc = copy_chunk(s, d, chunk, len, &h, next, final, &held, err);
			if (rc <= 0)
				break;
		}
		rp_ringfile_iter_free(it);
	}
	if (rc >= 0 && !held)
		rc = catch_up(s, d, UINT64_MAX, next, final, err);
	ring_horizon(d);
	return rc < 0 ? rc : 0;
}

/* Pump every device.  Running out of memory leaves the session open for
 * the next pump to retry; any other error fails it.  err is not NULL. */
static int pump(struct rp_session *s, bool final, struct rp_err *err)
{
	for (size_t i = 0; i < s->ndevs; i++) {
		int rc = pump_device(s, s->devs[i], final, err);
		if (rc < 0) {
			if (rc != -ENOMEM)
				fail(s, err);
			return rc;
		}
	}
	return 0;
}

int rp_session_pump(struct rp_session *s, struct rp_err *err)
{
	/* A failed session reported why when it failed; a closed one is done. */
	if (s->state != RP_SESSION_OPEN)
		return 0;
	struct rp_err why = { 0 };
	int rc = pump(s, false, &why);
	/* Retention takes a session whose marker went stale for abandoned. */
	uint64_t now = rp_clock_now_ns();
	if (rc == 0 && now - s->touched_ns >= RP_SESSION_OPEN_FRESH_NS / 10) {
		if (utimensat(s->dirfd, s->marker, NULL, AT_SYMLINK_NOFOLLOW) < 0)
			rc = rp_err_set(&why, -errno, "cannot refresh %s/%s: %s: retention may delete "
					"the session as abandoned; check the log directory", s->path,
					s->marker, strerror(errno));
		else
			s->touched_ns = now;
	}
	if (rc < 0 && err)
		*err = why;
	return rc;
}

/* Chunks copied while the window was open were counted up to "forever";
 * those reaching past the end it got are counted again. */
static int recount_edges(struct rp_session *s, struct device *d, struct rp_err *err)
{
	unsigned char *buf = NULL;
	int rc = 0;
	for (size_t i = 0; i < d->nprov && rc == 0; i++) {
		const struct provisional *p = &d->prov[i];
		if (p->last_ts <= s->end_ns)
			continue;
		unsigned char *b = realloc(buf, p->len);
		if (!b) {
			rc = rp_err_set(err, -ENOMEM, "out of memory closing session %s", s->id);
			break;
		}
		buf = b;
		ssize_t n = pread(d->fd, buf, p->len, (off_t)p->off);
		if (n != (ssize_t)p->len) {
			rc = rp_err_set(err, n < 0 ? -errno : -EIO, "cannot read back %s: %s: check "
					"the disk", d->file, n < 0 ? strerror(errno) : "short read");
			break;
		}
		struct rp_chunk_header h;
		uint64_t events, drops;
		rc = rp_chunk_header_check(buf, p->len, &h, err);
		if (rc == 0)
			rc = count_window(s, buf, p->len, &h, s->end_ns, &events, &drops, err);
		if (rc == 0) {
			d->events += events - p->events;
			d->dropped += drops - p->drops;
		}
	}
	free(buf);
	free(d->prov);
	d->prov = NULL;
	d->nprov = d->prov_cap = 0;
	return rc;
}

/* Last pumps, exact counts, data on disk; any error fails the session. */
static void finish(struct rp_session *s)
{
	struct rp_err why = { 0 };
	int rc = pump(s, false, &why);
	unpin_all(s);
	/* After unpin no save runs: every gap left is a loss. */
	if (rc == 0)
		rc = pump(s, true, &why);
	for (size_t i = 0; i < s->ndevs && rc == 0; i++) {
		struct device *d = s->devs[i];
		rc = recount_edges(s, d, &why);
		if (rc == 0 && fsync(d->fd) < 0)
			rc = write_error(&why, errno, d->file);
	}
	if (rc < 0 && s->state == RP_SESSION_OPEN)
		fail(s, &why);
}

/* ---- JSON ---- */

static json_t *ns_json(uint64_t ns)
{
	return ns > INT64_MAX ? json_null() : json_integer((json_int_t)ns);
}

static json_t *window_json(const struct rp_session *s, uint64_t start, uint64_t end)
{
	json_t *w = json_object();
	json_object_set_new(w, "start_ns", ns_json(start));
	json_object_set_new(w, "end_ns", ns_json(end));
	json_object_set_new(w, "start_wall_ns", json_integer((json_int_t)start + s->wall_offset_ns));
	json_object_set_new(w, "end_wall_ns", end > INT64_MAX ? json_null()
				: json_integer((json_int_t)end + s->wall_offset_ns));
	return w;
}

/* What the rings held of the requested window; false when nothing.  A
 * ring covers from its oldest data up to the end of the window (the
 * daemon seals everything up to the end before closing), whether or not
 * producers were busy then: an idle stretch is covered, just empty. */
static bool covered(const struct rp_session *s, uint64_t *start, uint64_t *end)
{
	uint64_t oldest = UINT64_MAX, newest = 0;
	for (size_t i = 0; i < s->ndevs; i++) {
		const struct device *d = s->devs[i];
		if (d->held_from < oldest)
			oldest = d->held_from;
		if (d->chunks && d->first_ts < oldest)
			oldest = d->first_ts;
		if (d->chunks && d->last_ts > newest)
			newest = d->last_ts;
	}
	*start = oldest > s->start_ns ? oldest : s->start_ns;
	/* While open, the window so far ends with the newest data copied. */
	*end = s->end_ns != UINT64_MAX ? s->end_ns : newest;
	return oldest != UINT64_MAX && *start <= *end;
}

static json_t *device_json(const struct device *d, bool manifest)
{
	json_t *o = json_object();
	struct rp_device_identity id = d->id;
	if (!id.kind) /* chunks recorded before device_info events, or none */
		(void)rp_device_identify(d->name, &id);
	json_object_set_new(o, "device", json_string(d->name));
	json_object_set_new(o, "kind", json_string(rp_device_kind_name(id.kind)));
	json_object_set_new(o, "index", json_integer(id.index));
	json_object_set_new(o, "uid", json_string(id.uid));
	json_object_set_new(o, "events", json_integer((json_int_t)d->events));
	json_object_set_new(o, "chunks", json_integer((json_int_t)d->chunks));
	json_object_set_new(o, "dropped", json_integer((json_int_t)d->dropped));
	json_object_set_new(o, "bytes", json_integer((json_int_t)d->off));
	json_object_set_new(o, "horizon_s", json_real(d->horizon_s));
	if (manifest) {
		json_object_set_new(o, "file", json_string(strrchr(d->file, '/') + 1));
		json_object_set_new(o, "lost_chunks", json_integer((json_int_t)d->lost));
		json_object_set_new(o, "first_ns", d->chunks ? ns_json(d->first_ts) : json_null());
		json_object_set_new(o, "last_ns", d->chunks ? ns_json(d->last_ts) : json_null());
	}
	return o;
}

/* The session object of docs/api.md; the manifest adds what a reader of
 * the files needs. */
static json_t *session_json(const struct rp_session *s, bool manifest)
{
	json_t *o = json_object();
	if (manifest)
		json_object_set_new(o, "schema_version", json_integer(1));
	json_object_set_new(o, "id", json_string(s->id));
	json_object_set_new(o, "run", json_string(s->run));
	json_object_set_new(o, "kind", json_string(kind_name(s->kind)));
	json_object_set_new(o, "state", json_string(state_name(s->state)));
	json_object_set_new(o, "path", json_string(s->path));
	json_object_set_new(o, "host", json_string(s->host));
	json_t *req = window_json(s, s->start_ns, s->end_ns);
	/* Asked to start before boot: start_ns is 0, the clock's first
	 * instant; the wall clock says what was asked. */
	if (s->end_ns != UINT64_MAX && s->asked_ns > s->end_ns - s->start_ns)
		json_object_set_new(req, "start_wall_ns", json_integer((json_int_t)s->end_ns -
									(json_int_t)s->asked_ns +
									s->wall_offset_ns));
	json_object_set_new(o, "requested", req);
	uint64_t cs, ce;
	bool any = covered(s, &cs, &ce);
	json_object_set_new(o, "covered", any ? window_json(s, cs, ce) : json_null());
	if (manifest) {
		/* Complete: the rings held the whole window and none of its
		 * chunks were lost on the way. */
		bool complete = any && cs == s->start_ns && ce == s->end_ns;
		for (size_t i = 0; i < s->ndevs; i++)
			complete = complete && !s->devs[i]->lost;
		json_object_set_new(o, "complete_coverage", json_boolean(complete));
		json_object_set_new(o, "clock", json_string("CLOCK_MONOTONIC"));
		json_object_set_new(o, "wall_offset_ns", json_integer(s->wall_offset_ns));
	}
	json_t *devs = json_array();
	for (size_t i = 0; i < s->ndevs; i++)
		json_array_append_new(devs, device_json(s->devs[i], manifest));
	json_object_set_new(o, "devices", devs);
	json_t *trigger = json_object();
	if (s->trigger_extra)
		json_object_update(trigger, s->trigger_extra);
	json_object_set_new(trigger, "source", json_string(s->source));
	json_object_set_new(trigger, "reason", s->reason ? json_string(s->reason) : json_null());
	json_object_set_new(trigger, "created_wall_ns", json_integer(s->created_wall_ns));
	json_object_set_new(o, "trigger", trigger);
	if (s->filter)
		json_object_set(o, "filter", s->filter);
	if (s->state == RP_SESSION_FAILED)
		json_object_set_new(o, "error", json_string(s->error.msg));
	/* Only a complete session gets exported. */
	if (s->state == RP_SESSION_COMPLETE)
		json_object_set(o, "exports", s->exports);
	return o;
}

json_t *rp_session_to_json(const struct rp_session *s)
{
	return session_json(s, false);
}

/* A temporary file, fsync, rename, fsync the directory: a reader sees the
 * old manifest or the new one, never half of one.  The temporary name is
 * random and made with O_EXCL | O_NOFOLLOW: a link planted at any name in
 * the directory (dirfd, shown as dir) is never written through.  gone
 * (NULL: none) is removed once the manifest is in place. */
static int store_manifest(int dirfd, const char *dir, const char *file_host, const char *text,
			  const char *gone, struct rp_err *err)
{
	char *final = join("%s" RP_SESSION_MANIFEST_SUFFIX, file_host);
	if (!text || !final) {
		free(final);
		return rp_err_set(err, -ENOMEM, "out of memory writing the manifest in %s", dir);
	}
	struct rp_safefs_tmp tmp;
	int rc = rp_safefs_tmp_open(dirfd, final, 0640, &tmp, dir, err);
	if (rc == 0 && (rc = write_all(tmp.fd, text, strlen(text))) < 0) {
		rp_safefs_tmp_discard(&tmp);
		rc = write_error(err, -rc, dir);
	}
	if (rc == 0)
		rc = rp_safefs_tmp_publish(&tmp, final, dir, err);
	/* A marker left behind (an unlink failing here) only keeps retention
	 * off the session until it goes stale. */
	if (rc == 0 && gone)
		(void)unlinkat(dirfd, gone, 0);
	free(final);
	return rc;
}

/* The .open marker goes once the manifest is in place. */
static int write_manifest(struct rp_session *s, struct rp_err *err)
{
	s->manifest_written = true;
	if (s->dirfd < 0)
		return 0; /* nothing was created on disk */
	json_t *m = session_json(s, true);
	char *text = json_dumps(m, JSON_INDENT(2));
	json_decref(m);
	int rc = text ? store_manifest(s->dirfd, s->path, s->file_host, text, s->marker, err)
		      : rp_err_set(err, -ENOMEM, "out of memory writing the manifest of session %s",
				   s->id);
	free(text);
	return rc;
}

int rp_session_close(struct rp_session *s, uint64_t end_ns, struct rp_err *err)
{
	if (s->manifest_written)
		return rp_err_set(err, -EALREADY, "session %s is already closed", s->id);
	/* An end before the start (a clock step) is an empty window. */
	pthread_mutex_lock(&s->lock);
	s->end_ns = end_ns < s->start_ns ? s->start_ns : end_ns;
	pthread_mutex_unlock(&s->lock);
	if (s->state == RP_SESSION_OPEN)
		finish(s);
	if (s->state == RP_SESSION_OPEN)
		s->state = RP_SESSION_COMPLETE;
	struct rp_err why = { 0 };
	if (write_manifest(s, &why) < 0 && s->state == RP_SESSION_COMPLETE)
		fail(s, &why);
	if (s->state != RP_SESSION_FAILED)
		return 0;
	if (err)
		*err = s->error;
	return s->error.code;
}

int rp_session_set_filter(struct rp_session *s, const uint32_t *pids, size_t n, const char *cgroup)
{
	json_t *f = json_object(), *list = json_array();
	bool ok = f && list && json_object_set(f, "pids", list) == 0 &&
		  (!cgroup || !cgroup[0] || json_object_set_new(f, "cgroup", json_string(cgroup)) == 0);
	for (size_t i = 0; ok && i < n; i++)
		ok = json_array_append_new(list, json_integer(pids[i])) == 0;
	json_decref(list);
	if (!ok) {
		json_decref(f);
		return -ENOMEM;
	}
	json_decref(s->filter);
	s->filter = f;
	return 0;
}

const char *rp_session_name(const struct rp_session *s) { return s->id; }
const char *rp_session_path(const struct rp_session *s) { return s->path; }
enum rp_session_state rp_session_state_of(const struct rp_session *s) { return s->state; }

void rp_session_free(struct rp_session *s)
{
	if (!s)
		return;
	if (!s->manifest_written) {
		if (s->state == RP_SESSION_OPEN) {
			struct rp_err why;
			rp_err_set(&why, -ECANCELED, "daemon stopped before the session was closed");
			fail(s, &why);
		}
		write_manifest(s, NULL);
	}
	unpin_all(s);
	for (size_t i = 0; i < s->ndevs; i++) {
		free_saved(s, s->devs[i]);
		free_device(s->devs[i]);
	}
	free(s->devs);
	rp_chunk_reader_free(s->reader);
	json_decref(s->trigger_extra);
	json_decref(s->exports);
	json_decref(s->filter);
	pthread_mutex_destroy(&s->lock);
	free(s->id);
	free(s->run);
	free(s->host);
	free(s->file_host);
	free(s->marker);
	free(s->path);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->source);
	free(s->reason);
	free(s);
}

int rp_session_set_export(int dirfd, const char *dir, const char *host, const char *format,
			  json_t *state, struct rp_err *err)
{
	char *file_host = strdup(host);
	if (file_host)
		rp_session_file_host(file_host);
	char *name = file_host ? join("%s" RP_SESSION_MANIFEST_SUFFIX, file_host) : NULL;
	int rc = name ? 0 : rp_err_set(err, -ENOMEM, "out of memory updating a manifest in %s", dir);
	char *text = NULL;
	size_t len = 0;
	if (rc == 0)
		rc = rp_safefs_read(dirfd, name, RP_SAFEFS_META_MAX, &text, &len, dir, err);
	json_error_t je;
	json_t *m = text ? json_loadb(text, len, 0, &je) : NULL;
	free(text);
	text = NULL;
	json_t *exports = json_object_get(m, "exports");
	if (rc == 0 && !json_is_object(exports))
		rc = rp_err_set(err, m ? -EBADMSG : -EINVAL, "cannot record the %s export in %s/%s: %s",
				format, dir, name, m ? "it lists no exports" : je.text);
	if (rc == 0 && (json_object_set(exports, format, state) < 0 ||
			!(text = json_dumps(m, JSON_INDENT(2)))))
		rc = rp_err_set(err, -ENOMEM, "out of memory updating %s/%s", dir, name);
	if (rc == 0)
		rc = store_manifest(dirfd, dir, file_host, text, NULL, err);
	free(text);
	json_decref(m);
	free(name);
	free(file_host);
	return rc;
}

/* ---- reading a session back ---- */

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int rp_session_manifests_at(int dirfd, const char *dir, json_t **out, struct rp_err *err)
{
	*out = NULL;
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return rp_err_set(err, -e, "cannot read session directory %s: %s", dir, strerror(e));
	}
	rewinddir(d);
	const size_t slen = strlen(RP_SESSION_MANIFEST_SUFFIX);
	char **names = NULL;
	size_t n = 0;
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (e->d_name[0] == '.' || len <= slen ||
		    strcmp(e->d_name + len - slen, RP_SESSION_MANIFEST_SUFFIX))
			continue;
		char **grown = realloc(names, (n + 1) * sizeof(*names));
		if (grown)
			names = grown;
		if (!grown || !(names[n] = strdup(e->d_name)))
			rc = rp_err_set(err, -ENOMEM, "out of memory reading %s", dir);
		else
			n++;
	}
	closedir(d);
	json_t *list = rc == 0 ? json_array() : NULL;
	if (rc == 0 && !list)
		rc = rp_err_set(err, -ENOMEM, "out of memory reading %s", dir);
	if (rc == 0 && n) /* qsort wants a non-null array even when empty */
		qsort(names, n, sizeof(*names), by_name);
	for (size_t i = 0; i < n; i++) {
		/* Only regular files of a manifest's size: a FIFO, a link or a
		 * huge file planted under a manifest's name is skipped. */
		char *text = NULL;
		size_t len = 0;
		json_t *m = rc == 0 && rp_safefs_read(dirfd, names[i], RP_SAFEFS_META_MAX, &text,
						      &len, dir, NULL) == 0
				    ? json_loadb(text, len, 0, NULL) : NULL;
		if (json_is_object(m)) {
			json_object_set_new(m, "path", json_string(dir));
			json_array_append(list, m);
		}
		json_decref(m);
		free(text);
		free(names[i]);
	}
	free(names);
	*out = list;
	return rc;
}

int rp_session_manifests(const char *dir, json_t **out, struct rp_err *err)
{
	*out = NULL;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot read session directory %s: %s", dir,
				  strerror(errno));
	int rc = rp_session_manifests_at(fd, dir, out, err);
	close(fd);
	return rc;
}

/* ---- reading a .chunks file back ---- */

struct rp_session_chunks {
	char *path;
	int fd;
	unsigned char *buf;
	size_t cap, pos, len;  /* buf[pos, len) is unread file data */
	uint64_t base;         /* file offset of buf[0] */
	bool eof;
	bool resync;           /* after a bad chunk: look for the next magic */
};

int rp_session_chunks_open(const char *path, struct rp_session_chunks **out, struct rp_err *err)
{
	struct rp_session_chunks *c = calloc(1, sizeof(*c));
	if (c)
		c->fd = -1;
	if (!c || !(c->path = strdup(path)) || !(c->buf = malloc(READ_BLOCK))) {
		rp_session_chunks_close(c);
		return rp_err_set(err, -ENOMEM, "out of memory opening %s", path);
	}
	c->cap = READ_BLOCK;
	/* A regular file only, never through a link nor blocking on a FIFO. */
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
	int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	int rc = !dir ? rp_err_set(err, -ENOMEM, "out of memory opening %s", path)
		: dfd < 0 ? rp_err_set(err, -errno, "cannot open session chunks %s: %s", path,
				       strerror(errno))
		: (c->fd = rp_safefs_open_regular(dfd, slash ? slash + 1 : path, UINT64_MAX, dir,
						  err));
	if (dfd >= 0)
		close(dfd);
	free(dir);
	if (rc < 0) {
		rp_session_chunks_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Have at least `need` unread bytes buffered, unless the file ends. */
static int fill(struct rp_session_chunks *c, size_t need, struct rp_err *err)
{
	if (c->len - c->pos >= need || c->eof)
		return 0;
	memmove(c->buf, c->buf + c->pos, c->len - c->pos);
	c->base += c->pos;
	c->len -= c->pos;
	c->pos = 0;
	if (need > c->cap) {
		unsigned char *b = realloc(c->buf, need);
		if (!b)
			return rp_err_set(err, -ENOMEM, "out of memory reading %s", c->path);
		c->buf = b;
		c->cap = need;
	}
	while (c->len < need) {
		ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return rp_err_set(err, -errno, "cannot read %s: %s", c->path, strerror(errno));
		if (n == 0) {
			c->eof = true;
			break;
		}
		c->len += (size_t)n;
	}
	return 0;
}

/* Move pos to the next chunk magic; false when the file ends first.  The
 * scan keeps at most one read block plus a magic's bytes in memory. */
static int find_magic(struct rp_session_chunks *c, bool *found, struct rp_err *err)
{
	const unsigned char magic[4] = { RP_CHUNK_MAGIC & 0xff, (RP_CHUNK_MAGIC >> 8) & 0xff,
					 (RP_CHUNK_MAGIC >> 16) & 0xff, RP_CHUNK_MAGIC >> 24 };
	for (;;) {
		unsigned char *p = memmem(c->buf + c->pos, c->len - c->pos, magic, sizeof(magic));
		if (p) {
			c->pos = (size_t)(p - c->buf);
			*found = true;
			return 0;
		}
		size_t keep = c->len - c->pos < sizeof(magic) ? c->len - c->pos : sizeof(magic) - 1;
		c->pos = c->len - keep;
		if (c->eof) {
			*found = false;
			return 0;
		}
		int rc = fill(c, keep + READ_BLOCK / 2, err);
		if (rc < 0)
			return rc;
	}
}

int rp_session_chunks_next(struct rp_session_chunks *c, const void **chunk, size_t *len,
			   struct rp_chunk_header *hdr, struct rp_err *err)
{
	for (;;) {
		if (c->resync) {
			bool found;
			int rc = find_magic(c, &found, err);
			if (rc < 0)
				return rc;
			if (!found) {
				c->pos = c->len;
				c->resync = false;
				return 0;
			}
		}
		int rc = fill(c, RP_CHUNK_HEADER_SIZE, err);
		if (rc < 0)
			return rc;
		size_t avail = c->len - c->pos;
		if (avail == 0)
			return 0;
		uint64_t at = c->base + c->pos;
		uint32_t comp = 0;
		if (avail >= RP_CHUNK_HEADER_SIZE) {
			const unsigned char *b = c->buf + c->pos + RP_CHUNK_COMP_SIZE_OFFSET;
			comp = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
			       (uint32_t)b[3] << 24;
			size_t want = RP_CHUNK_HEADER_SIZE + (size_t)comp;
			if (want <= RP_CHUNK_MAX && (rc = fill(c, want, err)) < 0)
				return rc;
			avail = c->len - c->pos;
		}
		size_t want = RP_CHUNK_HEADER_SIZE + (size_t)comp;
		struct rp_chunk_header h;
		struct rp_err why = { 0 };
		if (avail >= want && want <= RP_CHUNK_MAX &&
		    rp_chunk_header_check(c->buf + c->pos, want, &h, &why) == 0) {
			*chunk = c->buf + c->pos;
			*len = want;
			if (hdr)
				*hdr = h;
			c->pos += want;
			c->resync = false;
			return 1;
		}
		/* Skip a byte, then look for the next magic.  A candidate that
		 * fails while resyncing is no new error: the damage goes on. */
		c->pos++;
		if (c->resync)
			continue;
		c->resync = true;
		if (avail < want && c->eof)
			return rp_err_set(err, -EBADMSG, "%s: chunk at offset %llu is cut short (the "
					  "file ends early): the chunks before it are intact",
					  c->path, (unsigned long long)at);
		return rp_err_set(err, -EBADMSG, "%s: corrupt chunk at offset %llu (%s): skipping "
				  "to the next intact chunk", c->path, (unsigned long long)at,
				  why.msg[0] ? why.msg : "impossible size");
	}
}

void rp_session_chunks_close(struct rp_session_chunks *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c->path);
	free(c);
}
