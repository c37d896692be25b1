package consul

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
)

// fakeAgent records agent service calls; fail answers the first calls
// with the given status codes.
type fakeAgent struct {
	mu       sync.Mutex
	fail     []int
	register []api.AgentServiceRegistration
	paths    []string
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	if len(f.fail) > 0 {
		code := f.fail[0]
		f.fail = f.fail[1:]
		http.Error(w, "Permission denied", code)
		return
	}
	if r.URL.Path == "/v1/agent/service/register" {
		var reg api.AgentServiceRegistration
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &reg); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.register = append(f.register, reg)
	}
}

func agentClient(t *testing.T, f *fakeAgent) AgentAPI {
	t.Helper()
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	c, err := NewClient(config.Consul{Address: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c.Client
}

func fastRetries(t *testing.T) {
	old := registerBackoff
	registerBackoff = [2]time.Duration{time.Microsecond, time.Millisecond}
	t.Cleanup(func() { registerBackoff = old })
}

func TestRegistrationFromConfig(t *testing.T) {
	sr := config.ServiceRegistration{Enabled: true, ServiceName: "sync",
		Address: "10.0.0.5", Namespace: "ns", DefaultCheck: config.DefaultCheck{Enabled: true}}
	r, ok := RegistrationFromConfig(sr, "cts-a", "[::]:9999", true)
	if !ok {
		t.Fatal("disabled")
	}
	svc := r.service()
	if svc.ID != "cts-a" || svc.Name != "sync" || svc.Port != 9999 || svc.Address != "10.0.0.5" ||
		svc.Namespace != "ns" || len(svc.Tags) != 1 || svc.Tags[0] != "cts" {
		t.Errorf("service %+v", svc)
	}
	if len(svc.Checks) != 1 {
		t.Fatalf("checks %+v", svc.Checks)
	}
	c := svc.Checks[0]
	want := api.AgentServiceCheck{CheckID: "cts-a-health", Name: "CTS Health Status", Notes: HealthCheckNotes,
		HTTP: "https://localhost:9999/v1/health", Method: "GET", Interval: "10s", Timeout: "2s",
		DeregisterCriticalServiceAfter: "30m", TLSSkipVerify: true, Status: "critical"}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("check\n %+v\nwant\n %+v", *c, want)
	}

	sr.DefaultCheck.Address = "http://10.0.0.5:9999"
	r, _ = RegistrationFromConfig(sr, "cts-a", "[::]:9999", true)
	if got := r.service().Checks[0].HTTP; got != "http://10.0.0.5:9999/v1/health" {
		t.Errorf("check address %q", got)
	}
	sr.DefaultCheck.Enabled = false
	r, _ = RegistrationFromConfig(sr, "cts-a", "[::]:9999", true)
	if len(r.service().Checks) != 0 {
		t.Error("check registered although disabled")
	}
	sr.Enabled = false
	if _, ok := RegistrationFromConfig(sr, "cts-a", "[::]:9999", true); ok {
		t.Error("registration enabled")
	}
}

// An API bound to one IP address is registered at that address, and its
// default check calls it there (neither the node's address nor localhost
// reach it); bound to every interface, the node's address and localhost,
// as in CTS. service_registration.address still wins.
func TestRegistrationFollowsListenAddress(t *testing.T) {
	sr := config.ServiceRegistration{Enabled: true, DefaultCheck: config.DefaultCheck{Enabled: true}}
	for _, c := range []struct {
		listen, srAddr, addr, check string
	}{
		{"[::]:8558", "", "", "http://localhost:8558/v1/health"},
		{"0.0.0.0:8558", "", "", "http://localhost:8558/v1/health"},
		{"127.0.0.2:9000", "", "127.0.0.2", "http://127.0.0.2:9000/v1/health"},
		{"10.0.0.5:8558", "", "10.0.0.5", "http://10.0.0.5:8558/v1/health"},
		{"[::1]:8558", "", "::1", "http://[::1]:8558/v1/health"},
		{"10.0.0.5:8558", "ctsync.example.com", "ctsync.example.com", "http://10.0.0.5:8558/v1/health"},
	} {
		sr.Address = c.srAddr
		r, _ := RegistrationFromConfig(sr, "cts-a", c.listen, false)
		svc := r.service()
		if svc.Address != c.addr || svc.Checks[0].HTTP != c.check {
			t.Errorf("bound to %s (service_registration.address %q): address %q, check %q; want %q, %q",
				c.listen, c.srAddr, svc.Address, svc.Checks[0].HTTP, c.addr, c.check)
		}
	}
}

func TestRegisterAndDeregister(t *testing.T) {
	fastRetries(t)
	f := &fakeAgent{fail: []int{500, 502}} // transient: retried
	c := agentClient(t, f)
	r := Registration{ID: "cts-x", Port: 8558, Check: true, Namespace: "team"}
	if err := Register(context.Background(), c, r, nil); err != nil {
		t.Fatal(err)
	}
	if len(f.register) != 1 {
		t.Fatalf("registrations %+v", f.register)
	}
	got := f.register[0]
	if got.ID != "cts-x" || got.Name != "consul-terraform-sync" || got.Port != 8558 || len(got.Checks) != 1 ||
		got.Checks[0].HTTP != "http://localhost:8558/v1/health" || got.Checks[0].Status != "critical" {
		t.Errorf("registration %+v", got)
	}
	if !strings.Contains(f.paths[2], "replace-existing-checks=true") {
		t.Errorf("paths %v", f.paths)
	}
	if err := Deregister(context.Background(), c, r, nil); err != nil {
		t.Fatal(err)
	}
	last := f.paths[len(f.paths)-1]
	if last != "PUT /v1/agent/service/deregister/cts-x?ns=team" {
		t.Errorf("deregister %q", last)
	}
}

func TestRegisterPermissionDenied(t *testing.T) {
	f := &fakeAgent{fail: []int{403, 403}}
	c := agentClient(t, f)
	err := Register(context.Background(), c, Registration{ID: "cts-x", Port: 8558}, nil)
	if err == nil || !strings.Contains(err.Error(), `needs service:write on "consul-terraform-sync"`) {
		t.Fatalf("error %v", err)
	}
	if len(f.paths) != 1 {
		t.Errorf("a 403 was retried: %v", f.paths)
	}
}

func TestRegisterGivesUp(t *testing.T) {
	fails := make([]int, registerAttempts)
	for i := range fails {
		fails[i] = 500
	}
	fails = append(fails, 500)
	f := &fakeAgent{fail: fails}
	c := agentClient(t, f)
	fastRetries(t)
	if err := Register(context.Background(), c, Registration{ID: "cts-x", Port: 8558}, nil); err == nil {
		t.Fatal("no error")
	}
	if len(f.paths) != registerAttempts {
		t.Errorf("%d attempts, want %d", len(f.paths), registerAttempts)
	}
	// A cancelled context stops the retries.
	f.fail = []int{500, 500}
	f.paths = nil
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Register(ctx, c, Registration{ID: "cts-x", Port: 8558}, nil); err == nil {
		t.Fatal("no error with a cancelled context")
	}
}

func TestDeregisterUnknownService(t *testing.T) {
	fastRetries(t)
	f := &fakeAgent{fail: []int{404}}
	c := agentClient(t, f)
	err := Deregister(context.Background(), c, Registration{ID: "cts-x"}, nil)
	if !IsUnknownService(err) {
		t.Fatalf("error %v", err)
	}
	if IsUnknownService(nil) || len(f.paths) != 1 {
		t.Errorf("paths %v", f.paths)
	}
}

// KeepRegistered registers the service again when the agent answers 404
// for it, and only then.
func TestKeepRegisteredRestores(t *testing.T) {
	var mu sync.Mutex
	have, registered, queries := true, 0, 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/v1/agent/service/register":
			registered++
			have = true
		case r.URL.Path == "/v1/agent/service/ctsync-1":
			queries++
			if queries == 3 {
				have = false // deregistered by hand
			}
			if !have {
				http.Error(w, "unknown service ID", http.StatusNotFound)
				return
			}
			w.Header().Set("X-Consul-ContentHash", "h"+strconv.Itoa(queries))
			_, _ = io.WriteString(w, `{"ID": "ctsync-1", "Service": "consul-terraform-sync"}`)
		}
	}))
	defer ts.Close()
	c, err := NewClient(config.Consul{Address: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- KeepRegistered(ctx, c.Client, Registration{ID: "ctsync-1"}, nil) }()
	testutil.WaitFor(t, "one registration and 5 queries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return registered == 1 && queries >= 5
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
