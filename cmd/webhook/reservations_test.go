package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// Each replica names itself by its pod, and a part drawn at start: two
// processes of one pod (a restarted container) never share a name.
func TestBudgetReservationsNameTheReplica(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		env  map[string]string
		want string // the pod part
	}{
		"POD_NAME":              {env: map[string]string{"POD_NAME": "runner-guard-7d9f-abcde"}, want: "runner-guard-7d9f-abcde"},
		"no POD_NAME: hostname": {env: map[string]string{}, want: host},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			a, err := budgetReservations(fake.NewClientBuilder().Build(), getenv, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			b, err := budgetReservations(fake.NewClientBuilder().Build(), getenv, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			re := regexp.MustCompile("^" + regexp.QuoteMeta(tc.want) + "/[0-9a-f]{8}$")
			if !re.MatchString(a.Replica()) || !re.MatchString(b.Replica()) || a.Replica() == b.Replica() {
				t.Errorf("replicas named %q and %q; want %s/<8 hex digits>, each its own", a.Replica(), b.Replica(), tc.want)
			}
		})
	}
}
