# syntax=docker/dockerfile:1
# Build: docker build -t lingo .
# Run:   docker run --rm -p 30000:30000 lingo --listen 0.0.0.0:30000 --upstream http://vllm:8000

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
COPY config ./config
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home lingo
COPY --from=build /src/target/release/lingo /usr/local/bin/lingo
COPY --from=build /src/config /etc/lingo
USER lingo
EXPOSE 30000
ENTRYPOINT ["lingo", "serve"]
CMD ["--listen", "0.0.0.0:30000"]
