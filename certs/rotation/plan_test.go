package rotation_test

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/activation"
)

var (
	testPolicy = rotation.Policy{Validity: 9 * time.Hour, CAValidity: 36 * time.Hour, Propagation: time.Minute}
	testNames  = rotation.Split([]string{"runner-guard-webhook.runner-guard.svc", "127.0.0.1"})
	t0         = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func mustPlan(t *testing.T, data map[string][]byte, live []byte, now time.Time) rotation.Plan {
	t.Helper()
	p, err := rotation.PlanFor(data, testNames, rotation.Live{Bundle: live}, testPolicy, now)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// verifies reports whether bundle verifies the plan's serving certificate for
// every test name at now, as the API server would.
func verifies(t *testing.T, bundle []byte, data map[string][]byte, now time.Time) error {
	t.Helper()
	for _, n := range []string{"runner-guard-webhook.runner-guard.svc", "127.0.0.1"} {
		if err := activation.Verify(bundle, []*x509.Certificate{fixture.ParseCert(t, data[rotation.KeyCert])}, n, now); err != nil {
			return err
		}
	}
	return nil
}

func TestPlanFor(t *testing.T) {
	fresh := mustPlan(t, nil, nil, t0)
	if !slices.Equal(fresh.Reasons, []rotation.Reason{rotation.ReasonNoCA, rotation.ReasonNoCert}) {
		t.Fatalf("fresh plan reasons %v", fresh.Reasons)
	}
	if err := verifies(t, fresh.Bundle(), fresh.Data, t0); err != nil {
		t.Fatalf("fresh bundle does not verify the fresh certificate: %v", err)
	}
	caDue := t0.Add(24 * time.Hour) // two thirds of 36h
	// The serving certificate renewed three hours before the CA is due.
	recent := mustPlan(t, fresh.Data, fresh.Bundle(), caDue.Add(-3*time.Hour))
	renewedCA := mustPlan(t, recent.Data, recent.Bundle(), caDue)

	for name, tc := range map[string]struct {
		data    map[string][]byte
		live    []byte
		since   time.Time // when live was first observed
		now     time.Time
		names   []string
		want    []rotation.Reason
		newCA   bool // the bundle changed
		newLeaf bool
	}{
		"steady":                       {data: fresh.Data, live: fresh.Bundle(), now: t0.Add(time.Hour)},
		"certificate renewal":          {data: fresh.Data, live: fresh.Bundle(), now: t0.Add(6 * time.Hour), want: []rotation.Reason{rotation.ReasonCertRenewal}, newLeaf: true},
		"new name":                     {data: fresh.Data, live: fresh.Bundle(), now: t0.Add(time.Hour), names: []string{"other.example"}, want: []rotation.Reason{rotation.ReasonNames}, newLeaf: true},
		"CA renewal keeps leaf":        {data: recent.Data, live: recent.Bundle(), now: caDue, want: []rotation.Reason{rotation.ReasonCARenewal}, newCA: true},
		"new CA not yet trusted":       {data: renewedCA.Data, live: fresh.Bundle(), now: caDue.Add(time.Hour)},
		"new CA trusted too recently":  {data: renewedCA.Data, live: renewedCA.Bundle(), now: caDue.Add(30 * time.Second)},
		"new CA observed too recently": {data: renewedCA.Data, live: renewedCA.Bundle(), since: caDue.Add(time.Hour - 30*time.Second), now: caDue.Add(time.Hour)},
		"new CA trusted long enough":   {data: renewedCA.Data, live: renewedCA.Bundle(), now: caDue.Add(2 * time.Minute), want: []rotation.Reason{rotation.ReasonNewSigner}, newLeaf: true},
		"previous CA expired":          {data: renewedCA.Data, live: renewedCA.Bundle(), now: t0.Add(36 * time.Hour), want: []rotation.Reason{rotation.ReasonPreviousGone, rotation.ReasonUntrusted}, newCA: true, newLeaf: true},
		"garbage":                      {data: map[string][]byte{rotation.KeySignerCert: []byte("x"), rotation.KeyCert: []byte("y")}, now: t0, want: []rotation.Reason{rotation.ReasonNoCA, rotation.ReasonNoCert}, newCA: true, newLeaf: true},
	} {
		t.Run(name, func(t *testing.T) {
			names := testNames
			if tc.names != nil {
				names = rotation.Split(append([]string{"runner-guard-webhook.runner-guard.svc", "127.0.0.1"}, tc.names...))
			}
			p, err := rotation.PlanFor(tc.data, names, rotation.Live{Bundle: tc.live, Since: tc.since}, testPolicy, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Reasons, tc.want) {
				t.Errorf("reasons %v, want %v", p.Reasons, tc.want)
			}
			if got := string(p.Bundle()) != string(tc.data[rotation.KeyBundle]); got != tc.newCA {
				t.Errorf("bundle changed: %v, want %v", got, tc.newCA)
			}
			if got := string(p.Data[rotation.KeyCert]) != string(tc.data[rotation.KeyCert]); got != tc.newLeaf {
				t.Errorf("serving certificate changed: %v, want %v", got, tc.newLeaf)
			}
			if err := verifies(t, p.Bundle(), p.Data, tc.now); err != nil {
				t.Errorf("the planned bundle does not verify the planned certificate: %v", err)
			}
			if tc.live != nil && !tc.newCA {
				// What the API server has now verifies what is served next.
				if err := verifies(t, tc.live, p.Data, tc.now); err != nil {
					t.Errorf("the live bundle does not verify the planned certificate: %v", err)
				}
			}
		})
	}
}

// TestPlanTimeline runs the plan every few minutes across several CA
// lifetimes, with the API server's caBundle lagging one step behind the
// Secret: every certificate served verifies against the bundle the API
// server has at that moment, so no call fails across renewals.
func TestPlanTimeline(t *testing.T) {
	var data map[string][]byte
	var live, pending []byte // what the API server trusts; what was injected last step
	cas := map[string]bool{}
	leaves := map[string]bool{}
	for now := t0; now.Before(t0.Add(4 * 36 * time.Hour)); now = now.Add(13 * time.Minute) {
		live = pending
		p := mustPlan(t, data, live, now)
		data = p.Data
		pending = p.Bundle()
		cas[string(data[rotation.KeySignerCert])] = true
		leaves[string(data[rotation.KeyCert])] = true
		if live == nil {
			continue // fresh install: nothing trusted yet, and the entries are at Ignore
		}
		if err := verifies(t, live, data, now); err != nil {
			t.Fatalf("at %v: the API server's caBundle does not verify the served certificate: %v", now.Sub(t0), err)
		}
	}
	if len(cas) < 5 || len(leaves) < 20 {
		t.Errorf("%d CAs and %d serving certificates over four CA lifetimes: renewals did not happen", len(cas), len(leaves))
	}
}

func TestPolicyCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		p  rotation.Policy
		ok bool
	}{
		"defaults":             {rotation.Policy{Validity: rotation.DefaultValidity, CAValidity: rotation.DefaultCAValidity, Propagation: rotation.DefaultPropagation}, true},
		"zero validity":        {rotation.Policy{CAValidity: time.Hour}, false},
		"CA too short":         {rotation.Policy{Validity: time.Hour, CAValidity: 2 * time.Hour}, false},
		"propagation too long": {rotation.Policy{Validity: time.Hour, CAValidity: 3 * time.Hour, Propagation: time.Hour}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.p.Check(); (err == nil) != tc.ok {
				t.Errorf("Check() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
