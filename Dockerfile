# The foo-controller image: a static binary on distroless, running as the
# non-root user 65532. Build from the repository root:
#   docker build -t example.com/foo-controller:dev .
# (multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...)

# The builder runs on the build machine's platform and cross-compiles.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer: it is rebuilt only when go.mod or
# go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags=-s -o /out/foo-controller .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/foo-controller /foo-controller
USER 65532:65532
ENTRYPOINT ["/foo-controller"]
