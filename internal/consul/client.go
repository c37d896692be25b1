// Package consul is ctsync's one place that builds Consul API clients and
// waits for the agent. Everything else (watch, store, ha, self-registration)
// uses the Client built here, so TLS, auth and the HTTP transport are
// configured exactly once.
package consul

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
)

// Transport defaults, the same as CTS. NewClient uses them for zero fields
// so a hand-built config.Consul (tests, tools) still gets a transport fit
// for many long polls. MaxIdleConns has no default: 0 already means
// "unlimited".
const (
	defaultDialTimeout         = 30 * time.Second
	defaultDialKeepAlive       = 30 * time.Second
	defaultIdleConnTimeout     = 5 * time.Second
	defaultMaxIdleConnsPerHost = 100
	defaultTLSHandshakeTimeout = 10 * time.Second
	// tlsMaxConns caps connections to the agent over TLS (HTTP/2):
	// 64 connections × 250 streams each is far more blocking queries than
	// one ctsync makes, and far under the agent's per-client limit of 200.
	tlsMaxConns = 64
)

// NewClient builds the Consul API client from the consul block.
//
// The address may be "host:port" or carry a scheme ("http://", "https://",
// "unix://"); an https address, or tls.enabled, makes the client speak TLS,
// and then HTTP/2 is attempted (negotiated with ALPN). TLS verification
// follows tls.verify: verify=false sets InsecureSkipVerify. The token, when
// empty, falls back to the API library's CONSUL_HTTP_TOKEN(_FILE)
// handling; the config package normally resolves it first.
//
// Connection math. A blocking query keeps its HTTP request open for the
// whole wait (up to 5 minutes plus Consul's jitter of wait/16). Over plain
// HTTP/1.1 that is one TCP connection per running watch.View for as long as
// the view waits, plus short-lived ones for KV writes, sessions and the
// like. So with V distinct queries ctsync holds about V+few connections to
// the agent:
//   - MaxIdleConnsPerHost should be >= V. Otherwise each answer returns its
//     connection to a full idle pool, the connection is closed, and the
//     view's next request dials a new one (connection churn, TIME_WAITs).
//   - The agent's limits.http_max_conns_per_client (default 200) caps
//     connections per client IP; beyond it the agent answers 429 or drops
//     the connection. Watching more than ~190 distinct queries from one
//     ctsync over HTTP/1.1 needs that limit raised, or TLS (next point).
//   - Over TLS the transport negotiates HTTP/2 and multiplexes all blocking
//     queries as streams on one connection (Go opens another connection
//     when the server's stream limit is reached), so the per-client
//     connection limit stops mattering.
//
// Over plain HTTP, MaxConnsPerHost is deliberately left unlimited: a cap
// below V would make views queue behind each other's 5-minute waits and
// stall. Over TLS it is capped at tlsMaxConns: without a cap, views that
// start together (hundreds at once) each dial a connection before the
// first HTTP/2 connection is up, which can exceed the agent's limit; with
// it, waiting requests share the HTTP/2 connections (Consul accepts 250
// streams on each). An agent that speaks only HTTP/1.1 over TLS would make
// views beyond tlsMaxConns wait, so that case is documented.
func NewClient(c config.Consul) (*Client, error) {
	addr := strings.TrimSpace(c.Address)
	if addr == "" {
		addr = "localhost:8500"
	}
	scheme := "http"
	if i := strings.Index(addr, "://"); i >= 0 {
		switch s := strings.ToLower(addr[:i]); s {
		case "http", "unix":
		case "https":
			scheme = "https"
		default:
			return nil, fmt.Errorf("consul address %q: unknown scheme %q (want http, https or unix)", c.Address, s)
		}
		addr = strings.ToLower(addr[:i]) + addr[i:]
	}
	useTLS := c.TLS.Enabled || scheme == "https"
	if useTLS {
		scheme = "https"
	}

	tr, err := newTransport(c, useTLS)
	if err != nil {
		return nil, err
	}
	cfg := &api.Config{
		Address:    addr,
		Scheme:     scheme,
		Token:      c.Token,
		Transport:  tr,
		HttpClient: &http.Client{Transport: tr}, // no Timeout: blocking queries wait minutes
	}
	if useTLS {
		// Only used by the API library when it builds its own HTTP client
		// (unix:// addresses); kept consistent with the transport's.
		cfg.TLSConfig = apiTLSConfig(c.TLS)
	}
	if c.Auth.Enabled || c.Auth.Username != "" || c.Auth.Password != "" {
		cfg.HttpAuth = &api.HttpBasicAuth{Username: c.Auth.Username, Password: c.Auth.Password}
	}
	client, err := FromAPIConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", c.Address, err)
	}
	client.UseCache = c.UseCache
	return client, nil
}

func apiTLSConfig(t config.ConsulTLS) api.TLSConfig {
	return api.TLSConfig{
		Address:            t.ServerName, // SetupTLSConfig turns it into tls.Config.ServerName
		CAFile:             t.CACert,
		CAPath:             t.CAPath,
		CertFile:           t.Cert,
		KeyFile:            t.Key,
		InsecureSkipVerify: !t.Verify,
	}
}

func newTransport(c config.Consul, useTLS bool) (*http.Transport, error) {
	t := c.Transport
	dialer := &net.Dialer{
		Timeout:   orDefault(t.DialTimeout, defaultDialTimeout),
		KeepAlive: orDefault(t.DialKeepAlive, defaultDialKeepAlive),
	}
	perHost := t.MaxIdleConnsPerHost
	if perHost <= 0 {
		perHost = defaultMaxIdleConnsPerHost
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        t.MaxIdleConns,
		MaxIdleConnsPerHost: perHost,
		IdleConnTimeout:     orDefault(t.IdleConnTimeout, defaultIdleConnTimeout),
		TLSHandshakeTimeout: orDefault(t.TLSHandshakeTimeout, defaultTLSHandshakeTimeout),
		DisableKeepAlives:   t.DisableKeepAlives,
		ForceAttemptHTTP2:   useTLS,
		// ctsync talks to a Consul agent, normally on the same host or LAN:
		// gzip would cost CPU on both sides (a health response of 1,000
		// instances is ~1 MB) and buy nothing.
		DisableCompression: true,
	}
	if useTLS {
		tr.MaxConnsPerHost = tlsMaxConns
		tc := apiTLSConfig(c.TLS)
		tlsCfg, err := api.SetupTLSConfig(&tc)
		if err != nil {
			return nil, fmt.Errorf("consul tls: %w", err)
		}
		tr.TLSClientConfig = tlsCfg
	}
	return tr, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
