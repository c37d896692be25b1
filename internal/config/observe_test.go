package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/redact"
)

const notificationsHCL = `
notification "webhook" {
  name    = "ops"
  url     = "https://hooks.example.com/services/T0/B0/XYZ"
  events  = ["failed", "recovered"]
  headers = {
    Authorization = "Bearer hdr-secret"
    X-Team        = "infra"
  }
  timeout = "3s"
  retries = 5
}

notification "webhook" {
  url = "http://127.0.0.1:9000/hook"
}
`

const notificationsJSON = `{
  "notification": [
    {"webhook": {
      "name": "ops",
      "url": "https://hooks.example.com/services/T0/B0/XYZ",
      "events": ["failed", "recovered"],
      "headers": {"Authorization": "Bearer hdr-secret", "X-Team": "infra"},
      "timeout": "3s",
      "retries": 5
    }},
    {"webhook": {"url": "http://127.0.0.1:9000/hook"}}
  ]
}`

func TestNotifications(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	want := []Notification{
		{Type: "webhook", Name: "ops", URL: "https://hooks.example.com/services/T0/B0/XYZ",
			Events:  []string{"failed", "recovered"},
			Headers: map[string]string{"Authorization": "Bearer hdr-secret", "X-Team": "infra"},
			Timeout: 3 * time.Second, Retries: 5},
		{Type: "webhook", Name: "webhook-2", URL: "http://127.0.0.1:9000/hook",
			Events: []string{"failed", "recovered", "drift", "approval", "policy", "removal"}, Timeout: 10 * time.Second, Retries: 3},
	}
	for _, f := range []struct{ name, content string }{{"n.hcl", notificationsHCL}, {"n.json", notificationsJSON}} {
		t.Run(f.name, func(t *testing.T) {
			cfg := mustLoad(t, writeFile(t, dir, f.name, f.content))
			got := cfg.Notifications
			for i := range got {
				if got[i].Range.Filename == "" || got[i].Range.Start.Line == 0 {
					t.Errorf("notification %d has no range", i)
				}
				got[i].Range = want[i].Range
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if !got[0].Wants("failed") || got[0].Wants("drift") {
				t.Errorf("Wants: %v", got[0].Events)
			}
		})
	}
}

func TestDriftDetectionConfig(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	hcl := lines(okTask(`  drift_detection {`, `    interval  = "6h"`, `    remediate = true`, `  }`)...)
	js := `{"task": [{"name": "web", "module": "org/m/x", "drift_detection": {"interval": "6h", "remediate": true},
	  "condition": {"services": {"names": ["web"]}}}]}`
	for name, content := range map[string]string{"d.hcl": hcl, "d.json": js} {
		cfg := mustLoad(t, writeFile(t, dir, name, content))
		dd := cfg.Tasks[0].DriftDetection
		if dd == nil || dd.Interval.D() != 6*time.Hour || !dd.Remediate {
			t.Errorf("%s: drift_detection = %+v", name, dd)
		}
	}
	// remediate defaults to false; no block means no drift detection
	cfg := mustLoad(t, writeFile(t, dir, "e.hcl", lines(okTask(`  drift_detection {`, `    interval = "1s"`, `  }`)...)))
	if dd := cfg.Tasks[0].DriftDetection; dd == nil || dd.Interval.D() != time.Second || dd.Remediate {
		t.Errorf("drift_detection = %+v", dd)
	}
	cfg = mustLoad(t, writeFile(t, dir, "f.hcl", lines(okTask()...)))
	if cfg.Tasks[0].DriftDetection != nil {
		t.Errorf("drift_detection without a block: %+v", cfg.Tasks[0].DriftDetection)
	}

	// A task file (task create -task-file) takes the block too.
	spec, err := LoadTaskFile(writeFile(t, dir, "task.hcl", hcl))
	if err != nil || spec.DriftDetection == nil || spec.DriftDetection.Interval.D() != 6*time.Hour {
		t.Errorf("task file: %+v, %v", spec.DriftDetection, err)
	}
}

func TestObserveErrors(t *testing.T) {
	clearConsulEnv(t)
	hook := func(body ...string) string {
		return lines(append(append([]string{`notification "webhook" {`}, body...), "}")...)
	}
	const okURL = `  url = "https://h.example.com/x"`
	tests := []struct {
		name, file, content string
		line                int
		field, msg          string
	}{
		{"interval missing", "c.hcl", lines(okTask(`  drift_detection {`, `    remediate = true`, `  }`)...), 4,
			`task "web".drift_detection.interval`, "is required"},
		{"interval too short", "c.hcl", lines(okTask(`  drift_detection {`, `    interval = "500ms"`, `  }`)...), 5,
			`task "web".drift_detection.interval`, "at least 1s"},
		{"interval not a duration", "c.hcl", lines(okTask(`  drift_detection {`, `    interval = "daily"`, `  }`)...), 5,
			`task "web".drift_detection.interval`, "not a valid duration"},
		{"remediate not a bool", "c.hcl", lines(okTask(`  drift_detection {`, `    interval = "1h"`, `    remediate = "sometimes"`, `  }`)...), 6,
			`task "web".drift_detection.remediate`, "must be a bool"},
		{"unknown drift key", "c.hcl", lines(okTask(`  drift_detection {`, `    interval = "1h"`, `    every = "1h"`, `  }`)...), 6,
			`task "web".drift_detection.every`, "unknown field"},
		{"two drift blocks", "c.hcl", lines(okTask(`  drift_detection {`, `    interval = "1h"`, `  }`, `  drift_detection {`, `    interval = "2h"`, `  }`)...), 7,
			`task "web".drift_detection`, "only one"},
		{"json interval too short", "c.json", lines(`{"task": [{"name": "web", "module": "m",`, `  "drift_detection": {`, `    "interval": "0s"}, "condition": {"services": {"names": ["a"]}}}]}`), 3,
			`task "web".drift_detection.interval`, "at least 1s"},

		{"notification type", "c.hcl", lines(`notification "slack" {`, "}"), 1, `notification "slack"`, `the only type is "webhook"`},
		{"url missing", "c.hcl", hook(`  retries = 1`), 1, `notification "webhook".url`, "is required"},
		{"url relative", "c.hcl", hook(`  url = "/hook"`), 2, `notification "webhook".url`, "absolute http:// or https://"},
		{"url scheme", "c.hcl", hook(`  url = "ftp://h/x"`), 2, `notification "webhook".url`, "absolute http:// or https://"},
		{"unknown event", "c.hcl", hook(okURL, `  events = ["failed", "exploded"]`), 3, `notification "webhook".events[1]`, `unknown event "exploded"`},
		{"duplicate event", "c.hcl", hook(okURL, `  events = ["drift", "drift"]`), 3, `notification "webhook".events[1]`, "listed twice"},
		{"empty events", "c.hcl", hook(okURL, `  events = []`), 3, `notification "webhook".events`, "cannot be empty"},
		{"retries too many", "c.hcl", hook(okURL, `  retries = 11`), 3, `notification "webhook".retries`, "between 0 and 10"},
		{"timeout zero", "c.hcl", hook(okURL, `  timeout = "0s"`), 3, `notification "webhook".timeout`, "greater than zero"},
		{"bad header name", "c.hcl", hook(okURL, `  headers = {`, `    "Bad Header" = "v"`, `  }`), 4, `notification "webhook".headers.Bad Header`, "not a valid HTTP header name"},
		{"unknown notification key", "c.hcl", hook(okURL, `  method = "PUT"`), 3, `notification "webhook".method`, "unknown field"},
		{"duplicate names", "c.hcl", lines(`notification "webhook" {`, `  name = "ops"`, okURL, "}", `notification "webhook" {`, `  name = "ops"`, okURL, "}"), 5,
			`notification "webhook"`, `duplicate notification name "ops"`},
		{"json url missing", "c.json", lines(`{"notification": {"webhook": {`, `  "retries": 2}}}`), 2, `notification "webhook".url`, "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, t.TempDir(), tt.file, tt.content)})
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			found := false
			for _, e := range AsList(err) {
				if filepath.Base(e.Range.Filename) == tt.file && e.Range.Start.Line == tt.line &&
					strings.Contains(e.Field, tt.field) && strings.Contains(e.Msg, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want an error at %s:%d on %q containing %q; got:\n%v", tt.file, tt.line, tt.field, tt.msg, err)
			}
		})
	}
}

// Header values and URLs are secrets: errors never repeat them.
func TestNotificationSecretsStayOutOfErrors(t *testing.T) {
	clearConsulEnv(t)
	const secret = "t0ps3cr3t"
	for name, content := range map[string]string{
		"header with newline": lines(`notification "webhook" {`, `  url = "https://h/x"`, `  headers = { A = "`+secret+`\n" }`, "}"),
		"header wrong type":   lines(`notification "webhook" {`, `  url = "https://h/x"`, `  headers = { A = ["`+secret+`", "x"] }`, "}"),
		"bad url":             lines(`notification "webhook" {`, `  url = "hooks/`+secret+`"`, "}"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, t.TempDir(), "s.hcl", content)})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("secret leaked: %v", err)
			}
		})
	}
}

func TestSecretsAndRedactor(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "s.hcl", `
consul {
  token = "consul-token-1234"
  auth {
    username = "admin"
    password = "pa\"ss"
  }
}
terraform_provider "aws" {
  region     = "us"
  secret_key = "aws-secret-key"
  zones      = ["zone-alpha", "b"]
  assume_role {
    role_arn = "arn:aws:iam::1:role/x"
  }
  task_env = {
    AWS_SESSION_TOKEN = "session-token-xyz"
  }
}
notification "webhook" {
  url     = "https://hooks.example.com/T0/B0/XYZ"
  headers = { Authorization = "Bearer hdr-secret" }
}
`+lines(okTask()...)))
	got := cfg.Secrets()
	for _, s := range []string{"consul-token-1234", `pa"ss`, "aws-secret-key", "zone-alpha", "arn:aws:iam::1:role/x",
		"session-token-xyz", "https://hooks.example.com/T0/B0/XYZ", "Bearer hdr-secret"} {
		if !contains(got, s) {
			t.Errorf("Secrets() lacks %q: %q", s, got)
		}
	}
	for _, s := range []string{"us", "b", "admin"} {
		if contains(got, s) {
			t.Errorf("Secrets() has %q, which is too short or not a secret", s)
		}
	}

	r := redact.NewRedactor(got)
	in := `provider "aws" { secret_key = "aws-secret-key" } token=consul-token-1234 ` +
		`json: {"p":"pa\"ss"} raw: pa"ss zone-alpha us-east b`
	want := `provider "aws" { secret_key = "[redacted]" } token=[redacted] ` +
		`json: {"p":"[redacted]"} raw: [redacted] [redacted] us-east b`
	if out := r.Redact(in); out != want {
		t.Errorf("Redact:\n got %s\nwant %s", out, want)
	}
	// A secret containing another is replaced whole.
	r = redact.NewRedactor([]string{"abcd", "xxabcdxx"})
	if out := r.Redact("1 xxabcdxx 2 abcd"); out != "1 [redacted] 2 [redacted]" {
		t.Errorf("nested secrets: %s", out)
	}
	var nilR *redact.Redactor
	if nilR.Redact("x") != "x" || redact.NewRedactor(nil).Redact("abcd") != "abcd" {
		t.Error("an empty redactor must change nothing")
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Provider values read from Consul count as secrets once resolved.
func TestSecretsAfterResolve(t *testing.T) {
	cfg := &Config{Providers: []Provider{{Name: "x", Args: ProviderBody{Attrs: map[string]cty.Value{
		"token": cty.StringVal("from-consul-kv"),
	}}}}}
	if s := cfg.Secrets(); len(s) != 1 || s[0] != "from-consul-kv" {
		t.Errorf("Secrets() = %q", s)
	}
}

func TestLogFormatJSON(t *testing.T) {
	clearConsulEnv(t)
	for in, want := range map[string]string{`log_format = "json"`: "json", `log_format = "JSON"`: "json", `port = 1`: "text"} {
		cfg := mustLoad(t, writeFile(t, t.TempDir(), "l.hcl", in+"\n"))
		if cfg.LogFormat != want {
			t.Errorf("%s: LogFormat = %q, want %q", in, cfg.LogFormat, want)
		}
	}
}
