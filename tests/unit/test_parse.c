/* util/parse: table-driven valid and invalid inputs for every parser,
 * checking values against independent computations (timegm, strftime) and
 * that messages name the offending text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parse.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define S 1000000000ull

struct bad {
	const char *text;
	int rc;
	const char *msg1; /* substrings the message must contain */
	const char *msg2;
};

static void expect_msg(const char *text, int rc, const struct rp_err *err, const struct bad *b)
{
	if (rc != b->rc || !strstr(err->msg, b->msg1) || (b->msg2 && !strstr(err->msg, b->msg2)))
		fail_msg("'%s': rc %d (want %d), message \"%s\" (want \"%s\"%s%s)", text, rc, b->rc,
			 err->msg, b->msg1, b->msg2 ? " and " : "", b->msg2 ? b->msg2 : "");
	assert_int_equal(err->code, rc);
}

/* ---- whole numbers ---- */

static void uint_valid_and_invalid(void **state)
{
	(void)state;
	unsigned v = 7;
	assert_int_equal(rp_parse_uint("1", 1, 10000, &v, NULL), 0);
	assert_int_equal(v, 1);
	assert_int_equal(rp_parse_uint("10000", 1, 10000, &v, NULL), 0);
	assert_int_equal(v, 10000);
	assert_int_equal(rp_parse_uint("0099", 1, 10000, &v, NULL), 0);
	assert_int_equal(v, 99);
	assert_int_equal(rp_parse_uint("4294967295", 0, 4294967295u, &v, NULL), 0);
	assert_int_equal(v, 4294967295u);
	static const struct bad t[] = {
		{"", -EINVAL, "'' is not a whole number", "from 1 to 10000"},
		{"-5", -EINVAL, "'-5' is not a whole number", NULL},
		{"+5", -EINVAL, "'+5' is not a whole number", NULL},
		{"12x", -EINVAL, "'12x' is not a whole number", NULL},
		{"1.5", -EINVAL, "'1.5' is not a whole number", NULL},
		{" 5", -EINVAL, "' 5' is not a whole number", NULL},
		{"0", -ERANGE, "'0' is outside 1..10000", NULL},
		{"10001", -ERANGE, "'10001' is outside 1..10000", NULL},
		{"4294967296", -ERANGE, "'4294967296' is outside 1..10000", NULL},
		{"99999999999999999999999", -ERANGE, "is outside 1..10000", NULL},
	};
	for (size_t i = 0; i < N(t); i++) {
		struct rp_err err = {0};
		v = 7;
		int rc = rp_parse_uint(t[i].text, 1, 10000, &v, &err);
		expect_msg(t[i].text, rc, &err, &t[i]);
		assert_int_equal(v, 7);
	}
}

/* ---- durations ---- */

static void duration_valid(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint64_t ns;
	} t[] = {
		{"1ns", 1},
		{"10ns", 10},
		{"250us", 250000},
		{"500ms", 500000000},
		{"30s", 30 * S},
		{"5m", 300 * S},
		{"1h", 3600 * S},
		{"1.5s", 1500000000},
		{"1.50s", 1500000000},
		{".5s", 500000000},
		{"0.001s", 1000000},
		{"1.000000001s", 1000000001},
		{"1.5ms", 1500000},
		{"0.5us", 500},
		{"0.25h", 900 * S},
		{"2m30s", 150 * S},
		{"1h30m", 5400 * S},
		{"1h0.5s", 3600 * S + 500000000},
		{"1h2m3s4ms5us6ns", 3723 * S + 4005006},
		{"0s1ns", 1},
		{"18446744073709551615ns", UINT64_MAX},
		{"5124095h", 5124095ull * 3600 * S},
	};
	for (size_t i = 0; i < N(t); i++) {
		uint64_t ns = 0;
		struct rp_err err = {0};
		int rc = rp_parse_duration(t[i].text, &ns, &err);
		if (rc || ns != t[i].ns)
			fail_msg("'%s': rc %d (%s), %llu ns, want %llu", t[i].text, rc, err.msg,
				 (unsigned long long)ns, (unsigned long long)t[i].ns);
	}
}

static void duration_invalid(void **state)
{
	(void)state;
	static const struct bad t[] = {
		{"", -EINVAL, "empty duration", "e.g. 30s"},
		{"30", -EINVAL, "'30': add a unit, e.g. 30s", NULL},
		{"1.5", -EINVAL, "'1.5': add a unit, e.g. 1.5s", NULL},
		{"-5s", -EINVAL, "'-5s' is negative: give a positive duration such as 30s", NULL},
		{"0s", -EINVAL, "'0s' is zero", "positive"},
		{"0.0ms", -EINVAL, "'0.0ms' is zero", NULL},
		{"1.5ns", -EINVAL, "'1.5ns' is more precise than one nanosecond", NULL},
		{"0.0000000000000000001h", -EINVAL, "more precise", NULL},
		{"5d", -EINVAL, "'5d': unknown unit 'd'", "ns, us, ms, s, m or h"},
		{"5S", -EINVAL, "unknown unit 'S'", NULL},
		{"30s2m", -EINVAL, "'30s2m': units must go from largest to smallest", "2m30s"},
		{"1s1s", -EINVAL, "'1s1s': units must go", NULL},
		{"2m30", -EINVAL, "'2m30': a number is missing its unit", NULL},
		{"s", -EINVAL, "'s' is not a duration", NULL},
		{".s", -EINVAL, "'.s' is not a duration", NULL},
		{"1.2.3s", -EINVAL, "'1.2.3s'", NULL},
		{"1 s", -EINVAL, "unknown unit ' s'", NULL},
		{" 1s", -EINVAL, "' 1s' is not a duration", NULL},
		{"+1s", -EINVAL, "'+1s' is not a duration", NULL},
		{"abc", -EINVAL, "'abc' is not a duration", NULL},
		{"18446744073709551616ns", -ERANGE, "'18446744073709551616ns' is too long", NULL},
		{"18446744073709551615s", -ERANGE, "is too long", "584 years"},
		{"5124096h", -ERANGE, "is too long", NULL},
		{"5124095h34m34s", -ERANGE, "is too long", NULL},
	};
	for (size_t i = 0; i < N(t); i++) {
		uint64_t ns = 12345;
		struct rp_err err = {0};
		int rc = rp_parse_duration(t[i].text, &ns, &err);
		expect_msg(t[i].text, rc, &err, &t[i]);
		assert_int_equal(ns, 12345); /* untouched on error */
	}
	struct rp_err err = {0};
	uint64_t ns;
	assert_int_equal(rp_parse_duration(NULL, &ns, &err), -EINVAL);
	assert_int_equal(rp_parse_duration("x", &ns, NULL), -EINVAL); /* err is optional */
	/* control characters are escaped in the message */
	assert_int_equal(rp_parse_duration("1\x01s", &ns, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "1\\x01s"));
}

static void duration_format(void **state)
{
	(void)state;
	static const struct {
		uint64_t ns;
		const char *text;
	} t[] = {
		{0, "0s"},
		{1, "1ns"},
		{999, "999ns"},
		{1000, "1us"},
		{1500, "1.5us"},
		{250000, "250us"},
		{1000001, "1.000001ms"},
		{10000000, "10ms"},
		{250000000, "250ms"},
		{S, "1s"},
		{1500000000, "1.5s"},
		{30 * S, "30s"},
		{60 * S, "1m"},
		{150 * S, "2m30s"},
		{3600 * S, "1h"},
		{3600 * S + 500000000, "1h0.5s"},
		{3723 * S + 1, "1h2m3.000000001s"},
		{7 * 24 * 3600 * S, "168h"},
		{UINT64_MAX, "5124095h34m33.709551615s"},
	};
	for (size_t i = 0; i < N(t); i++) {
		char buf[64];
		rp_format_duration(t[i].ns, buf, sizeof(buf));
		assert_string_equal(buf, t[i].text);
	}
	/* Exact: every rendering parses back to the same value. */
	srandom(1);
	for (int i = 0; i < 100000; i++) {
		uint64_t v = ((uint64_t)random() << 33 ^ (uint64_t)random() << 2 ^ (uint64_t)random()) >>
			     (random() % 64);
		if (!v)
			continue;
		char buf[64];
		uint64_t back = 0;
		rp_format_duration(v, buf, sizeof(buf));
		if (rp_parse_duration(buf, &back, NULL) || back != v)
			fail_msg("%llu -> '%s' -> %llu", (unsigned long long)v, buf,
				 (unsigned long long)back);
	}
	/* A short buffer is truncated, never overrun. */
	char small[4] = "xxx";
	rp_format_duration(150 * S, small, sizeof(small));
	assert_string_equal(small, "2m3");
}

/* ---- sizes ---- */

static void size_valid(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint64_t bytes;
	} t[] = {
		{"0", 0},
		{"4096", 4096},
		{"4096B", 4096},
		{"512KiB", 512 << 10},
		{"64MiB", 64 << 20},
		{"1GiB", 1ull << 30},
		{"2TiB", 2ull << 40},
		{"64M", 64 << 20},
		{"64MB", 64 << 20},
		{"64mib", 64 << 20},
		{"1K", 1024},
		{"1KB", 1024},
		{"1k", 1024},
		{"3G", 3ull << 30},
		{"1T", 1ull << 40},
		{"1.5KiB", 1536},
		{"0.5MiB", 512 << 10},
		{"16777215TiB", 16777215ull << 40},
		{"18446744073709551615", UINT64_MAX},
	};
	for (size_t i = 0; i < N(t); i++) {
		uint64_t b = 1;
		struct rp_err err = {0};
		int rc = rp_parse_size(t[i].text, &b, &err);
		if (rc || b != t[i].bytes)
			fail_msg("'%s': rc %d (%s), %llu bytes, want %llu", t[i].text, rc, err.msg,
				 (unsigned long long)b, (unsigned long long)t[i].bytes);
	}
}

static void size_format(void **state)
{
	(void)state;
	static const struct {
		uint64_t bytes;
		const char *text;
	} t[] = {
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{64ull << 20, "64.0 MiB"}, {(42ull << 30) / 10, "4.2 GiB"}, {10ull << 40, "10.0 TiB"},
		{UINT64_MAX, "16.0 EiB"},
	};
	for (size_t i = 0; i < N(t); i++) {
		char buf[32];
		rp_format_size(t[i].bytes, buf, sizeof(buf));
		assert_string_equal(buf, t[i].text);
	}
}

static void size_invalid(void **state)
{
	(void)state;
	static const struct bad t[] = {
		{"", -EINVAL, "empty size", "MiB"},
		{"-1MiB", -EINVAL, "'-1MiB' is negative", NULL},
		{"64Q", -EINVAL, "'64Q': unknown unit 'Q'", "KiB, MiB, GiB, TiB"},
		{"64 MiB", -EINVAL, "unknown unit ' MiB'", NULL},
		{"64MiBs", -EINVAL, "unknown unit 'MiBs'", NULL},
		{"64Ki", -EINVAL, "unknown unit 'Ki'", NULL},
		{"1.5", -EINVAL, "'1.5' is not a whole number of bytes", NULL},
		{"0.25", -EINVAL, "'0.25' is not a whole number", NULL},
		{"MiB", -EINVAL, "'MiB' is not a size", NULL},
		{"abc", -EINVAL, "'abc' is not a size", NULL},
		{"18446744073709551616", -ERANGE, "'18446744073709551616' is too large", NULL},
		{"16777216TiB", -ERANGE, "'16777216TiB' is too large", "16 EiB"},
	};
	for (size_t i = 0; i < N(t); i++) {
		uint64_t b = 7;
		struct rp_err err = {0};
		int rc = rp_parse_size(t[i].text, &b, &err);
		expect_msg(t[i].text, rc, &err, &t[i]);
		assert_int_equal(b, 7);
	}
}

/* ---- times ---- */

/* The expected value, computed independently with timegm. */
static int64_t expect_time(int y, int mo, int d, int h, int mi, int s, int64_t frac_ns,
			   int offset_min)
{
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
			.tm_hour = h, .tm_min = mi, .tm_sec = s};
	time_t t = timegm(&tm);
	return ((int64_t)t - offset_min * 60) * (int64_t)S + frac_ns;
}

static void time_valid(void **state)
{
	(void)state;
	const struct {
		const char *text;
		int64_t ns;
	} t[] = {
		{"1970-01-01T00:00:00Z", 0},
		{"1970-01-01T00:00:00.000000001Z", 1},
		{"2026-11-22T14:03:07Z", expect_time(2026, 11, 22, 14, 3, 7, 0, 0)},
		{"2026-11-22t14:03:07z", expect_time(2026, 11, 22, 14, 3, 7, 0, 0)},
		{"2026-11-22 14:03:07Z", expect_time(2026, 11, 22, 14, 3, 7, 0, 0)},
		{"2026-11-22T14:03:07.5Z", expect_time(2026, 11, 22, 14, 3, 7, 500000000, 0)},
		{"2026-11-22T14:03:07.250Z", expect_time(2026, 11, 22, 14, 3, 7, 250000000, 0)},
		{"2026-11-22T14:03:07.123456789Z",
		 expect_time(2026, 11, 22, 14, 3, 7, 123456789, 0)},
		{"2026-11-22T16:03:07+02:00", expect_time(2026, 11, 22, 14, 3, 7, 0, 0)},
		{"2026-11-22T16:03:07.5+02:00", expect_time(2026, 11, 22, 16, 3, 7, 500000000, 120)},
		{"2026-11-22T08:33:07-05:30", expect_time(2026, 11, 22, 8, 33, 7, 0, -330)},
		{"2026-11-22T14:03:07+00:00", expect_time(2026, 11, 22, 14, 3, 7, 0, 0)},
		{"2027-01-01T00:30:00+01:00", expect_time(2026, 12, 31, 23, 30, 0, 0, 0)},
		{"2024-02-29T23:59:59.999999999Z",
		 expect_time(2024, 2, 29, 23, 59, 59, 999999999, 0)},
		{"2000-02-29T12:00:00Z", expect_time(2000, 2, 29, 12, 0, 0, 0, 0)},
		{"2262-04-11T23:47:16.854775807Z", INT64_MAX},
		{"0", 0},
		{"1795356187000000000", 1795356187000000000},
		{"9223372036854775807", INT64_MAX},
	};
	for (size_t i = 0; i < N(t); i++) {
		int64_t ns = -1;
		struct rp_err err = {0};
		int rc = rp_parse_time(t[i].text, &ns, &err);
		if (rc || ns != t[i].ns)
			fail_msg("'%s': rc %d (%s), %lld, want %lld", t[i].text, rc, err.msg,
				 (long long)ns, (long long)t[i].ns);
	}
}

static void time_invalid(void **state)
{
	(void)state;
	static const struct bad t[] = {
		{"", -EINVAL, "empty time", "RFC 3339"},
		{"-5", -EINVAL, "'-5' is negative", NULL},
		{"-", -EINVAL, "'-' is not a time", NULL},
		{"abc", -EINVAL, "'abc' is not a time", "Unix nanoseconds"},
		{"12abc", -EINVAL, "'12abc' is not a time", NULL},
		{"2026-11-22", -EINVAL, "'2026-11-22' is not a time", NULL},
		{"2026-11-22T14:03Z", -EINVAL, "is not a time", NULL},
		{"2026-13-01T00:00:00Z", -EINVAL, "'2026-13-01T00:00:00Z': date or time of day out of range", NULL},
		{"2026-00-01T00:00:00Z", -EINVAL, "out of range", NULL},
		{"2026-02-29T00:00:00Z", -EINVAL, "out of range", NULL},
		{"2026-04-31T00:00:00Z", -EINVAL, "out of range", NULL},
		{"2026-11-22T24:00:00Z", -EINVAL, "out of range", NULL},
		{"2026-11-22T14:60:00Z", -EINVAL, "out of range", NULL},
		{"2026-12-31T23:59:60Z", -EINVAL, "leap seconds", NULL},
		{"2026-11-22T14:03:07", -EINVAL, "'2026-11-22T14:03:07' has no time zone", "Z"},
		{"2026-11-22T14:03:07.Z", -EINVAL, "1 to 9 digits", NULL},
		{"2026-11-22T14:03:07.1234567890Z", -EINVAL, "1 to 9 digits", NULL},
		{"2026-11-22T14:03:07+2:00", -EINVAL, "bad UTC offset", NULL},
		{"2026-11-22T14:03:07+0200", -EINVAL, "bad UTC offset", NULL},
		{"2026-11-22T14:03:07+24:00", -EINVAL, "bad UTC offset", NULL},
		{"2026-11-22T14:03:07Zjunk", -EINVAL, "unexpected 'junk'", NULL},
		{"2026-11-22T14:03:07Z ", -EINVAL, "unexpected ' '", NULL},
		{"1969-12-31T23:59:59Z", -ERANGE, "'1969-12-31T23:59:59Z' is out of range", "1970"},
		{"1970-01-01T00:30:00+01:00", -ERANGE, "out of range", NULL},
		{"2262-04-11T23:47:16.854775808Z", -ERANGE, "out of range", "2262"},
		{"9999-12-31T23:59:59Z", -ERANGE, "out of range", NULL},
		{"9223372036854775808", -ERANGE, "'9223372036854775808' is too large", NULL},
		{"99999999999999999999999", -ERANGE, "too large", NULL},
	};
	for (size_t i = 0; i < N(t); i++) {
		int64_t ns = 42;
		struct rp_err err = {0};
		int rc = rp_parse_time(t[i].text, &ns, &err);
		expect_msg(t[i].text, rc, &err, &t[i]);
		assert_int_equal(ns, 42);
	}
}

static void time_format(void **state)
{
	(void)state;
	char buf[64];
	rp_format_time(0, buf, sizeof(buf));
	assert_string_equal(buf, "1970-01-01T00:00:00.000000000Z");
	rp_format_time(expect_time(2026, 11, 22, 14, 3, 7, 123456789, 0), buf, sizeof(buf));
	assert_string_equal(buf, "2026-11-22T14:03:07.123456789Z");
	rp_format_time(-1, buf, sizeof(buf));
	assert_string_equal(buf, "1969-12-31T23:59:59.999999999Z");
	rp_format_time(INT64_MAX, buf, sizeof(buf));
	assert_string_equal(buf, "2262-04-11T23:47:16.854775807Z");

	srandom(2);
	for (int i = 0; i < 100000; i++) {
		int64_t v = (int64_t)(((uint64_t)random() << 32 ^ (uint64_t)random() << 1) >>
				      (random() % 40));
		int64_t back = -1;
		rp_format_time(v, buf, sizeof(buf));
		if (rp_parse_time(buf, &back, NULL) || back != v)
			fail_msg("%lld -> '%s' -> %lld", (long long)v, buf, (long long)back);
		/* and strftime agrees on the calendar part */
		char want[64];
		time_t secs = (time_t)(v / (int64_t)S);
		struct tm tm;
		gmtime_r(&secs, &tm);
		strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
		assert_memory_equal(buf, want, strlen(want));
	}
}

static void session_id(void **state)
{
	(void)state;
	char id[32];
	rp_session_id_from_time(expect_time(2026, 11, 22, 14, 3, 7, 999999999, 0), id);
	assert_string_equal(id, "2026_11_22_14_03_07");
	rp_session_id_from_time(0, id);
	assert_string_equal(id, "1970_01_01_00_00_00");
	srandom(3);
	for (int i = 0; i < 10000; i++) {
		int64_t v = (int64_t)(((uint64_t)random() << 32 ^ (uint64_t)random()) >> 1);
		time_t secs = (time_t)(v / (int64_t)S);
		struct tm tm;
		char want[32];
		gmtime_r(&secs, &tm);
		strftime(want, sizeof(want), "%Y_%m_%d_%H_%M_%S", &tm);
		rp_session_id_from_time(v, id);
		assert_string_equal(id, want);
	}
}

/* ---- names ---- */

static void name_valid(void **state)
{
	(void)state;
	char max[64];
	memset(max, 'a', 63);
	max[63] = '\0';
	const char *ok[] = {"a", "run-1_x.y", "gpu0", "A.b-C_9", "x..y", "x.", "-", "_", max};
	for (size_t i = 0; i < N(ok); i++) {
		struct rp_err err = {0};
		if (rp_check_name(ok[i], 63, "session name", &err))
			fail_msg("'%s' rejected: %s", ok[i], err.msg);
	}
}

static void name_invalid(void **state)
{
	(void)state;
	char longer[65];
	memset(longer, 'a', 64);
	longer[64] = '\0';
	const struct bad t[] = {
		{"", -EINVAL, "session name is empty", "letters, digits"},
		{"../x", -EINVAL,
		 "session name '../x': '/' is not allowed; use letters, digits, '_', '-' and '.'",
		 NULL},
		{"a/b", -EINVAL, "session name 'a/b': '/' is not allowed", NULL},
		{".", -EINVAL, "session name '.' is not allowed", NULL},
		{"..", -EINVAL, "session name '..' is not allowed", NULL},
		{".hidden", -EINVAL, "session name '.hidden' starts with '.'", NULL},
		{"a b", -EINVAL, "session name 'a b': ' ' is not allowed", NULL},
		{"a\x01z", -EINVAL, "session name 'a\\x01z': '\\x01' is not allowed", NULL},
		{"tab\t", -EINVAL, "'\\x09' is not allowed", NULL},
		{"caf\xc3\xa9", -EINVAL, "session name 'caf\\xc3\\xa9': '\\xc3' is not allowed", NULL},
		{"x:y", -EINVAL, "':' is not allowed", NULL},
		{longer, -EINVAL, "is 64 characters long; the limit is 63", NULL},
	};
	for (size_t i = 0; i < N(t); i++) {
		struct rp_err err = {0};
		int rc = rp_check_name(t[i].text, 63, "session name", &err);
		expect_msg(t[i].text, rc, &err, &t[i]);
	}
	struct rp_err err = {0};
	assert_int_equal(rp_check_name("abcd", 3, "run name", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "run name 'abcd' is 4 characters long; the limit is 3"));
	assert_int_equal(rp_check_name(NULL, 3, "run name", &err), -EINVAL);
	/* A huge name is cut short in the message, which still names the fix. */
	char huge[2000];
	memset(huge, 'b', sizeof(huge) - 2);
	huge[sizeof(huge) - 2] = '/';
	huge[sizeof(huge) - 1] = '\0';
	assert_int_equal(rp_check_name(huge, 63, "session name", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "...': '/' is not allowed; use letters"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(uint_valid_and_invalid),
		cmocka_unit_test(duration_valid), cmocka_unit_test(duration_invalid),
		cmocka_unit_test(duration_format), cmocka_unit_test(size_valid), cmocka_unit_test(size_format),
		cmocka_unit_test(size_invalid), cmocka_unit_test(time_valid),
		cmocka_unit_test(time_invalid), cmocka_unit_test(time_format),
		cmocka_unit_test(session_id), cmocka_unit_test(name_valid),
		cmocka_unit_test(name_invalid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
