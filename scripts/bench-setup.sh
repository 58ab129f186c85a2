#!/usr/bin/env bash
# Installs, with apt, the programs `npm run bench` compares fencegate with and that are missing:
#   etcd-server    /usr/bin/etcd           (benchmarks/leases.ts: etcd lease pairs)
#   redis-server   /usr/bin/redis-server   (benchmarks/leases.ts: Redis Lua pairs, Redis lease store)
# Idempotent: with everything present it changes nothing and says so. Non-interactive; runs as
# root, or through sudo -n. Debian (12) and its derivatives. benchmarks/lib/peers.ts runs it
# when /usr/bin/etcd is missing.
set -euo pipefail

checks=(
  "etcd-server|test -x /usr/bin/etcd"
  "redis-server|test -x /usr/bin/redis-server"
)

need=()
for entry in "${checks[@]}"; do
  bash -c "${entry#*|}" >/dev/null 2>&1 || need+=("${entry%%|*}")
done
if [ ${#need[@]} -eq 0 ]; then
  echo "bench-setup: nothing to install; present: etcd-server redis-server"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "bench-setup: need ${need[*]} and cannot install them: not root and sudo -n is refused" >&2
  echo "bench-setup: run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi

echo "bench-setup: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
# Debian's package starts an etcd service on 2379; the benchmark runs its own on free ports.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  "${as_root[@]}" systemctl stop etcd || true
fi
for entry in "${checks[@]}"; do
  bash -c "${entry#*|}" >/dev/null 2>&1 || {
    echo "bench-setup: ${entry%%|*} still missing after apt-get install" >&2
    exit 1
  }
done
echo "bench-setup: installed ${need[*]}"
