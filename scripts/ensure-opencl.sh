#!/usr/bin/env bash
# Installs Debian's PoCL (a CPU OpenCL runtime) when no OpenCL platform is registered on this machine.
set -euo pipefail
if compgen -G "/etc/OpenCL/vendors/*.icd" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "ensure-opencl: no OpenCL platform and cannot apt-get install pocl-opencl-icd here; OpenCL tests will skip" >&2
  exit 0
fi
echo "ensure-opencl: no OpenCL platform found, installing Debian's pocl-opencl-icd"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends pocl-opencl-icd ocl-icd-libopencl1 >/dev/null
