package ghfake

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// StatelessTokenHeader, set to "enabled" on POST
// /app/installations/{id}/access_tokens, has GitHub issue the installation
// token in its new format (GITHUB-API.md, "Credentials, 2026").
const StatelessTokenHeader = "X-GitHub-Stateless-S2S-Token"

// opaqueToken is an installation token in the old format: ghs_ and 40
// characters.
func opaqueToken() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return "ghs_" + hex.EncodeToString(b[:])
}

// tokenAlphabet is what GitHub says a new token's parts are made of:
// ghs_[A-Za-z0-9._]{36,}.
const tokenAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"

// statelessToken is an installation token in the new format: ghs_ and a
// JWT of three dot-separated parts, 520 characters in all.
func statelessToken() string {
	parts := make([]string, 3)
	for i, n := range []int{36, 136, 342} { // header, claims, RS256 signature
		b := make([]byte, n)
		_, _ = rand.Read(b)
		for j := range b {
			b[j] = tokenAlphabet[int(b[j])%len(tokenAlphabet)]
		}
		parts[i] = string(b)
	}
	return "ghs_" + strings.Join(parts, ".")
}
