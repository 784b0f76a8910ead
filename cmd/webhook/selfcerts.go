package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runner-guard/runner-guard/certs/rotation"
)

// selfCertFlags turn on runner-guard's own CA and serving certificate
// (package certs/rotation) in place of --cert-dir.
type selfCertFlags struct {
	secret string
	policy rotation.Policy
}

func (f *selfCertFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.secret, "self-managed-cert-secret", "", "Keep runner-guard's own CA and serving certificate in this Secret (in POD_NAMESPACE), renew them before they expire, serve the certificate from it and inject its CA bundle into --webhook-configuration-name; --cert-dir is then unused. Empty: serve --cert-dir's files.")
	fs.DurationVar(&f.policy.Validity, "self-managed-cert-validity", rotation.DefaultValidity, "With --self-managed-cert-secret: lifetime of a serving certificate; renewed with a third left.")
	fs.DurationVar(&f.policy.CAValidity, "self-managed-ca-validity", rotation.DefaultCAValidity, "With --self-managed-cert-secret: lifetime of the CA; a new one joins the bundle with a third left.")
	fs.DurationVar(&f.policy.Propagation, "self-managed-cert-propagation", rotation.DefaultPropagation, "With --self-managed-cert-secret: how long a new CA is in the webhook configuration's caBundle before it signs the serving certificate.")
}

func (f *selfCertFlags) enabled() bool { return f.secret != "" }

// check refuses the mode without the configuration to inject into or the
// namespace to keep the Secret in.
func (f *selfCertFlags) check(configurationName, namespace string) error {
	if !f.enabled() {
		return nil
	}
	switch {
	case configurationName == "":
		return errors.New("--self-managed-cert-secret needs --webhook-configuration-name: the configuration whose caBundle it sets")
	case namespace == "":
		return errors.New("--self-managed-cert-secret needs POD_NAMESPACE: the namespace of the Secret")
	}
	if err := f.policy.Check(); err != nil {
		return fmt.Errorf("--self-managed-cert-validity, --self-managed-ca-validity, --self-managed-cert-propagation: %w", err)
	}
	return nil
}

// rotator builds the Rotator whose certificate the webhook serves.
func (f *selfCertFlags) rotator(cfg *rest.Config, configurationName, namespace string, log logr.Logger) (*rotation.Rotator, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--self-managed-cert-secret: API client: %w", err)
	}
	r, err := rotation.New(rotation.Options{
		Namespace: namespace, SecretName: f.secret, ConfigurationName: configurationName,
		Client: cs, Policy: f.policy, Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("--self-managed-cert-secret: %w", err)
	}
	return r, nil
}
