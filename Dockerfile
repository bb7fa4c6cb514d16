# Builds the messaging-api binary (pure Go, no cgo) into a distroless image,
# with roomctl, its command-line client, beside it
# (docker run --entrypoint roomctl IMAGE rooms list, with MESSAGING_API_URL
# and MESSAGING_API_KEY).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (CGO_ENABLED=0): the runtime image has no libc.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/messaging-api ./cmd/messaging-api && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/roomctl ./cmd/roomctl

# Runs as the non-root user 65532 (distroless "nonroot"), numeric so that
# Kubernetes' runAsNonRoot can verify it, and needs no writable path: with a
# PostgreSQL DATABASE_URL and a STOMP BROKER_URL the service writes no file,
# so the root filesystem can be read-only with no volume mounted
# (deploy/kubernetes/). Only the development default, an SQLite file under
# data/ of the working directory (nonroot's home), needs a writable one.
FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /home/nonroot
COPY --from=build /out/messaging-api /out/roomctl /usr/local/bin/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/messaging-api"]
CMD ["serve"]
