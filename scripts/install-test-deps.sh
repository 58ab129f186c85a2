#!/usr/bin/env bash
# Installs, with apt, the system packages the test suites run and that are missing:
#   redis-server   /usr/bin/redis-server   (test/support/redis.ts: suites with a Redis lease store)
#   awscli         /usr/bin/aws            (test/clients/awscli.test.ts)
#   s3cmd          /usr/bin/s3cmd          (test/clients/s3cmd.test.ts)
#   rclone         /usr/bin/rclone         (test/clients/rclone.test.ts)
#   python3-boto3  /usr/bin/python3 -c 'import boto3'   (test/clients/boto3.test.ts)
#   curl           /usr/bin/curl           (test/api/lease-api.test.ts)
#   chromium       /usr/bin/chromium       (test/console/console-browser.test.ts, headless)
#   lua5.1         /usr/bin/luac5.1        (test/leases/redis/lua-files.test.ts: luac5.1 -p on every .lua under src/)
# The checks are the ones the suites make (test/support/tools.ts). Idempotent: with everything
# present it changes nothing and says so. Non-interactive; runs as root, or through sudo -n.
# Debian (12) and its derivatives.
set -euo pipefail

# package|check: the check succeeds when the package's program is usable.
checks=(
  "redis-server|test -x /usr/bin/redis-server"
  "awscli|test -x /usr/bin/aws"
  "s3cmd|test -x /usr/bin/s3cmd"
  "rclone|test -x /usr/bin/rclone"
  "python3-boto3|env -i PATH=/usr/bin:/bin /usr/bin/python3 -c 'import boto3'"
  "curl|test -x /usr/bin/curl"
  "chromium|/usr/bin/chromium --version"
  "lua5.1|/usr/bin/luac5.1 -v"
)

missing() {
  local entry out=()
  for entry in "${checks[@]}"; do
    bash -c "${entry#*|}" >/dev/null 2>&1 || out+=("${entry%%|*}")
  done
  echo "${out[*]}"
}

read -r -a need <<<"$(missing)"
if [ ${#need[@]} -eq 0 ]; then
  echo "install-test-deps: nothing to install; present: redis-server awscli s3cmd rclone python3-boto3 curl chromium lua5.1"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "install-test-deps: missing ${need[*]}, and installing them needs root (or sudo without a password)" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: missing ${need[*]}, and there is no apt-get here: install them by hand" >&2
  exit 1
fi

echo "install-test-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "${need[@]}" </dev/null

read -r -a still <<<"$(missing)"
if [ ${#still[@]} -ne 0 ]; then
  echo "install-test-deps: still missing after apt-get install: ${still[*]}" >&2
  exit 1
fi
echo "install-test-deps: installed ${need[*]}"
