package jobannotation

import (
	"strings"
	"testing"

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

func TestJobFromPod(t *testing.T) {
	secret := []byte("s3cret")
	job := Job{Repository: "acme/app", RunID: 7, Attempt: 1, JobID: 42, Name: "build"}
	good := Value(job, "uid-1", secret)
	tampered := strings.Replace(good, `"jobID":42`, `"jobID":43`, 1)
	cases := map[string]struct {
		pod    *corev1.Pod
		secret []byte
		ok     bool
	}{
		"signed for this pod":   {podWith("uid-1", good), secret, true},
		"no annotation":         {podWith("uid-1", ""), secret, false},
		"copied to another pod": {podWith("uid-2", good), secret, false},
		"another secret":        {podWith("uid-1", good), []byte("other"), false},
		"no secret configured":  {podWith("uid-1", good), nil, false},
		"a field changed":       {podWith("uid-1", tampered), secret, false},
		"not JSON":              {podWith("uid-1", "busy"), secret, false},
		"no mac":                {podWith("uid-1", `{"repository":"acme/app","jobID":42}`), secret, false},
		"mac of an empty job":   {podWith("uid-1", Value(Job{}, "uid-1", secret)), secret, false},
		"mac not hex":           {podWith("uid-1", strings.Replace(good, `"mac":"`, `"mac":"zz`, 1)), secret, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := JobFromPod(tc.pod, tc.secret)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && got != job {
				t.Fatalf("job = %+v, want %+v", got, job)
			}
		})
	}
}
