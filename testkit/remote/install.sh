#!/usr/bin/env bash
# Installs the servers of the remote-file tests (testkit::remote) when they are missing:
# OpenSSH's sshd (Debian package openssh-server) and moto's S3 server (PyPI moto[server], in a
# venv under ${PLEXUS_TOOLS_DIR:-$HOME/.cache/plexus}). Prints what it installs; a failure
# leaves the tests to print their skip notice (or fail under CI=true).
set -uo pipefail
tools="${PLEXUS_TOOLS_DIR:-$HOME/.cache/plexus}"
if [ ! -x /usr/sbin/sshd ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing openssh-server (needed by the sftp tests)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssh-server >/dev/null || true
fi
if [ ! -x "$tools/moto-venv/bin/moto_server" ] && command -v python3 >/dev/null 2>&1; then
  echo "installing moto[server] into $tools/moto-venv (needed by the S3 tests)"
  mkdir -p "$tools"
  python3 -m venv "$tools/moto-venv" &&
    "$tools/moto-venv/bin/pip" install -q 'moto[server]' || echo "moto could not be installed"
fi
