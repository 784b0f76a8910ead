package rerun

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// credentialsFromSecret reads ARC's githubConfigSecret keys as ARC does: a
// token, or a GitHub App (ID, private key, installation ID). ghclient's
// Router checks them further when it builds their client. The runner's own
// trust and proxy (the EphemeralRunner's githubServerTLS and proxy) are not
// read: the EphemeralRunner is often gone by the time its job is decided.
func credentialsFromSecret(s *corev1.Secret) (*ghclient.Credentials, error) {
	get := func(k string) string { return strings.TrimSpace(string(s.Data[k])) }
	creds := &ghclient.Credentials{Key: s.Namespace + "/" + s.Name, Version: s.ResourceVersion}
	token, appID, install := get(arc.KeyGitHubToken), get(arc.KeyGitHubAppID), get(arc.KeyGitHubAppInstallationID)
	key := s.Data[arc.KeyGitHubAppPrivateKey]
	switch {
	case token != "" && appID != "" && install != "" && len(key) > 0:
		return nil, fmt.Errorf("both %s and GitHub App keys are set; set only one", arc.KeyGitHubToken)
	case token != "":
		creds.Token = token
		return creds, nil
	case appID == "" || len(key) == 0:
		return nil, fmt.Errorf("holds neither %s nor %s and %s", arc.KeyGitHubToken, arc.KeyGitHubAppID, arc.KeyGitHubAppPrivateKey)
	}
	creds.AppID, creds.PrivateKey = appID, key
	if install != "" {
		id, err := strconv.ParseInt(install, 10, 64)
		if err != nil || id <= 0 {
			return nil, errors.New(arc.KeyGitHubAppInstallationID + " is not a positive integer")
		}
		creds.InstallationID = id
	}
	return creds, nil
}
