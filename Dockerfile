# syntax=docker/dockerfile:1
# Build: docker build -t lingo .   (profile-guided: add --build-arg PGO=1)
# Run:   docker run --rm -p 30000:30000 lingo --listen 0.0.0.0:30000 --upstream http://vllm:8000

FROM rust:1.95-slim-bookworm AS build
# PGO=1 (`docker build --build-arg PGO=1 -t lingo .`): the profile-guided build of
# scripts/build-pgo.sh, 10-17% less CPU a request than the plain build (README, "The
# profile-guided build"). It builds twice and runs a training load on loopback in between:
# about 15 minutes on two cores, where the plain build takes about 6. The script adds the
# toolchain's llvm-tools with rustup (from the network, as cargo fetches the crates).
ARG PGO=0
WORKDIR /src
RUN if [ "$PGO" = 1 ]; then \
      apt-get update && apt-get install -y --no-install-recommends curl python3 \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# Dependencies first, so source edits do not rebuild them (the plain build only: the
# profile-guided one builds its dependencies with its own flags).
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
RUN if [ "$PGO" != 1 ]; then \
      mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
      && cargo build --release --locked && rm -rf src; \
    fi
COPY src ./src
COPY config ./config
COPY scripts ./scripts
RUN touch src/main.rs src/lib.rs \
    && if [ "$PGO" = 1 ]; then scripts/build-pgo.sh && cp target/pgo/lingo /src/lingo; \
       else cargo build --release --locked && cp target/release/lingo /src/lingo; fi

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home lingo
COPY --from=build /src/lingo /usr/local/bin/lingo
COPY --from=build /src/config /etc/lingo
USER lingo
EXPOSE 30000
ENTRYPOINT ["lingo", "serve"]
CMD ["--listen", "0.0.0.0:30000"]
