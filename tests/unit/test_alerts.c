/* daemon/alerts: Alertmanager's webhook payload (version 4) parsed
 * leniently (unknown fields ignored), malformed ones refused with the
 * field named; fingerprints, run names and reasons. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "alerts.h"

/* What Alertmanager 0.25 sends, plus fields a later one might add. */
static const char payload[] =
	"{\"receiver\": \"ringprofd\", \"status\": \"firing\", \"version\": \"4\","
	" \"groupKey\": \"{}:{alertname=\\\"SlowStep\\\"}\", \"truncatedAlerts\": 0,"
	" \"groupLabels\": {\"alertname\": \"SlowStep\"}, \"commonLabels\": {}, \"commonAnnotations\": {},"
	" \"externalURL\": \"http://am:9093\", \"someFutureField\": [1, 2],"
	" \"alerts\": ["
	"  {\"status\": \"firing\", \"labels\": {\"alertname\": \"SlowStep\", \"job\": \"llama\", \"instance\": \"h1\"},"
	"   \"annotations\": {\"summary\": \"step time doubled\"},"
	"   \"startsAt\": \"2026-11-22T14:03:07.25Z\", \"endsAt\": \"0001-01-01T00:00:00Z\","
	"   \"generatorURL\": \"http://prom:9090/graph?g0.expr=x\", \"fingerprint\": \"a1b2c3d4e5f60718\","
	"   \"newAlertField\": {\"x\": 1}},"
	"  {\"status\": \"resolved\", \"labels\": {\"alertname\": \"Old\"}, \"annotations\": {},"
	"   \"startsAt\": \"2026-11-22T13:00:00Z\", \"endsAt\": \"2026-11-22T13:05:00Z\", \"fingerprint\": \"ff\"}"
	" ]}";

static void parse_full(void **state)
{
	(void)state;
	struct rp_alert_batch b;
	struct rp_err err = { 0 };
	if (rp_alerts_parse(payload, strlen(payload), &b, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(b.n, 2);
	const struct rp_alert *a = &b.alerts[0];
	assert_true(a->firing);
	assert_string_equal(a->fingerprint, "a1b2c3d4e5f60718");
	assert_string_equal(a->starts_at, "2026-11-22T14:03:07.25Z");
	/* 2026-11-22T14:03:07Z is 1795356187 s after the epoch. */
	assert_int_equal(a->starts_at_wall_ns, 1795356187250000000ll);
	assert_string_equal(a->generator_url, "http://prom:9090/graph?g0.expr=x");
	assert_string_equal(json_string_value(json_object_get(a->labels, "job")), "llama");
	assert_string_equal(json_string_value(json_object_get(a->annotations, "summary")),
			    "step time doubled");
	char run[64], reason[256];
	assert_true(rp_alert_run(a, "job", run));
	assert_string_equal(run, "llama");
	assert_false(rp_alert_run(a, "team", run));
	rp_alert_reason(a, reason, sizeof(reason));
	assert_string_equal(reason, "SlowStep: step time doubled");
	assert_false(b.alerts[1].firing);
	assert_string_equal(b.alerts[1].fingerprint, "ff");
	assert_int_not_equal(b.alerts[0].key, b.alerts[1].key);
	rp_alerts_free(&b);
}

static struct rp_alert_batch parse_ok(const char *text)
{
	struct rp_alert_batch b;
	struct rp_err err = { 0 };
	if (rp_alerts_parse(text, strlen(text), &b, &err))
		fail_msg("%s: %s", text, err.msg);
	return b;
}

/* Without a fingerprint the alert is identified by its sorted labels. */
static void fingerprint_from_labels(void **state)
{
	(void)state;
	struct rp_alert_batch b = parse_ok(
		"{\"alerts\": ["
		"{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": {\"a\": \"1\", \"b\": \"2\"}},"
		"{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": {\"b\": \"2\", \"a\": \"1\"}, \"fingerprint\": \"\"},"
		"{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": {\"a\": \"12\"}},"
		"{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": {\"a1\": \"2\"}},"
		"{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\"}]}");
	assert_int_equal(b.n, 5);
	assert_int_equal(strlen(b.alerts[0].fingerprint), 16);
	assert_string_equal(b.alerts[0].fingerprint, b.alerts[1].fingerprint);
	assert_int_equal(b.alerts[0].key, b.alerts[1].key);
	/* "a=12" and "a1=2" must not collide: keys and values are delimited. */
	assert_string_not_equal(b.alerts[2].fingerprint, b.alerts[3].fingerprint);
	assert_string_not_equal(b.alerts[0].fingerprint, b.alerts[2].fingerprint);
	/* No labels at all: an empty object, an empty reason source. */
	assert_int_equal(json_object_size(b.alerts[4].labels), 0);
	char reason[64];
	rp_alert_reason(&b.alerts[4], reason, sizeof(reason));
	assert_string_equal(reason, "alert cbf29ce484222325");
	rp_alerts_free(&b);
}

static void run_names(void **state)
{
	(void)state;
	struct rp_alert_batch b = parse_ok(
		"{\"alerts\": [{\"status\": \"resolved\", \"labels\": {"
		"\"job\": \"train/job 1\", \"hidden\": \".x\", \"dots\": \"..\", \"empty\": \"\","
		"\"long\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
		"\"utf\": \"\\u00e9t\\u00e9\", \"ok\": \"llama-70b_v1.2\"}}]}");
	const struct rp_alert *a = &b.alerts[0];
	char run[64];
	assert_true(rp_alert_run(a, "job", run));
	assert_string_equal(run, "train_job_1");
	assert_true(rp_alert_run(a, "hidden", run));
	assert_string_equal(run, "_x");
	assert_true(rp_alert_run(a, "dots", run));
	assert_string_equal(run, "_.");
	assert_true(rp_alert_run(a, "long", run));
	assert_int_equal(strlen(run), 63);
	assert_true(rp_alert_run(a, "utf", run));
	assert_string_equal(run, "__t__");
	assert_true(rp_alert_run(a, "ok", run));
	assert_string_equal(run, "llama-70b_v1.2");
	strcpy(run, "unchanged");
	assert_false(rp_alert_run(a, "empty", run));
	assert_false(rp_alert_run(a, "missing", run));
	assert_string_equal(run, "unchanged");
	rp_alerts_free(&b);
}

/* A reason cut to fit is still valid UTF-8: it goes into JSON. */
static void reason_cut_at_characters(void **state)
{
	(void)state;
	struct rp_alert_batch b = parse_ok(
		"{\"alerts\": [{\"status\": \"resolved\", \"labels\": {\"alertname\": \"A\"},"
		" \"annotations\": {\"summary\": \"\\u00e9\\u00e9\\u00e9\\u20ac\\u20ac\"}}]}");
	for (size_t len = 1; len <= 16; len++) {
		char reason[16];
		rp_alert_reason(&b.alerts[0], reason, len);
		json_t *s = json_string(reason);
		if (!s)
			fail_msg("reason cut to %zu bytes is not UTF-8: %s", len, reason);
		json_decref(s);
	}
	char reason[64];
	rp_alert_reason(&b.alerts[0], reason, sizeof(reason));
	assert_string_equal(reason, "A: \xc3\xa9\xc3\xa9\xc3\xa9\xe2\x82\xac\xe2\x82\xac");
	rp_alerts_free(&b);
}

static void resolved_needs_no_start(void **state)
{
	(void)state;
	struct rp_alert_batch b = parse_ok("{\"alerts\": [{\"status\": \"resolved\"}]}");
	assert_false(b.alerts[0].firing);
	rp_alerts_free(&b);
	b = parse_ok("{\"version\": \"4\", \"alerts\": []}");
	assert_int_equal(b.n, 0);
	rp_alerts_free(&b);
}

static void malformed(void **state)
{
	(void)state;
	static const struct {
		const char *body, *words;
	} cases[] = {
		{ "", "body is empty" },
		{ "{\"alerts\": [", "malformed JSON" },
		{ "[1]", "is an array, not an object" },
		{ "{\"version\": \"3\", \"alerts\": []}", "version \"4\"" },
		{ "{\"version\": 4, \"alerts\": []}", "field 'version' is a number" },
		{ "{\"status\": \"firing\"}", "no 'alerts' array" },
		{ "{\"alerts\": {}}", "'alerts' must be an array, not an object" },
		{ "{\"alerts\": [7]}", "alerts[0] must be an object, not a number" },
		{ "{\"alerts\": [{\"labels\": {}}]}", "alerts[0].status must be \"firing\" or \"resolved\" and is missing" },
		{ "{\"alerts\": [{\"status\": \"pending\"}]}", "alerts[0].status must be \"firing\" or \"resolved\", not \"pending\"" },
		{ "{\"alerts\": [{\"status\": 1}]}", "alerts[0].status must be a string, not a number" },
		{ "{\"alerts\": [{\"status\": \"resolved\"}, {\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": []}]}",
		  "alerts[1].labels must be an object of strings, not an array" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"labels\": {\"job\": 3}}]}",
		  "alerts[0].labels.job must be a string, not a number" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"annotations\": {\"s\": null}}]}",
		  "alerts[0].annotations.s must be a string, not null" },
		{ "{\"alerts\": [{\"status\": \"firing\"}]}", "alerts[0].startsAt is missing" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"yesterday\"}]}", "alerts[0].startsAt" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": 5}]}", "alerts[0].startsAt must be a string" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"fingerprint\": 12}]}",
		  "alerts[0].fingerprint must be a string" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"fingerprint\": "
		  "\"0123456789012345678901234567890123456789012345678901234567890123456789\"}]}",
		  "alerts[0].fingerprint is 70 bytes long" },
		{ "{\"alerts\": [{\"status\": \"firing\", \"startsAt\": \"2026-01-01T00:00:00Z\", \"generatorURL\": false}]}",
		  "alerts[0].generatorURL must be a string, not a boolean" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rp_alert_batch b;
		struct rp_err err = { 0 };
		int rc = rp_alerts_parse(cases[i].body, strlen(cases[i].body), &b, &err);
		if (rc != -EINVAL)
			fail_msg("%s: got %d, expected -EINVAL", cases[i].body, rc);
		if (!strstr(err.msg, cases[i].words))
			fail_msg("%s: message '%s' does not say '%s'", cases[i].body, err.msg, cases[i].words);
		assert_null(b.root);
		assert_null(b.alerts);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_full),       cmocka_unit_test(fingerprint_from_labels),
		cmocka_unit_test(run_names),        cmocka_unit_test(reason_cut_at_characters),
		cmocka_unit_test(resolved_needs_no_start), cmocka_unit_test(malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
