package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tfe "github.com/hashicorp/go-tfe"
)

// OTFDefaultTerraformVersion is the Terraform version OTF v0.1.0 gives a
// workspace that names none. Its agent looks for that version under
// $TMPDIR/otf-terraform-bins/<version>/terraform before downloading it;
// StartOTF puts the local terraform binary there, so no download happens.
const OTFDefaultTerraformVersion = "1.5.2"

// OTF is a running OTF server (github.com/leg100/otf, an implementation of
// the HCP Terraform / Terraform Enterprise API) backed by its own
// PostgreSQL cluster, both on loopback. Remote runs execute in otfd's
// built-in agent with the terraform binary of scripts/tools.sh.
type OTF struct {
	// Hostname is host:port; URL is http://Hostname.
	Hostname, URL string
	// Token is the site admin token.
	Token string
	// Organization exists (created by StartOTF).
	Organization string

	t        testing.TB
	base     string
	otfd     string
	args     []string
	env      []string
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	logs     *bytes.Buffer
	stopPG   func()
	stopped  bool
	startups int
}

// requireOTF reports whether the OTF tests must run (CI): then a missing
// otfd or PostgreSQL fails the test instead of skipping it.
func requireOTF() bool {
	return os.Getenv("CI") != "" || os.Getenv("CTSYNC_REQUIRE_OTF") == "1"
}

// pgBinDir finds PostgreSQL's server programs (initdb, pg_ctl, createdb).
func pgBinDir() string {
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(r)
		}
		return filepath.Dir(p)
	}
	return ""
}

// StartOTF starts PostgreSQL and otfd on loopback, creates an organization
// and returns when the API answers. Both stop when the test ends. Without
// otfd (scripts/tools.sh builds it) or PostgreSQL the test is skipped with
// the reason, except in CI (CI or CTSYNC_REQUIRE_OTF=1 set), where it
// fails.
func StartOTF(t testing.TB) *OTF {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + ": run scripts/tools.sh (it builds otfd into .tools/bin and installs Debian's postgresql)"
		if requireOTF() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	otfd := filepath.Join(ToolsDir(), "bin", "otfd")
	if _, err := os.Stat(otfd); err != nil {
		if p, err := exec.LookPath("otfd"); err == nil {
			otfd = p
		} else {
			missing("otfd (OTF) not found")
		}
	}
	pgBin := pgBinDir()
	if pgBin == "" {
		missing("PostgreSQL (initdb) not found")
	}
	tfBin := Binary(t, "terraform")

	base, err := os.MkdirTemp("", "ctsync-otf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	o := &OTF{t: t, base: base, otfd: otfd, Organization: "ctsync"}
	o.stopPG = startPostgres(t, pgBin, base)
	t.Cleanup(o.stopPG)

	tmp := filepath.Join(base, "tmp")
	bins := filepath.Join(tmp, "otf-terraform-bins", OTFDefaultTerraformVersion)
	if err := os.MkdirAll(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tfBin, filepath.Join(bins, "terraform")); err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	tok := make([]byte, 12)
	_, _ = rand.Read(tok)
	o.Token = "site-" + hex.EncodeToString(tok)
	port := FreePort(t)
	o.Hostname = "127.0.0.1:" + strconv.Itoa(port)
	o.URL = "http://" + o.Hostname
	o.args = []string{"--address", o.Hostname, "--hostname", o.Hostname,
		"--database", fmt.Sprintf("postgres:///otf?host=%s&port=%d&user=postgres", filepath.Join(base, "sock"), pgPort),
		"--secret", hex.EncodeToString(secret), "--site-token", o.Token}
	o.env = append(os.Environ(), "TMPDIR="+tmp)
	o.env = append(o.env, TerraformEnv()...)
	o.Start()
	t.Cleanup(o.Stop)

	c := o.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Organizations.Create(ctx, tfe.OrganizationCreateOptions{
		Name: tfe.String(o.Organization), Email: tfe.String("ctsync@example.com"),
	}); err != nil {
		t.Fatalf("otf: create organization: %v", err)
	}
	return o
}

// pgPort is the PostgreSQL port. The server listens on its Unix socket
// only (no TCP), so the number just names the socket file.
const pgPort = 5432

// startPostgres creates a cluster under base/pg (owned by the postgres
// user when the tests run as root: PostgreSQL refuses to run as root),
// starts it on a Unix socket in base/sock and creates the otf database.
func startPostgres(t testing.TB, bin, base string) func() {
	t.Helper()
	data := filepath.Join(base, "pg")
	sock := filepath.Join(base, "sock")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, d := range []string{data, sock} {
			if err := os.Chown(d, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(name string, args ...string) {
		t.Helper()
		argv := append(append(append([]string{}, asUser...), filepath.Join(bin, name)), args...)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("postgres: %s: %v\n%s", name, err, out)
		}
	}
	run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off", pgPort, sock)
	run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(data, "server.log"), "-w", "-t", "60", "start")
	run("createdb", "-h", sock, "-p", strconv.Itoa(pgPort), "-U", "postgres", "otf")
	var once sync.Once
	return func() {
		once.Do(func() {
			argv := append(append([]string{}, asUser...), filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
			_ = exec.Command(argv[0], argv[1:]...).Run()
		})
	}
}

// Client returns a go-tfe client with the site token.
func (o *OTF) Client(t testing.TB) *tfe.Client {
	t.Helper()
	c, err := tfe.NewClient(&tfe.Config{Address: o.URL, Token: o.Token, RetryServerErrors: true})
	if err != nil {
		t.Fatalf("otf client: %v", err)
	}
	return c
}

// Start starts otfd (after Stop: on the same address, with the same
// database) and waits until its API answers.
func (o *OTF) Start() {
	o.t.Helper()
	o.mu.Lock()
	o.logs = &bytes.Buffer{}
	cmd := exec.Command(o.otfd, o.args...)
	cmd.Env = o.env
	cmd.Dir = o.base
	cmd.Stdout = o.logs
	cmd.Stderr = o.logs
	if err := cmd.Start(); err != nil {
		o.mu.Unlock()
		o.t.Fatalf("start otfd: %v", err)
	}
	o.cmd, o.done, o.stopped = cmd, make(chan struct{}), false
	o.startups++
	done := o.done
	go func() { _ = cmd.Wait(); close(done) }()
	o.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			o.t.Fatalf("otfd exited early:\n%s", o.Logs())
		default:
		}
		resp, err := http.Get(o.URL + "/api/v2/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	o.t.Fatalf("otfd at %s not ready after 60s:\n%s", o.URL, o.Logs())
}

// Stop stops otfd (idempotent); PostgreSQL keeps running.
func (o *OTF) Stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopped || o.cmd == nil {
		return
	}
	o.stopped = true
	_ = o.cmd.Process.Kill()
	<-o.done
}

// Logs returns otfd's output so far.
func (o *OTF) Logs() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.logs == nil {
		return ""
	}
	s := o.logs.String()
	if len(s) > 20000 {
		s = "...\n" + s[len(s)-20000:]
	}
	return strings.TrimSpace(s)
}
