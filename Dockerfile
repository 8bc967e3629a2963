# One image for the orchestrator and every example agent (workers run the
# same binary with `worker --agent agents/<id>`; the example agents are
# Python scripts, so the runtime has python3).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin orchestrator

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /src/target/release/orchestrator /usr/local/bin/orchestrator
COPY agents ./agents
COPY triggers ./triggers
ENV ORCH_DATA_DIR=/data
# mimalloc returns freed memory after 10 ms instead of 1 s: 7-18 MiB less
# resident under a moderate load, no measurable throughput cost
# (docs/operations.md#memory).
ENV MIMALLOC_PURGE_DELAY=10
EXPOSE 8080
ENTRYPOINT []
CMD ["orchestrator", "--help"]
