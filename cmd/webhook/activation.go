package main

import (
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runner-guard/runner-guard/webhook/activation"
)

// activationFlags name the ValidatingWebhookConfiguration this replica
// activates (package webhook/activation).
type activationFlags struct {
	configurationName string
}

func (f *activationFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.configurationName, "webhook-configuration-name", "", "Name of runner-guard's own ValidatingWebhookConfiguration, installed with failurePolicy Ignore: once the entry's Service (or URL) answers with a certificate its caBundle verifies, set the entry to the policy of its annotation "+activation.AnnotationDeletes+" or "+activation.AnnotationEvictions+". Empty: leave the configuration alone.")
}

// setupActivation adds the Activator to mgr when --webhook-configuration-name is set.
func (f *activationFlags) setup(mgr manager.Manager, cfg *rest.Config, timeout activation.TimeoutCheck, log logr.Logger) error {
	if f.configurationName == "" {
		return nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("--webhook-configuration-name: API client: %w", err)
	}
	a, err := activation.New(activation.Options{
		Name:    f.configurationName,
		Client:  cs.AdmissionregistrationV1(),
		Served:  activation.DialViaClusterIP(cs.CoreV1()),
		Log:     log,
		Timeout: timeout,
	})
	if err != nil {
		return fmt.Errorf("--webhook-configuration-name: %w", err)
	}
	if err := mgr.Add(a); err != nil {
		return fmt.Errorf("--webhook-configuration-name: %w", err)
	}
	return nil
}
