# Debian's tinyproxy, the real forward proxy of the e2e proxy scenarios
# (test/e2e/enterprise_test.go). Included by the root Makefile.

# `make test` and `make e2e` run the proxy scenarios: install it first.
TEST_DEPS += tinyproxy
e2e: tinyproxy

.PHONY: tinyproxy
tinyproxy: ## Install Debian's tinyproxy when missing (root; apt-get only then).
	@$(CURDIR)/hack/install-tinyproxy.sh >/dev/null
