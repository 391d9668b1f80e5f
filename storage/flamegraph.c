/* Flame graphs of the window's CPU samples: <host>.folded, the collapsed
 * stacks flamegraph.pl, inferno and speedscope read ("frame;frame;...
 * count" per line, root first), and <host>.flamegraph.svg, an SVG that
 * draws them itself (click a frame to zoom, Ctrl-F or "Search" to
 * highlight a name; no file or network besides it).
 *
 * Both weigh frames by samples, whatever the sampling rate, and start
 * each stack at its process ("comm (pid)"), so one graph shows every
 * process side by side, or only those the reader's filter lets pass.
 * The samples are folded into a tree of frames (a child per distinct
 * name under its caller): memory grows with the number of distinct call
 * paths, not with samples.  Names are made printable (util/text.h: no
 * control characters, bytes that are not UTF-8 as \xNN) and, in the
 * folded text, hold no ';'. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"
#include "text.h"
#include "writers.h"

#define NAME_MAX_LEN 1024
#define SVG_WIDTH 1200.0
#define SVG_PAD 10.0
#define FRAME_HEIGHT 16
#define SVG_TOP 36    /* title and search button */
#define SVG_BOTTOM 24 /* the details line */
#define MIN_WIDTH 0.1 /* px: narrower frames (and what they call) are not drawn */
#define CHAR_WIDTH 7.0 /* px of a 12px monospace character, about */

/* A frame in its caller's place: node 0 is the root (all samples). */
struct node {
	uint32_t parent, name; /* name: index into names */
	uint32_t child, next;  /* first child, next sibling; 0: none */
	uint32_t depth;
	bool kernel;
	uint64_t total, self, start; /* start: samples left of it (drawing) */
};

struct slot {
	uint32_t id, hash; /* id 1-based, 0: free */
};

struct fold {
	struct rp_reader *r;
	char **names;
	size_t nnames, names_cap, names_mask;
	struct slot *name_ix;
	struct node *nodes;
	size_t nnodes, nodes_cap, nodes_mask;
	struct slot *node_ix;
	uint32_t max_depth;
};

static bool slot_used(const void *s) { return ((const struct slot *)s)->id != 0; }
static uint64_t slot_hash(const void *s) { return ((const struct slot *)s)->hash; }

/* The index of name (printable already) in f->names, added if new; -1
 * without memory. */
static int64_t intern(struct fold *f, const char *name)
{
	uint32_t hash = (uint32_t)rp_hash_str(name);
	if (rp_table_reserve(&f->name_ix, &f->names_mask, f->nnames, sizeof(*f->name_ix), slot_used,
			     slot_hash, RP_TABLE_FIRST) < 0)
		return -1;
	size_t i = hash & f->names_mask;
	for (; f->name_ix[i].id; i = (i + 1) & f->names_mask)
		if (f->name_ix[i].hash == hash && strcmp(f->names[f->name_ix[i].id - 1], name) == 0)
			return f->name_ix[i].id - 1;
	char *copy = strdup(name);
	if (!copy || rp_array_reserve(&f->names, &f->names_cap, f->nnames + 1, sizeof(*f->names)) < 0) {
		free(copy);
		return -1;
	}
	f->names[f->nnames++] = copy;
	f->name_ix[i] = (struct slot){ .id = (uint32_t)f->nnames, .hash = hash };
	return (int64_t)f->nnames - 1;
}

/* The child of parent named name (raw text), added if new; 0 without
 * memory (node 0 is never a child). */
static uint32_t child(struct fold *f, uint32_t parent, const char *raw, bool kernel)
{
	char buf[NAME_MAX_LEN];
	int64_t name = intern(f, rp_text_escape(raw, buf, sizeof(buf)));
	if (name < 0)
		return 0;
	uint32_t hash = (uint32_t)rp_hash_u64((uint64_t)parent << 32 | (uint64_t)name);
	if (rp_table_reserve(&f->node_ix, &f->nodes_mask, f->nnodes, sizeof(*f->node_ix), slot_used,
			     slot_hash, RP_TABLE_FIRST) < 0)
		return 0;
	size_t i = hash & f->nodes_mask;
	for (; f->node_ix[i].id; i = (i + 1) & f->nodes_mask) {
		struct node *n = &f->nodes[f->node_ix[i].id - 1];
		if (f->node_ix[i].hash == hash && n->parent == parent && n->name == name)
			return f->node_ix[i].id - 1;
	}
	if (f->nnodes >= UINT32_MAX ||
	    rp_array_reserve(&f->nodes, &f->nodes_cap, f->nnodes + 1, sizeof(*f->nodes)) < 0)
		return 0;
	uint32_t id = (uint32_t)f->nnodes++;
	struct node *p = &f->nodes[parent];
	f->nodes[id] = (struct node){ .parent = parent, .name = (uint32_t)name, .next = p->child,
				      .depth = p->depth + 1, .kernel = kernel };
	p->child = id;
	if (f->nodes[id].depth > f->max_depth)
		f->max_depth = f->nodes[id].depth;
	f->node_ix[i] = (struct slot){ .id = id + 1, .hash = hash };
	return id;
}

/* One CPU sample's stack, root first, under its process. */
static int fold_sample(void *ctx, const struct rp_reader_event *e)
{
	struct fold *f = ctx;
	const struct rp_event *ev = e->ev;
	if (ev->kind != RP_EV_CPU_SAMPLE)
		return 0;
	char proc[NAME_MAX_LEN];
	const char *comm = rp_reader_process_name(f->r, ev->pid);
	if (!comm)
		comm = rp_reader_thread_name(f->r, ev->pid, ev->tid);
	snprintf(proc, sizeof(proc), "%s (%" PRIu32 ")", comm ? comm : ev->pid ? "pid" : "idle",
		 ev->pid);
	uint32_t at = child(f, 0, proc, false);
	if (!at)
		return -ENOMEM;
	f->nodes[0].total++;
	f->nodes[at].total++;
	struct rp_symbolizer *sym = rp_reader_symbolizer(f->r);
	for (unsigned i = ev->u.sample.nframes; i-- > 0;) {
		struct rp_symbol s;
		char buf[NAME_MAX_LEN];
		bool kernel = i < ev->u.sample.nkernel;
		rp_symbolize(sym, ev->pid, rp_frame_address(ev->u.sample.frames, ev->u.sample.nkernel, i),
			     kernel, &s);
		if (!(at = child(f, at, rp_symbol_name(&s, buf, sizeof(buf)), kernel)))
			return -ENOMEM;
		f->nodes[at].total++;
	}
	f->nodes[at].self++;
	return 0;
}

static void free_fold(struct fold *f)
{
	for (size_t i = 0; i < f->nnames; i++)
		free(f->names[i]);
	free(f->names);
	free(f->name_ix);
	free(f->nodes);
	free(f->node_ix);
}

static int by_name(const void *a, const void *b, void *ctx)
{
	const struct fold *f = ctx;
	const struct node *x = &f->nodes[*(const uint32_t *)a];
	const struct node *y = &f->nodes[*(const uint32_t *)b];
	return strcmp(f->names[x->name], f->names[y->name]);
}

/* Every child list sorted by name (as flamegraph.pl draws them), each
 * child's start set: the samples of its parent's start and of the
 * siblings before it. */
static int sort_children(struct fold *f)
{
	uint32_t *kids = NULL;
	size_t cap = 0;
	/* A parent comes before its children: its start is set first. */
	for (size_t p = 0; p < f->nnodes; p++) {
		size_t n = 0;
		for (uint32_t c = f->nodes[p].child; c; c = f->nodes[c].next) {
			if (rp_array_reserve(&kids, &cap, n + 1, sizeof(*kids)) < 0) {
				free(kids);
				return -ENOMEM;
			}
			kids[n++] = c;
		}
		if (n > 1)
			qsort_r(kids, n, sizeof(*kids), by_name, f);
		uint64_t start = f->nodes[p].start;
		for (size_t i = 0; i < n; i++) {
			f->nodes[kids[i]].next = i + 1 < n ? kids[i + 1] : 0;
			f->nodes[kids[i]].start = start;
			start += f->nodes[kids[i]].total;
		}
		f->nodes[p].child = n ? kids[0] : 0;
	}
	free(kids);
	return 0;
}

/* Calls visit for every node but the root, callers before callees,
 * siblings in name order, with the path of node ids from depth 1 to the
 * node's.  Stops at visit's error. */
static int walk(const struct fold *f, int (*visit)(const struct fold *, const uint32_t *path,
						   uint32_t depth, void *), void *ctx)
{
	uint32_t *path = malloc(((size_t)f->max_depth + 1) * sizeof(*path));
	if (!path)
		return -ENOMEM;
	int rc = 0;
	uint32_t at = f->nodes[0].child;
	while (at && rc == 0) {
		const struct node *n = &f->nodes[at];
		path[n->depth] = at;
		rc = visit(f, path + 1, n->depth, ctx);
		if (n->child && rc == 0) {
			at = n->child;
			continue;
		}
		/* Up to the first caller with a next sibling. */
		while (at && !f->nodes[at].next)
			at = f->nodes[at].parent;
		at = at ? f->nodes[at].next : 0;
	}
	free(path);
	return rc;
}

static int fold_session(struct fold *f, struct rp_err *err)
{
	f->nodes = calloc(1, sizeof(*f->nodes));
	f->nnodes = f->nodes_cap = 1;
	int rc = f->nodes ? rp_reader_each(f->r, fold_sample, f, err) : -ENOMEM;
	if (rc == 0)
		rc = sort_children(f);
	if (rc == -ENOMEM)
		rc = rp_err_set(err, rc, "out of memory folding %" PRIu64 " CPU samples",
				f->nodes ? f->nodes[0].total : 0);
	return rc;
}

/* A folded line for each call path some samples end in. */
static int put_folded(const struct fold *f, const uint32_t *path, uint32_t depth, void *ctx)
{
	FILE *out = ctx;
	const struct node *n = &f->nodes[path[depth - 1]];
	if (!n->self)
		return 0;
	for (uint32_t d = 0; d < depth; d++) {
		if (d)
			putc(';', out);
		for (const char *c = f->names[f->nodes[path[d]].name]; *c; c++)
			putc(*c == ';' ? ':' : *c, out);
	}
	fprintf(out, " %" PRIu64 "\n", n->self);
	return ferror(out) ? -EIO : 0;
}

int rp_write_folded(struct rp_reader *r, FILE *out, struct rp_err *err)
{
	struct fold f = { .r = r };
	int rc = fold_session(&f, err);
	if (rc == 0 && (rc = walk(&f, put_folded, out)) == -EIO)
		rc = rp_err_set(err, -EIO, "cannot write the folded stacks");
	else if (rc == -ENOMEM)
		rc = rp_err_set(err, rc, "out of memory writing the folded stacks");
	free_fold(&f);
	return rc;
}

/* s in XML character data or an attribute value; Unicode's
 * non-characters U+FFFE and U+FFFF, which XML forbids, as '?'. */
static void put_xml(FILE *out, const char *s, size_t max)
{
	for (size_t i = 0; s[i] && i < max; i++) {
		const char *esc = s[i] == '&' ? "&amp;" : s[i] == '<' ? "&lt;" : s[i] == '>' ? "&gt;"
				: s[i] == '"' ? "&quot;" : s[i] == '\'' ? "&apos;" : NULL;
		if (esc)
			fputs(esc, out);
		else if ((unsigned char)s[i] == 0xef && (unsigned char)s[i + 1] == 0xbf &&
			 ((unsigned char)s[i + 2] & 0xfe) == 0xbe) {
			putc('?', out);
			i += 2;
		} else
			putc(s[i], out);
	}
}

struct svg {
	FILE *out;
	double scale; /* px per sample */
	unsigned height;
};

/* A stable warm colour per name (flamegraph.pl's "hot"), orange-brown
 * for kernel frames and grey for the processes. */
static void color(const char *name, const struct node *n, unsigned rgb[3])
{
	uint64_t h = rp_hash_str(name);
	unsigned a = (unsigned)(h & 0xff), b = (unsigned)(h >> 8 & 0xff), c = (unsigned)(h >> 16 & 0xff);
	if (n->depth == 1) {
		rgb[0] = rgb[1] = rgb[2] = 190 + c % 40;
	} else if (n->kernel) {
		rgb[0] = 200 + a % 55;
		rgb[1] = 120 + b % 60;
		rgb[2] = 40 + c % 40;
	} else {
		rgb[0] = 205 + a * 50 / 255;
		rgb[1] = b * 230 / 255;
		rgb[2] = c * 55 / 255;
	}
}

static int put_frame(const struct fold *f, const uint32_t *path, uint32_t depth, void *ctx)
{
	struct svg *s = ctx;
	const struct node *n = &f->nodes[path[depth - 1]];
	double w = (double)n->total * s->scale;
	if (w < MIN_WIDTH)
		return 0;
	const char *name = f->names[n->name];
	double x = SVG_PAD + (double)n->start * s->scale;
	double y = (double)s->height - SVG_BOTTOM - (double)depth * FRAME_HEIGHT;
	unsigned rgb[3];
	color(name, n, rgb);
	fprintf(s->out, "<g data-s=\"%" PRIu64 "\" data-n=\"%" PRIu64 "\" data-d=\"%" PRIu32
		"\"><title>", n->start, n->total, depth);
	put_xml(s->out, name, SIZE_MAX);
	fprintf(s->out, " (%" PRIu64 " samples, %.2f%%)</title><rect x=\"%.2f\" y=\"%.1f\" "
		"width=\"%.2f\" height=\"%d\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/><text x=\"%.2f\" "
		"y=\"%.1f\">", n->total, 100.0 * (double)n->total / (double)f->nodes[0].total, x, y, w,
		FRAME_HEIGHT - 1, rgb[0], rgb[1], rgb[2], x + 3, y + FRAME_HEIGHT - 4.5);
	/* The label: as many characters as fit (the script redoes it on
	 * zoom), ".." when cut, never inside a UTF-8 sequence. */
	size_t fit = w > 3 * CHAR_WIDTH ? (size_t)((w - 6) / CHAR_WIDTH) : 0, len = strlen(name);
	size_t cut = len <= fit ? len : fit >= 2 ? fit - 2 : 0;
	while (cut < len && cut > 0 && ((unsigned char)name[cut] & 0xc0) == 0x80)
		cut--;
	put_xml(s->out, name, cut);
	fprintf(s->out, "%s</text></g>\n", len > fit && fit >= 2 ? ".." : "");
	return ferror(s->out) ? -EIO : 0;
}

/* Click to zoom (a frame's callers span the width, what it calls
 * widens), click the background or "Reset zoom" to undo; "Search" (or
 * Ctrl-F) highlights the frames whose name matches a regular expression
 * and says what share of the samples they hold. */
static const char svg_script[] =
	"<script type=\"text/ecmascript\"><![CDATA[\n"
	"'use strict';\n"
	"const W = %.1f, P = %.1f, CW = %.1f, TOTAL = %" PRIu64 ";\n"
	"const frames = Array.from(document.querySelectorAll('#frames > g'));\n"
	"const details = document.getElementById('details');\n"
	"function label(g, w) {\n"
	"  const name = g.querySelector('title').textContent.replace(/ \\([0-9]+ samples, [0-9.]+%%\\)$/, '');\n"
	"  const fit = w > 3 * CW ? Math.floor((w - 6) / CW) : 0;\n"
	"  g.querySelector('text').textContent = name.length <= fit ? name : fit >= 2 ? name.slice(0, fit - 2) + '..' : '';\n"
	"}\n"
	"function zoom(z) {\n"
	"  const zs = z ? +z.dataset.s : 0, zn = z ? +z.dataset.n : TOTAL, zd = z ? +z.dataset.d : 0;\n"
	"  const scale = (W - 2 * P) / zn;\n"
	"  for (const g of frames) {\n"
	"    const s = +g.dataset.s, n = +g.dataset.n, d = +g.dataset.d;\n"
	"    const r = g.querySelector('rect'), t = g.querySelector('text');\n"
	"    const caller = d < zd && s <= zs && s + n >= zs + zn;\n"
	"    const inside = d >= zd && s >= zs && s + n <= zs + zn;\n"
	"    g.style.display = caller || inside ? '' : 'none';\n"
	"    g.style.opacity = caller ? 0.6 : 1;\n"
	"    if (!caller && !inside) continue;\n"
	"    const x = caller ? P : P + (s - zs) * scale, w = caller ? W - 2 * P : n * scale;\n"
	"    r.setAttribute('x', x); r.setAttribute('width', w); t.setAttribute('x', x + 3);\n"
	"    label(g, w);\n"
	"  }\n"
	"  document.getElementById('unzoom').style.display = z ? '' : 'none';\n"
	"}\n"
	"function search() {\n"
	"  const term = prompt('Highlight the frames whose name matches (a regular expression):', '');\n"
	"  if (term === null) return;\n"
	"  let re; try { re = new RegExp(term); } catch (e) { details.textContent = 'not a regular expression: ' + e.message; return; }\n"
	"  const spans = [];\n"
	"  for (const g of frames) {\n"
	"    const name = g.querySelector('title').textContent.replace(/ \\([0-9]+ samples, [0-9.]+%%\\)$/, '');\n"
	"    const hit = term !== '' && re.test(name);\n"
	"    const r = g.querySelector('rect');\n"
	"    if (!r.dataset.fill) r.dataset.fill = r.getAttribute('fill');\n"
	"    r.setAttribute('fill', hit ? 'rgb(230,0,230)' : r.dataset.fill);\n"
	"    if (hit) spans.push([+g.dataset.s, +g.dataset.s + +g.dataset.n]);\n"
	"  }\n"
	"  spans.sort((a, b) => a[0] - b[0]);\n"
	"  let hit = 0, end = 0;\n"
	"  for (const [s, e] of spans) { if (e > end) { hit += e - Math.max(s, end); end = e; } }\n"
	"  details.textContent = term === '' ? ' ' : 'Matched ' + term + ': ' + (100 * hit / TOTAL).toFixed(2) + '%% of the samples';\n"
	"}\n"
	"for (const g of frames) {\n"
	"  g.addEventListener('click', e => { zoom(g); e.stopPropagation(); });\n"
	"  g.addEventListener('mouseover', () => { details.textContent = g.querySelector('title').textContent; });\n"
	"}\n"
	"document.getElementById('background').addEventListener('click', () => zoom(null));\n"
	"document.getElementById('unzoom').addEventListener('click', () => zoom(null));\n"
	"document.getElementById('search').addEventListener('click', search);\n"
	"window.addEventListener('keydown', e => { if (e.ctrlKey && e.key === 'f') { e.preventDefault(); search(); } });\n"
	"]]></script>\n";

int rp_write_flamegraph(struct rp_reader *r, FILE *out, struct rp_err *err)
{
	struct fold f = { .r = r };
	int rc = fold_session(&f, err);
	if (rc < 0) {
		free_fold(&f);
		return rc;
	}
	uint64_t total = f.nodes[0].total;
	struct svg s = { .out = out, .scale = total ? (SVG_WIDTH - 2 * SVG_PAD) / (double)total : 0 };
	uint32_t depth = 0; /* of the deepest frame drawn */
	for (size_t i = 1; i < f.nnodes; i++)
		if ((double)f.nodes[i].total * s.scale >= MIN_WIDTH && f.nodes[i].depth > depth)
			depth = f.nodes[i].depth;
	s.height = SVG_TOP + SVG_BOTTOM + (depth + 1) * FRAME_HEIGHT;
	char filter[512] = "";
	const uint32_t *pids;
	size_t npids;
	const struct rp_reader_filter *rf = rp_reader_filter(r, &pids, &npids);
	if (rf)
		rp_reader_filter_text(rf, filter, sizeof(filter));
	fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
		"height=\"%u\" viewBox=\"0 0 %.0f %u\" font-family=\"monospace\" font-size=\"12\">\n"
		"<style>#frames text { pointer-events: none; } #frames g { cursor: pointer; } "
		".button { cursor: pointer; fill: #333; }</style>\n"
		"<rect id=\"background\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
		"<text x=\"%.0f\" y=\"20\" text-anchor=\"middle\" font-size=\"16\">CPU flame graph: "
		"host ", SVG_WIDTH, s.height, SVG_WIDTH, s.height, SVG_WIDTH / 2);
	put_xml(out, rp_reader_host(r), SIZE_MAX);
	if (*filter) {
		fputs(", ", out);
		put_xml(out, filter, SIZE_MAX);
	}
	fprintf(out, ", %" PRIu64 " samples%s</text>\n"
		"<text id=\"unzoom\" class=\"button\" x=\"%.0f\" y=\"20\" style=\"display:none\">"
		"Reset zoom</text>\n"
		"<text id=\"search\" class=\"button\" x=\"%.0f\" y=\"20\" text-anchor=\"end\">Search"
		"</text>\n"
		"<text id=\"details\" x=\"%.0f\" y=\"%u\"> </text>\n<g id=\"frames\">\n",
		total, total ? "" : " (the window holds no CPU samples)", SVG_PAD,
		SVG_WIDTH - SVG_PAD, SVG_PAD, s.height - 8);
	rc = walk(&f, put_frame, &s);
	if (rc == 0) {
		fputs("</g>\n", out);
		fprintf(out, svg_script, SVG_WIDTH, SVG_PAD, CHAR_WIDTH, total);
		fputs("</svg>\n", out);
		rc = ferror(out) ? -EIO : 0;
	}
	if (rc == -EIO)
		rc = rp_err_set(err, rc, "cannot write the flame graph");
	else if (rc == -ENOMEM)
		rc = rp_err_set(err, rc, "out of memory drawing the flame graph");
	free_fold(&f);
	return rc;
}
