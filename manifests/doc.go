// Package manifests holds runner-guard's Kubernetes manifests as kustomize
// bases and overlays, and the tests that render and validate them:
//
//	base/         Namespace, RBAC, Deployment, Service, PodDisruptionBudget and
//	              the ValidatingWebhookConfiguration (base/webhook/)
//	certmanager/  self-signed Issuer and the serving Certificate
//	default/      base + certmanager with CA injection: what users apply,
//	              rendered into dist/install.yaml by `make manifests`
//	local/        only the ValidatingWebhookConfiguration, calling a webhook at
//	              https://127.0.0.1:9443 (e2e harness, demo)
//	e2e-kind/     default + an in-cluster fake GitHub (`make e2e-kind`)
//	examples/     the GitHub credentials Secret, documented
//
// The package has no Go API.
package manifests
