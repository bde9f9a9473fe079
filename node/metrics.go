package node

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves the Prometheus metrics of the Go runtime, of the
// process and of cs: /metrics of the node's dashboard and of the indexer.
func metricsHandler(cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// putFunc reports the value v of the metric described by descs[key], of
// type t, with the values of its labels.
type putFunc func(key string, t prometheus.ValueType, v float64, labels ...string)

// statsCollector is a prometheus.Collector of values read when scraped:
// descs describes each metric by a key, and collect reports the values
// with put. collect must be safe for concurrent use.
type statsCollector struct {
	descs   map[string]*prometheus.Desc
	collect func(put putFunc)
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(func(key string, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[key], t, v, labels...)
	})
}
