// Package image tests the container image that `make image` builds without a
// container engine (bin/runner-guard-image.tar, docker-archive format).
package image
