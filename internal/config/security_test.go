package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestAPISecurityBlocks(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "ops.token", "  ops-secret-0123456789abcdef\n")
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CTSYNC_TEST_DASH_TOKEN", "dash-secret-0123456789")
	hcl := `
api_auth {
  token {
    name        = "ops"
    secret_file = "` + tokenFile + `"
    access      = "write"
  }
  token {
    name   = "dashboard"
    secret = "{{ env \"CTSYNC_TEST_DASH_TOKEN\" }}"
    access = "READ"
  }
}
api_tasks {
  allowed_modules = ["./modules/*", "registry.example.com/net/*"]
  create          = true
}
api_http {
  cors_origins  = ["https://dash.example.com"]
  allowed_hosts = ["ctsync.internal"]
}
`
	json := `{
  "api_auth": {"token": [
    {"name": "ops", "secret_file": "` + tokenFile + `", "access": "write"},
    {"name": "dashboard", "secret": "{{ env \"CTSYNC_TEST_DASH_TOKEN\" }}", "access": "READ"}
  ]},
  "api_tasks": {"allowed_modules": ["./modules/*", "registry.example.com/net/*"], "create": true},
  "api_http": {"cors_origins": ["https://dash.example.com"], "allowed_hosts": ["ctsync.internal"]}
}`
	for _, f := range []struct{ name, content string }{{"s.hcl", hcl}, {"s.json", json}} {
		t.Run(f.name, func(t *testing.T) {
			cfg := mustLoad(t, writeFile(t, dir, f.name, f.content))
			var got []APIToken
			for _, tk := range cfg.APIAuth.Tokens {
				tk.Range = APIToken{}.Range
				got = append(got, tk)
			}
			want := []APIToken{
				{Name: "ops", Secret: "ops-secret-0123456789abcdef", SecretFile: tokenFile, Access: AccessWrite},
				{Name: "dashboard", Secret: "dash-secret-0123456789", Access: AccessRead},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("tokens:\n got %+v\nwant %+v", got, want)
			}
			if !reflect.DeepEqual(cfg.APITasks, APITasks{AllowedModules: []string{"./modules/*", "registry.example.com/net/*"}}) {
				t.Errorf("api_tasks: %+v", cfg.APITasks)
			}
			if !reflect.DeepEqual(cfg.APIHTTP, APIHTTP{CORSOrigins: []string{"https://dash.example.com"}, AllowedHosts: []string{"ctsync.internal"}}) {
				t.Errorf("api_http: %+v", cfg.APIHTTP)
			}
			secrets := cfg.Secrets()
			for _, s := range []string{"ops-secret-0123456789abcdef", "dash-secret-0123456789"} {
				if !slices.Contains(secrets, s) {
					t.Errorf("Secrets() lacks the token %q", s)
				}
			}
		})
	}
}

func TestAPISecurityDefaults(t *testing.T) {
	clearConsulEnv(t)
	cfg := mustLoad(t, writeFile(t, t.TempDir(), "c.hcl", `api_tasks { create = false }`))
	if cfg.APIAuth.Enabled() || cfg.APITasks.AllowedModules != nil || !cfg.APITasks.CreateDisabled {
		t.Errorf("got %+v %+v", cfg.APIAuth, cfg.APITasks)
	}
	cfg = mustLoad(t, writeFile(t, t.TempDir(), "c.hcl", `log_level = "INFO"`))
	if cfg.APITasks.CreateDisabled || !cfg.APITasks.ModuleAllowed("anything/at/all") {
		t.Errorf("default api_tasks refuses: %+v", cfg.APITasks)
	}
}

func TestAPISecurityErrors(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	long := "a-long-enough-secret-0001"
	tok := func(lines ...string) string { return "  token {\n    " + strings.Join(lines, "\n    ") + "\n  }\n" }
	auth := func(tokens ...string) string { return "api_auth {\n" + strings.Join(tokens, "") + "}\n" }
	name, read := `name = "a"`, `access = "read"`
	secret := `secret = "` + long + `"`
	for _, tc := range []struct {
		name, content, want string
	}{
		{"no access", auth(tok(name, secret)), `api_auth.token.access: is required`},
		{"bad access", auth(tok(name, secret, `access = "admin"`)), `"admin" is not an access level`},
		{"no name", auth(tok(secret, read)), `api_auth.token.name: is required`},
		{"no secret", auth(tok(name, read)), `needs secret or secret_file`},
		{"both", auth(tok(name, secret, `secret_file = "/x"`, read)), `cannot be set together with secret`},
		{"short", auth(tok(name, `secret = "short"`, read)), `too short`},
		{"spaces", auth(tok(name, `secret = "a long secret with spaces"`, read)), `cannot contain spaces`},
		{"missing file", auth(tok(name, `secret_file = "`+filepath.Join(dir, "nope")+`"`, read)), `reading the token file`},
		{"key template", auth(tok(name, `secret = "{{ key \"x\" }}"`, read)), `{{ key }} cannot be used here: only {{ env "NAME" }} and {{ with secret`},
		{"duplicate name", auth(tok(name, secret, read), tok(name, `secret = "`+long+`-2"`, read)), `duplicate token name "a"`},
		{"same secret", auth(tok(name, secret, read), tok(`name = "b"`, secret, `access = "write"`)), `has the same secret as token "a"`},
		{"bad glob", `api_tasks { allowed_modules = ["[x"] }`, `not a valid glob pattern`},
		{"bad origin", `api_http { cors_origins = ["dash.example.com"] }`, `is not an origin`},
		{"origin with path", `api_http { cors_origins = ["https://x.example.com/ui"] }`, `is not an origin`},
		{"host with port", `api_http { allowed_hosts = ["x.example.com:8558"] }`, `is not a host name`},
		{"unknown key", "api_auth {\n  tokens = []\n}\n", `tokens`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, dir, "c.hcl", tc.content)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), long) {
				t.Errorf("the error quotes the secret: %v", err)
			}
		})
	}
}

func TestModuleAllowed(t *testing.T) {
	a := APITasks{AllowedModules: []string{"./modules/*", "registry.example.com/net/*"}}
	for src, want := range map[string]bool{
		"./modules/lb":                    true,
		"./modules/lb/sub":                false,
		"./modules/..":                    false,
		"./modules/../../etc":             false,
		"registry.example.com/net/fw":     true,
		"registry.example.com/net/fw/aws": false,
		"registry.example.com/other/fw":   false,
		"/tmp/evil":                       false,
		"git::https://evil.example/x":     false,
		"":                                false,
	} {
		if got := a.ModuleAllowed(src); got != want {
			t.Errorf("ModuleAllowed(%q) = %v, want %v", src, got, want)
		}
	}
	if !(APITasks{}).ModuleAllowed("/tmp/anything") {
		t.Error("no allowlist must allow any module")
	}
	if (APITasks{AllowedModules: []string{}}).ModuleAllowed("./modules/lb") {
		t.Error("an empty allowlist must allow nothing")
	}
}

func TestAPITasksVariablesAndKV(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	for _, f := range []struct{ name, content string }{
		{"c.hcl", `api_tasks {
  allowed_modules     = ["./modules/*"]
  allowed_variables   = ["service_name", "upstream_*"]
  allowed_kv_prefixes = ["net/"]
}`},
		{"c.json", `{"api_tasks": {"allowed_modules": ["./modules/*"], "allowed_variables": ["service_name", "upstream_*"], "allowed_kv_prefixes": ["net/"]}}`},
	} {
		cfg := mustLoad(t, writeFile(t, dir, f.name, f.content))
		at := cfg.APITasks
		if !slices.Equal(at.AllowedVariables, []string{"service_name", "upstream_*"}) || !slices.Equal(at.AllowedKVPrefixes, []string{"net/"}) {
			t.Fatalf("%s: %+v", f.name, at)
		}
		for v, want := range map[string]bool{"service_name": true, "upstream_port": true, "reload_command": false, "upstream": false} {
			if at.VariableAllowed(v) != want {
				t.Errorf("VariableAllowed(%q) = %v", v, !want)
			}
		}
		for k, want := range map[string]bool{"net/a": true, "net/": true, "net": false, "network/a": false, "secrets/x": false,
			"net/../secrets": false, "net//x": false, "net/./x": false, "/net/a": false} {
			if at.KVAllowed(k) != want {
				t.Errorf("KVAllowed(%q) = %v", k, !want)
			}
		}
	}
	// Without allowed_modules nothing is limited (and a warning says the
	// lists do nothing).
	cfg := mustLoad(t, writeFile(t, dir, "w.hcl", `api_tasks { allowed_variables = ["a"] }`))
	if !cfg.APITasks.VariableAllowed("b") || !cfg.APITasks.KVAllowed("secrets/x") || len(cfg.Warnings) == 0 {
		t.Errorf("unrestricted: %+v, warnings %v", cfg.APITasks, cfg.Warnings)
	}
	for _, c := range []struct{ content, want string }{
		{`api_tasks { allowed_variables = ["[a"] }`, `c.hcl:1: api_tasks.allowed_variables[0]: "[a" is not a valid glob pattern`},
		{`api_tasks { allowed_kv_prefixes = ["/net/"] }`, `api_tasks.allowed_kv_prefixes[0]: "/net/" is not a KV prefix`},
	} {
		_, err := Load([]string{writeFile(t, dir, "c.hcl", c.content)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.content, err)
		}
	}
}

// Names that the generated root module writes as identifiers are checked
// at load in JSON files too, with file:line (HCL native syntax cannot
// write them).
func TestJSONIdentifierNames(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	for _, c := range []struct{ content, want string }{
		{`{"terraform_provider": [{"local": {"bad name": "x"}}]}`,
			`c.json:1: terraform_provider "local".bad name: argument name "bad name" is not a valid name`},
		{`{"terraform_provider": [{"bad name": {}}]}`, `c.json:1: terraform_provider "bad name": the provider name "bad name" is not a valid name`},
		{`{"terraform_provider": [{"local": {"alias": "a b"}}]}`, `terraform_provider "local".alias: "a b" is not a valid name`},
		{`{"task": [{"name": "t", "module": "m", "variables": {"bad var": "1"}, "condition": {"services": {"names": ["web"]}}}]}`,
			`c.json:1: task "t".variables.bad var: "bad var" is not a valid name`},
		{`{"task": [{"name": "t", "module": "m", "variables": {"count": "1"}, "condition": {"services": {"names": ["web"]}}}]}`,
			`task "t".variables.count: "count" is reserved`},
		{`{"task": [{"name": "` + strings.Repeat("n", 129) + `", "module": "m", "condition": {"services": {"names": ["web"]}}}]}`,
			`.name: is 129 characters long: a task name has at most 128`},
	} {
		_, err := Load([]string{writeFile(t, dir, "c.json", c.content)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s", c.content, err, c.want)
		}
	}
}
