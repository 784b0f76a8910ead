package process

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestRunSteps(t *testing.T) {
	failed := errors.New("no such binary")
	tests := map[string]struct {
		fail    string // the step that fails
		wantRan []string
		wantErr string
	}{
		"all up":             {wantRan: []string{"etcd", "apiserver", "kubelet"}},
		"first fails":        {fail: "etcd", wantRan: []string{"etcd"}, wantErr: "etcd: no such binary"},
		"later steps do not": {fail: "apiserver", wantRan: []string{"etcd", "apiserver"}, wantErr: "apiserver: no such binary"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ran, logged []string
			step := func(name string) Step {
				return Step{Name: name, Run: func(context.Context) error {
					ran = append(ran, name)
					if name == tc.fail {
						return failed
					}
					return nil
				}}
			}
			logf := func(format string, args ...any) { logged = append(logged, args[0].(string)) }
			err := RunSteps(context.Background(), logf, step("etcd"), step("apiserver"), step("kubelet"))
			if !reflect.DeepEqual(ran, tc.wantRan) {
				t.Errorf("ran %v, want %v", ran, tc.wantRan)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr || !errors.Is(err, failed)):
				t.Errorf("error %v, want %q wrapping the step's", err, tc.wantErr)
			}
			if wantLogged := len(tc.wantRan) - min(1, len(tc.fail)); len(logged) != wantLogged {
				t.Errorf("logged %v, want the %d steps that came up", logged, wantLogged)
			}
		})
	}
}
