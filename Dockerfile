# syntax=docker/dockerfile:1
# The dbkeeper manager: a static Go binary on distroless, running as the
# image's nonroot user, with versitygw beside it for the repositories on
# backup volumes. Build with `make docker-build IMG=...`.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY apis/ apis/
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager

# The S3 server of a Database's repository on its backup volume
# (docs/design/backup.md), at the version test/tools/versitygw pins.
FROM --platform=$BUILDPLATFORM golang:1.26 AS versitygw
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY test/tools/versitygw/ ./
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/versitygw github.com/versity/versitygw/cmd/versitygw

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/dbkeeper/dbkeeper" \
      org.opencontainers.image.description="dbkeeper: a Kubernetes operator for PostgreSQL" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=versitygw /out/versitygw /versitygw
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
