package jobannotation

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podWith(uid, value string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: types.UID(uid)}}
	if value != "" {
		p.Annotations = map[string]string{Annotation: value}
	}
	return p
}

func mustKeyring(t *testing.T, now time.Time, secrets ...Secret) *Keyring {
	t.Helper()
	k, err := NewKeyring(secrets, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustValue(t *testing.T, k *Keyring, r Record, uid string) string {
	t.Helper()
	v, err := k.Value(r, uid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRead(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	job := Job{Repository: "acme/app", RunID: 7, Attempt: 1, JobID: 42, Name: "build"}
	rec := Record{Job: job, State: StateInProgress, At: now.Add(-time.Minute), Secret: "acme"}
	s1 := Secret{Name: "acme", Value: []byte("s1")}
	rotated := Secret{Name: "acme", Value: []byte("s2"), Previous: []byte("s1"), PreviousUntil: now.Add(time.Hour)}
	expired := Secret{Name: "acme", Value: []byte("s2"), Previous: []byte("s1"), PreviousUntil: now.Add(-time.Hour)}
	good := mustValue(t, mustKeyring(t, now, s1), rec, "uid-1")
	cases := map[string]struct {
		pod     *corev1.Pod
		keys    *Keyring
		wantErr string // "" verifies
	}{
		"signed for this pod":            {podWith("uid-1", good), mustKeyring(t, now, s1), ""},
		"previous value inside window":   {podWith("uid-1", good), mustKeyring(t, now, rotated), ""},
		"previous value after window":    {podWith("uid-1", good), mustKeyring(t, now, expired), "previous value, accepted until"},
		"no annotation":                  {podWith("uid-1", ""), mustKeyring(t, now, s1), "no runner-guard.io/job"},
		"copied to another pod":          {podWith("uid-2", good), mustKeyring(t, now, s1), "does not verify"},
		"another secret value":           {podWith("uid-1", good), mustKeyring(t, now, Secret{Name: "acme", Value: []byte("x")}), "does not verify"},
		"signed under an unknown secret": {podWith("uid-1", good), mustKeyring(t, now, Secret{Name: "other", Value: []byte("s1")}), `"acme", which is not configured`},
		"no keyring":                     {podWith("uid-1", good), nil, "no webhook secret"},
		"a field changed":                {podWith("uid-1", strings.Replace(good, `"jobID":42`, `"jobID":43`, 1)), mustKeyring(t, now, s1), "does not verify"},
		"the state changed":              {podWith("uid-1", strings.Replace(good, `"in_progress"`, `"completed"`, 1)), mustKeyring(t, now, s1), "does not verify"},
		"the secret name changed":        {podWith("uid-1", strings.Replace(good, `"secret":"acme"`, `"secret":"other"`, 1)), mustKeyring(t, now, s1, Secret{Name: "other", Value: []byte("s1")}), "does not verify"},
		"not JSON":                       {podWith("uid-1", "busy"), mustKeyring(t, now, s1), "not a record"},
		"no job":                         {podWith("uid-1", `{"state":"in_progress","mac":"00"}`), mustKeyring(t, now, s1), "no job ID"},
		"unknown state":                  {podWith("uid-1", `{"repository":"a/b","jobID":1,"state":"queued"}`), mustKeyring(t, now, s1), `state "queued"`},
		"mac not hex":                    {podWith("uid-1", strings.Replace(good, `"mac":"`, `"mac":"zz`, 1)), mustKeyring(t, now, s1), "does not verify"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.keys.Read(tc.pod)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if got.Job != job || got.State != StateInProgress || !got.At.Equal(rec.At) {
					t.Fatalf("record = %+v, want %+v", got, rec)
				}
				if _, ok := tc.keys.JobFromPod(tc.pod); !ok {
					t.Fatal("JobFromPod: no job, want one")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Read error = %v, want one containing %q", err, tc.wantErr)
			}
			if _, ok := tc.keys.JobFromPod(tc.pod); ok {
				t.Fatal("JobFromPod: a job, want none")
			}
		})
	}
}

func TestCompletedHoldsNoJob(t *testing.T) {
	k := mustKeyring(t, time.Now(), Secret{Value: []byte("s")})
	r := Record{Job: Job{Repository: "a/b", JobID: 1}, State: StateCompleted, At: time.Now()}
	pod := podWith("u", mustValue(t, k, r, "u"))
	if _, err := k.Read(pod); err != nil {
		t.Fatalf("Read: %v", err)
	}
	if _, ok := k.JobFromPod(pod); ok {
		t.Fatal("a completed record holds a job")
	}
}

// The MAC key is derived: the raw secret does not sign a valid record.
func TestKeyIsNotTheSecret(t *testing.T) {
	r := Record{Job: Job{Repository: "a/b", JobID: 1}, State: StateInProgress}
	raw := value(r, "u", []byte("s"))
	k := mustKeyring(t, time.Now(), Secret{Value: []byte("s")})
	if _, err := k.Read(podWith("u", raw)); err == nil {
		t.Fatal("a record signed with the raw secret verifies")
	}
}

func TestSupersedes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(id int64, state string, at time.Duration) Record {
		return Record{Job: Job{Repository: "a/b", JobID: id}, State: state, At: t0.Add(at)}
	}
	cases := map[string]struct {
		next, cur Record
		curOK     bool
		want      bool
	}{
		"nothing on the pod":                 {rec(1, StateInProgress, 0), Record{}, false, true},
		"completed after in_progress":        {rec(1, StateCompleted, 2), rec(1, StateInProgress, 1), true, true},
		"in_progress replayed after its end": {rec(1, StateInProgress, 1), rec(1, StateCompleted, 2), true, false},
		"completed again":                    {rec(1, StateCompleted, 2), rec(1, StateCompleted, 2), true, false},
		"in_progress again":                  {rec(1, StateInProgress, 1), rec(1, StateInProgress, 1), true, false},
		"a later job":                        {rec(2, StateInProgress, 5), rec(1, StateCompleted, 2), true, true},
		"an older job's in_progress":         {rec(1, StateInProgress, 1), rec(2, StateInProgress, 5), true, false},
		"an older job's completed":           {rec(1, StateCompleted, 2), rec(2, StateInProgress, 5), true, false},
		"same second, higher ID":             {rec(2, StateInProgress, 2), rec(1, StateCompleted, 2), true, true},
		"same second, lower ID":              {rec(1, StateCompleted, 2), rec(2, StateInProgress, 2), true, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Supersedes(tc.next, tc.cur, tc.curOK); got != tc.want {
				t.Fatalf("Supersedes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewKeyringRefuses(t *testing.T) {
	cases := map[string][]Secret{
		"a name twice": {{Name: "a", Value: []byte("x")}, {Name: "a", Value: []byte("y")}},
		"an empty one": {{Name: "a"}},
	}
	for name, secrets := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := NewKeyring(secrets, nil); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
