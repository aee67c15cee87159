#!/usr/bin/env bash
# Before setup: is there room for the venvs still to be installed and for the suite's builds? A full disk fails deep
# inside pip or an export, with a traceback that names neither the cause nor the fix; this names both in one line.
# MiB, measured on a fresh clone (docs/testing.md, "Disk"): each venv as installed, and the suite's builds under the
# temporary folder (pytest's base temp of one run).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_mib=0
for entry in .venv:2700 .venv-containers:2200 .venv-st:1600 .venv-infinity:1500; do
	[ -e "${entry%%:*}/.installed" ] || repo_mib=$((repo_mib + ${entry##*:}))
done
tmp_dir=${TMPDIR:-/tmp}
tmp_mib=2100
free_mib() { df -Pm "$1" | awk 'NR == 2 {print $4}'; }
mount_of() { df -P "$1" | awk 'NR == 2 {print $6}'; }
gib() { echo "$(($1 / 1024)).$(($1 % 1024 * 10 / 1024))"; }  # MiB as GiB, one decimal, rounded down
check() {  # folder, MiB it needs, what needs them
	local free
	free=$(free_mib "$1")
	if [ "$free" -lt "$2" ]; then
		echo "error: $(gib "$free") GiB free on $(mount_of "$1"), and $3 need about $(gib "$2") GiB there:" \
			"free some space (old clones, pip cache purge) and run again" >&2
		exit 1
	fi
}
if [ "$(mount_of .)" = "$(mount_of "$tmp_dir")" ]; then
	check . $((repo_mib + tmp_mib)) "the venvs to install and the suite's builds"
else
	check . "$repo_mib" "the venvs to install"
	check "$tmp_dir" "$tmp_mib" "the suite's builds ($tmp_dir)"
fi
