package config

import (
	"testing"
)

func TestVaultAndSyslogBlocks(t *testing.T) {
	clearConsulEnv(t)
	for _, k := range []string{"VAULT_ADDR", "VAULT_TOKEN", "VAULT_NAMESPACE", "VAULT_RENEW_TOKEN", "VAULT_UNWRAP_TOKEN", "VAULT_SKIP_VERIFY", "VAULT_CACERT"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "c.hcl", "port = 1\n"))
	if cfg.Vault.Enabled || cfg.Syslog.Enabled || cfg.Syslog.Facility != "LOCAL0" || cfg.Syslog.Name != "consul-terraform-sync" {
		t.Fatalf("defaults: vault %+v syslog %+v", cfg.Vault, cfg.Syslog)
	}
	t.Setenv("VAULT_ADDR", "https://vault:8200")
	t.Setenv("VAULT_CACERT", "/env/ca.pem")
	t.Setenv("VAULT_SKIP_VERIFY", "true")
	t.Setenv("VAULT_UNWRAP_TOKEN", "true")
	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", lines(
		`vault {`,
		`  namespace = "ns1"`,
		`  vault_agent_token_file = "/run/vault/token"`,
		`  default_lease_duration = "30s"`,
		`  tls {`,
		`    server_name = "vault.example"`,
		`  }`,
		`  transport {`,
		`    dial_timeout = "3s"`,
		`  }`,
		`}`,
		`syslog {`,
		`  facility = "local3"`,
		`}`,
	)))
	v := cfg.Vault
	if !v.Enabled || v.Address != "https://vault:8200" || v.Namespace != "ns1" || v.Token != "" || v.RenewToken ||
		!v.UnwrapToken || v.AgentTokenFile != "/run/vault/token" || v.DefaultLeaseDuration.String() != "30s" ||
		v.TLS.Verify || !v.TLS.Enabled || v.TLS.CACert != "/env/ca.pem" || v.TLS.ServerName != "vault.example" || v.Transport.DialTimeout.String() != "3s" {
		t.Errorf("vault = %+v", v)
	}
	if s := cfg.Syslog; !s.Enabled || s.Facility != "LOCAL3" || s.Name != "consul-terraform-sync" {
		t.Errorf("syslog = %+v", s)
	}
	// ~/.vault-token, as the Vault CLI writes it.
	t.Setenv("VAULT_UNWRAP_TOKEN", "")
	home := t.TempDir()
	t.Setenv("HOME", home)
	writeFile(t, home, ".vault-token", "hvs.from-file\n")
	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", lines(`vault {`, `}`, `syslog {`, `  enabled = false`, `  name = "x"`, `}`)))
	if cfg.Vault.Token != "hvs.from-file" || !cfg.Vault.RenewToken || cfg.Syslog.Enabled {
		t.Errorf("vault = %+v, syslog = %+v", cfg.Vault, cfg.Syslog)
	}
}
