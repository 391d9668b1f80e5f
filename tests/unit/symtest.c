/* symtest: a program with known functions for the symbolizer and process
 * information tests.  Prints "NAME ADDRESS LINE" for each function (its
 * run-time address and the line it is defined on), then waits for its
 * stdin to close.  Built with -g -O0 and a fixed build-id. */
#include <stdio.h>

int rp_symtest_alpha(int x);
int rp_symtest_beta(int x);

static const int alpha_line = __LINE__ + 1;
int rp_symtest_alpha(int x) { return x * 3 + 1; }
static const int beta_line = __LINE__ + 1;
int rp_symtest_beta(int x) { return rp_symtest_alpha(x) - 2; }

int main(void)
{
	printf("rp_symtest_alpha %p %d\n", (void *)rp_symtest_alpha, alpha_line);
	printf("rp_symtest_beta %p %d\n", (void *)rp_symtest_beta, beta_line);
	fflush(stdout);
	while (getchar() != EOF)
		;
	return rp_symtest_beta(0) == -1 ? 0 : 1;
}
