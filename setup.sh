#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# One command from a fresh Debian 12 machine to a working gtplab: installs what is missing (apt, a
# Python venv from the pinned requirements.txt), mounts bpffs, builds the data plane, then runs:
#   ./setup.sh test  [pytest args]   the test suite (what CI runs)
#   ./setup.sh sweep [sweep args]    the default frame-size sweep on the embedded lab
#   ./setup.sh                       set up only
# Safe to run again: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
top=$PWD

APT_PACKAGES=(
	clang llvm libclang-rt-14-dev make gcc libc6-dev pkg-config libbpf-dev libxdp-dev libelf-dev zlib1g-dev
	bpftool xdp-tools iproute2 ethtool tshark linux-perf pciutils
	python3 python3-venv python3-pip
	prometheus prometheus-pushgateway prometheus-node-exporter
	libtalloc2 libtins4.0 libyaml-0-2 libmicrohttpd12    # Open5GS's UPF (../shared/open5gs/, lab config embedded-open5gs)
)

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'setup.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages, loads BPF programs and builds network namespaces)"

install_apt() {
	local missing=() p
	for p in "${APT_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
}

mount_bpffs() {
	mountpoint -q /sys/fs/bpf && return 0
	say "mounting bpffs on /sys/fs/bpf"
	mount -t bpf bpf /sys/fs/bpf
}

install_venv() {
	local stamp=.venv/.gtplab-stamp want
	want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
	if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		return 0
	fi
	say "creating the Python venv from requirements.txt"
	[ -x .venv/bin/python ] || python3 -m venv .venv
	.venv/bin/python -m pip install -q --upgrade pip
	.venv/bin/python -m pip install -q -r requirements.txt
	# gtplab itself with its test extra (pyproject.toml: packages only the tests import, pinned there;
	# everything else is in requirements.txt, installed above)
	.venv/bin/python -m pip install -q --no-build-isolation -e '.[test]'
	echo "$want" > "$stamp"
}

build() {
	say "building the data plane"
	make -s -C dataplane
	for d in bench gtplab/traffic/engine/bpf gtplab/dut; do
		[ -f "$d/Makefile" ] && make -s -C "$d"
	done
	return 0
}

install_apt
mount_bpffs
install_venv
build

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
"")
	say "set up; now try: ./setup.sh sweep   or   ./setup.sh test" ;;
test)
	mkdir -p results
	say "running the tests (JUnit report: results/junit.xml)"
	# --timeout: 15 x the slowest test here (~40 s, docs/testing.md "The suite's time"), room for a
	# timing test's wait for the CPUs (tests/conftest.py, up to 300 s); @pytest.mark.timeout(N) overrides
	exec .venv/bin/python -m pytest -m "not long and not multihost" --junitxml=results/junit.xml --durations=25 --timeout=600 "$@" ;;
sweep)
	exec .venv/bin/gtplab sweep "$@" ;;
*)
	die "unknown command '$cmd' (use: test, sweep, or nothing)" ;;
esac
