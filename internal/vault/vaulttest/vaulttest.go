// Package vaulttest gives tests a Vault: a real `vault server -dev` when a
// vault binary is on PATH (or CTSYNC_VAULT_BIN names one), otherwise a
// small in-process server that answers the part of Vault's HTTP API ctsync
// uses, the way Vault does:
//
//	GET  /v1/sys/health
//	GET  /v1/auth/token/lookup-self, POST /v1/auth/token/renew-self
//	GET/POST /v1/secret/data/<path>     KV version 2 (mount "secret/")
//	GET/POST /v1/kv1/<path>             KV version 1 (mount "kv1/"; a "ttl" key gives the lease duration)
//	GET  /v1/database/creds/<role>      a dynamic secret: new credentials, renewable lease
//	POST /v1/sys/leases/renew           lease renewal, up to the lease's max TTL
//
// Every request needs the root token (X-Vault-Token), as in Vault. Tests
// drive both the same way, through the official client.
package vaulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
)

// RootToken is the token of the test Vault.
const RootToken = "ctsync-test-root-token"

// Vault is a running test Vault.
type Vault struct {
	Addr   string
	Token  string
	Real   bool // a real vault server -dev
	Client *api.Client
	fake   *fake
}

// Start starts a test Vault for t; it stops with the test.
func Start(t testing.TB) *Vault {
	t.Helper()
	bin := os.Getenv("CTSYNC_VAULT_BIN")
	if bin == "" {
		bin, _ = exec.LookPath("vault")
	}
	var v *Vault
	if bin != "" {
		v = startReal(t, bin)
	} else {
		f := newFake()
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		v = &Vault{Addr: srv.URL, Token: RootToken, fake: f}
	}
	conf := api.DefaultConfig()
	conf.Address = v.Addr
	c, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(v.Token)
	v.Client = c
	if v.Real {
		// A KV version 1 mount next to the dev server's version 2 "secret/".
		if err := c.Sys().Mount("kv1", &api.MountInput{Type: "kv", Options: map[string]string{"version": "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func startReal(t testing.TB, bin string) *Vault {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "server", "-dev", "-dev-root-token-id="+RootToken, "-dev-listen-address="+addr)
	cmd.Env = append(os.Environ(), "VAULT_DEV_ROOT_TOKEN_ID="+RootToken)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	v := &Vault{Addr: "http://" + addr, Token: RootToken, Real: true}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(v.Addr + "/v1/sys/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vault server -dev did not come up at %s", addr)
		}
		time.Sleep(100 * time.Millisecond) // polling a child process's start-up
	}
}

// PutKV2 writes a new version of a KV version 2 secret at secret/data/<path>.
func (v *Vault) PutKV2(t testing.TB, path string, data map[string]any) {
	t.Helper()
	if _, err := v.Client.KVv2("secret").Put(context.Background(), path, data); err != nil {
		t.Fatal(err)
	}
}

// PutKV1 writes a KV version 1 secret at kv1/<path>; ttl (e.g. "2s") gives
// its reads a lease duration, as Vault does.
func (v *Vault) PutKV1(t testing.TB, path string, data map[string]any, ttl string) {
	t.Helper()
	d := map[string]any{}
	for k, x := range data {
		d[k] = x
	}
	if ttl != "" {
		d["ttl"] = ttl
	}
	if _, err := v.Client.Logical().Write("kv1/"+path, d); err != nil {
		t.Fatal(err)
	}
}

// Fake reports whether this is the in-process server; the calls below
// need it.
func (v *Vault) Fake() bool { return v.fake != nil }

// SetDown makes the fake answer 503 ("Vault is sealed") to everything.
func (v *Vault) SetDown(down bool) {
	v.fake.mu.Lock()
	v.fake.down = down
	v.fake.mu.Unlock()
}

// SetLease sets the lease (seconds) and max TTL of the fake's dynamic
// secrets (database/creds/<role>) issued from now on.
func (v *Vault) SetLease(ttl, maxTTL int) {
	v.fake.mu.Lock()
	v.fake.leaseTTL, v.fake.leaseMax = ttl, maxTTL
	v.fake.mu.Unlock()
}

// Counts returns how many times the fake answered each kind of request:
// "read", "renew", "renew-self", "creds".
func (v *Vault) Counts() map[string]int {
	v.fake.mu.Lock()
	defer v.fake.mu.Unlock()
	out := map[string]int{}
	for k, n := range v.fake.counts {
		out[k] = n
	}
	return out
}

// fake is the in-process Vault.
type fake struct {
	mu       sync.Mutex
	down     bool
	kv2      map[string][]map[string]any // versions, oldest first
	kv1      map[string]map[string]any
	leases   map[string]*lease
	serial   int
	leaseTTL int
	leaseMax int
	token    tokenState
	counts   map[string]int
}

type lease struct {
	issued time.Time
	expiry time.Time
}

type tokenState struct {
	ttl     int
	created time.Time
}

func newFake() *fake {
	return &fake{kv2: map[string][]map[string]any{}, kv1: map[string]map[string]any{}, leases: map[string]*lease{},
		leaseTTL: 60, leaseMax: 600, token: tokenState{ttl: 3600, created: time.Now()}, counts: map[string]int{}}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		writeErr(w, http.StatusServiceUnavailable, "Vault is sealed")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	if path == "sys/health" {
		writeJSON(w, http.StatusOK, map[string]any{"initialized": true, "sealed": false})
		return
	}
	if r.Header.Get("X-Vault-Token") != RootToken {
		writeErr(w, http.StatusForbidden, "permission denied")
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err.Error() != "EOF" {
			writeErr(w, http.StatusBadRequest, "invalid JSON")
			return
		}
	}
	write := r.Method == http.MethodPost || r.Method == http.MethodPut
	switch {
	case path == "auth/token/lookup-self":
		f.counts["lookup-self"]++
		writeJSON(w, 200, map[string]any{"data": map[string]any{"id": RootToken, "renewable": true,
			"ttl": f.token.ttl, "policies": []string{"root"}}})
	case path == "auth/token/renew-self" && write:
		f.counts["renew-self"]++
		writeJSON(w, 200, map[string]any{"auth": map[string]any{"client_token": RootToken, "renewable": true,
			"lease_duration": f.token.ttl, "policies": []string{"root"}}})
	case strings.HasPrefix(path, "secret/data/"):
		key := strings.TrimPrefix(path, "secret/data/")
		if write {
			data, _ := body["data"].(map[string]any)
			f.kv2[key] = append(f.kv2[key], data)
			writeJSON(w, 200, map[string]any{"data": map[string]any{"version": len(f.kv2[key])}})
			return
		}
		f.counts["read"]++
		vs := f.kv2[key]
		if len(vs) == 0 {
			writeErr(w, http.StatusNotFound)
			return
		}
		writeJSON(w, 200, map[string]any{"request_id": f.id(), "lease_duration": 0, "renewable": false,
			"data": map[string]any{"data": vs[len(vs)-1], "metadata": map[string]any{"version": len(vs)}}})
	case strings.HasPrefix(path, "kv1/"):
		key := strings.TrimPrefix(path, "kv1/")
		if write {
			f.kv1[key] = body
			w.WriteHeader(http.StatusNoContent)
			return
		}
		f.counts["read"]++
		d, ok := f.kv1[key]
		if !ok {
			writeErr(w, http.StatusNotFound)
			return
		}
		lease := 2764800 // Vault's default for KV v1 without ttl: 32 days
		if ttl, ok := d["ttl"].(string); ok {
			if dur, err := time.ParseDuration(ttl); err == nil {
				lease = int(dur.Seconds())
			}
		}
		writeJSON(w, 200, map[string]any{"request_id": f.id(), "lease_duration": lease, "renewable": false, "data": d})
	case strings.HasPrefix(path, "database/creds/"):
		f.counts["creds"]++
		f.serial++
		id := fmt.Sprintf("%s/%d", path, f.serial)
		now := time.Now()
		f.leases[id] = &lease{issued: now, expiry: now.Add(time.Duration(f.leaseTTL) * time.Second)}
		writeJSON(w, 200, map[string]any{"request_id": f.id(), "lease_id": id, "renewable": true, "lease_duration": f.leaseTTL,
			"data": map[string]any{"username": fmt.Sprintf("v-user-%d", f.serial), "password": fmt.Sprintf("v-pass-%d-%d", f.serial, now.UnixNano())}})
	case path == "sys/leases/renew" && write:
		f.counts["renew"]++
		id, _ := body["lease_id"].(string)
		l, ok := f.leases[id]
		if !ok || time.Now().After(l.expiry) {
			writeErr(w, http.StatusBadRequest, "lease not found or lease is not renewable")
			return
		}
		maxEnd := l.issued.Add(time.Duration(f.leaseMax) * time.Second)
		end := time.Now().Add(time.Duration(f.leaseTTL) * time.Second)
		if end.After(maxEnd) {
			end = maxEnd
		}
		l.expiry = end
		ttl := int(time.Until(end).Round(time.Second).Seconds())
		writeJSON(w, 200, map[string]any{"lease_id": id, "renewable": ttl > 0, "lease_duration": ttl})
	default:
		writeErr(w, http.StatusNotFound)
	}
}

func (f *fake) id() string {
	f.serial++
	return fmt.Sprintf("req-%d", f.serial)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msgs ...string) {
	if msgs == nil {
		msgs = []string{}
	}
	writeJSON(w, code, map[string]any{"errors": msgs})
}
