#include "alerts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsontype.h"
#include "parse.h"

#define HINT "send Alertmanager's webhook payload (version \"4\")"

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ull

/* Field `name` of alert i as a string: 1, 0 when absent. */
static int string_of(json_t *alert, size_t i, const char *name, const char **out,
		     struct rp_err *err)
{
	json_t *v = json_object_get(alert, name);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return rp_err_set(err, -EINVAL, "alerts[%zu].%s must be a string, not %s: " HINT, i,
				  name, rp_json_type_name(v));
	*out = json_string_value(v);
	return 1;
}

/* Field `name` of alert i as an object of strings; absent is empty. */
static int labels_of(json_t *alert, size_t i, const char *name, json_t **out,
		     struct rp_err *err)
{
	json_t *v = json_object_get(alert, name);
	if (!v) {
		if (!(v = json_object()) || json_object_set_new(alert, name, v) < 0)
			return rp_err_set(err, -ENOMEM, "out of memory parsing the alerts");
	}
	if (!json_is_object(v))
		return rp_err_set(err, -EINVAL, "alerts[%zu].%s must be an object of strings, not %s: " HINT,
				  i, name, rp_json_type_name(v));
	const char *key;
	json_t *s;
	json_object_foreach(v, key, s)
		if (!json_is_string(s))
			return rp_err_set(err, -EINVAL,
					  "alerts[%zu].%s.%.64s must be a string, not %s: " HINT, i,
					  name, key, rp_json_type_name(s));
	*out = v;
	return 0;
}

static int by_key(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Alertmanager's fingerprint identifies an alert by its label set; an
 * alert sent without one is identified the same way. */
static int labels_fingerprint(json_t *labels, struct rp_alert *a)
{
	size_t n = json_object_size(labels), k = 0;
	const char **keys = malloc((n ? n : 1) * sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	const char *key;
	json_t *v;
	json_object_foreach(labels, key, v)
		keys[k++] = key;
	qsort(keys, n, sizeof(*keys), by_key);
	uint64_t h = FNV_OFFSET;
	for (size_t i = 0; i < n; i++) {
		const char *value = json_string_value(json_object_get(labels, keys[i]));
		h = fnv1a(h, keys[i], strlen(keys[i]) + 1);
		h = fnv1a(h, value, strlen(value) + 1);
	}
	free(keys);
	snprintf(a->fingerprint, sizeof(a->fingerprint), "%016llx", (unsigned long long)h);
	return 0;
}

static int parse_alert(json_t *o, size_t i, struct rp_alert *a, struct rp_err *err)
{
	if (!json_is_object(o))
		return rp_err_set(err, -EINVAL, "alerts[%zu] must be an object, not %s: " HINT, i,
				  rp_json_type_name(o));
	const char *status = NULL;
	int rc = string_of(o, i, "status", &status, err);
	if (rc < 0)
		return rc;
	if (rc == 0 || (strcmp(status, "firing") && strcmp(status, "resolved")))
		return rp_err_set(err, -EINVAL,
				  "alerts[%zu].status must be \"firing\" or \"resolved\"%s%.32s%s: " HINT, i,
				  rc ? ", not \"" : " and is missing", rc ? status : "", rc ? "\"" : "");
	a->firing = !strcmp(status, "firing");
	if ((rc = labels_of(o, i, "labels", &a->labels, err)) < 0 ||
	    (rc = labels_of(o, i, "annotations", &a->annotations, err)) < 0)
		return rc;

	const char *fp = NULL;
	if ((rc = string_of(o, i, "fingerprint", &fp, err)) < 0)
		return rc;
	if (rc && strlen(fp) >= sizeof(a->fingerprint))
		return rp_err_set(err, -EINVAL,
				  "alerts[%zu].fingerprint is %zu bytes long: Alertmanager's are 16 hex digits; send at most %zu",
				  i, strlen(fp), sizeof(a->fingerprint) - 1);
	if (rc && fp[0])
		snprintf(a->fingerprint, sizeof(a->fingerprint), "%s", fp);
	else if (labels_fingerprint(a->labels, a) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory parsing the alerts");
	a->key = fnv1a(FNV_OFFSET, a->fingerprint, strlen(a->fingerprint));

	a->generator_url = "";
	a->starts_at = "";
	if ((rc = string_of(o, i, "generatorURL", &a->generator_url, err)) < 0 ||
	    (rc = string_of(o, i, "startsAt", &a->starts_at, err)) < 0)
		return rc;
	if (!a->firing)
		return 0; /* resolved alerts are ignored: their start does not matter */
	if (rc == 0)
		return rp_err_set(err, -EINVAL,
				  "alerts[%zu].startsAt is missing: a firing alert needs its start time (RFC 3339) to anchor the snapshot",
				  i);
	if (rp_parse_time(a->starts_at, &a->starts_at_wall_ns, err) < 0) {
		rp_err_prefix(err, "alerts[%zu].startsAt", i);
		err->code = -EINVAL;
		return -EINVAL;
	}
	return 0;
}

int rp_alerts_parse(const char *body, size_t len, struct rp_alert_batch *out,
		    struct rp_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len == 0)
		return rp_err_set(err, -EINVAL, "the request body is empty: " HINT);
	json_error_t je;
	json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &je);
	if (!root)
		return rp_err_set(err, -EINVAL, "malformed JSON in the request body at line %d, column %d: %s: " HINT,
				  je.line, je.column, je.text);
	out->root = root;
	int rc = 0;
	json_t *version = json_object_get(root, "version");
	json_t *alerts = json_object_get(root, "alerts");
	if (!json_is_object(root))
		rc = rp_err_set(err, -EINVAL, "the request body is %s, not an object: " HINT, rp_json_type_name(root));
	else if (version && !(json_is_string(version) && !strcmp(json_string_value(version), "4")))
		rc = rp_err_set(err, -EINVAL,
				"field 'version' is %s%.16s%s: ringprofd reads version \"4\" of Alertmanager's webhook payload",
				json_is_string(version) ? "\"" : rp_json_type_name(version),
				json_is_string(version) ? json_string_value(version) : "",
				json_is_string(version) ? "\"" : "");
	else if (!alerts)
		rc = rp_err_set(err, -EINVAL, "the payload has no 'alerts' array: " HINT);
	else if (!json_is_array(alerts))
		rc = rp_err_set(err, -EINVAL, "field 'alerts' must be an array, not %s: " HINT,
				rp_json_type_name(alerts));
	if (rc == 0 && json_array_size(alerts) &&
	    !(out->alerts = calloc(json_array_size(alerts), sizeof(*out->alerts))))
		rc = rp_err_set(err, -ENOMEM, "out of memory parsing the alerts");
	for (size_t i = 0; rc == 0 && i < json_array_size(alerts); i++, out->n++)
		rc = parse_alert(json_array_get(alerts, i), i, &out->alerts[i], err);
	if (rc < 0)
		rp_alerts_free(out);
	return rc;
}

void rp_alerts_free(struct rp_alert_batch *b)
{
	json_decref(b->root);
	free(b->alerts);
	memset(b, 0, sizeof(*b));
}

static bool run_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || (c == '.' && !first);
}

bool rp_alert_run(const struct rp_alert *a, const char *label, char out[64])
{
	const char *v = json_string_value(json_object_get(a->labels, label));
	if (!v || !*v)
		return false;
	size_t i;
	for (i = 0; v[i] && i < 63; i++)
		out[i] = run_char(v[i], i == 0) ? v[i] : '_';
	out[i] = '\0';
	return true;
}

/* Cut at a UTF-8 character boundary: the reason goes into JSON. */
static void utf8_trim(char *s)
{
	size_t n = strlen(s), end = n;
	while (end && ((unsigned char)s[end - 1] & 0xc0) == 0x80)
		end--;
	if (end && (unsigned char)s[end - 1] >= 0xc0) {
		unsigned char lead = (unsigned char)s[end - 1];
		size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
		if (n - (end - 1) < need)
			s[end - 1] = '\0';
	}
}

void rp_alert_reason(const struct rp_alert *a, char *out, size_t len)
{
	const char *name = json_string_value(json_object_get(a->labels, "alertname"));
	const char *summary = json_string_value(json_object_get(a->annotations, "summary"));
	if (name && summary)
		snprintf(out, len, "%s: %s", name, summary);
	else if (name || summary)
		snprintf(out, len, "%s", name ? name : summary);
	else
		snprintf(out, len, "alert %s", a->fingerprint);
	utf8_trim(out);
}
