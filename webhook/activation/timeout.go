package activation

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// defaultTimeoutSeconds is what the API server uses for an entry without
// timeoutSeconds (admissionregistration.k8s.io/v1).
const defaultTimeoutSeconds = 10

// ShortTimeout is an entry whose timeoutSeconds ends before runner-guard's
// own deadline (--webhook-timeout): the API server would give up on a
// review while runner-guard may still be asking GitHub to remove a runner.
type ShortTimeout struct {
	Name    string
	Timeout time.Duration
}

func (s ShortTimeout) String() string {
	return fmt.Sprintf("entry %s has timeoutSeconds %s", s.Name, s.Timeout)
}

// ShortTimeouts lists the entries of vwc that review deletions or evictions
// and give up before want.
func ShortTimeouts(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, want time.Duration) []ShortTimeout {
	var short []ShortTimeout
	for _, wh := range vwc.Webhooks {
		if KindOf(wh) == "" {
			continue
		}
		secs := int32(defaultTimeoutSeconds)
		if wh.TimeoutSeconds != nil {
			secs = *wh.TimeoutSeconds
		}
		if t := time.Duration(secs) * time.Second; t < want {
			short = append(short, ShortTimeout{Name: wh.Name, Timeout: t})
		}
	}
	return short
}

// TimeoutCheck compares the configuration's timeoutSeconds with
// runner-guard's own deadline each time the Activator looks.
type TimeoutCheck struct {
	// Want is --webhook-timeout; zero checks nothing.
	Want time.Duration
	// Fit is told the deadline to decide within: the shortest entry's
	// timeout when one is shorter than Want, else Want again.
	Fit func(time.Duration)
	// Short, per entry, is 1 while that entry gives up before Want.
	Short *prometheus.GaugeVec
}

// NewShortTimeoutGauge is TimeoutCheck.Short's metric.
func NewShortTimeoutGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "runner_guard_webhook_timeout_short",
		Help: "1 while the webhook configuration entry's timeoutSeconds is shorter than --webhook-timeout: runner-guard then decides within the entry's timeout instead.",
	}, []string{"entry"})
}

// apply reports what ShortTimeouts found: the gauge, the deadline, and the
// log line when it changed since last (returned for the next call).
func (c TimeoutCheck) apply(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, last string, log func(msg string, kv ...any)) string {
	if c.Want <= 0 {
		return last
	}
	short := ShortTimeouts(vwc, c.Want)
	fit := c.Want
	said := ""
	if c.Short != nil {
		c.Short.Reset()
	}
	for _, s := range short {
		fit = min(fit, s.Timeout)
		said += s.String() + "; "
		if c.Short != nil {
			c.Short.WithLabelValues(s.Name).Set(1)
		}
	}
	if c.Fit != nil {
		c.Fit(fit)
	}
	if said != last {
		if said != "" {
			log("the API server gives up on reviews before --webhook-timeout: runner-guard decides within the shortest timeoutSeconds instead; set timeoutSeconds and --webhook-timeout alike",
				"name", vwc.Name, "webhookTimeout", c.Want.String(), "decidesWithin", fit.String(), "entries", said)
		} else if last != "" {
			log("the webhook configuration's timeoutSeconds no longer end before --webhook-timeout", "name", vwc.Name, "webhookTimeout", c.Want.String())
		}
	}
	return said
}
