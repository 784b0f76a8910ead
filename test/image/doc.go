// Package image tests the container image that `make image` builds without a
// container engine: the multi-arch OCI index (bin/runner-guard-image-oci, an
// OCI image layout with linux/amd64 and linux/arm64) and this machine's image
// as a docker-archive (bin/runner-guard-image.tar).
package image
