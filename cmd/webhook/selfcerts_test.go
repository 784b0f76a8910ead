package main

import (
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs/rotation"
)

func TestSelfCertFlagsCheck(t *testing.T) {
	defaults := rotation.Policy{Validity: rotation.DefaultValidity, CAValidity: rotation.DefaultCAValidity, Propagation: rotation.DefaultPropagation}
	for name, tc := range map[string]struct {
		flags         selfCertFlags
		configuration string
		namespace     string
		wantErr       string
	}{
		"off":                     {flags: selfCertFlags{}},
		"on":                      {flags: selfCertFlags{secret: "cert", policy: defaults}, configuration: "runner-guard", namespace: "rg"},
		"no configuration":        {flags: selfCertFlags{secret: "cert", policy: defaults}, namespace: "rg", wantErr: "--webhook-configuration-name"},
		"no namespace":            {flags: selfCertFlags{secret: "cert", policy: defaults}, configuration: "runner-guard", wantErr: "POD_NAMESPACE"},
		"CA shorter than 3 certs": {flags: selfCertFlags{secret: "cert", policy: rotation.Policy{Validity: time.Hour, CAValidity: 2 * time.Hour}}, configuration: "runner-guard", namespace: "rg", wantErr: "--self-managed-ca-validity"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.flags.check(tc.configuration, tc.namespace)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("check() = %v, want an error naming %q", err, tc.wantErr)
			}
		})
	}
}
