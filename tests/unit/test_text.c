/* Escaping text for terminals (util/text.c): what an attacker puts in a
 * reason, a range or process name comes out inert; UTF-8 text stays. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "text.h"

static void expect(const char *in, const char *want)
{
	char buf[256];
	if (strcmp(rp_text_escape(in, buf, sizeof(buf)), want))
		fail_msg("gave '%s', not '%s'", buf, want);
	char *dup = rp_text_escape_dup(in);
	assert_string_equal(dup, want);
	free(dup);
}

static void test_controls(void **state)
{
	(void)state;
	expect("plain text", "plain text");
	expect(NULL, "");
	/* CSI (clear screen), OSC 52 (write the clipboard), CR over a line. */
	expect("a\x1b[2Jb", "a\\x1b[2Jb");
	expect("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07");
	expect("ok\rFAKE", "ok\\x0dFAKE");
	expect("line1\n* * * * * root", "line1\\x0a* * * * * root");
	expect("del\x7f", "del\\x7f");
	/* C1 CSI as a raw byte and as UTF-8 U+009B. */
	expect("\x9b" "31m", "\\x9b31m");
	expect("\xc2\x9b" "31m", "\\xc2\\x9b31m");
	/* A right-to-left override that would reorder the line. */
	expect("abc\xe2\x80\xaetxt.exe", "abc\\xe2\\x80\\xaetxt.exe");
}

static void test_utf8(void **state)
{
	(void)state;
	expect("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\xa5", "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\xa5");
	/* Cut, overlong, surrogate, past U+10FFFF, stray continuation. */
	expect("a\xc3", "a\\xc3");
	expect("\xc0\xaf", "\\xc0\\xaf");
	expect("\xed\xa0\x80", "\\xed\\xa0\\x80");
	expect("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
	expect("\x80x", "\\x80x");
}

static void test_cut(void **state)
{
	(void)state;
	char buf[8];
	/* Whole escapes and characters only: never half of either. */
	assert_string_equal(rp_text_escape("ab\x1b\x1b", buf, sizeof(buf)), "ab\\x1b");
	assert_string_equal(rp_text_escape("abcde\xc3\xa9", buf, sizeof(buf)), "abcde\xc3\xa9");
	assert_string_equal(rp_text_escape("abcdef\xc3\xa9", buf, sizeof(buf)), "abcdef");
	assert_string_equal(rp_text_escape("abcdefghij", buf, sizeof(buf)), "abcdefg");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_controls),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
