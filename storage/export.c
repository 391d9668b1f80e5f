#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader.h"
#include "safefs.h"
#include "session.h"
#include "writers.h"

/* The writers taking only a reader and a file; names: formats.c. */
static int (*const writers[RP_EXPORT_NFORMATS])(struct rp_reader *, FILE *, struct rp_err *) = {
	/* xplane and perfetto take more: rp_export_host calls them. */
	[RP_EXPORT_PPROF] = rp_write_pprof,
	[RP_EXPORT_JSON] = rp_write_json,
	[RP_EXPORT_SUMMARY] = rp_write_summary,
	[RP_EXPORT_FLAMEGRAPH] = rp_write_flamegraph,
	[RP_EXPORT_FOLDED] = rp_write_folded,
};

/* Exports are as private as the session they come from: the session
 * directory's mode without its execute bits (the daemon's 0750 gives
 * 0640, like its chunk files), 0644 when it cannot be read. */
static mode_t session_mode(const char *session_dir)
{
	struct stat st;
	return stat(session_dir, &st) == 0 ? st.st_mode & 0666 : 0644;
}

/* Format f of reader r's host part into file `name` of directory dirfd
 * (path dir), through a temporary file renamed into place when whole: a
 * random name made with O_EXCL | O_NOFOLLOW, so a link planted at the
 * export's name or any guessable temporary name is never written through. */
static int write_format(struct rp_reader *r, const char *session_dir, enum rp_export_format f,
			int dirfd, const char *dir, const char *name,
			const struct rp_export_opts *opts, struct rp_err *err)
{
	struct rp_safefs_tmp tmp;
	int rc = rp_safefs_tmp_open(dirfd, name, session_mode(session_dir), &tmp, dir, err);
	FILE *out = rc == 0 ? fdopen(tmp.fd, "w") : NULL;
	if (rc == 0 && !out) {
		rc = rp_err_set(err, -errno, "cannot write %s/%s: %s", dir, tmp.name, strerror(errno));
		rp_safefs_tmp_discard(&tmp);
	}
	if (rc < 0) {
		rp_err_prefix(err, "%s export of %s (host %s)", rp_export_format_name(f), session_dir,
			      rp_reader_host(r));
		return rc;
	}
	/* XSpace's scratch file goes beside the export: that directory is
	 * writable, where /tmp may not be (ringprofd's unit). */
	if (f == RP_EXPORT_XPLANE)
		rc = rp_write_xplane(r, out, dir, err);
	else if (f == RP_EXPORT_PERFETTO)
		rc = rp_write_perfetto(r, out, opts->perfetto_grouping, err);
	else
		rc = writers[f](r, out, err);
	if (rc == 0 && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) < 0))
		rc = rp_err_set(err, errno ? -errno : -EIO, "cannot write %s/%s: %s%s", dir, name,
				strerror(errno ? errno : EIO),
				errno == ENOSPC ? " (free space on its file system, or export elsewhere "
						  "with -o)" : "");
	if (fclose(out) != 0 && rc == 0)
		rc = rp_err_set(err, -errno, "cannot write %s/%s: %s", dir, name, strerror(errno));
	tmp.fd = -1; /* closed with out */
	if (rc == 0)
		rc = rp_safefs_tmp_publish(&tmp, name, dir, err);
	else
		rp_safefs_tmp_discard(&tmp);
	if (rc < 0)
		rp_err_prefix(err, "%s export of %s (host %s)", rp_export_format_name(f), session_dir,
			      rp_reader_host(r));
	return rc;
}

static int check_opts(enum rp_export_format f, const struct rp_export_opts *opts,
		      struct rp_err *err)
{
	if (f >= RP_EXPORT_NFORMATS)
		return rp_err_set(err, -EINVAL, "unknown export format %d", (int)f);
	if (opts->perfetto_grouping >= RP_PERFETTO_NGROUPINGS)
		return rp_err_set(err, -EINVAL, "unknown Perfetto grouping %d",
				  (int)opts->perfetto_grouping);
	return 0;
}

static const struct rp_export_opts default_opts;

/* A reader of the manifest's part, with the options' filter. */
static int open_reader(const char *session_dir, json_t *manifest,
		       const struct rp_export_opts *opts, struct rp_reader **r, struct rp_err *err)
{
	int rc = rp_reader_open(session_dir, manifest, NULL, r, err);
	if (rc == 0 && (rc = rp_reader_set_filter(*r, opts->filter)) < 0) {
		rp_reader_free(*r);
		*r = NULL;
		rc = rp_err_set(err, rc, "out of memory for the process filter");
	}
	return rc;
}

int rp_export_host(const char *session_dir, json_t *manifest, enum rp_export_format f,
		   const char *path, const struct rp_export_opts *opts, struct rp_err *err)
{
	if (!opts)
		opts = &default_opts;
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	/* The directory part, "/" for "/name", "." for a bare name. */
	if ((size_t)snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path + (slash == path)) : 1,
			     slash ? path : ".") >= sizeof(dir))
		return rp_err_set(err, -ENAMETOOLONG, "%s: path too long", path);
	struct rp_reader *r;
	int rc = check_opts(f, opts, err);
	if (rc < 0 || (rc = open_reader(session_dir, manifest, opts, &r, err)) < 0)
		return rc;
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = dirfd < 0 ? rp_err_set(err, -errno, "cannot open directory %s for %s: %s", dir, path,
				    strerror(errno))
		       : write_format(r, session_dir, f, dirfd, dir, slash ? slash + 1 : path, opts,
				      err);
	if (dirfd >= 0)
		close(dirfd);
	rp_reader_free(r);
	return rc;
}

int rp_export_session(const char *session_dir, const char *host, unsigned mask,
		      const struct rp_export_opts *opts, struct rp_err *err)
{
	if (!opts)
		opts = &default_opts;
	json_t *all, *m;
	int dirfd = opts->beneath ? rp_safefs_open_beneath(opts->beneath, session_dir, 0, err)
				  : open(session_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return opts->beneath ? dirfd : rp_err_set(err, -errno, "cannot read session "
							  "directory %s: %s", session_dir,
							  strerror(errno));
	int rc = rp_session_manifests_at(dirfd, session_dir, &all, err), first = 0;
	unsigned failed = 0;
	if (rc < 0) {
		close(dirfd);
		return rc;
	}
	size_t i, found = 0;
	json_array_foreach(all, i, m) {
		const char *h = json_string_value(json_object_get(m, "host"));
		if (!h || (host && strcmp(h, host) != 0))
			continue;
		found++;
		char name[256], file[300];
		snprintf(name, sizeof(name), "%s", h);
		rp_session_file_host(name);
		/* One reader for every format: the metadata pass, the symbol
		 * tables and the frames already named are shared. */
		struct rp_reader *r = NULL;
		struct rp_err ferr = { 0 };
		rc = open_reader(session_dir, m, opts, &r, &ferr);
		bool go_on = true;
		for (unsigned f = 0; go_on && f < RP_EXPORT_NFORMATS; f++) {
			if (!(mask & 1u << f))
				continue;
			snprintf(file, sizeof(file), "%s%s", name, rp_export_suffix(f));
			if (r && (rc = check_opts(f, opts, &ferr)) == 0)
				rc = write_format(r, session_dir, f, dirfd, session_dir, file, opts,
						  &ferr);
			failed += rc < 0;
			if (rc < 0 && first == 0) {
				first = rc;
				*err = ferr;
			}
			if (opts->progress)
				go_on = opts->progress(opts->progress_ctx, h, (enum rp_export_format)f,
						       dirfd, file, rc < 0 ? &ferr : NULL);
		}
		rp_reader_free(r);
		if (!go_on)
			break;
	}
	json_decref(all);
	close(dirfd);
	if (failed > 1) {
		size_t n = strlen(err->msg);
		snprintf(err->msg + n, sizeof(err->msg) - n, "; %u more exports failed (export them "
			 "one --format at a time to see why)", failed - 1);
	}
	if (!found && first == 0 && host)
		first = rp_err_set(err, -ENOENT, "%s holds no manifest of host %s: is the host name "
				   "right, and is the session complete?", session_dir, host);
	else if (!found && first == 0)
		first = rp_err_set(err, -ENOENT, "%s holds no readable <host>.manifest.json: is it a "
				   "ringprof session directory, and is the session complete?",
				   session_dir);
	return first;
}
