package events

// SecretsFile is the file of --github-webhook-secrets (docs/events.md): the
// webhooks' secrets, by file, and the scopes each webhook may speak for. The
// binary reads it, and so does explain, from the object it is mounted from.
type SecretsFile struct {
	Secrets []SecretsEntry `json:"secrets"`
}

// SecretsEntry is one webhook's secret; with PreviousSecretFile, the secret
// it replaced still verifies deliveries until PreviousUntil (RFC 3339).
type SecretsEntry struct {
	Name               string   `json:"name"`
	SecretFile         string   `json:"secretFile"`
	Scopes             []string `json:"scopes"`
	PreviousSecretFile string   `json:"previousSecretFile,omitempty"`
	PreviousUntil      string   `json:"previousUntil,omitempty"`
}
