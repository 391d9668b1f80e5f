/* The configuration's key table (daemon/config.c) against what users read:
 * docs/configuration.md (argv[1]) has a key table per section with every
 * key and no other, and its default column is the row's default, which is
 * what --print-config prints; deploy/ringprofd.conf.example (argv[2])
 * sets every key and no other. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

static const char *docs_path, *example_path;

/* A key as a document gives it. */
struct doc_key {
	char section[32]; /* a list section by its prefix: "ring.", "rule." */
	char key[64];
	char def[160];    /* the default column ("" where the file has none) */
	int line;
	bool found;       /* a row has it */
};

#define MAX_DOC_KEYS 256

struct doc {
	struct doc_key keys[MAX_DOC_KEYS];
	size_t n;
};

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	size_t skip = strspn(s, " \t");
	memmove(s, s + skip, n - skip + 1);
}

/* "ring.DEVICE" -> "ring.", "daemon" -> "daemon". */
static void section_of(const char *name, size_t len, char *out, size_t cap)
{
	const char *dot = memchr(name, '.', len);
	size_t n = dot ? (size_t)(dot - name) + 1 : len;
	snprintf(out, cap, "%.*s", (int)n, name);
}

static void add_key(struct doc *d, const char *section, const char *key, const char *def,
		    int line)
{
	if (d->n == MAX_DOC_KEYS)
		fail_msg("more than %d keys in the documents: raise MAX_DOC_KEYS", MAX_DOC_KEYS);
	struct doc_key *k = &d->keys[d->n++];
	snprintf(k->section, sizeof(k->section), "%s", section);
	snprintf(k->key, sizeof(k->key), "%s", key);
	snprintf(k->def, sizeof(k->def), "%s", def);
	k->line = line;
	k->found = false;
}

/* The first table under each "### `[section]`" heading whose header row
 * starts with "| key |": its key and default columns.  A default in
 * backticks, or a bare word or number, is a value; other text ("see
 * below", "empty (no TCP)", "(required)") is none and reads as "". */
static void read_docs(const char *path, struct doc *d)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	char line[4096], section[32] = "";
	int lineno = 0, def_col = -1;
	bool in_table = false;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		trim(line);
		if (line[0] == '#') {
			section[0] = '\0';
			in_table = false;
			const char *open = strstr(line, "`[");
			const char *close = open ? strstr(open, "]`") : NULL;
			if (!strncmp(line, "### ", 4) && close)
				section_of(open + 2, (size_t)(close - open - 2), section, sizeof(section));
			continue;
		}
		if (line[0] != '|') {
			if (in_table)
				section[0] = '\0'; /* the key table ended; later tables are not keys */
			in_table = false;
			continue;
		}
		if (!section[0] || !strncmp(line, "|---", 4))
			continue;
		char *cells[8];
		int n = 0;
		for (char *c = strtok(line + 1, "|"); c && n < 8; c = strtok(NULL, "|")) {
			trim(c);
			cells[n++] = c;
		}
		if (n && !strcmp(cells[0], "key")) {
			in_table = true;
			def_col = -1;
			for (int i = 0; i < n; i++)
				if (!strcmp(cells[i], "default"))
					def_col = i;
			if (def_col < 0)
				fail_msg("%s:%d: a key table without a default column", path, lineno);
			continue;
		}
		if (!in_table)
			continue;
		size_t klen = strlen(cells[0]);
		if (def_col >= n || klen < 3 || cells[0][0] != '`' || cells[0][klen - 1] != '`')
			fail_msg("%s:%d: a key table row without `key` and a default", path, lineno);
		cells[0][klen - 1] = '\0';
		char *def = cells[def_col];
		size_t dlen = strlen(def);
		if (dlen >= 2 && def[0] == '`' && def[dlen - 1] == '`' && !memchr(def + 1, '`', dlen - 2)) {
			def[dlen - 1] = '\0';
			def++;
		} else if (!strncmp(def, "empty", 5) ||
			   strspn(def, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,") !=
				   dlen) {
			def = "";
		}
		add_key(d, section, cells[0] + 1, def, lineno);
	}
	fclose(f);
}

/* An INI file's keys per section, the value as the default ("[rule.x]"
 * under "rule."). */
static void read_ini(const char *path, struct doc *d)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	char line[4096], section[32] = "";
	int lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		trim(line);
		char *eq = strchr(line, '=');
		if (line[0] == '[' && strchr(line, ']')) {
			section_of(line + 1, (size_t)(strchr(line, ']') - line - 1), section,
				   sizeof(section));
		} else if (line[0] && line[0] != '#' && line[0] != ';' && eq) {
			*eq = '\0';
			trim(line);
			trim(eq + 1);
			add_key(d, section, line, eq + 1, lineno);
		}
	}
	fclose(f);
}

/* Sections whose rows an earlier section has ([ring.DEVICE]: [rings]'s)
 * are documented there. */
static bool documented_apart(size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (rp_config_sections[j]->keys == rp_config_sections[i]->keys)
			return false;
	return true;
}

static struct doc_key *find(struct doc *d, const char *section, const char *key)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->keys[i].section, section) && !strcmp(d->keys[i].key, key))
			return &d->keys[i];
	return NULL;
}

/* Every row in d, and nothing else; compare_defaults: with its default. */
static void expect_rows(struct doc *d, const char *path, bool all_sections,
			bool compare_defaults)
{
	for (size_t i = 0; i < rp_config_nsections; i++) {
		const struct rp_config_section *s = rp_config_sections[i];
		if (!all_sections && !documented_apart(i))
			continue;
		for (size_t r = 0; r < s->nkeys; r++) {
			const struct rp_config_key *row = &s->keys[r];
			struct doc_key *k = find(d, s->name, row->name);
			if (!k)
				fail_msg("%s: [%s%s] %s is missing; add it (daemon/config.c has it)",
					 path, s->name, s->list ? s->instance : "", row->name);
			for (size_t j = 0; j < d->n; j++) /* each [rule.NAME] has it */
				if (!strcmp(d->keys[j].section, s->name) &&
				    !strcmp(d->keys[j].key, row->name))
					d->keys[j].found = true;
			const char *def = row->def ? row->def : "";
			if (compare_defaults && strcmp(k->def, def))
				fail_msg("%s:%d: [%s%s] %s: the default is '%s' there, '%s' in "
					 "daemon/config.c", path, k->line, s->name,
					 s->list ? s->instance : "", row->name, k->def, def);
		}
	}
	for (size_t i = 0; i < d->n; i++)
		if (!d->keys[i].found)
			fail_msg("%s:%d: [%s] %s is not a key of daemon/config.c", path, d->keys[i].line,
				 d->keys[i].section, d->keys[i].key);
}

static void docs_tables(void **state)
{
	(void)state;
	static struct doc d;
	read_docs(docs_path, &d);
	assert_true(d.n > 0);
	expect_rows(&d, docs_path, false, true);
}

static void example_sets_every_key(void **state)
{
	(void)state;
	static struct doc d;
	read_ini(example_path, &d);
	expect_rows(&d, example_path, true, false);
}

/* What --print-config prints for a configuration of defaults (and one
 * rule of its defaults) is each row's default as written in the row. */
static void defaults_print_as_written(void **state)
{
	(void)state;
	char conf[] = "/tmp/test-config-docs-XXXXXX", printed[64];
	int fd = mkstemp(conf);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "[rule.x]\n", 9), 9);
	assert_int_equal(close(fd), 0);
	struct rp_config c;
	struct rp_err err = {0};
	rp_config_defaults(&c);
	if (rp_config_load(&c, conf, &err))
		fail_msg("%s", err.msg);
	snprintf(printed, sizeof(printed), "%s.printed", conf);
	FILE *f = fopen(printed, "w");
	assert_non_null(f);
	rp_config_print(&c, f);
	assert_int_equal(fclose(f), 0);
	static struct doc d;
	read_ini(printed, &d);
	unlink(printed);
	unlink(conf);
	size_t checked = 0;
	for (size_t i = 0; i < rp_config_nsections; i++) {
		const struct rp_config_section *s = rp_config_sections[i];
		for (size_t r = 0; r < s->nkeys; r++) {
			if (!s->keys[r].def || (s->list && s->list->overrides))
				continue;
			struct doc_key *k = find(&d, s->name, s->keys[r].name);
			if (!k || strcmp(k->def, s->keys[r].def))
				fail_msg("[%s] %s: the default '%s' prints as '%s'; write it so",
					 s->name, s->keys[r].name, s->keys[r].def, k ? k->def : "(nothing)");
			checked++;
		}
	}
	assert_true(checked > 0);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s docs/configuration.md deploy/ringprofd.conf.example\n",
			argv[0]);
		return 2;
	}
	docs_path = argv[1];
	example_path = argv[2];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(docs_tables),
		cmocka_unit_test(example_sets_every_key),
		cmocka_unit_test(defaults_print_as_written),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
