/* Escaping text for terminals (text.h). */
#include "text.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of the UTF-8 character at s, 0 when it is not one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, cut). */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n;
	unsigned min;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		min = 0x10000;
	} else {
		return 0;
	}
	unsigned cp = c & (0x7f >> n);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* C1 controls and the bidirectional embeddings, overrides and isolates,
 * which reorder what a terminal shows. */
static bool unsafe_char(const unsigned char *s, size_t n)
{
	unsigned cp = n == 2 ? (unsigned)(s[0] & 0x1f) << 6 | (s[1] & 0x3f)
		    : n == 3 ? (unsigned)(s[0] & 0x0f) << 12 | (unsigned)(s[1] & 0x3f) << 6 | (s[2] & 0x3f)
			     : 0;
	return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/* Writes s escaped; out NULL only counts.  Returns the bytes it takes. */
static size_t escape(const char *s, char *out, size_t cap)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t len = 0;
	while (*p) {
		size_t n = *p >= 0x20 && *p < 0x7f ? 1 : utf8_len(p);
		bool raw = n == 1 || (n > 1 && !unsafe_char(p, n));
		size_t need = raw ? n : (n ? n : 1) * 4;
		if (out && len + need + 1 > cap)
			break;
		if (out && raw)
			memcpy(out + len, p, n);
		for (size_t i = 0; out && !raw && i < (n ? n : 1); i++)
			snprintf(out + len + 4 * i, 5, "\\x%02x", p[i]);
		len += need;
		p += n ? n : 1;
	}
	if (out)
		out[len] = '\0';
	return len;
}

const char *rp_text_escape(const char *s, char *buf, size_t cap)
{
	if (cap)
		escape(s, buf, cap);
	return buf;
}

char *rp_text_escape_dup(const char *s)
{
	size_t n = escape(s, NULL, 0) + 1;
	char *buf = malloc(n);
	if (buf)
		escape(s, buf, n);
	return buf;
}
