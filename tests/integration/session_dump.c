/* session-dump: print a session's events as JSON lines, for tests.
 *
 *   session-dump SESSION_DIR [--all]
 *
 * Reads every <host>.manifest.json for its host's window and every
 * <host>.<device>.chunks file it lists; prints events stamped inside the
 * window (all with --all), one JSON object a line: host, device, kind,
 * ts, pid, tid, name, value (counters), count (drops). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "chunk.h"
#include "session.h"

static int dump_file(const char *path, const char *host, const char *device, uint64_t t0,
		     uint64_t t1)
{
	struct rp_err err = { 0 };
	struct rp_session_chunks *sc;
	struct rp_chunk_reader *r;
	if (rp_session_chunks_open(path, &sc, &err) < 0 || rp_chunk_reader_new(&r) < 0) {
		fprintf(stderr, "session-dump: %s\n", err.msg);
		return -1;
	}
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	int rc, status = 0;
	while ((rc = rp_session_chunks_next(sc, &chunk, &len, &hdr, &err)) != 0) {
		if (rc < 0 || rp_chunk_reader_load(r, chunk, len, &err) < 0) {
			fprintf(stderr, "session-dump: %s: %s\n", path, err.msg);
			status = -1;
			continue;
		}
		struct rp_event ev;
		while ((rc = rp_chunk_reader_next(r, &ev, &err)) == 1) {
			if (ev.ts < t0 || ev.ts > t1)
				continue;
			json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "host", host,
					      "device", device,
					      "kind", rp_event_kind_name(ev.kind), "seq", (json_int_t)hdr.seq,
					      "ts", (json_int_t)ev.ts, "pid", (json_int_t)ev.pid,
					      "tid", (json_int_t)ev.tid);
			if (ev.name)
				json_object_set_new(o, "name", json_string(ev.name));
			if (ev.kind == RP_EV_COUNTER)
				json_object_set_new(o, "value", json_real(ev.u.counter.value));
			if (ev.kind == RP_EV_DROPS)
				json_object_set_new(o, "count", json_integer((json_int_t)ev.u.drops.count));
			char *line = json_dumps(o, JSON_COMPACT);
			puts(line);
			free(line);
			json_decref(o);
		}
		if (rc < 0) {
			fprintf(stderr, "session-dump: %s: %s\n", path, err.msg);
			status = -1;
		}
	}
	rp_chunk_reader_free(r);
	rp_session_chunks_close(sc);
	return status;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--all") != 0)) {
		fprintf(stderr, "usage: session-dump SESSION_DIR [--all]\n");
		return 2;
	}
	char path[4096];
	json_t *all, *m;
	struct rp_err err = { 0 };
	if (rp_session_manifests(argv[1], &all, &err) < 0 || !json_array_size(all)) {
		fprintf(stderr, "session-dump: %s: %s\n", argv[1], err.msg[0] ? err.msg : "no manifest");
		json_decref(all);
		return 1;
	}
	int status = 0;
	size_t k;
	json_array_foreach(all, k, m) {
		uint64_t t0 = 0, t1 = UINT64_MAX;
		if (argc == 2) {
			json_t *req = json_object_get(m, "requested");
			t0 = (uint64_t)json_integer_value(json_object_get(req, "start_ns"));
			t1 = (uint64_t)json_integer_value(json_object_get(req, "end_ns"));
		}
		const char *host = json_string_value(json_object_get(m, "host"));
		size_t i;
		json_t *dev;
		json_array_foreach(json_object_get(m, "devices"), i, dev) {
			const char *file = json_string_value(json_object_get(dev, "file"));
			const char *name = json_string_value(json_object_get(dev, "device"));
			if (!file || !name)
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[1], file);
			if (dump_file(path, host ? host : "", name, t0, t1) < 0)
				status = 1;
		}
	}
	json_decref(all);
	return status;
}
