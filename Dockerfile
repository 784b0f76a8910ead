# syntax=docker/dockerfile:1
# runner-guard webhook image.
#
#   docker build --build-arg VERSION=v1.2.3 \
#     --build-arg GO_IMAGE=<your mirror>/golang:1.26 \
#     --build-arg BASE_IMAGE=<your mirror>/distroless/static:nonroot -t runner-guard:v1.2.3 .
#
# The defaults below are short names your engine resolves with its own
# registry configuration; point them at a mirror you trust. The base only has
# to provide a CA bundle and the nonroot user 65532 (distroless "static:nonroot"
# does). Without an engine, `make image` builds the same image from the binary
# (bin/runner-guard-image.tar, docker-archive format).
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=distroless/static:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /webhook ./cmd/webhook

FROM ${BASE_IMAGE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="runner-guard" \
      org.opencontainers.image.description="Validating admission webhook that unregisters GitHub Actions runners before their pods go" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /webhook /webhook
USER 65532:65532
ENTRYPOINT ["/webhook"]
