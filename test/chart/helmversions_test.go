package chart

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/runner-guard/runner-guard/test/render"
)

// TestHelm3ReleaseUpgrades installs and upgrades the chart with Helm 3 (still
// supported for one more release) on a real API server: the entries start at
// Ignore, the webhook raises them, a Helm 3 upgrade (a client-side three-way
// merge) keeps them Fail, and Helm 4 then takes the Helm 3 release over with
// a plain upgrade and uninstalls it.
func TestHelm3ReleaseUpgrades(t *testing.T) {
	e := startInstallEnv(t)
	e.helmBin = render.Helm3Bin(t)
	if out, err := e.helmErr("version", "--short"); err != nil || !strings.HasPrefix(out, "v3.") {
		t.Fatalf("helm3 version: %q %v, want v3.x", out, err)
	}
	e.deploy("install")
	e.requireFailurePolicies(admissionregistrationv1.Ignore)
	e.startWebhook()
	e.waitActivated()
	e.waitForWebhook()

	// An upgrade that changes the entries (their timeout): Helm 3's
	// three-way merge replaces the webhooks list, so with a rendered Ignore
	// it would drop every entry back to Ignore.
	e.deploy("upgrade", "policy.timeoutSeconds=12")
	e.requireActivated()
	t.Run("busy runner refused after a Helm 3 upgrade", e.scenarioBusy)

	// Moving to Helm 4: its upgrade of a Helm 3 release.
	e.helmBin = ""
	e.deploy("upgrade", "policy.timeoutSeconds=11")
	e.requireActivated()
	t.Run("busy runner refused after a Helm 4 upgrade", e.scenarioBusy)

	e.helm("uninstall", releaseName, "--namespace", namespace, "--wait", "--timeout", "2m")
	t.Run("uninstall unblocks deletes", e.scenarioUninstalled)
}
