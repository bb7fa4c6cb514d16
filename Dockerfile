# Builds the messaging-api binary (pure Go, no cgo) into a distroless image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/messaging-api ./cmd/messaging-api

FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /home/nonroot
COPY --from=build /out/messaging-api /usr/local/bin/messaging-api
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/messaging-api"]
CMD ["serve"]
