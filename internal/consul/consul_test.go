package consul

import (
	"context"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
)

func TestBackoffFullJitterCappedAndReset(t *testing.T) {
	b := NewBackoff(250*time.Millisecond, 10*time.Second)
	wantCeil := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range wantCeil {
		d := b.Next()
		if b.Ceiling() != w {
			t.Fatalf("step %d ceiling = %s, want %s", i, b.Ceiling(), w)
		}
		if d < 0 || d > w {
			t.Fatalf("step %d delay %s outside [0, %s]", i, d, w)
		}
	}
	for range 200 { // no overflow however long the outage
		if d := b.Next(); d < 0 || d > 10*time.Second {
			t.Fatalf("delay %s out of range after %d attempts", d, b.Attempts())
		}
	}
	b.Reset()
	if b.Attempts() != 0 || b.Ceiling() != 0 {
		t.Fatal("reset")
	}
	b.Next()
	if b.Ceiling() != 250*time.Millisecond {
		t.Fatalf("after reset ceiling = %s", b.Ceiling())
	}
	// Jitter really spreads: 100 draws at the cap are not all equal.
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[b.Next()] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct delays", len(seen))
	}
	if d := NewBackoff(0, 0); d.Base != DefaultBackoffBase || d.Cap != DefaultBackoffCap {
		t.Fatalf("defaults %+v", d)
	}
}

// agent is a minimal /v1/status/leader responder that records what it saw.
type agent struct {
	mu      sync.Mutex
	leader  []string // answers in order; the last one repeats
	calls   int
	token   string
	user    string
	pass    string
	proto   int
	path    string
	fail500 int
}

func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.token = r.Header.Get("X-Consul-Token")
	a.user, a.pass, _ = r.BasicAuth()
	a.proto = r.ProtoMajor
	a.path = r.URL.Path
	if a.fail500 > 0 {
		a.fail500--
		http.Error(w, "boom", 500)
		return
	}
	l := `"127.0.0.1:8300"`
	if len(a.leader) > 0 {
		l = a.leader[0]
		if len(a.leader) > 1 {
			a.leader = a.leader[1:]
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(l))
}

func TestNewClientPlainHTTPTokenAuthAndPrefix(t *testing.T) {
	a := &agent{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	for _, addr := range []string{srv.URL, strings.TrimPrefix(srv.URL, "http://")} {
		c, err := NewClient(config.Consul{Address: addr, Token: "s3cret",
			Auth: config.ConsulAuth{Enabled: true, Username: "u", Password: "p"}})
		if err != nil {
			t.Fatal(err)
		}
		if l, err := c.Status().Leader(); err != nil || l == "" {
			t.Fatalf("%s: leader %q %v", addr, l, err)
		}
		if a.token != "s3cret" || a.user != "u" || a.pass != "p" || a.proto != 1 || a.path != "/v1/status/leader" {
			t.Fatalf("%s: agent saw %+v", addr, a)
		}
	}
	// A reverse-proxy path prefix is kept.
	c, err := NewClient(config.Consul{Address: srv.URL + "/consul"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Status().Leader()
	if a.path != "/consul/v1/status/leader" {
		t.Fatalf("path = %q", a.path)
	}
	if _, err := NewClient(config.Consul{Address: "ftp://x:1"}); err == nil {
		t.Fatal("unknown scheme accepted")
	}
}

func TestNewClientTLS(t *testing.T) {
	a := &agent{}
	srv := httptest.NewUnstartedServer(a)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	hostPort := strings.TrimPrefix(srv.URL, "https://")

	// https:// in the address turns TLS on; the CA verifies; HTTP/2 is used.
	c, err := NewClient(config.Consul{Address: srv.URL, TLS: config.ConsulTLS{Verify: true, CACert: caFile}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().Leader(); err != nil {
		t.Fatalf("https with CA: %v", err)
	}
	if a.proto != 2 {
		t.Fatalf("HTTP/%d, want HTTP/2 over TLS", a.proto)
	}
	// tls.enabled with a bare host:port; the test cert is for 127.0.0.1 and
	// "example.com", so server_name example.com verifies too.
	c, _ = NewClient(config.Consul{Address: hostPort, TLS: config.ConsulTLS{Enabled: true, Verify: true, CACert: caFile, ServerName: "example.com"}})
	if _, err := c.Status().Leader(); err != nil {
		t.Fatalf("tls.enabled + server_name: %v", err)
	}
	// A wrong server name fails verification.
	c, _ = NewClient(config.Consul{Address: hostPort, TLS: config.ConsulTLS{Enabled: true, Verify: true, CACert: caFile, ServerName: "wrong.test"}})
	if _, err := c.Status().Leader(); err == nil {
		t.Fatal("wrong server name verified")
	}
	// Without the CA verification fails, unless verify=false.
	c, _ = NewClient(config.Consul{Address: hostPort, TLS: config.ConsulTLS{Enabled: true, Verify: true}})
	if _, err := c.Status().Leader(); err == nil {
		t.Fatal("unknown CA verified")
	}
	c, _ = NewClient(config.Consul{Address: hostPort, TLS: config.ConsulTLS{Enabled: true, Verify: false}})
	if _, err := c.Status().Leader(); err != nil {
		t.Fatalf("verify=false: %v", err)
	}
	// http:// with tls.enabled still speaks TLS.
	c, _ = NewClient(config.Consul{Address: "http://" + hostPort, TLS: config.ConsulTLS{Enabled: true}})
	if _, err := c.Status().Leader(); err != nil {
		t.Fatalf("http:// + tls.enabled: %v", err)
	}
	// A half-configured client certificate is an error at construction.
	if _, err := NewClient(config.Consul{Address: hostPort, TLS: config.ConsulTLS{Enabled: true, Cert: "x.pem"}}); err == nil {
		t.Fatal("cert without key accepted")
	}
}

func TestNewTransportSettings(t *testing.T) {
	tr, err := newTransport(config.Consul{Transport: config.Transport{
		IdleConnTimeout: 7 * time.Second, MaxIdleConns: 11, MaxIdleConnsPerHost: 12,
		TLSHandshakeTimeout: 3 * time.Second, DisableKeepAlives: true,
	}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if tr.IdleConnTimeout != 7*time.Second || tr.MaxIdleConns != 11 || tr.MaxIdleConnsPerHost != 12 ||
		tr.TLSHandshakeTimeout != 3*time.Second || !tr.DisableKeepAlives || tr.ForceAttemptHTTP2 ||
		tr.MaxConnsPerHost != 0 || tr.TLSClientConfig != nil {
		t.Fatalf("transport %+v", tr)
	}
	tr, _ = newTransport(config.Consul{}, true)
	if tr.MaxIdleConnsPerHost != 100 || tr.IdleConnTimeout != 5*time.Second || !tr.ForceAttemptHTTP2 ||
		tr.TLSClientConfig == nil || tr.TLSClientConfig.InsecureSkipVerify != true {
		t.Fatalf("defaults %+v", tr)
	}
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (s *lines) Enabled(context.Context, slog.Level) bool { return true }
func (s *lines) Handle(_ context.Context, r slog.Record) error {
	b := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { b += " " + a.Key + "=" + a.Value.String(); return true })
	s.mu.Lock()
	s.l = append(s.l, b)
	s.mu.Unlock()
	return nil
}
func (s *lines) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *lines) WithGroup(string) slog.Handler      { return s }

func TestWaitReadyRetriesUntilLeader(t *testing.T) {
	a := &agent{fail500: 2, leader: []string{`""`, `""`, `"10.0.0.1:8300"`}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	c, _ := NewClient(config.Consul{Address: srv.URL})
	log := &lines{}
	if err := waitReady(context.Background(), c.Client, slog.New(log), NewBackoff(time.Millisecond, 2*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if a.calls != 5 {
		t.Fatalf("calls = %d, want 5", a.calls)
	}
	warns := 0
	for _, l := range log.l {
		if strings.HasPrefix(l, "WARN consul not reachable, retrying") {
			warns++
		}
	}
	if warns != 4 || !strings.Contains(log.l[len(log.l)-1], "consul reachable") {
		t.Fatalf("logs:\n%s", strings.Join(log.l, "\n"))
	}
}

func TestWaitReadyUnreachableHonoursContext(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	c, _ := NewClient(config.Consul{Address: addr})
	log := &lines{}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := waitReady(ctx, c.Client, slog.New(log), NewBackoff(time.Millisecond, 5*time.Millisecond))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.l) == 0 || !strings.Contains(log.l[0], "address="+addr) || !strings.Contains(log.l[0], "connection refused") {
		t.Fatalf("logs: %v", log.l)
	}
	// The public entry point returns at once on a cancelled context.
	if err := WaitReady(ctx, c.Client, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady = %v", err)
	}
}
