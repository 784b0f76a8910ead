# The release: the commit --version reports, the multi-arch image index, the
# chart README, and the checks of the GitHub workflows. Included by the root
# Makefile.

# The commit `webhook --version` prints (the Go toolchain's own record of it is
# absent when GOFLAGS has -buildvcs=false).
COMMIT  ?= $(eval COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown))$(COMMIT)
LDFLAGS += -X main.commit=$(COMMIT)
