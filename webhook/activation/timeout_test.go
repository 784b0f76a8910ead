package activation

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

// An entry that gives up before --webhook-timeout is found, logged once,
// counted, and shortens the deadline runner-guard decides within; when it
// is fixed the deadline comes back.
func TestTimeoutCheck(t *testing.T) {
	cc := serviceConfig(nil)
	withTimeout := func(wh admissionregistrationv1.ValidatingWebhook, secs *int32) admissionregistrationv1.ValidatingWebhook {
		wh.TimeoutSeconds = secs
		return wh
	}
	tests := map[string]struct {
		vwc      *admissionregistrationv1.ValidatingWebhookConfiguration
		wantFit  time.Duration
		wantLogs int
		short    []string
	}{
		"timeouts alike": {vwc: config(bothFail, withTimeout(deleteEntry("deletes.runner-guard.io", cc, fail), ptr.To[int32](10)), withTimeout(evictionEntry(cc, fail), ptr.To[int32](10))),
			wantFit: 10 * time.Second},
		"unset: the API server's default 10s": {vwc: config(bothFail, deleteEntry("deletes.runner-guard.io", cc, fail)), wantFit: 10 * time.Second},
		"eviction entry lowered to 5s": {vwc: config(bothFail, withTimeout(deleteEntry("deletes.runner-guard.io", cc, fail), ptr.To[int32](10)), withTimeout(evictionEntry(cc, fail), ptr.To[int32](5))),
			wantFit: 5 * time.Second, wantLogs: 1, short: []string{"evictions.runner-guard.io"}},
		"longer than runner-guard's: nothing to fit": {vwc: config(bothFail, withTimeout(deleteEntry("deletes.runner-guard.io", cc, fail), ptr.To[int32](30))),
			wantFit: 10 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var fit time.Duration
			gauge := NewShortTimeoutGauge()
			check := TimeoutCheck{Want: 10 * time.Second, Fit: func(d time.Duration) { fit = d }, Short: gauge}
			logs := 0
			log := func(string, ...any) { logs++ }
			last := check.apply(tc.vwc, "", log)
			last = check.apply(tc.vwc, last, log) // the same again: no second line
			if fit != tc.wantFit || logs != tc.wantLogs {
				t.Errorf("fit %s after %d log lines, want %s after %d", fit, logs, tc.wantFit, tc.wantLogs)
			}
			if got := testutil.CollectAndCount(gauge); got != len(tc.short) {
				t.Errorf("%d short entries counted, want %v", got, tc.short)
			}
			for _, e := range tc.short {
				if testutil.ToFloat64(gauge.WithLabelValues(e)) != 1 {
					t.Errorf("entry %s not counted short", e)
				}
			}
			if last != "" {
				fixed := config(bothFail, withTimeout(deleteEntry("deletes.runner-guard.io", cc, fail), ptr.To[int32](10)))
				check.apply(fixed, last, log)
				if fit != 10*time.Second || testutil.CollectAndCount(gauge) != 0 {
					t.Errorf("fixed: fit %s, %d entries still counted short", fit, testutil.CollectAndCount(gauge))
				}
			}
		})
	}
}
