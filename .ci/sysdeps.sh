#!/usr/bin/env bash
# System libraries that the Python packages need: libusb for Open3D, Xvfb for headless rendering.
# Installs what is missing with apt-get (as root, or through sudo); otherwise says what to install.
# --browser: also Chromium, for the check of the built documentation site (CI: tests/test_docs_site.py).
set -euo pipefail
missing=()
if [ "${1:-}" = --browser ]; then
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
fi
ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so' || missing+=(libusb-1.0-0)
command -v xvfb-run >/dev/null || missing+=(xvfb xauth)
ldconfig -p 2>/dev/null | grep -q 'libGL.so.1' || missing+=(libgl1)
ldconfig -p 2>/dev/null | grep -q 'libgomp.so.1' || missing+=(libgomp1)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; else
    echo "pointgeope: please install the system packages: ${missing[*]} (e.g. apt-get install -y ${missing[*]})" >&2
    echo "pointgeope: continuing; Open3D views and display tests need them." >&2
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "pointgeope: no apt-get here; install the equivalents of: ${missing[*]}" >&2
    exit 0
fi
echo "pointgeope: installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
