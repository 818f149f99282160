#!/bin/sh
# Installs the Debian packages the test suite needs, if they are missing.
set -e
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
# the PostgreSQL server the store's tests start themselves (tests/pg_server.py)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing Debian packages:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
