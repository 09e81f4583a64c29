//go:build tools

// Package prometheus pins Prometheus's promtool, which checks and unit-tests certapi's alerting rules
// (artifacts/monitoring), and the Prometheus server, which an end-to-end test runs against certapi. It is
// a module of its own, beside the kube-apiserver tools module rather than in it, so that Prometheus's
// dependencies never move the versions kube-apiserver and etcd are built with.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
