# syntax=docker/dockerfile:1
# Build stage: compile TypeScript and install the native modules. Node 22 runs better-sqlite3 12
# (compiled here when no prebuilt binary is found); better-sqlite3-napi (13, prebuilt) is its
# fallback and what Node 24 would run (src/sqlite/sqlite.ts).
FROM node:22-bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm ci --omit=dev --no-audit --no-fund

# Runtime stage: production dependencies and compiled output only, as a non-root user.
FROM node:22-bookworm-slim
ENV NODE_ENV=production \
    FENCEGATE_HOST=0.0.0.0 \
    FENCEGATE_PORT=9700 \
    FENCEGATE_DATA_DIR=/var/lib/fencegate
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The browser console's static files (tsc copies only what it compiles).
COPY --from=build /app/src/console/assets ./dist/console/assets
COPY package.json ./
COPY bin ./bin
COPY config ./config
RUN groupadd --system fencegate && useradd --system --gid fencegate --home /var/lib/fencegate fencegate \
 && mkdir -p /var/lib/fencegate && chown fencegate:fencegate /var/lib/fencegate
USER fencegate
VOLUME ["/var/lib/fencegate"]
EXPOSE 9700
# Listening on 0.0.0.0 requires real credentials and a token-signing key:
#   FENCEGATE_ACCESS_KEY_ID, FENCEGATE_SECRET_ACCESS_KEY, FENCEGATE_TOKEN_SIGNING_KEY
# Liveness on the port the configuration gives (FENCEGATE_PORT, or server.port in FENCEGATE_CONFIG):
# no dependency is called, so a slow store does not get a serving gateway restarted.
HEALTHCHECK --interval=15s --timeout=3s CMD ["node", "bin/healthcheck.js"]
ENTRYPOINT ["node", "bin/fencegate.js"]
CMD ["serve"]
