#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define NS_PER_S 1000000000ull

/* Text echoed in messages: non-printable bytes escaped as \xNN so a
 * control character cannot garble a terminal or log line, and long input
 * cut short so the fix still fits in rp_err. */
static const char *quote(const char *s, char *out, size_t len)
{
	size_t o = 0;
	for (; *s && o + 8 < len; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20 || ch >= 0x7f)
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	if (*s)
		o += (size_t)snprintf(out + o, len - o, "...");
	out[o] = '\0';
	return out;
}

#define QUOTE_LEN 96
#define Q(s) quote((s), (char[QUOTE_LEN]){0}, QUOTE_LEN)

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* A decimal number "123" or "1.25": its integer part and a fraction
 * frac / 10^frac_digits with trailing zeros dropped (so "1.50" and "1.5"
 * agree). */
struct decimal {
	uint64_t whole;
	uint64_t frac;
	unsigned frac_digits;
};

/* More significant fraction digits than this cannot name a whole
 * nanosecond or byte (10^19 does not fit in 64 bits). */
#define MAX_FRAC_DIGITS 18

/* Returns the end of the number, or NULL when there is none.  *problem:
 * -ERANGE when the integer part overflows, -EDOM when the fraction is too
 * fine to be exact, else 0. */
static const char *scan_decimal(const char *p, struct decimal *d, int *problem)
{
	const char *start = p;
	*d = (struct decimal){0};
	*problem = 0;
	for (; is_digit(*p); p++) {
		if (__builtin_mul_overflow(d->whole, 10, &d->whole) ||
		    __builtin_add_overflow(d->whole, (uint64_t)(*p - '0'), &d->whole))
			*problem = -ERANGE;
	}
	bool have_whole = p > start;
	if (*p != '.')
		return have_whole ? p : NULL;
	const char *fstart = ++p;
	unsigned n = 0, significant = 0;
	for (; is_digit(*p); p++) {
		n++;
		if (*p != '0')
			significant = n;
	}
	if (!have_whole && p == fstart)
		return NULL;
	if (significant > MAX_FRAC_DIGITS) {
		if (!*problem)
			*problem = -EDOM;
		return p;
	}
	for (unsigned i = 0; i < significant; i++)
		d->frac = d->frac * 10 + (uint64_t)(fstart[i] - '0');
	d->frac_digits = significant;
	return p;
}

static uint64_t pow10u(unsigned n)
{
	uint64_t r = 1;
	while (n--)
		r *= 10;
	return r;
}

/* d * unit exactly.  -ERANGE when it does not fit, -EDOM when the
 * fraction leaves a part smaller than one base unit. */
static int scale_decimal(const struct decimal *d, uint64_t unit, uint64_t *out)
{
	uint64_t whole;
	if (__builtin_mul_overflow(d->whole, unit, &whole))
		return -ERANGE;
	unsigned __int128 f = (unsigned __int128)d->frac * unit;
	uint64_t div = pow10u(d->frac_digits);
	if (f % div)
		return -EDOM;
	f /= div;
	if (f > UINT64_MAX || __builtin_add_overflow(whole, (uint64_t)f, out))
		return -ERANGE;
	return 0;
}

/* ---- durations ---- */

static const struct {
	const char *name;
	uint64_t ns;
} duration_units[] = { /* largest first: compound values must follow it */
	{"h", 3600 * NS_PER_S}, {"m", 60 * NS_PER_S}, {"s", NS_PER_S},
	{"ms", 1000000}, {"us", 1000}, {"ns", 1},
};
#define N_DURATION_UNITS (sizeof(duration_units) / sizeof(duration_units[0]))

#define DURATION_HINT "use a number and a unit (ns, us, ms, s, m, h), e.g. 30s, 1.5s or 2m30s"

int rp_parse_duration(const char *text, uint64_t *ns, struct rp_err *err)
{
	if (!text || !*text)
		return rp_err_set(err, -EINVAL, "empty duration: %s", DURATION_HINT);
	if (*text == '-')
		return rp_err_set(err, -EINVAL,
				  "'%s' is negative: give a positive duration such as 30s",
				  Q(text));
	const char *p = text;
	size_t prev_unit = 0; /* index into duration_units allowed next */
	uint64_t total = 0;
	while (*p) {
		struct decimal d;
		int rc;
		const char *end = scan_decimal(p, &d, &rc);
		if (!end)
			return rp_err_set(err, -EINVAL, "'%s' is not a duration: %s",
					  Q(text), DURATION_HINT);
		const char *u = end;
		while (*end && !is_digit(*end) && *end != '.')
			end++;
		size_t ulen = (size_t)(end - u);
		if (ulen == 0) {
			if (p == text && !*end)
				return rp_err_set(err, -EINVAL, "'%s': add a unit, e.g. %ss",
						  Q(text), Q(text));
			return rp_err_set(err, -EINVAL, "'%s': a number is missing its unit; %s",
					  Q(text), DURATION_HINT);
		}
		size_t i;
		for (i = 0; i < N_DURATION_UNITS; i++)
			if (strlen(duration_units[i].name) == ulen &&
			    !memcmp(duration_units[i].name, u, ulen))
				break;
		if (i == N_DURATION_UNITS)
			return rp_err_set(err, -EINVAL,
					  "'%s': unknown unit '%.*s'; use ns, us, ms, s, m or h",
					  Q(text), (int)ulen, u);
		if (i < prev_unit)
			return rp_err_set(err, -EINVAL,
					  "'%s': units must go from largest to smallest, each once, e.g. 2m30s",
					  Q(text));
		prev_unit = i + 1;
		uint64_t part = 0;
		if (!rc)
			rc = scale_decimal(&d, duration_units[i].ns, &part);
		if (rc == -EDOM)
			return rp_err_set(err, -EINVAL,
					  "'%s' is more precise than one nanosecond; use whole nanoseconds",
					  Q(text));
		if (rc || __builtin_add_overflow(total, part, &total))
			return rp_err_set(err, -ERANGE,
					  "'%s' is too long: durations are limited to about 584 years",
					  Q(text));
		p = end;
	}
	if (total == 0)
		return rp_err_set(err, -EINVAL,
				  "'%s' is zero: give a positive duration such as 30s", Q(text));
	*ns = total;
	return 0;
}

/* Appends "<v>[.<frac>]<unit>" with the fraction's trailing zeros dropped. */
static size_t put_unit(char *out, size_t len, size_t o, uint64_t v, uint64_t frac,
		       unsigned frac_digits, const char *unit)
{
	char fs[24] = "";
	if (frac) {
		snprintf(fs, sizeof(fs), ".%0*llu", (int)frac_digits, (unsigned long long)frac);
		size_t n = strlen(fs);
		while (fs[n - 1] == '0')
			fs[--n] = '\0';
	}
	if (o < len)
		o += (size_t)snprintf(out + o, len - o, "%llu%s%s",
				      (unsigned long long)v, fs, unit);
	return o;
}

/* Exact, so the output parses back to the same value (config round-trip). */
void rp_format_duration(uint64_t ns, char *out, size_t len)
{
	if (!len)
		return;
	out[0] = '\0';
	if (ns == 0) {
		snprintf(out, len, "0s");
	} else if (ns < 1000) {
		put_unit(out, len, 0, ns, 0, 0, "ns");
	} else if (ns < 1000000) {
		put_unit(out, len, 0, ns / 1000, ns % 1000, 3, "us");
	} else if (ns < NS_PER_S) {
		put_unit(out, len, 0, ns / 1000000, ns % 1000000, 6, "ms");
	} else {
		uint64_t s = ns / NS_PER_S, sub = ns % NS_PER_S;
		size_t o = 0;
		if (s >= 3600)
			o = put_unit(out, len, o, s / 3600, 0, 0, "h");
		if (s % 3600 >= 60)
			o = put_unit(out, len, o, s % 3600 / 60, 0, 0, "m");
		if (s % 60 || sub)
			put_unit(out, len, o, s % 60, sub, 9, "s");
	}
}

/* ---- sizes ---- */

#define SIZE_HINT "use bytes or KiB, MiB, GiB, TiB (K/M/G/T and KB/MB/GB/TB mean the same), e.g. 64MiB"

/* Binary multiplier for a unit ("", "B", "K", "KB", "KiB", ... any case);
 * 0 when unknown. */
static uint64_t size_unit(const char *u)
{
	static const char prefixes[] = "KMGT";
	if (!*u || !strcasecmp(u, "B"))
		return 1;
	const char *pp = strchr(prefixes, toupper((unsigned char)u[0]));
	if (!pp)
		return 0;
	const char *rest = u + 1;
	if (*rest && strcasecmp(rest, "B") && strcasecmp(rest, "iB"))
		return 0;
	return 1ull << (10 * (pp - prefixes + 1));
}

int rp_parse_size(const char *text, uint64_t *bytes, struct rp_err *err)
{
	if (!text || !*text)
		return rp_err_set(err, -EINVAL, "empty size: %s", SIZE_HINT);
	if (*text == '-')
		return rp_err_set(err, -EINVAL, "'%s' is negative: give a positive size such as 64MiB",
				  Q(text));
	struct decimal d;
	int rc;
	const char *u = scan_decimal(text, &d, &rc);
	if (!u)
		return rp_err_set(err, -EINVAL, "'%s' is not a size: %s", Q(text), SIZE_HINT);
	uint64_t mult = size_unit(u);
	if (!mult)
		return rp_err_set(err, -EINVAL, "'%s': unknown unit '%s'; %s", Q(text), Q(u), SIZE_HINT);
	if (!rc)
		rc = scale_decimal(&d, mult, bytes);
	if (rc == -EDOM)
		return rp_err_set(err, -EINVAL, "'%s' is not a whole number of bytes", Q(text));
	if (rc)
		return rp_err_set(err, -ERANGE, "'%s' is too large: sizes are limited to 16 EiB",
				  Q(text));
	return 0;
}

int rp_parse_uint(const char *text, unsigned min, unsigned max, unsigned *out,
		  struct rp_err *err)
{
	const char *p = text;
	unsigned long long v = 0;
	while (is_digit(*p) && v <= UINT_MAX)
		v = v * 10 + (unsigned)(*p++ - '0');
	if (p == text || (*p && !is_digit(*p)))
		return rp_err_set(err, -EINVAL, "'%s' is not a whole number: give digits only, "
				  "from %u to %u", Q(text), min, max);
	if (*p || v < min || v > max)
		return rp_err_set(err, -ERANGE, "'%s' is outside %u..%u", Q(text), min, max);
	*out = (unsigned)v;
	return 0;
}

void rp_format_size(uint64_t bytes, char *out, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	if (bytes < 1024) {
		snprintf(out, len, "%llu B", (unsigned long long)bytes);
		return;
	}
	double v = (double)bytes / 1024;
	size_t u = 0;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(out, len, "%.1f %s", v, units[u]);
}

/* ---- times ---- */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil); avoids timegm and its struct tm range limits. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	unsigned doe = (unsigned)(z - era * 146097);
	unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static unsigned days_in_month(int64_t y, unsigned m)
{
	static const unsigned char dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : dm[m - 1];
}

/* Exactly n digits at *p into *v. */
static bool digits(const char **p, unsigned n, unsigned *v)
{
	*v = 0;
	for (unsigned i = 0; i < n; i++, (*p)++) {
		if (!is_digit(**p))
			return false;
		*v = *v * 10 + (unsigned)(**p - '0');
	}
	return true;
}

#define TIME_HINT "use RFC 3339 (2026-11-22T14:03:07Z, 2026-11-22T16:03:07.5+02:00) " \
	"or Unix nanoseconds (1795356187000000000)"

static int parse_rfc3339(const char *text, int64_t *wall_ns, struct rp_err *err)
{
	const char *p = text;
	unsigned y, mo, d, h, mi, s;
	if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
	    !digits(&p, 2, &d) || (*p != 'T' && *p != 't' && *p != ' ') ||
	    (p++, !digits(&p, 2, &h)) || *p++ != ':' || !digits(&p, 2, &mi) ||
	    *p++ != ':' || !digits(&p, 2, &s))
		return rp_err_set(err, -EINVAL, "'%s' is not a time: %s", Q(text), TIME_HINT);
	if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
	    s > 59)
		return rp_err_set(err, -EINVAL,
				  "'%s': date or time of day out of range (leap seconds are not accepted)",
				  Q(text));
	uint64_t frac = 0;
	if (*p == '.') {
		const char *f = ++p;
		while (is_digit(*p))
			frac = frac * 10 + (uint64_t)(*p++ - '0');
		unsigned n = (unsigned)(p - f);
		if (n == 0 || n > 9)
			return rp_err_set(err, -EINVAL,
					  "'%s': give 1 to 9 digits after the seconds' '.' (nanoseconds)",
					  Q(text));
		frac *= pow10u(9 - n);
	}
	int64_t offset_s;
	if (*p == 'Z' || *p == 'z') {
		offset_s = 0;
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1;
		unsigned oh, om;
		if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 ||
		    om > 59)
			return rp_err_set(err, -EINVAL,
					  "'%s': bad UTC offset; write it as +hh:mm or -hh:mm, or end with Z",
					  Q(text));
		offset_s = sign * (int64_t)(oh * 3600 + om * 60);
	} else {
		return rp_err_set(err, -EINVAL,
				  "'%s' has no time zone: end it with Z for UTC or an offset such as +02:00",
				  Q(text));
	}
	if (*p)
		return rp_err_set(err, -EINVAL, "'%s': unexpected '%s' after the time; %s",
				  Q(text), Q(p), TIME_HINT);
	int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset_s;
	int64_t ns;
	if (secs < 0 || __builtin_mul_overflow(secs, (int64_t)NS_PER_S, &ns) ||
	    __builtin_add_overflow(ns, (int64_t)frac, &ns))
		return rp_err_set(err, -ERANGE,
				  "'%s' is out of range: times must lie between 1970 and 2262", Q(text));
	*wall_ns = ns;
	return 0;
}

int rp_parse_time(const char *text, int64_t *wall_ns, struct rp_err *err)
{
	if (!text || !*text)
		return rp_err_set(err, -EINVAL, "empty time: %s", TIME_HINT);
	const char *p = text + (*text == '-');
	while (is_digit(*p))
		p++;
	if (*p || p == text + (*text == '-'))
		return parse_rfc3339(text, wall_ns, err);
	if (*text == '-')
		return rp_err_set(err, -EINVAL,
				  "'%s' is negative: Unix nanoseconds count from 1970", Q(text));
	uint64_t v = 0;
	for (p = text; *p; p++)
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v) || v > INT64_MAX)
			return rp_err_set(err, -ERANGE,
					  "'%s' is too large for Unix nanoseconds (the limit is year 2262)",
					  Q(text));
	*wall_ns = (int64_t)v;
	return 0;
}

/* UTC broken-down time of wall_ns, flooring for times before 1970. */
static void utc_fields(int64_t wall_ns, int64_t *y, unsigned f[5], unsigned *nsec)
{
	int64_t secs = wall_ns / (int64_t)NS_PER_S, rem = wall_ns % (int64_t)NS_PER_S;
	if (rem < 0) {
		rem += NS_PER_S;
		secs--;
	}
	int64_t days = secs / 86400, sod = secs % 86400;
	if (sod < 0) {
		sod += 86400;
		days--;
	}
	civil_from_days(days, y, &f[0], &f[1]);
	f[2] = (unsigned)(sod / 3600);
	f[3] = (unsigned)(sod % 3600 / 60);
	f[4] = (unsigned)(sod % 60);
	*nsec = (unsigned)rem;
}

void rp_format_time(int64_t wall_ns, char *out, size_t len)
{
	int64_t y;
	unsigned f[5], nsec;
	utc_fields(wall_ns, &y, f, &nsec);
	snprintf(out, len, "%04lld-%02u-%02uT%02u:%02u:%02u.%09uZ", (long long)y, f[0], f[1],
		 f[2], f[3], f[4], nsec);
}

void rp_session_id_from_time(int64_t wall_ns, char out[32])
{
	int64_t y;
	unsigned f[5], nsec;
	utc_fields(wall_ns, &y, f, &nsec);
	snprintf(out, 32, "%04lld_%02u_%02u_%02u_%02u_%02u", (long long)y, f[0], f[1], f[2],
		 f[3], f[4]);
}

/* ---- names ---- */

static bool name_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
	       c == '-' || c == '.';
}

int rp_check_name(const char *name, size_t max_len, const char *what, struct rp_err *err)
{
	if (!name || !*name)
		return rp_err_set(err, -EINVAL,
				  "%s is empty; use 1 to %zu letters, digits, '_', '-' or '.'", what,
				  max_len);
	for (const char *p = name; *p; p++)
		if (!name_char_ok(*p)) {
			char c[2] = {*p, '\0'};
			return rp_err_set(err, -EINVAL,
					  "%s '%s': '%s' is not allowed; use letters, digits, '_', '-' and '.'",
					  what, Q(name), Q(c));
		}
	size_t n = strlen(name);
	if (n > max_len)
		return rp_err_set(err, -EINVAL, "%s '%s' is %zu characters long; the limit is %zu",
				  what, Q(name), n, max_len);
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return rp_err_set(err, -EINVAL, "%s '%s' is not allowed; pick a real name", what,
				  name);
	if (name[0] == '.')
		return rp_err_set(err, -EINVAL,
				  "%s '%s' starts with '.'; names must not be hidden files", what,
				  Q(name));
	return 0;
}
