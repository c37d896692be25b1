package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/testutil"
)

// CTS's TLS and mutual TLS scenarios of the task commands
// (TestE2E_CommandTLS, _CAPath, TestE2E_CommandMTLS, _CAPath and their
// Errors variants), against two real daemons: one serving its API over
// TLS, one over mutual TLS trusting the client CAs of a ca_path directory
// (two CAs). The binary is installed under CTS's name. Each command is run
// as those scenarios run it: disable and enable of a configured task,
// delete -auto-approve of an unknown task (its 404 proves the connection
// worked), and create of a task file naming providers = ["local"] (no
// terraform_provider block in the daemon's configuration) answered "no";
// in the error cases every command also gets the task name as a stray
// last argument, which task create ignores, as CTS. What is checked is
// what those scenarios look for in the output and whether the command
// failed.
func TestCompatCommandTLS(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	for _, s := range []string{"api", "db", "web"} {
		c.RegisterService(t, &api.AgentServiceRegistration{ID: s, Name: s, Address: "10.0.0.1", Port: 8080}, api.HealthPassing)
	}
	certs := testcerts.Generate(t)
	alt := testcerts.Generate(t) // another CA, and a client certificate it signed
	copyTo := func(dir string, files ...string) string {
		t.Helper()
		must(t, os.MkdirAll(dir, 0o700))
		for i, f := range files {
			b, err := os.ReadFile(f)
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("cert-%d.pem", i)), b, 0o600))
		}
		return dir
	}
	base := t.TempDir()
	// The daemon's client CAs, and a CA path that does not hold the CA of
	// the daemon's certificate.
	clientCAs := copyTo(filepath.Join(base, "client-cas"), certs.CACert, alt.CACert, certs.ClientCert)
	wrongCAPath := copyTo(filepath.Join(base, "wrong-cas"), certs.OtherCACert, alt.CACert)

	start := func(name, tlsBlock string) string {
		t.Helper()
		dir := filepath.Join(base, name)
		must(t, os.MkdirAll(dir, 0o700))
		port := testutil.FreePort(t)
		cfg := writeFile(t, dir, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
%s
task {
  name        = "db_task"
  description = "basic read-write e2e task for api & db"
  module      = %q
  providers   = ["local"]
  condition "services" {
    names = ["api", "db"]
  }
}
`, filepath.Join(dir, "sync-tasks"), port, c.Addr, tlsBlock, module("instances_file")))
		startCompat(t, dir, nil, "start", "-config-file", cfg)
		return fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	tlsAddr := start("tls", fmt.Sprintf("tls {\n  enabled = true\n  cert = %q\n  key = %q\n}\n", certs.ServerCert, certs.ServerKey))
	mtlsAddr := start("mtls", fmt.Sprintf("tls {\n  enabled = true\n  cert = %q\n  key = %q\n  verify_incoming = true\n  ca_path = %q\n}\n",
		certs.ServerCert, certs.ServerKey, clientCAs))

	taskFile := writeFile(t, base, "task.hcl", fmt.Sprintf(`
task {
  name           = "test-task"
  description    = "Creates a new task"
  module         = %q
  providers      = ["local"]
  condition "services" {
    names = ["api"]
  }
  enabled = true
}`, module("instances_file")))

	cts := filepath.Join(t.TempDir(), "consul-terraform-sync")
	must(t, os.Symlink(ctsyncBin, cts))
	newlines := regexp.MustCompile(`\r?\n`)
	runCmd := func(stdin string, env []string, args ...string) (string, int) {
		t.Helper()
		// The scenarios read the output with its lines joined.
		o, code := runCLI(cts, env, stdin, args...)
		return newlines.ReplaceAllString(o, " "), code
	}

	// Each command as the scenarios run it.
	type command struct {
		name   string
		args   []string // before the options
		arg    string   // after them
		stdin  string
		want   string
		failOK bool // the command's own error is expected (delete of an unknown task)
	}
	commands := []command{
		{"task disable", []string{"task", "disable"}, "db_task", "", "disable complete!", false},
		{"task enable", []string{"task", "enable"}, "db_task", "", "enable complete!", false},
		{"task delete", []string{"task", "delete", "-auto-approve"}, "task-no-exist", "", "404 Not Found:", true},
		{"task create", []string{"task", "create"}, "--task-file=" + taskFile, "no\n", "Creating the task will perform the actions described above.", false},
	}
	type scenario struct {
		name string
		opts []string
		env  []string
	}
	happy := func(t *testing.T, addr string, cases []scenario) {
		for _, sc := range cases {
			for _, cmd := range commands {
				args := append(append(append([]string(nil), cmd.args...), sc.opts...), cmd.arg)
				o, code := runCmd(cmd.stdin, sc.env, args...)
				if !strings.Contains(o, cmd.want) || (code != 0) != cmd.failOK {
					t.Errorf("%s, %s: exit %d, want %q:\n%s", sc.name, cmd.name, code, cmd.want, o)
				}
				if cmd.name == "task enable" {
					// Enabling queues the task (it runs if its inputs
					// moved); the next scenario's disable would be 409
					// until it is idle again.
					waitTaskIdle(t, addr, certs)
				}
			}
		}
	}
	// The error cases: every command gets the configured task's name last
	// (task create ignores it and still makes its request).
	errorCommands := map[string][]string{
		"task disable": {"task", "disable"},
		"task enable":  {"task", "enable"},
		"task delete":  {"task", "delete", "-auto-approve"},
		"task create":  {"task", "create", "--task-file=" + taskFile},
	}
	failing := func(t *testing.T, name string, opts []string, want string) {
		for cmdName, cmd := range errorCommands {
			args := append(append(append([]string(nil), cmd...), opts...), "db_task")
			o, code := runCmd("", nil, args...)
			if !strings.Contains(o, want) || code == 0 {
				t.Errorf("%s, %s: exit %d, want %q:\n%s", name, cmdName, code, want, o)
			}
		}
	}

	start0 := time.Now()
	t.Run("TLS", func(t *testing.T) {
		waitTaskRun(t, tlsAddr, certs)
		flags := []string{"-http-addr=" + tlsAddr, "-ca-cert=" + certs.CACert, "-ssl-verify=true"}
		happy(t, tlsAddr, []scenario{
			{"flags", flags, nil},
			{"environment", nil, []string{"CTS_ADDRESS=" + tlsAddr, "CTS_CACERT=" + certs.CACert, "CTS_SSL_VERIFY=true"}},
			{"flags over environment", flags, []string{"CTS_ADDRESS=bogus_address", "CTS_CACERT=bogus_cert"}},
			{"-ssl-verify=false", []string{"-http-addr=" + tlsAddr, "-ssl-verify=false"}, nil},
			{"CTS_SSL_VERIFY=false", nil, []string{"CTS_ADDRESS=" + tlsAddr, "CTS_SSL_VERIFY=false"}},
			{"-ca-path", []string{"-http-addr=" + tlsAddr, "-ca-path=" + certs.CADir, "-ssl-verify=true"}, nil},
			{"CTS_CAPATH", nil, []string{"CTS_ADDRESS=" + tlsAddr, "CTS_CAPATH=" + certs.CADir, "CTS_SSL_VERIFY=true"}},
			{"-ca-cert over a bogus -ca-path", []string{"-http-addr=" + tlsAddr, "-ca-cert=" + certs.CACert, "-ca-path=/path/bogus_cert", "-ssl-verify=true"}, nil},
		})
		plain := strings.Replace(tlsAddr, "https://", "http://", 1)
		failing(t, "wrong scheme", []string{"-http-addr=" + plain, "-ca-cert=" + certs.CACert, "-ssl-verify=true"}, "sent an HTTP request to an HTTPS server")
		failing(t, "unknown CA", []string{"-http-addr=" + tlsAddr, "-ca-cert=" + certs.OtherCACert, "-ssl-verify=true"}, "signed by unknown authority")
		failing(t, "CA path without the CA", []string{"-http-addr=" + tlsAddr, "-ca-path=" + wrongCAPath, "-ssl-verify=true"}, "signed by unknown authority")
		failing(t, "no CA", []string{"-http-addr=" + tlsAddr, "-ssl-verify=true"}, "signed by unknown authority")
	})
	t.Run("mTLS", func(t *testing.T) {
		waitTaskRun(t, mtlsAddr, certs)
		client := []string{"-client-cert=" + certs.ClientCert, "-client-key=" + certs.ClientKey}
		flags := append([]string{"-http-addr=" + mtlsAddr, "-ca-cert=" + certs.CACert, "-ssl-verify=true"}, client...)
		happy(t, mtlsAddr, []scenario{
			{"flags", flags, nil},
			{"environment", nil, []string{"CTS_ADDRESS=" + mtlsAddr, "CTS_CACERT=" + certs.CACert, "CTS_SSL_VERIFY=true",
				"CTS_CLIENT_CERT=" + certs.ClientCert, "CTS_CLIENT_KEY=" + certs.ClientKey}},
			{"flags over environment", flags, []string{"CTS_ADDRESS=bogus_address", "CTS_CACERT=bogus_ca_cert", "CTS_SSL_VERIFY=true",
				"CTS_CLIENT_CERT=bogus_client_cert", "CTS_CLIENT_KEY=bogus_client_key"}},
			{"-ssl-verify=false", append([]string{"-http-addr=" + mtlsAddr, "-ssl-verify=false"}, client...), nil},
			{"-ca-path", append([]string{"-http-addr=" + mtlsAddr, "-ca-path=" + certs.CADir}, client...), nil},
			{"CTS_CAPATH", nil, []string{"CTS_ADDRESS=" + mtlsAddr, "CTS_CAPATH=" + certs.CADir, "CTS_SSL_VERIFY=true",
				"CTS_CLIENT_CERT=" + certs.ClientCert, "CTS_CLIENT_KEY=" + certs.ClientKey}},
			{"a client certificate of the other client CA", []string{"-http-addr=" + mtlsAddr, "-ca-cert=" + certs.CACert,
				"-client-cert=" + alt.ClientCert, "-client-key=" + alt.ClientKey, "-ssl-verify=true"}, nil},
		})
		failing(t, "unknown CA", append([]string{"-http-addr=" + mtlsAddr, "-ca-cert=" + certs.OtherCACert, "-ssl-verify=true"}, client...), "signed by unknown authority")
		failing(t, "CA path without the CA", append([]string{"-http-addr=" + mtlsAddr, "-ca-path=" + wrongCAPath, "-ssl-verify=true"}, client...), "signed by unknown authority")
		failing(t, "no client certificate", []string{"-http-addr=" + mtlsAddr, "-ca-cert=" + certs.CACert, "-ssl-verify=true"}, "certificate required")
		failing(t, "no client certificate, -ssl-verify=false", []string{"-http-addr=" + mtlsAddr, "-ssl-verify=false"}, "certificate required")
	})
	t.Logf("the scenarios took %s", time.Since(start0).Round(time.Second))
}

// waitTaskRun waits for db_task's first run to be recorded and the task
// idle (the scenarios start once the daemon is up and its task has run):
// the task answers disable then, not 409.
func waitTaskRun(t *testing.T, addr string, certs testcerts.Files) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, "db_task's first run", func() bool {
		st, err := apiDo(t, certs, "GET", addr+"/v1/status/tasks/db_task")
		return err == nil && strings.Contains(st, `"status":"successful"`) && strings.Contains(st, `"active":false`)
	})
}

// waitTaskIdle waits until db_task neither runs nor waits to run.
func waitTaskIdle(t *testing.T, addr string, certs testcerts.Files) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, "db_task idle", func() bool {
		st, err := apiDo(t, certs, "GET", addr+"/v1/status/tasks/db_task")
		return err == nil && strings.Contains(st, `"active":false`)
	})
}
