package client

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

func TestAddress(t *testing.T) {
	certs := testcerts.Generate(t)
	for _, c := range []struct {
		cfg  Config
		want string
		err  string
	}{
		{Config{}, "http://localhost:8558", ""},
		{Config{Address: "127.0.0.1:9000"}, "http://127.0.0.1:9000", ""},
		{Config{Address: "127.0.0.1:9000", CACert: certs.CACert}, "https://127.0.0.1:9000", ""},
		{Config{Address: "http://h:1/", Port: 2}, "http://h:2", ""},
		{Config{Address: "https://[::1]:8558", Port: 9}, "https://[::1]:9", ""},
		{Config{Address: "ftp://h:1"}, "", "scheme must be http or https"},
		{Config{Address: "http://"}, "", "no host"},
		{Config{ClientCert: certs.ClientCert}, "", "must be given together"},
		{Config{CACert: certs.Dir + "/nope.pem"}, "", "reading CA certificate"},
	} {
		cl, err := New(c.cfg)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c.cfg, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", c.cfg, err)
			continue
		}
		if cl.Address() != c.want {
			t.Errorf("%+v: address %q, want %q", c.cfg, cl.Address(), c.want)
		}
	}
}

func TestConfigFromEnvAndFlags(t *testing.T) {
	t.Setenv(EnvAddress, "http://env:1")
	t.Setenv(EnvCACert, "/env/ca.pem")
	t.Setenv(EnvSSLVerify, "false")
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Address != "http://env:1" || c.CACert != "/env/ca.pem" || c.SSLVerify {
		t.Errorf("from env %+v", c)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-http-addr=http://flag:2", "-ssl-verify", "-port=3"}); err != nil {
		t.Fatal(err)
	}
	if c.Address != "http://flag:2" || !c.SSLVerify || c.Port != 3 || c.CACert != "/env/ca.pem" {
		t.Errorf("after flags %+v", c)
	}
	t.Setenv(EnvSSLVerify, "sometimes")
	if _, err := ConfigFromEnv(); err == nil {
		t.Error("bad CTS_SSL_VERIFY accepted")
	}
}

func TestErrors(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/tasks/json":
			w.Header().Set("X-Request-Id", "hdr")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"message":"a task with name 'json' does not exist or has not been initialized yet"},"request_id":"rid"}`)
		case "/v1/tasks/text":
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "bad gateway\n")
		case "/v1/health":
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // EOF for the client
		}
	}))
	defer ts.Close()
	cl, err := New(Config{Address: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = cl.Task(ctx, "json")
	var e *Error
	if !IsNotFound(err) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("json error %v", err)
	} else if e = err.(*Error); e.RequestID != "rid" {
		t.Errorf("request id %q", e.RequestID)
	}
	_, err = cl.Task(ctx, "text")
	if err == nil || !strings.Contains(err.Error(), "502 Bad Gateway: bad gateway") || IsNotFound(err) {
		t.Errorf("text error %v", err)
	}
	err = cl.Health(ctx)
	if err == nil || !strings.Contains(err.Error(), "hint: the ctsync API may be serving HTTPS") {
		t.Errorf("EOF error %v", err)
	}
}

// nopWatcher has no data: tasks never become ready to run.
type nopWatcher struct{}

func (nopWatcher) Subscribe(string, watch.Query)  {}
func (nopWatcher) Unsubscribe(string, string)     {}
func (nopWatcher) UnsubscribeAll(string)          {}
func (nopWatcher) Get(string) (any, uint64, bool) { return nil, 0, false }

func TestAgainstServer(t *testing.T) {
	ctrl := reconcile.New(reconcile.Options{Watcher: nopWatcher{}}, nil)
	srv, err := api.New(api.Options{Controller: ctrl})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	cl, err := New(Config{Address: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.Health(ctx); err != nil {
		t.Fatal(err)
	}
	spec := task.Spec{Name: "a", Module: "m", Enabled: true,
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
	resp, err := cl.CreateTask(ctx, RunDefault, spec)
	if err != nil || resp.Task.Name != "a" || resp.RequestID == "" {
		t.Fatalf("create %+v %v", resp, err)
	}
	if _, err := cl.CreateTask(ctx, RunDefault, spec); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("duplicate: %v", err)
	}
	if tasks, err := cl.Tasks(ctx); err != nil || len(tasks) != 1 {
		t.Fatalf("tasks %+v %v", tasks, err)
	}
	if _, err := cl.UpdateTask(ctx, "a", false, RunDefault); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Task(ctx, "a"); err != nil || got.Enabled {
		t.Fatalf("task %+v %v", got, err)
	}
	st, err := cl.Status(ctx)
	if err != nil || st.TaskSummary.Enabled.False != 1 || st.TaskSummary.Status.Unknown != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	ts2, err := cl.TaskStatuses(ctx, "", StatusQuery{IncludeEvents: true, Status: "unknown"})
	if err != nil || ts2["a"].Status != "unknown" {
		t.Fatalf("task statuses %+v %v", ts2, err)
	}
	if evs, err := cl.Events(ctx, "a"); err != nil || len(evs) != 0 {
		t.Fatalf("events %+v %v", evs, err)
	}
	if id, err := cl.DeleteTask(ctx, "a", false); err != nil || id == "" {
		t.Fatalf("delete %q %v", id, err)
	}
	if _, err := cl.RunTask(ctx, "a"); !IsNotFound(err) {
		t.Fatalf("run deleted task: %v", err)
	}
}

func TestToken(t *testing.T) {
	const secret = "client-token-0123456789"
	srv, err := api.New(api.Options{Controller: reconcile.New(reconcile.Options{Watcher: nopWatcher{}}, nil),
		Tokens: []config.APIToken{{Name: "ops", Secret: secret, Access: config.AccessWrite}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	ctx := context.Background()

	t.Setenv(EnvToken, " "+secret+"\n")
	c, err := ConfigFromEnv()
	if err != nil || c.Token != secret {
		t.Fatalf("token from %s: %q %v", EnvToken, c.Token, err)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	if strings.Contains(usage.String(), secret) {
		t.Errorf("-h shows the token from the environment:\n%s", usage.String())
	}
	if err := fs.Parse([]string{"-token=other-token-0123456789"}); err != nil || c.Token != "other-token-0123456789" {
		t.Fatalf("-token: %q %v", c.Token, err)
	}

	for _, tc := range []struct{ token, want string }{
		{"", "hint: the daemon requires an API token: set CTS_TOKEN"},
		{"wrong-token-0123456789", "hint: the daemon does not know the token"},
	} {
		cl, err := New(Config{Address: ts.URL, Token: tc.token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Status(ctx); err == nil || !strings.Contains(err.Error(), "401 Unauthorized: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: %v", tc.token, err)
		}
		if err := cl.Health(ctx); err != nil {
			t.Errorf("health needs no token: %v", err)
		}
	}
	cl, err := New(Config{Address: ts.URL, Token: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if _, err := New(Config{Address: ts.URL, Token: "two words"}); err == nil {
		t.Error("a token with a space accepted")
	}
}
