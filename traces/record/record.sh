#!/bin/sh
# Records the real CPU traces of traces/bundled: builds the LD_PRELOAD library,
# trains each model of record.py for a few steps under it with Debian's
# PyTorch, checks each trace with 'simulate inspect', compresses it into
# traces/bundled/NAME-cpu.csv.gz, and writes the versions used to VERSIONS.
#
# Needs gcc, make, go and Debian's python3-torch and python3-torchvision:
#
#	apt-get install gcc make python3-torch python3-torchvision
#	traces/record/record.sh
#
# Recording is a manual step; the tests replay the committed files. Addresses
# and timestamps differ from run to run, so a new recording differs from the
# committed one even on the same machine.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

make -s -C "$here" libgpualloc_record.so

# PyTorch's CPU allocator (c10::alloc_cpu) must take memory with
# posix_memalign, the function the library wraps.
c10=$("$python" -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")))')
if ! nm -D --undefined-only "$c10" | grep -q ' posix_memalign'; then
	echo "record.sh: $c10 does not call posix_memalign; the recorder would miss PyTorch's allocations" >&2
	exit 1
fi

for model in resnet18 transformer; do
	echo "recording $model" >&2
	GPUALLOC_TRACE="$tmp/$model.csv" GPUALLOC_TRACE_START=mark \
		OMP_NUM_THREADS=1 PYTHONHASHSEED=0 \
		LD_PRELOAD="$here/libgpualloc_record.so" \
		"$python" "$here/record.py" "$model"
	(cd "$root" && go run ./cmd/simulate inspect "$tmp/$model.csv") >&2
	gzip -9 -n -c "$tmp/$model.csv" >"$root/traces/bundled/$model-cpu.csv.gz"
done

pkg() { dpkg-query -W -f='${Package} ${Version}\n' "$1"; }
{
	echo "# The versions that recorded traces/bundled/*-cpu.csv.gz (traces/record/record.sh)."
	pkg python3-torch
	pkg python3-torchvision
	pkg libblas3
	pkg libdnnl2 2>/dev/null || true
	pkg python3
	pkg gcc
	pkg libc6
	echo "torch $("$python" -c 'import torch; print(torch.__version__)')"
	echo "kernel $(uname -s) $(uname -m)"
	echo "cpu $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
} >"$here/VERSIONS"
