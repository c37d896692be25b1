package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/testutil"
)

// runServer starts a Server on a free loopback port and stops it when the
// test ends, checking that Run returns nil after the shutdown.
func runServer(t *testing.T, tc config.APITLS) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	srv, err := New(Options{Addr: "127.0.0.1:0", TLS: tc, Controller: reconcile.New(reconcile.Options{Watcher: newFakeWatcher()}, nil),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(ShutdownTimeout + testutil.Scale(2*time.Second)):
			t.Error("Run did not return after shutdown")
		}
	})
	return srv, logs
}

func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("no CA")
	}
	return p
}

func tlsClient(t *testing.T, ca string, certFile, keyFile string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: caPool(t, ca)}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
}

func get(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestPlainHTTPServer(t *testing.T) {
	srv, logs := runServer(t, config.APITLS{})
	code, err := get(http.DefaultClient, "http://"+srv.Addr()+"/v1/health")
	if err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if !strings.Contains(logs.String(), `msg="api listening" address=`+srv.Addr()) {
		t.Errorf("no 'api listening' log line:\n%s", logs)
	}
}

func TestTLSServer(t *testing.T) {
	certs := testcerts.Generate(t)
	srv, _ := runServer(t, config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey})
	url := "https://" + srv.Addr() + "/v1/health"
	if code, err := get(tlsClient(t, certs.CACert, "", ""), url); err != nil || code != 200 {
		t.Fatalf("TLS client: %d %v", code, err)
	}
	// A client that does not trust the CA is refused.
	if _, err := get(tlsClient(t, certs.OtherCACert, "", ""), url); err == nil {
		t.Fatal("untrusted server certificate accepted")
	}
	// TLS 1.1 is refused.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: caPool(t, certs.CACert), MaxVersion: tls.VersionTLS11}}}
	if _, err := get(old, url); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
	// Plain HTTP to the TLS port gets Go's 400.
	if code, _ := get(http.DefaultClient, "http://"+srv.Addr()+"/v1/health"); code != 400 {
		t.Errorf("plain http to TLS: %d", code)
	}
}

func TestMutualTLS(t *testing.T) {
	certs := testcerts.Generate(t)
	for name, tc := range map[string]config.APITLS{
		"ca_cert": {Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true, CACert: certs.CACert},
		"ca_path": {Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true, CAPath: certs.CADir},
	} {
		t.Run(name, func(t *testing.T) {
			srv, logs := runServer(t, tc)
			url := "https://" + srv.Addr() + "/v1/health"
			if code, err := get(tlsClient(t, certs.CACert, certs.ClientCert, certs.ClientKey), url); err != nil || code != 200 {
				t.Fatalf("client with certificate: %d %v", code, err)
			}
			if code, err := get(tlsClient(t, certs.CACert, "", ""), url); err == nil {
				t.Fatalf("client without certificate got %d", code)
			}
			// A certificate of our CA without client-auth usage is refused.
			if code, err := get(tlsClient(t, certs.CACert, certs.ServerCert, certs.ServerKey), url); err == nil {
				t.Fatalf("client with a server certificate got %d", code)
			}
			if !strings.Contains(logs.String(), "mtls=true") {
				t.Errorf("log does not say mtls:\n%s", logs)
			}
		})
	}
}

func TestTLSConfigErrors(t *testing.T) {
	certs := testcerts.Generate(t)
	for name, c := range map[string]struct {
		tls  config.APITLS
		want string
	}{
		"no key":           {config.APITLS{Enabled: true, Cert: certs.ServerCert}, "cert and key are both required"},
		"bad key":          {config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ClientKey}, "loading cert and key"},
		"verify no CA":     {config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true}, "needs ca_cert or ca_path"},
		"CA not PEM":       {config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true, CACert: certs.ServerKey}, "no PEM certificate"},
		"CA path missing":  {config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true, CAPath: certs.Dir + "/none"}, "reading ca_path"},
		"CA file missing":  {config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true, CACert: certs.Dir + "/none.pem"}, "reading CA certificate"},
		"cert file absent": {config.APITLS{Enabled: true, Cert: certs.Dir + "/x.pem", Key: certs.ServerKey}, "loading cert and key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(Options{TLS: c.tls, Controller: reconcile.New(reconcile.Options{Watcher: newFakeWatcher()}, nil)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	// ca_cert wins over ca_path.
	tc, err := TLSConfig(config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey, VerifyIncoming: true,
		CACert: certs.CACert, CAPath: certs.Dir + "/none"})
	if err != nil || tc.ClientAuth != tls.RequireAndVerifyClientCert || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("%+v %v", tc, err)
	}
}

func TestListenFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, err := New(Options{Addr: ln.Addr().String(), Controller: reconcile.New(reconcile.Options{Watcher: newFakeWatcher()}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Listen: %v", err)
	}
	if err := srv.Run(context.Background()); err == nil {
		t.Fatal("Run on a used port returned nil")
	}
}

// TestShutdownWaitsForRequests checks the graceful shutdown: a request in
// progress completes, and Run returns once it has.
func TestShutdownWaitsForRequests(t *testing.T) {
	h := newHarness(t, nil)
	srv, err := New(Options{Addr: "127.0.0.1:0", Controller: h.ctrl})
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	srv.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-unblock
		_, _ = w.Write([]byte("done"))
	}))
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + srv.Addr() + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{string(b), err}
	}()
	<-entered
	cancel()
	select {
	case err := <-runDone:
		t.Fatalf("Run returned (%v) with a request in progress", err)
	default:
	}
	close(unblock)
	r := <-got
	if r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request: %q %v", r.body, r.err)
	}
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
