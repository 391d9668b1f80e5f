#include "psi.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pressure file is two lines of about 60 bytes. */
#define PSI_FILE_MAX 512

static int parse_line(const char *line, unsigned lineno, struct rp_psi *out, struct rp_err *err)
{
	char kind[5], rest;
	double avg10, avg60, avg300;
	uint64_t total;
	int n = 0;
	const char *digits = strstr(line, "total=");
	/* sscanf reads "-1" as a huge unsigned: total must start with a digit. */
	if (sscanf(line, "%4s avg10=%lf avg60=%lf avg300=%lf total=%" SCNu64 "%n", kind, &avg10,
		   &avg60, &avg300, &total, &n) != 5 || sscanf(line + n, " %c", &rest) == 1 ||
	    !digits || digits[6] < '0' || digits[6] > '9')
		return rp_err_set(err, -EBADMSG, "line %u is not \"some|full avg10=P avg60=P "
				  "avg300=P total=US\": '%.80s'", lineno, line);
	struct rp_psi_line *l = !strcmp(kind, "some") ? &out->some
			       : !strcmp(kind, "full") ? &out->full : NULL;
	if (!l)
		return rp_err_set(err, -EBADMSG, "line %u: '%s' is neither some nor full",
				  lineno, kind);
	if (l->present)
		return rp_err_set(err, -EBADMSG, "line %u: a second '%s' line", lineno, kind);
	if (!(avg10 >= 0 && avg10 <= 100))
		return rp_err_set(err, -EBADMSG, "line %u: avg10=%g is not a percentage",
				  lineno, avg10);
	*l = (struct rp_psi_line){ .present = true, .avg10 = avg10, .total_us = total };
	return 0;
}

int rp_psi_parse(const char *text, struct rp_psi *out, struct rp_err *err)
{
	*out = (struct rp_psi){ 0 };
	char line[PSI_FILE_MAX];
	unsigned lineno = 0;
	for (const char *p = text; *p; ) {
		size_t len = strcspn(p, "\n");
		lineno++;
		if (len >= sizeof(line))
			return rp_err_set(err, -EBADMSG, "line %u is longer than %zu bytes",
					  lineno, sizeof(line) - 1);
		memcpy(line, p, len);
		line[len] = 0;
		int rc = parse_line(line, lineno, out, err);
		if (rc < 0)
			return rc;
		p += len + (p[len] == '\n');
	}
	if (!out->some.present)
		return rp_err_set(err, -EBADMSG, "no \"some\" line");
	return 0;
}

int rp_psi_read(const char *path, struct rp_psi *out, struct rp_err *err)
{
	char text[PSI_FILE_MAX + 1];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
	int saved = errno;
	if (fd >= 0)
		(void)close(fd);
	if (n < 0)
		return rp_err_set(err, -saved, "PSI: cannot read %s: %s", path, strerror(saved));
	if ((size_t)n == sizeof(text) - 1)
		return rp_err_set(err, -EBADMSG, "PSI: %s: more than %d bytes, not a pressure file",
				  path, PSI_FILE_MAX);
	text[n] = 0;
	int rc = rp_psi_parse(text, out, err);
	return rc < 0 ? rp_err_prefix(err, "PSI: %s", path) : 0;
}
