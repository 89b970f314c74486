package provider

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a provider's view of a job is checked against the attempt it is
// applied to: the labels of aivedio_provider_identity_mismatches_total.
const (
	CheckedAtSubmit   = "submit"   // the answer to a submit
	CheckedAtCallback = "callback" // a completion callback
	CheckedAtPoll     = "poll"     // a poll's (or a callback's) Get
)

var identityMismatches = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "aivedio_provider_identity_mismatches_total",
	Help: "Provider answers, callbacks and poll results refused because they carry another attempt's client request id, " +
		"by provider and where they were checked (submit, callback, poll). Any increase means a job id was reused or mixed up: look at the logs.",
}, []string{"provider", "where"})

// IdentityCollector exports aivedio_provider_identity_mismatches_total,
// process-wide. Register it once per registry.
func IdentityCollector() prometheus.Collector { return identityMismatches }

// CheckIdentity reports whether job belongs to the attempt whose client
// request id is want, before anything the job says is applied to it. A job
// that echoes no client request id (a provider that cannot) is taken on
// its id alone; one that echoes another attempt's is refused: counted
// under where, and returned as an error that names both ids.
func CheckIdentity(providerName, where string, job Job, want string) error {
	if job.ClientRequestID == "" || job.ClientRequestID == want {
		return nil
	}
	identityMismatches.WithLabelValues(providerName, where).Inc()
	return fmt.Errorf("provider %s job %s carries client request id %s, not %s: it is another attempt's job, and is not applied to this one",
		providerName, job.ID, job.ClientRequestID, want)
}

var failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "aivedio_provider_failovers_total",
	Help: "New attempts sent to another provider because the task's provider was unavailable and its attempt had made no remote job, by provider left and provider taken.",
}, []string{"from", "to"})

// FailoverCollector exports aivedio_provider_failovers_total, process-wide.
// Register it once per registry.
func FailoverCollector() prometheus.Collector { return failovers }

// Collectors are the package's process-wide collectors: identity
// mismatches and failovers.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{identityMismatches, failovers}
}

// CountFailover counts a task's move from one provider to another.
func CountFailover(from, to string) { failovers.WithLabelValues(from, to).Inc() }
