package vault_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/tmpl"
	"github.com/ctsync/ctsync/internal/vault"
	"github.com/ctsync/ctsync/internal/vault/vaulttest"
)

func newManager(t *testing.T, v *vaulttest.Vault, mod func(*config.Vault)) (*vault.Manager, chan string) {
	t.Helper()
	changes := make(chan string, 16)
	c := config.Vault{Enabled: true, Address: v.Addr, Token: v.Token, RenewToken: true,
		DefaultLeaseDuration: time.Second, Transport: config.DefaultTransport}
	if mod != nil {
		mod(&c)
	}
	m, err := vault.New(vault.Options{Config: c, Logger: slog.New(slog.DiscardHandler), OnChange: func(keys []string) {
		for _, k := range keys {
			changes <- k
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m, changes
}

func run(t *testing.T, m *vault.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitChange(t *testing.T, ch chan string, want string, within time.Duration) {
	t.Helper()
	within = testutil.Scale(within)
	timeout := time.After(within)
	for {
		select {
		case k := <-ch:
			if k == want {
				return
			}
		case <-timeout:
			t.Fatalf("no change of %q within %s", want, within)
		}
	}
}

func TestKV2ReadAndNewVersion(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV2(t, "app", map[string]any{"password": "pw-one"})
	m, changes := newManager(t, v, nil)
	ctx := context.Background()
	s, err := m.Read(ctx, "secret/data/app", nil)
	if err != nil || s == nil {
		t.Fatalf("read: %v, %v", s, err)
	}
	if got := s.Data["data"].(map[string]any)["password"]; got != "pw-one" {
		t.Fatalf("password = %v", got)
	}
	if s, err := m.Read(ctx, "secret/data/missing", nil); s != nil || err != nil {
		t.Fatalf("missing secret: %v, %v", s, err)
	}
	run(t, m)
	v.PutKV2(t, "app", map[string]any{"password": "pw-two"})
	waitChange(t, changes, "secret/data/app", 10*time.Second)
	s, _ = m.Read(ctx, "secret/data/app", nil)
	if got := s.Data["data"].(map[string]any)["password"]; got != "pw-two" {
		t.Fatalf("after rotation password = %v", got)
	}
}

func TestKV1LeaseReadAgain(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV1(t, "app", map[string]any{"token": "tok-one"}, "1s")
	m, changes := newManager(t, v, func(c *config.Vault) { c.DefaultLeaseDuration = time.Hour })
	s, err := m.Read(context.Background(), "kv1/app", nil)
	if err != nil || s.Data["token"] != "tok-one" || s.LeaseDuration != 1 {
		t.Fatalf("read: %+v, %v", s, err)
	}
	run(t, m)
	// The lease (1s) ends: the secret is read again and the new value found,
	// although the default lease duration is an hour.
	v.PutKV1(t, "app", map[string]any{"token": "tok-two"}, "1s")
	waitChange(t, changes, "kv1/app", 10*time.Second)
}

func TestLeasedSecretRenewedThenReplaced(t *testing.T) {
	v := vaulttest.Start(t)
	if !v.Fake() {
		t.Skip("needs a dynamic secrets engine: the in-process Vault's database/creds")
	}
	v.SetLease(2, 4) // 2s leases, renewable up to 4s
	m, changes := newManager(t, v, nil)
	s, err := m.Read(context.Background(), "database/creds/app", nil)
	if err != nil || !s.Renewable || s.LeaseID == "" {
		t.Fatalf("read: %+v, %v", s, err)
	}
	first := s.Data["password"]
	run(t, m)
	waitChange(t, changes, "database/creds/app", 20*time.Second)
	s, _ = m.Read(context.Background(), "database/creds/app", nil)
	if s.Data["password"] == first {
		t.Fatal("the replaced lease must give new credentials")
	}
	if c := v.Counts(); c["renew"] == 0 || c["creds"] < 2 {
		t.Errorf("counts = %v: the lease must be renewed before it is replaced", c)
	}
}

func TestVaultDownKeepsValuesAndRecovers(t *testing.T) {
	v := vaulttest.Start(t)
	if !v.Fake() {
		t.Skip("stopping Vault needs the in-process server")
	}
	v.PutKV2(t, "app", map[string]any{"password": "pw-one"})
	m, changes := newManager(t, v, nil)
	v.SetDown(true)
	_, err := m.Read(context.Background(), "secret/data/app", nil)
	if !errors.Is(err, tmpl.ErrVaultUnavailable) {
		t.Fatalf("read with Vault down: %v", err)
	}
	v.SetDown(false)
	if _, err := m.Read(context.Background(), "secret/data/app", nil); err != nil {
		t.Fatal(err)
	}
	run(t, m)
	v.SetDown(true)
	// Down: the cached value is served.
	s, err := m.Read(context.Background(), "secret/data/app", nil)
	if err != nil || s.Data["data"].(map[string]any)["password"] != "pw-one" {
		t.Fatalf("cached read: %v, %v", s, err)
	}
	v.SetDown(false)
	v.PutKV2(t, "app", map[string]any{"password": "pw-two"})
	waitChange(t, changes, "secret/data/app", 15*time.Second)
}

func TestTokenErrors(t *testing.T) {
	v := vaulttest.Start(t)
	v.PutKV2(t, "app", map[string]any{"password": "pw-one"})
	m, _ := newManager(t, v, func(c *config.Vault) { c.Token = "wrong-token" })
	_, err := m.Read(context.Background(), "secret/data/app", nil)
	if err == nil || errors.Is(err, tmpl.ErrVaultUnavailable) || !strings.Contains(err.Error(), "403") {
		t.Fatalf("wrong token: %v (must be a 403, not a wait)", err)
	}
	if strings.Contains(err.Error(), "wrong-token") {
		t.Fatal("the error quotes the token")
	}
	// vault_agent_token_file: the token is read from the file.
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(v.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ = newManager(t, v, func(c *config.Vault) { c.Token = ""; c.AgentTokenFile = f })
	if _, err := m.Read(context.Background(), "secret/data/app", nil); err != nil {
		t.Fatal(err)
	}
	// Unreachable address: a wait, not a configuration error.
	m, _ = newManager(t, v, func(c *config.Vault) { c.Address = "http://127.0.0.1:1" })
	if _, err := m.Read(context.Background(), "secret/data/app", nil); !errors.Is(err, tmpl.ErrVaultUnavailable) {
		t.Fatalf("unreachable: %v", err)
	}
}
