// Package metrics defines the controller's Prometheus metrics and serves
// them, with the health probes, over HTTP.
//
// Everything is registered in component-base's legacyregistry, the registry
// the Kubernetes components themselves use, so that the well-kept adapters
// for client-go come for free: importing
// k8s.io/component-base/metrics/prometheus/restclient exports client-go's
// request counts and latencies by verb, host and code (rest_client_*). The
// workqueue series (every named workqueue's depth, adds, queue latency,
// work duration, unfinished work, longest running processor and retries:
// workqueue_* with a name label) are the same as component-base's
// adapter's, from a provider of our own that can also remove a stopped
// queue's series (QueueMetrics, ForgetQueue).
// docs/operations.md lists every metric and the alerts worth having.
package metrics

import (
	"runtime"
	"sync"

	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// Registered for its side effects: client-go's REST client metrics,
	// exported through legacyregistry.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
)

const subsystem = "foo_controller"

// Sync results, the values of the reconcile metrics' result label.
const (
	ResultSuccess  = "success"  // converged as far as possible; key forgotten
	ResultConflict = "conflict" // 409 on a stale object; retried
	ResultError    = "error"    // any other error; retried with backoff
	ResultPanic    = "panic"    // recovered panic; retried with backoff
)

// Conversion review results, the values of conversion_reviews_total's
// result label.
const (
	ConversionSuccess = "success" // every object converted
	ConversionFailure = "failure" // answered Failure: the request that needed it fails with the message
	ConversionInvalid = "invalid" // not a ConversionReview (an HTTP error), or one cut off (an object over 3 MiB, a client that stalled): not the API server
	ConversionBusy    = "busy"    // 429: the reviews being answered held the webhook's memory budget for 10 s
)

var (
	// ReconcileTotal counts syncs by result.
	ReconcileTotal = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "reconcile_total",
		Help:           "Foo syncs, by result: success, conflict, error or panic.",
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"result"})

	// ReconcileDuration is the time one sync takes.
	ReconcileDuration = k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "reconcile_duration_seconds",
		Help:           "Time one Foo sync takes, by result.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"result"})

	// watchErrors counts failures of the informers' list/watch calls.
	watchErrors = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "watch_errors_total",
		Help:           "Errors of the informers' list and watch calls, by resource. A steady rise means the cache is going stale.",
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"resource"})

	// CorrectionsDelayed counts Deployment corrections held back because
	// the same Deployment was put back too often (pkg/corrections).
	CorrectionsDelayed = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "corrections_delayed_total",
		Help:           "Deployment corrections delayed because something else keeps changing the same Deployment. A rise means a fight with another writer.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// StatusRepairs counts the status writes that had to remove conditions
	// other field managers kept (see plan.WriteStatus), by result.
	StatusRepairs = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "status_repairs_total",
		Help:           "Foo status writes whose server-side apply could not remove a condition (another field manager co-owns it) and that removed it with a JSON patch, by result: repaired (StatusRepaired Warnings, repeats folded into one Event), or failed (retried with backoff; the error is logged).",
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"result"})

	// Leader is 1 while this process holds the leader lease (or runs
	// without leader election), else 0.
	Leader = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "leader",
		Help:           "1 while this process is the leader and runs workers, else 0.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ShardSlots is how many slots this replica holds (-shard-slots).
	ShardSlots = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "shard_slots",
		Help:           "Slots this replica holds and works on, in sharded mode (-shard-slots); each has its own workqueue, foo-controller-slot-N.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ShardFoos is how many Foos the slots this replica holds contain: the
	// weight the slot boundaries balance (docs/sharding.md).
	ShardFoos = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "shard_foos",
		Help:           "In sharded mode, the Foos in the slots this replica holds (its caches' count): the load the slot boundaries balance.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ShardLayoutChanges counts the slot boundaries this replica wrote
	// (a re-balance); every member hands its slots over after one.
	ShardLayoutChanges = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "shard_layout_changes_total",
		Help:           "In sharded mode, how many times this replica wrote new slot boundaries (a re-balance: every slot is handed over once).",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ShardServerFiltering is 1 when the API server filters lists and
	// watches by shard, 0 when it sends everything (sharded mode only).
	ShardServerFiltering = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "shard_server_filtering",
		Help:           "In sharded mode, 1 when the API server filters each slot's lists and watches (ShardedListAndWatch), 0 when every slot receives every object and filters it on our side.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ConversionReviews counts the conversion webhook's answers.
	ConversionReviews = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "conversion_reviews_total",
		Help:           "ConversionReviews the webhook answered, by result: success, failure (the API server fails the request that needed it, with the message), invalid (not a review, or one cut off: an object over 3 MiB, a client that stalled) or busy (429: the webhook's memory budget held by other reviews for 10 s).",
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"result"})

	// ConversionObjects counts the objects the webhook converted.
	ConversionObjects = k8smetrics.NewCounter(&k8smetrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "conversion_objects_total",
		Help:           "Objects the conversion webhook converted (the API server sends one per review: one per Foo written while two versions are served, and one per stored Foo when it starts).",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// ConversionDuration is the time one review takes to answer.
	ConversionDuration = k8smetrics.NewHistogram(&k8smetrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "conversion_duration_seconds",
		Help:           "Time the conversion webhook takes to answer one ConversionReview, from reading it to writing the answer.",
		Buckets:        []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: k8smetrics.ALPHA,
	})

	// WebhookCertificateExpiry is when the served certificate expires.
	WebhookCertificateExpiry = k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "webhook_certificate_expiry_timestamp_seconds",
		Help:           "When the conversion webhook's serving certificate expires, as a Unix time; 0 until one is served. It is renewed at two thirds of its year: less than a third left means renewal is failing.",
		StabilityLevel: k8smetrics.ALPHA,
	})

	// buildInfo is always 1; its labels describe the binary.
	buildInfo = k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "build_info",
		Help:           "Always 1; the labels describe the running binary.",
		StabilityLevel: k8smetrics.ALPHA,
	}, []string{"version", "revision", "go_version"})
)

var registerOnce sync.Once

// Register registers the metrics (once) and sets build_info: version is
// the main module's version, revision the commit ("" when not stamped).
func Register(version, revision string) {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(ReconcileTotal, ReconcileDuration, watchErrors, CorrectionsDelayed, StatusRepairs, Leader, ShardSlots, ShardFoos, ShardLayoutChanges, ShardServerFiltering,
			ConversionReviews, ConversionObjects, ConversionDuration, WebhookCertificateExpiry, buildInfo)
	})
	buildInfo.WithLabelValues(version, revision, runtime.Version()).Set(1)
}
