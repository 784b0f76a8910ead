// Pins the cert-manager release whose CRDs (deploy/crds in the module zip:
// plain CustomResourceDefinition YAMLs) the manifest tests install into the
// test API server. Nothing imports the module, so do not run `go mod tidy`
// here: it would drop the requirement. `make cert-manager-crds` prints the
// directory (go mod download -json).
module github.com/runner-guard/runner-guard/hack/tools/certmanager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
