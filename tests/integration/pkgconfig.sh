#!/bin/bash
# libringprof from a build tree, as a user would take it: pkg-config on the
# uninstalled ringprof.pc, compile and link lib/examples/annotate.c, run it
# without a daemon; and the shared library exports ringprof_* only.
# Usage: pkgconfig.sh UNINSTALLED_PC_DIR EXAMPLE_C LIBRINGPROF_SO
set -euo pipefail
pcdir=$1 example=$2 so=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs ringprof)
echo "pkg-config: $flags"
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir ringprof)
# shellcheck disable=SC2086
${CC:-cc} -std=c17 -Wall -Wextra -Werror -o "$tmp/annotate" "$example" $flags \
	-Wl,-rpath,"$libdir"
out=$(RINGPROF_SOCKET=$tmp/none.sock "$tmp/annotate" 20)
echo "example: $out"
[[ $out == "20 steps, result "*", connected 0, dropped 0" ]]

bad=$(nm -D --defined-only "$so" | awk '$2 != "A" && $3 !~ /^ringprof_/ { print $3 }')
if [[ -n $bad ]]; then
	echo "libringprof exports more than ringprof_*: $bad" >&2
	exit 1
fi
nm -D --defined-only "$so" | grep -q ' T ringprof_range_begin@@RINGPROF_0'
echo "exports: $(nm -D --defined-only "$so" | grep -c ' T ringprof_') ringprof_* functions"
