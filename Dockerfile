# Static, non-root images for the webhook and the demo writer. `make images` builds both targets.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ehdb-webhook ./cmd/webhook \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ehdb-writer ./cmd/ehdb-writer

FROM gcr.io/distroless/static-debian12:nonroot AS webhook
COPY --from=build /out/ehdb-webhook /ehdb-webhook
USER 65532:65532
ENTRYPOINT ["/ehdb-webhook"]

FROM gcr.io/distroless/static-debian12:nonroot AS writer
COPY --from=build /out/ehdb-writer /ehdb-writer
USER 65532:65532
ENTRYPOINT ["/ehdb-writer"]
