#!/usr/bin/env bash
# Runs minio-go's functional test suite (the S3 conformance tests MinIO's "mint" uses, shipped in
# Debian's golang-github-minio-minio-go-v7-dev) against a fresh fencegate, with fencing optional
# (the suite cannot carry tokens), and prints a summary: PASS / FAIL / NA per test.
#
#   apt-get install golang-go golang-github-minio-minio-go-v7-dev
#   bash test/s3-endpoint/conformance/minio-go.sh [report.jsonl]
#
# Not part of npm test: it takes minutes and needs the Go toolchain.
set -euo pipefail
cd "$(dirname "$0")/../../.."
src=/usr/share/gocode/src/github.com/minio/minio-go/v7/functional_tests.go
[ -f "$src" ] || { echo "missing $src: apt-get install golang-go golang-github-minio-minio-go-v7-dev" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill "$gw" 2>/dev/null || true; rm -rf "$work"' EXIT
# The file is package main behind a "mint" build tag inside the library's own directory: build a copy.
sed '1,2{/build/d}' "$src" > "$work/functional_tests.go"
GO111MODULE=off GOPATH=/usr/share/gocode go build -o "$work/functional" "$work/functional_tests.go"

port=${PORT:-19711}
FENCEGATE_PORT=$port FENCEGATE_DATA_DIR="$work/data" FENCEGATE_FENCING=optional FENCEGATE_LOG_LEVEL=warn \
  node --import tsx src/cli/main.ts serve > "$work/gateway.log" 2>&1 &
gw=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/_fence/v1/health" > /dev/null 2>&1 && break
  sleep 0.2
done

report=${1:-$work/report.jsonl}
SERVER_ENDPOINT=127.0.0.1:$port ACCESS_KEY=fencegate SECRET_KEY=fencegate-secret ENABLE_HTTPS=0 ENABLE_KMS=0 \
  MINT_MODE=${MINT_MODE:-full} RUN_ON_FAIL=1 \
  timeout "${TIMEOUT:-900}" "$work/functional" > "$report" 2>&1 || true

node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l.startsWith("{"));
const byTest = new Map();
for (const l of lines) {
  let r; try { r = JSON.parse(l); } catch { continue; }
  const name = r.function ? `${r.name ?? ""} ${r.function}`.trim() : r.name;
  const prev = byTest.get(name);
  // A test can log several lines; a FAIL anywhere makes it fail.
  if (!prev || r.status === "FAIL") byTest.set(name, r);
}
const count = { PASS: 0, FAIL: 0, NA: 0 };
for (const [name, r] of byTest) {
  count[r.status] = (count[r.status] ?? 0) + 1;
  if (r.status !== "PASS") console.log(`${r.status}\t${name}\t${(r.error ?? r.alert ?? r.message ?? "").toString().slice(0, 200)}`);
}
console.log(`\n${count.PASS} passed, ${count.FAIL} failed, ${count.NA} not applicable (of ${byTest.size})`);
' "$report"
