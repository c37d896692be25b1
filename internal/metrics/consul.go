package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RoundTripper wraps the HTTP transport of the Consul client so that every
// request is counted by endpoint class, status code and whether it blocks,
// and the latency of requests that do not block is observed.
//
// A blocking query (one with a non-zero index parameter) is held by Consul
// until the data changes or the wait time (5 minutes by default) runs out:
// its duration measures how long the data stayed the same, not how fast
// Consul is, so it would drown the latency histogram. Blocking queries are
// therefore only counted (blocking="true"), and their failures counted as
// errors. A request cancelled by ctsync itself (a watch that stops, a
// shutdown) is neither an error nor a latency sample.
func (m *Metrics) RoundTripper(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &consulTransport{m: m, next: next}
}

type consulTransport struct {
	m    *Metrics
	next http.RoundTripper
}

func (t *consulTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	class := EndpointClass(req.URL.Path)
	blocking := isBlocking(req)
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	d := time.Since(start)
	m := t.m
	if err != nil {
		if errors.Is(err, context.Canceled) || req.Context().Err() != nil {
			return resp, err
		}
		m.consulReqs.WithLabelValues(class, "error", strconv.FormatBool(blocking)).Inc()
		m.consulErrs.WithLabelValues(class).Inc()
		return resp, err
	}
	m.consulReqs.WithLabelValues(class, strconv.Itoa(resp.StatusCode), strconv.FormatBool(blocking)).Inc()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		m.consulErrs.WithLabelValues(class).Inc()
	}
	if !blocking {
		m.consulLat.WithLabelValues(class).Observe(d.Seconds())
	}
	return resp, nil
}

// EndpointClass groups a Consul API path: "health", "catalog", "kv" or
// "other" (sessions, agent, status, ...). Paths carry service names and
// keys, so they are never used as label values themselves.
func EndpointClass(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return "other"
	}
	seg, _, _ := strings.Cut(rest, "/")
	switch seg {
	case "health", "catalog", "kv":
		return seg
	}
	return "other"
}

// isBlocking reports whether the request is a blocking query: it carries a
// non-zero index to wait on.
func isBlocking(req *http.Request) bool {
	idx := req.URL.Query().Get("index")
	return idx != "" && idx != "0"
}
