#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Extract the raw vmlinux BTF (.BTF section) from a compressed kernel image.
# usage: extract-btf.sh VMLINUZ OUT.btf
# Finds an xz / zstd / gzip / bzip2 / lz4 / lzma stream in the bzImage payload,
# decompresses it, checks for an ELF vmlinux and runs
# objcopy -O binary --only-section=.BTF.  Needs grep -P, objcopy and the
# decompressors for the formats tried.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 VMLINUZ OUT.btf" >&2; exit 2; }
in=$1
out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

is_elf() {
	[ "$(head -c 4 "$1" | od -An -c | tr -d ' \n')" = '177ELF' ]
}

extract() {
	if objcopy -O binary --only-section=.BTF "$1" "$tmp/btf" 2>/dev/null && [ -s "$tmp/btf" ]; then
		mv "$tmp/btf" "$out"
		echo "extract-btf: $(wc -c < "$out") bytes of BTF from $in" >&2
		return 0
	fi
	return 1
}

# $1: magic as a grep -P pattern, $2: decompressor command
try() {
	command -v "${2%% *}" >/dev/null 2>&1 || return 1
	for off in $(LC_ALL=C grep -obUaP "$1" "$in" | cut -d: -f1); do
		tail -c +$((off + 1)) "$in" | $2 > "$tmp/vmlinux" 2>/dev/null || true
		if [ -s "$tmp/vmlinux" ] && is_elf "$tmp/vmlinux" && extract "$tmp/vmlinux"; then
			return 0
		fi
	done
	return 1
}

if is_elf "$in" && extract "$in"; then
	exit 0
fi
try '\xfd7zXZ\x00' 'xz -dc' ||
	try '\x28\xb5\x2f\xfd' 'zstd -dc' ||
	try '\x1f\x8b\x08' 'gzip -dc' ||
	try 'BZh' 'bzip2 -dc' ||
	try '\x02\x21\x4c\x18' 'lz4 -dc' ||
	try '\x5d\x00\x00\x00' 'xz -dc --format=lzma' ||
	{ echo "extract-btf: no vmlinux with .BTF found in $in" >&2; exit 1; }
