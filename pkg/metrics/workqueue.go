package metrics

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The workqueue metrics: the series of k8s.io/component-base's adapter
// (k8s.io/component-base/metrics/prometheus/workqueue), same names, help,
// buckets and stability, with one addition: ForgetQueue removes a queue's
// series. That adapter keeps its vectors to itself, so a queue that shuts
// down leaves its series behind at their last value; in sharded mode each
// slot's controller has a queue of its own, started and stopped as the
// slot comes and goes, and a slot handed over would go on showing, on the
// replica that let it go, the depth its queue had then.
var (
	queueDepth = k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: "workqueue", Name: "depth", StabilityLevel: k8smetrics.BETA,
		Help: "Current depth of workqueue",
	}, []string{"name"})
	queueAdds = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total", StabilityLevel: k8smetrics.BETA,
		Help: "Total number of adds handled by workqueue",
	}, []string{"name"})
	queueLatency = k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds", StabilityLevel: k8smetrics.BETA,
		Help:    "How long in seconds an item stays in workqueue before being requested.",
		Buckets: k8smetrics.ExponentialBuckets(10e-9, 10, 10),
	}, []string{"name"})
	queueWorkDuration = k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds", StabilityLevel: k8smetrics.BETA,
		Help:    "How long in seconds processing an item from workqueue takes.",
		Buckets: k8smetrics.ExponentialBuckets(10e-9, 10, 10),
	}, []string{"name"})
	queueUnfinished = k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds", StabilityLevel: k8smetrics.BETA,
		Help: "How many seconds of work has done that is in progress and hasn't been observed by work_duration. " +
			"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
	}, []string{"name"})
	queueLongestRunning = k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds", StabilityLevel: k8smetrics.BETA,
		Help: "How many seconds has the longest running processor for workqueue been running.",
	}, []string{"name"})
	queueRetries = k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total", StabilityLevel: k8smetrics.BETA,
		Help: "Total number of retries handled by workqueue",
	}, []string{"name"})

	registerQueuesOnce sync.Once
)

// registerQueues registers the workqueue metrics, at the first queue (as
// the adapter does, so that a process without a queue serves none).
func registerQueues() {
	registerQueuesOnce.Do(func() {
		legacyregistry.MustRegister(queueDepth, queueAdds, queueLatency, queueWorkDuration, queueUnfinished, queueLongestRunning, queueRetries)
	})
}

// QueueMetrics is the workqueue metrics provider: every named workqueue
// (all three layers of lanes.NewWorkqueue's) is given it, and it is client-go's
// global provider too.
var QueueMetrics workqueue.MetricsProvider = queueMetricsProvider{}

func init() { workqueue.SetProvider(QueueMetrics) }

type queueMetricsProvider struct{}

func (queueMetricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	registerQueues()
	return queueDepth.WithLabelValues(name)
}

func (queueMetricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	registerQueues()
	return queueAdds.WithLabelValues(name)
}

func (queueMetricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	registerQueues()
	return queueLatency.WithLabelValues(name)
}

func (queueMetricsProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	registerQueues()
	return queueWorkDuration.WithLabelValues(name)
}

func (queueMetricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	registerQueues()
	return queueUnfinished.WithLabelValues(name)
}

func (queueMetricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	registerQueues()
	return queueLongestRunning.WithLabelValues(name)
}

func (queueMetricsProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	registerQueues()
	return queueRetries.WithLabelValues(name)
}

// ForgetQueue removes the series of the workqueue called name, once it has
// shut down: they vanish from /metrics (Prometheus marks them stale) rather
// than stay at their last value. A queue of that name created later starts
// its series afresh (its counters from 0, which rate() reads as a reset).
// Whatever the old queue still records after this goes nowhere.
func ForgetQueue(name string) {
	queueDepth.DeleteLabelValues(name)
	queueAdds.DeleteLabelValues(name)
	queueLatency.DeleteLabelValues(name)
	queueWorkDuration.DeleteLabelValues(name)
	queueUnfinished.DeleteLabelValues(name)
	queueLongestRunning.DeleteLabelValues(name)
	queueRetries.DeleteLabelValues(name)
}
