#!/bin/bash
# Builds a program against libringprof as a user does: the compiler's
# defaults, -O2, and what pkg-config says for ringprof (here the build
# tree's uninstalled ringprof.pc), with an rpath to its library directory.
# Usage: cc_pkgconfig.sh UNINSTALLED_PC_DIR SOURCE OUTPUT
set -euo pipefail
pcdir=$1 src=$2 out=$3
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs ringprof)
rpath=$(PKG_CONFIG_PATH=$pcdir pkg-config --libs-only-L ringprof | sed 's/^ *-L//; s/ .*//')
# shellcheck disable=SC2086
exec ${CC:-cc} -O2 -Wall -Wextra -o "$out" "$src" $flags -Wl,-rpath,"$rpath"
